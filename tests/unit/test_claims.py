"""Claims: ReleaseClaims un-assigns a job's references, AssignJobIds may take over claims older than a time,
and a job whose claim was released or taken over can no longer commit its replacement."""

from __future__ import annotations

import pytest

from statestore.errors import (
    AllJobsRejectedError,
    FileReferenceAssignedToJobError,
    FileReferenceNotAssignedToJobError,
    InvalidTransactionError,
)
from statestore.model.files import FileReference, TableFile
from statestore.state.table_state import TableState
from statestore.transactions import (
    AddFiles,
    AssignJobIdRequest,
    AssignJobIds,
    ReleaseClaims,
    ReplaceFileReferences,
    ReplaceFileReferencesJob,
)
from tests.builders import STRING_SCHEMA, commit, count_files_made, new_state, ref
from tests.unit.test_transactions import T0, assert_rejected, standard_state

CLAIMED_AT = 5_000  # job1 claims a and b in p1 then; job2 claims c in p2 at LATER
LATER = 9_000


def claimed_state() -> TableState:
    state = standard_state()
    commit(state, AssignJobIds((AssignJobIdRequest("job1", "p1", ("a.parquet", "b.parquet")),)), CLAIMED_AT)
    commit(state, AssignJobIds((AssignJobIdRequest("job2", "p2", ("c.parquet",)),)), LATER)
    return state


def owners(state: TableState) -> dict[tuple[str, str], tuple[str | None, int]]:
    return {(r.filename, r.partition_id): (r.job_id, r.last_update_time) for r in state.file_references()}


# --- ReleaseClaims ------------------------------------------------------------------------------------


def test_release_claims_un_assigns_the_jobs_references_stamped_with_the_update_time() -> None:
    state = claimed_state()

    commit(state, ReleaseClaims(("job1",)), 12_000)

    assert owners(state) == {
        ("a.parquet", "p1"): (None, 12_000),
        ("b.parquet", "p1"): (None, 12_000),
        ("b.parquet", "p2"): (None, T0),
        ("c.parquet", "p2"): ("job2", LATER),
    }
    assert state.file("a.parquet").last_update_time == 12_000
    assert state.file("c.parquet").last_update_time == LATER
    # The released references can be claimed again.
    commit(state, AssignJobIds((AssignJobIdRequest("job3", "p1", ("a.parquet", "b.parquet")),)))


def test_release_claims_made_before_a_time_keeps_younger_claims() -> None:
    state = claimed_state()

    commit(state, ReleaseClaims(("job1", "job2"), claimed_before=LATER), 12_000)

    assert owners(state)[("a.parquet", "p1")] == (None, 12_000)
    assert owners(state)[("c.parquet", "p2")] == ("job2", LATER)  # claimed at the limit, not before it
    commit(state, ReleaseClaims(("job2",), claimed_before=LATER + 1), 13_000)
    assert owners(state)[("c.parquet", "p2")] == (None, 13_000)


def test_releasing_a_job_that_holds_nothing_is_accepted_and_changes_nothing() -> None:
    # A retry after a lost response, or a release racing the job's own commit: neither needs to know.
    state = claimed_state()
    commit(state, ReleaseClaims(("job1",)), 12_000)
    files = dict(state.files_by_name)

    for again in (ReleaseClaims(("job1",)), ReleaseClaims(("never-ran",)), ReleaseClaims(("job2",), 0)):
        commit(state, again, 20_000)

    assert state.files_by_name == files
    assert all(state.files_by_name[name] is f for name, f in files.items())


@pytest.mark.parametrize(
    ("transaction", "match"),
    [
        (ReleaseClaims(()), "at least one job id"),
        (ReleaseClaims(("",)), "job id must be a non-empty string, got ''"),
        (ReleaseClaims((7,)), "job id must be a non-empty string, got 7"),  # type: ignore[arg-type]
        (ReleaseClaims(("job1", "job1")), "lists a job id more than once"),
        (ReleaseClaims(("job1",), True), r"claimed_before \(epoch ms\) needs an integer, got bool"),
        (ReleaseClaims(("job1",), 1.5), r"claimed_before \(epoch ms\) needs an integer, got float"),  # type: ignore[arg-type]
        (ReleaseClaims(("job1",), 2**63), r"claimed_before \(epoch ms\) value .* is out of range"),
    ],
    ids=["no-jobs", "empty-id", "id-not-a-string", "listed-twice", "bool-time", "float-time", "huge-time"],
)
def test_release_claims_is_rejected(transaction: ReleaseClaims, match: str) -> None:
    assert_rejected(claimed_state(), transaction, InvalidTransactionError, match)


def test_a_job_whose_claim_was_released_cannot_commit_its_replacement() -> None:
    state = claimed_state()
    commit(state, ReleaseClaims(("job1",)), 12_000)
    replace = ReplaceFileReferences(
        (ReplaceFileReferencesJob("job1", "p1", ("a.parquet", "b.parquet"), ref("out", "p1", 30)),)
    )

    error = assert_rejected(state, replace, AllJobsRejectedError, "not assigned to job 'job1'")

    assert isinstance(error, AllJobsRejectedError) and "it is assigned to no job" in str(error)
    assert isinstance(error.failures[0][1], FileReferenceNotAssignedToJobError)


# --- AssignJobIds taking over expired claims ----------------------------------------------------------


def test_assign_job_ids_takes_over_claims_made_before_the_given_time_in_one_step() -> None:
    state = claimed_state()
    take_over = AssignJobIds(
        (AssignJobIdRequest("resumed", "p1", ("a.parquet", "b.parquet")),), take_over_claimed_before=LATER
    )

    commit(state, take_over, 12_000)

    assert owners(state)[("a.parquet", "p1")] == ("resumed", 12_000)
    assert owners(state)[("b.parquet", "p1")] == ("resumed", 12_000)
    assert "job1" not in state.claimed_references()
    # The dead job, should it commit after all, is refused: its inputs now belong to the new job.
    late = ReplaceFileReferences(
        (ReplaceFileReferencesJob("job1", "p1", ("a.parquet", "b.parquet"), ref("out", "p1", 30)),)
    )
    error = assert_rejected(state, late, AllJobsRejectedError, "it is assigned to job 'resumed'")
    assert isinstance(error, AllJobsRejectedError)
    assert isinstance(error.failures[0][1], FileReferenceNotAssignedToJobError)


def test_a_take_over_also_claims_unassigned_references() -> None:
    state = claimed_state()

    commit(
        state,
        AssignJobIds(
            (
                AssignJobIdRequest("resumed", "p1", ("a.parquet",)),
                AssignJobIdRequest("resumed", "p2", ("b.parquet",)),
            ),
            take_over_claimed_before=LATER,
        ),
        12_000,
    )

    assert owners(state)[("b.parquet", "p2")] == ("resumed", 12_000)


@pytest.mark.parametrize(
    ("take_over_claimed_before", "match"),
    [
        (None, r"already assigned to job 'job2'$"),
        (
            LATER,
            "already assigned to job 'job2' .claimed at 9000, not before 9000: its job may still be running",
        ),
    ],
    ids=["no-take-over", "claim-too-young"],
)
def test_a_claim_that_is_not_old_enough_is_not_taken_over_and_nothing_is(
    take_over_claimed_before: int | None, match: str
) -> None:
    state = claimed_state()
    transaction = AssignJobIds(
        (AssignJobIdRequest("resumed", "p2", ("b.parquet", "c.parquet")),), take_over_claimed_before
    )

    error = assert_rejected(state, transaction, FileReferenceAssignedToJobError, match)

    assert isinstance(error, FileReferenceAssignedToJobError) and error.job_id == "job2"


def test_a_take_over_cannot_claim_one_reference_for_two_jobs() -> None:
    state = claimed_state()
    transaction = AssignJobIds(
        (
            AssignJobIdRequest("first", "p1", ("a.parquet",)),
            AssignJobIdRequest("second", "p1", ("a.parquet",)),
        ),
        take_over_claimed_before=LATER,
    )

    assert_rejected(state, transaction, FileReferenceAssignedToJobError, "already assigned to job 'first'")


@pytest.mark.parametrize("cutoff", [True, 1.5, -(2**63) - 1], ids=["bool", "float", "below-int64"])
def test_a_take_over_time_the_codecs_cannot_hold_is_rejected(cutoff: object) -> None:
    transaction = AssignJobIds((AssignJobIdRequest("j", "p1", ("a.parquet",)),), cutoff)  # type: ignore[arg-type]
    assert_rejected(claimed_state(), transaction, InvalidTransactionError, "take_over_claimed_before")


def test_claimed_references_groups_claims_by_job_and_filters_by_claim_time() -> None:
    state = claimed_state()

    by_job = {job: sorted(r.filename for r in refs) for job, refs in state.claimed_references().items()}
    old = {job: sorted(r.filename for r in refs) for job, refs in state.claimed_references(LATER).items()}

    assert by_job == {"job1": ["a.parquet", "b.parquet"], "job2": ["c.parquet"]}
    assert old == {"job1": ["a.parquet", "b.parquet"]}
    assert state.claimed_references(CLAIMED_AT) == {}


# --- found from the columns, not by a scan of every file ----------------------------------------------


def mixed_state() -> TableState:
    """Claims in the columns (folded: job1's at 5,000, job5's at 9,500) and in the overlay: a base file
    claimed since the fold, a base file whose claim was released and made again, a file added since."""
    state = claimed_state()
    commit(state, AddFiles((ref("d.parquet", "p1"), ref("e.parquet", "p2"))), LATER)
    commit(state, AssignJobIds((AssignJobIdRequest("job5", "p2", ("e.parquet",)),)), 9_500)
    state.file_columns()  # folds every file into the columns
    assert state.files_by_name  # (the view still serves them)
    commit(state, AssignJobIds((AssignJobIdRequest("job3", "p1", ("d.parquet",)),)), 10_000)
    commit(state, ReleaseClaims(("job2",)), 10_500)  # c.parquet: its base row now shadowed
    commit(state, AssignJobIds((AssignJobIdRequest("job2", "p2", ("c.parquet",)),)), 11_000)
    commit(state, AddFiles((ref("f.parquet", "p2"),)), 11_000)
    commit(state, AssignJobIds((AssignJobIdRequest("job4", "p2", ("f.parquet",)),)), 11_500)
    return state


def claims_by_scan(state: TableState, before: int | None) -> dict[str, list[FileReference]]:
    out: dict[str, list[FileReference]] = {}
    for table_file in state.files_by_name.values():
        for r in table_file.references:
            if r.job_id is not None and (before is None or r.last_update_time < before):
                out.setdefault(r.job_id, []).append(r)
    return out


@pytest.mark.parametrize("before", [None, CLAIMED_AT, CLAIMED_AT + 1, 9_500, 10_001, 11_000, 11_501])
def test_claimed_references_are_those_a_scan_of_every_file_finds(before: int | None) -> None:
    state = mixed_state()
    assert state._overlay and state._base.file_count  # both kinds of files are searched

    found = state.claimed_references(before)

    assert {job: sorted(refs) for job, refs in found.items()} == {
        job: sorted(refs) for job, refs in claims_by_scan(state, before).items()
    }


@pytest.mark.parametrize(
    ("jobs", "before"),
    [
        (("job1",), None),
        (("job2", "job3"), None),
        (("job1", "job2", "job4"), 11_000),
        (("job1", "job5"), 9_000),
        (("gone",), None),
    ],
)
def test_files_claimed_by_are_those_a_scan_of_every_file_finds(
    jobs: tuple[str, ...], before: int | None
) -> None:
    state = mixed_state()
    expected = {
        f.filename: f
        for f in state.files_by_name.values()
        if any(r.job_id in jobs and (before is None or r.last_update_time < before) for r in f.references)
    }

    found = state.files_claimed_by(jobs, before)

    assert len(found) == len(expected) and {f.filename: f for f in found} == expected


def test_a_release_makes_objects_only_for_the_files_it_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    # A table of a thousand files in columns, two of them claimed: the release reads those two, not the
    # table (it used to make a TableFile of every file, seconds and hundreds of MB at a million).
    state = new_state(
        STRING_SCHEMA, ["m"], [ref(f"f{i:04}.parquet", "p1") for i in range(1000)], update_time=T0
    )
    commit(
        state, AssignJobIds((AssignJobIdRequest("job1", "p1", ("f0007.parquet", "f0500.parquet")),)), 5_000
    )
    state.file_columns()
    made = count_files_made(monkeypatch)

    commit(state, ReleaseClaims(("job1",)), 6_000)

    assert made == [2]
    monkeypatch.undo()
    assert state.claimed_references() == {}
    assert state.file("f0007.parquet").references[0] == ref("f0007.parquet", "p1")._replace(
        last_update_time=6_000
    )
    assert len(state.files_by_name) == 1000


def test_a_file_put_with_a_claim_after_the_first_release_is_found_by_the_next() -> None:
    # The first release indexes the overlay's claims; a new file put into the overlay afterwards, holding a
    # claim (no transaction adds one today, but put_files takes any file), is indexed as it goes in.
    state = mixed_state()
    assert state.files_claimed_by(["job7"]) == []
    claim = ref("g.parquet", "p1")._replace(job_id="job7", last_update_time=12_000)
    claimed = TableFile("g.parquet", (claim,), 12_000)

    state.put_files([claimed])
    assert state.files_claimed_by(["job7"]) == [claimed]
    assert state.files_claimed_by(["job7"], before=12_000) == []

    state.remove_file("g.parquet")
    assert state.files_claimed_by(["job7"]) == []
