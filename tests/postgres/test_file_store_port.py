"""The FileReferenceStore behaviour suite, run on every store through one parametrised fixture
(``file_store``: the in-memory twin and PostgreSQL): each port method, each row transaction's acceptance and
each rejection's error type, groups, request ids, clearing, two-phase garbage collection, forgetting
requests, deleting a table, and tables kept apart."""

from __future__ import annotations

import uuid

import pytest

from statestore.errors import (
    AllJobsRejectedError,
    FileAlreadyExistsError,
    FileHasReferencesError,
    FileNotFoundInStateError,
    FileReferenceAlreadyExistsError,
    FileReferenceAssignedToJobError,
    FileReferenceNotAssignedToJobError,
    FileReferenceNotFoundError,
    InvalidTransactionError,
    PartitionNotFoundError,
    TransactionValidationError,
)
from statestore.model.files import FileReference, TableFile
from statestore.store.ports import FileCommitMember, FileCommitOutcome, FileReferenceStore
from statestore.transactions import (
    AddFiles,
    AssignJobIdRequest,
    AssignJobIds,
    ClearFiles,
    DeleteFiles,
    ReleaseClaims,
    ReplaceFileReferences,
    ReplaceFileReferencesJob,
    SplitFileReferenceRequest,
    SplitFileReferences,
    Transaction,
)
from tests.builders import STRING_SCHEMA, data_key, ref, tree
from tests.postgres.conftest import Clock, DataKey

# root, split at "m" into the leaves p1 and p2.
PARTITIONS = {p.id: p for p in tree(STRING_SCHEMA, ["m"])}


def commit(
    store: FileReferenceStore,
    table_id: str,
    *transactions: Transaction,
    time: int = 2_000,
    request_ids: list[str] | None = None,
) -> FileCommitOutcome:
    ids = request_ids or [f"req-{uuid.uuid4().hex}" for _ in transactions]
    members = [FileCommitMember(t, r) for t, r in zip(transactions, ids, strict=True)]
    return store.commit(table_id, STRING_SCHEMA, dict(PARTITIONS), members, time)


def committed(store: FileReferenceStore, table_id: str, transaction: Transaction, time: int = 2_000) -> int:
    outcome = commit(store, table_id, transaction, time=time)
    assert outcome.committed == (0,), outcome.rejected
    assert outcome.commit_number is not None
    return outcome.commit_number


def rejected(
    store: FileReferenceStore, table_id: str, transaction: Transaction
) -> TransactionValidationError:
    before = store.files(table_id)
    outcome = commit(store, table_id, transaction)
    assert outcome.committed == () and outcome.commit_number is None
    assert store.files(table_id) == before  # a rejection changes nothing
    return outcome.rejected[0]


def claim(job_id: str, partition_id: str, *filenames: str, before: int | None = None) -> AssignJobIds:
    return AssignJobIds((AssignJobIdRequest(job_id, partition_id, filenames),), before)


def compaction(job_id: str, partition_id: str, inputs: tuple[str, ...], output: str) -> ReplaceFileReferences:
    return ReplaceFileReferences(
        (ReplaceFileReferencesJob(job_id, partition_id, inputs, ref(output, partition_id)),)
    )


def stamped(reference: FileReference, time: int, job_id: str | None = None) -> FileReference:
    return reference._replace(last_update_time=time, job_id=job_id)


# --- AddFiles and reading -------------------------------------------------------------------------------


def test_added_files_are_read_back_with_their_references_stamped_with_the_update_time(
    file_store: FileReferenceStore, table_id: str, key: DataKey
) -> None:
    a1, a2, b = (
        ref(key("a"), "p1", 10),
        ref(key("a"), "p2", 20, whole_file=False),
        ref(key("b"), "p2", 5, approximate=True),
    )
    assert not file_store.has_files(table_id)

    committed(file_store, table_id, AddFiles((a1, a2, b)), time=2_000)

    files = file_store.files(table_id)
    assert set(files) == {key("a"), key("b")}
    assert sorted(files[key("a")].references) == [stamped(a1, 2_000), stamped(a2, 2_000)]
    assert files[key("b")] == TableFile(key("b"), (stamped(b, 2_000),), 2_000)
    assert file_store.has_files(table_id)


def test_a_file_added_with_no_reference_is_kept_and_ready_for_gc_from_its_add_time(
    file_store: FileReferenceStore, table_id: str, key: DataKey
) -> None:
    committed(file_store, table_id, AddFiles((), unreferenced_files=(key("orphan"),)), time=3_000)

    assert file_store.files(table_id) == {key("orphan"): TableFile(key("orphan"), (), 3_000)}
    assert file_store.files_ready_for_gc(table_id, before=3_000) == []
    assert file_store.files_ready_for_gc(table_id, before=3_001) == [key("orphan")]


def test_add_files_rejections_name_what_is_wrong(
    file_store: FileReferenceStore, table_id: str, key: DataKey
) -> None:
    committed(file_store, table_id, AddFiles((ref(key("a"), "p1"),)))

    assert isinstance(
        rejected(file_store, table_id, AddFiles((ref(key("a"), "p2"),))), FileAlreadyExistsError
    )
    assert isinstance(
        rejected(file_store, table_id, AddFiles((), unreferenced_files=(key("a"),))), FileAlreadyExistsError
    )
    assert isinstance(
        rejected(file_store, table_id, AddFiles((ref(key("b"), "nowhere"),))), PartitionNotFoundError
    )
    assert isinstance(
        rejected(file_store, table_id, AddFiles((ref(key("b"), "p1"), ref(key("b"), "p1")))),
        FileReferenceAlreadyExistsError,
    )
    assert isinstance(rejected(file_store, table_id, AddFiles(())), InvalidTransactionError)
    assert isinstance(
        rejected(file_store, table_id, AddFiles((ref(key("c"), "p1"),), unreferenced_files=(key("c"),))),
        InvalidTransactionError,
    )


def test_a_hundred_files_in_one_commit_are_all_added(
    file_store: FileReferenceStore, table_id: str, key: DataKey
) -> None:
    refs = [ref(key(f"f{i:03}"), "p1" if i % 2 else "p2", i) for i in range(100)]
    committed(file_store, table_id, AddFiles(tuple(refs)), time=5)

    files = file_store.files(table_id)
    assert sorted(r for f in files.values() for r in f.references) == sorted(stamped(r, 5) for r in refs)


# --- AssignJobIds and ReleaseClaims ---------------------------------------------------------------------


def test_a_claim_assigns_the_job_and_stamps_the_claim_time(
    file_store: FileReferenceStore, table_id: str, key: DataKey
) -> None:
    committed(
        file_store,
        table_id,
        AddFiles((ref(key("a"), "p1"), ref(key("a"), "p2"), ref(key("b"), "p1"))),
        time=1_000,
    )

    committed(file_store, table_id, claim("job-1", "p1", key("a"), key("b")), time=2_000)

    files = file_store.files(table_id)
    assert files[key("a")].reference_in("p1") == stamped(ref(key("a"), "p1"), 2_000, "job-1")
    # The other partition's is left.
    assert files[key("a")].reference_in("p2") == stamped(ref(key("a"), "p2"), 1_000)
    assert files[key("b")].reference_in("p1") == stamped(ref(key("b"), "p1"), 2_000, "job-1")


def test_claim_rejections_name_what_is_wrong(
    file_store: FileReferenceStore, table_id: str, key: DataKey
) -> None:
    committed(file_store, table_id, AddFiles((ref(key("a"), "p1"), ref(key("b"), "p1"))), time=1_000)
    committed(file_store, table_id, claim("job-1", "p1", key("a")), time=2_000)

    assert isinstance(
        rejected(file_store, table_id, claim("job-2", "p1", key("missing"))), FileNotFoundInStateError
    )
    assert isinstance(
        rejected(file_store, table_id, claim("job-2", "p2", key("a"))), FileReferenceNotFoundError
    )
    taken = rejected(file_store, table_id, claim("job-2", "p1", key("b"), key("a")))
    assert isinstance(taken, FileReferenceAssignedToJobError) and taken.job_id == "job-1"
    # A take-over only of claims made before the cutoff: one made at it may still be running.
    assert isinstance(
        rejected(file_store, table_id, claim("job-2", "p1", key("a"), before=2_000)),
        FileReferenceAssignedToJobError,
    )
    assert isinstance(rejected(file_store, table_id, AssignJobIds(())), InvalidTransactionError)


def test_a_take_over_of_an_old_claim_passes_it_to_the_new_job(
    file_store: FileReferenceStore, table_id: str, key: DataKey
) -> None:
    committed(file_store, table_id, AddFiles((ref(key("a"), "p1"),)), time=1_000)
    committed(file_store, table_id, claim("job-1", "p1", key("a")), time=2_000)

    committed(file_store, table_id, claim("job-2", "p1", key("a"), before=2_001), time=3_000)

    assert file_store.files(table_id)[key("a")].references == (stamped(ref(key("a"), "p1"), 3_000, "job-2"),)


def test_release_frees_the_jobs_claims_made_before_the_cutoff(
    file_store: FileReferenceStore, table_id: str, key: DataKey
) -> None:
    committed(
        file_store,
        table_id,
        AddFiles((ref(key("a"), "p1"), ref(key("b"), "p1"), ref(key("c"), "p2"))),
        time=1_000,
    )
    committed(file_store, table_id, claim("job-1", "p1", key("a")), time=2_000)
    committed(file_store, table_id, claim("job-1", "p2", key("c")), time=4_000)
    committed(file_store, table_id, claim("job-2", "p1", key("b")), time=2_000)

    committed(file_store, table_id, ReleaseClaims(("job-1", "job-gone"), claimed_before=3_000), time=5_000)

    files = file_store.files(table_id)
    assert files[key("a")].references == (stamped(ref(key("a"), "p1"), 5_000),)
    # Claimed after the cutoff.
    assert files[key("c")].references == (stamped(ref(key("c"), "p2"), 4_000, "job-1"),)
    assert files[key("b")].references == (stamped(ref(key("b"), "p1"), 2_000, "job-2"),)  # another job's
    # Releasing a job that holds nothing is accepted and changes nothing.
    before = file_store.files(table_id)
    committed(file_store, table_id, ReleaseClaims(("job-nothing",)), time=6_000)
    assert file_store.files(table_id) == before
    assert isinstance(rejected(file_store, table_id, ReleaseClaims(("x", "x"))), InvalidTransactionError)
    assert isinstance(rejected(file_store, table_id, ReleaseClaims(())), InvalidTransactionError)


# --- ReplaceFileReferences ------------------------------------------------------------------------------


def test_a_compaction_replaces_its_inputs_in_its_partition_only(
    file_store: FileReferenceStore, table_id: str, key: DataKey
) -> None:
    committed(
        file_store,
        table_id,
        AddFiles((ref(key("a"), "p1"), ref(key("a"), "p2"), ref(key("b"), "p1"))),
        time=1_000,
    )
    committed(file_store, table_id, claim("job-1", "p1", key("a"), key("b")), time=2_000)

    committed(file_store, table_id, compaction("job-1", "p1", (key("a"), key("b")), key("out")), time=3_000)

    files = file_store.files(table_id)
    assert files[key("out")] == TableFile(key("out"), (stamped(ref(key("out"), "p1"), 3_000),), 3_000)
    assert files[key("a")].references == (stamped(ref(key("a"), "p2"), 1_000),)
    assert files[key("b")].references == ()  # kept, with no reference, until garbage collection
    assert file_store.files_ready_for_gc(table_id, before=10**12) == []  # not marked yet


def test_compaction_rejections_name_what_is_wrong(
    file_store: FileReferenceStore, table_id: str, key: DataKey
) -> None:
    committed(
        file_store,
        table_id,
        AddFiles((ref(key("a"), "p1"), ref(key("b"), "p1"), ref(key("taken"), "p2"))),
        time=1_000,
    )
    committed(file_store, table_id, claim("job-1", "p1", key("a"), key("b")), time=2_000)

    not_assigned = rejected(file_store, table_id, compaction("job-2", "p1", (key("a"),), key("out")))
    assert isinstance(not_assigned, AllJobsRejectedError)
    assert isinstance(not_assigned.failures[0][1], FileReferenceNotAssignedToJobError)
    exists = rejected(file_store, table_id, compaction("job-1", "p1", (key("a"), key("b")), key("taken")))
    assert isinstance(exists, AllJobsRejectedError)
    assert isinstance(exists.failures[0][1], FileAlreadyExistsError)
    missing = rejected(file_store, table_id, compaction("job-1", "p1", (key("a"), key("nope")), key("out")))
    assert isinstance(missing, AllJobsRejectedError)
    assert isinstance(missing.failures[0][1], FileNotFoundInStateError)
    assert isinstance(rejected(file_store, table_id, ReplaceFileReferences(())), InvalidTransactionError)


def test_a_compaction_commit_skips_its_invalid_jobs_and_applies_the_others(
    file_store: FileReferenceStore, table_id: str, key: DataKey
) -> None:
    committed(file_store, table_id, AddFiles((ref(key("a"), "p1"), ref(key("b"), "p2"))), time=1_000)
    committed(file_store, table_id, claim("job-1", "p1", key("a")), time=2_000)
    transaction = ReplaceFileReferences(
        (
            ReplaceFileReferencesJob("job-1", "p1", (key("a"),), ref(key("out-1"), "p1")),
            ReplaceFileReferencesJob("job-2", "p2", (key("b"),), ref(key("out-2"), "p2")),
        )
    )

    outcome = commit(file_store, table_id, transaction, time=3_000)

    assert outcome.committed == (0,)
    assert [part for part, _ in outcome.skipped_parts[0]] == ["job-2"]
    assert set(file_store.files(table_id)) == {key("a"), key("b"), key("out-1")}


# --- SplitFileReferences --------------------------------------------------------------------------------


def test_a_split_moves_a_reference_down_to_the_children(
    file_store: FileReferenceStore, table_id: str, key: DataKey
) -> None:
    committed(file_store, table_id, AddFiles((ref(key("a"), "root", 100),)), time=1_000)
    halves = (ref(key("a"), "p1", 50, whole_file=False), ref(key("a"), "p2", 50, whole_file=False))

    committed(
        file_store,
        table_id,
        SplitFileReferences((SplitFileReferenceRequest(key("a"), "root", halves),)),
        time=2_000,
    )

    assert sorted(file_store.files(table_id)[key("a")].references) == [stamped(h, 2_000) for h in halves]


def test_split_rejections_name_what_is_wrong(
    file_store: FileReferenceStore, table_id: str, key: DataKey
) -> None:
    committed(
        file_store,
        table_id,
        AddFiles((ref(key("a"), "root"), ref(key("b"), "root"), ref(key("c"), "p1"))),
        time=1_000,
    )
    committed(file_store, table_id, claim("job-1", "root", key("b")), time=2_000)

    def split(filename: str, source: str, *targets: str) -> SplitFileReferences:
        new = tuple(ref(filename, t, 1, whole_file=False) for t in targets)
        return SplitFileReferences((SplitFileReferenceRequest(filename, source, new),))

    assert isinstance(
        rejected(file_store, table_id, split(key("b"), "root", "p1")), FileReferenceAssignedToJobError
    )
    assert isinstance(rejected(file_store, table_id, split(key("a"), "p1", "p2")), FileReferenceNotFoundError)
    assert isinstance(rejected(file_store, table_id, split(key("c"), "p1", "p2")), InvalidTransactionError)
    assert isinstance(
        rejected(file_store, table_id, split(key("zz"), "root", "p1")), FileNotFoundInStateError
    )
    assert isinstance(
        rejected(file_store, table_id, split(key("a"), "root", "p1", "p1")), FileReferenceAlreadyExistsError
    )
    assert isinstance(rejected(file_store, table_id, SplitFileReferences(())), InvalidTransactionError)


# --- DeleteFiles and garbage collection -----------------------------------------------------------------


def test_garbage_collection_marks_then_finds_files_after_the_delay_then_deletes_them(
    file_store: FileReferenceStore, table_id: str, key: DataKey
) -> None:
    committed(
        file_store,
        table_id,
        AddFiles((ref(key("a"), "p1"), ref(key("b"), "p1"), ref(key("c"), "p2"))),
        time=1_000,
    )
    committed(file_store, table_id, claim("job-1", "p1", key("a"), key("b")), time=2_000)
    committed(file_store, table_id, compaction("job-1", "p1", (key("a"), key("b")), key("out")), time=3_000)
    assert file_store.files_ready_for_gc(table_id, before=10**12) == []

    assert file_store.mark_unreferenced(table_id, now=10_000) == 2
    assert file_store.mark_unreferenced(table_id, now=11_000) == 0  # marked once, at the first time
    assert file_store.files(table_id)[key("a")] == TableFile(key("a"), (), 10_000)
    assert file_store.files(table_id)[key("c")].last_update_time == 1_000  # referenced: its add time
    assert file_store.files_ready_for_gc(table_id, before=10_000) == []  # not before the delay
    assert file_store.files_ready_for_gc(table_id, before=10_001) == [key("a"), key("b")]
    assert file_store.files_ready_for_gc(table_id, before=10_001, limit=1) == [key("a")]

    committed(file_store, table_id, DeleteFiles((key("a"), key("b"))), time=20_000)

    assert set(file_store.files(table_id)) == {key("c"), key("out")}
    assert file_store.files_ready_for_gc(table_id, before=10**12) == []


def test_files_ready_for_gc_come_oldest_first(
    file_store: FileReferenceStore, table_id: str, key: DataKey
) -> None:
    committed(file_store, table_id, AddFiles((), unreferenced_files=(key("late"),)), time=5_000)
    committed(file_store, table_id, AddFiles((), unreferenced_files=(key("early"),)), time=4_000)
    committed(file_store, table_id, AddFiles((ref(key("x"), "p1"),)), time=1_000)
    committed(file_store, table_id, claim("j", "p1", key("x")), time=1_500)
    committed(file_store, table_id, compaction("j", "p1", (key("x"),), key("y")), time=2_000)
    file_store.mark_unreferenced(table_id, now=4_500)

    assert file_store.files_ready_for_gc(table_id, before=10_000) == [key("early"), key("x"), key("late")]


def test_delete_files_refuses_a_file_that_still_has_a_reference(
    file_store: FileReferenceStore, table_id: str, key: DataKey
) -> None:
    committed(
        file_store, table_id, AddFiles((ref(key("a"), "p1"),), unreferenced_files=(key("gone"),)), time=1_000
    )

    has_reference = rejected(file_store, table_id, DeleteFiles((key("gone"), key("a"))))
    assert isinstance(has_reference, FileHasReferencesError) and has_reference.filename == key("a")
    assert isinstance(
        rejected(file_store, table_id, DeleteFiles((key("missing"),))), FileNotFoundInStateError
    )
    assert isinstance(
        rejected(file_store, table_id, DeleteFiles((key("gone"), key("gone")))), InvalidTransactionError
    )
    assert isinstance(rejected(file_store, table_id, DeleteFiles(())), InvalidTransactionError)
    assert set(file_store.files(table_id)) == {key("a"), key("gone")}


def test_a_file_deleted_and_added_again_in_one_group_is_a_new_file_that_waits_the_whole_delay(
    file_store: FileReferenceStore, table_id: str, key: DataKey
) -> None:
    committed(file_store, table_id, AddFiles((), unreferenced_files=(key("reused"),)), time=1_000)
    file_store.mark_unreferenced(table_id, now=1_000)

    outcome = commit(
        file_store,
        table_id,
        DeleteFiles((key("reused"),)),
        AddFiles((ref(key("reused"), "p1"),)),
        time=50_000,
    )
    assert outcome.committed == (0, 1)
    assert file_store.files(table_id)[key("reused")].last_update_time == 50_000  # the new file's add time
    committed(file_store, table_id, claim("j", "p1", key("reused")), time=51_000)
    committed(file_store, table_id, compaction("j", "p1", (key("reused"),), key("out")), time=52_000)

    # Unreferenced from its new life only: not ready by the old file's mark.
    assert file_store.files_ready_for_gc(table_id, before=52_000) == []
    file_store.mark_unreferenced(table_id, now=60_000)
    assert file_store.files_ready_for_gc(table_id, before=60_001) == [key("reused")]


# --- groups and request ids -----------------------------------------------------------------------------


def test_later_members_of_a_group_see_the_earlier_ones(
    file_store: FileReferenceStore, table_id: str, key: DataKey
) -> None:
    outcome = commit(
        file_store,
        table_id,
        AddFiles((ref(key("a"), "p1"),)),
        claim("job-1", "p1", key("a")),
        compaction("job-1", "p1", (key("a"),), key("out")),
        time=7_000,
    )

    assert outcome.committed == (0, 1, 2) and outcome.commit_number is not None
    files = file_store.files(table_id)
    assert files[key("a")].references == () and files[key("out")].references == (
        stamped(ref(key("out"), "p1"), 7_000),
    )


def test_a_group_reports_found_rejected_and_committed_positions_under_one_commit_number(
    file_store: FileReferenceStore, table_id: str, key: DataKey
) -> None:
    first = commit(file_store, table_id, AddFiles((ref(key("a"), "p1"),)), request_ids=["req-a"])
    assert first.commit_number is not None

    outcome = commit(
        file_store,
        table_id,
        AddFiles((ref(key("b"), "p1"),)),
        AddFiles((ref(key("a"), "p1"),)),  # a redelivery of req-a: found, not applied again
        AddFiles((ref(key("b"), "p2"),)),  # b was added by the first member: rejected
        AddFiles((ref(key("c"), "p2"),)),
        request_ids=["req-b", "req-a", "req-b2", "req-c"],
    )

    assert outcome.committed == (0, 3)
    assert outcome.found == {1: first.commit_number}
    assert set(outcome.rejected) == {2} and isinstance(outcome.rejected[2], FileAlreadyExistsError)
    assert outcome.commit_number is not None and outcome.commit_number > first.commit_number
    assert file_store.committed_requests(table_id, ["req-a", "req-b", "req-b2", "req-c", "never"]) == {
        "req-a": first.commit_number,
        "req-b": outcome.commit_number,
        "req-c": outcome.commit_number,
    }


def test_a_request_committed_again_is_found_and_never_applied_twice(
    file_store: FileReferenceStore, table_id: str, key: DataKey
) -> None:
    committed(file_store, table_id, AddFiles((ref(key("a"), "p1"),)), time=1_000)
    release = ReleaseClaims(("job-1",))
    claimed = claim("job-1", "p1", key("a"))
    first = commit(file_store, table_id, claimed, time=2_000, request_ids=["claim"])
    commit(file_store, table_id, release, time=3_000)

    again = commit(file_store, table_id, claimed, time=4_000, request_ids=["claim"])

    assert again.committed == () and again.commit_number is None and again.found == {0: first.commit_number}
    # Still released.
    assert file_store.files(table_id)[key("a")].references == (stamped(ref(key("a"), "p1"), 3_000),)


def test_a_group_with_no_valid_member_writes_nothing(
    file_store: FileReferenceStore, table_id: str, key: DataKey
) -> None:
    outcome = commit(
        file_store,
        table_id,
        DeleteFiles((key("x"),)),
        AddFiles((ref(key("y"), "nowhere"),)),
        request_ids=["r1", "r2"],
    )

    assert outcome.commit_number is None and outcome.committed == () and set(outcome.rejected) == {0, 1}
    assert file_store.committed_requests(table_id, ["r1", "r2"]) == {}
    assert not file_store.has_files(table_id)


def test_commit_numbers_increase(file_store: FileReferenceStore, table_id: str, key: DataKey) -> None:
    numbers = [committed(file_store, table_id, AddFiles((ref(key(f"f{i}"), "p1"),))) for i in range(3)]
    numbers.append(file_store.clear(table_id))

    assert numbers == sorted(numbers) and len(set(numbers)) == 4


def test_a_transaction_that_is_not_decided_on_rows_is_refused(
    file_store: FileReferenceStore, table_id: str, key: DataKey
) -> None:
    with pytest.raises(ValueError, match="ClearFiles"):
        commit(file_store, table_id, AddFiles((ref(key("a"), "p1"),)), ClearFiles())
    assert not file_store.has_files(table_id)


# --- clear, forget, delete, isolation -------------------------------------------------------------------


def test_clear_forgets_every_file_of_the_table_only(
    file_store: FileReferenceStore, table_id: str, key: DataKey
) -> None:
    other = f"{table_id}-other"
    committed(
        file_store,
        table_id,
        AddFiles((ref(key("a"), "p1"), ref(key("b"), "p2")), unreferenced_files=(key("c"),)),
    )
    committed(file_store, other, AddFiles((ref(data_key(other, "a"), "p1"),)))

    file_store.clear(table_id)

    assert file_store.files(table_id) == {} and not file_store.has_files(table_id)
    assert set(file_store.files(other)) == {data_key(other, "a")}
    committed(file_store, table_id, AddFiles((ref(key("a"), "p2"),)))  # the names are free again


def test_forget_requests_drops_request_ids_recorded_before_the_time(
    file_store: FileReferenceStore, table_id: str, key: DataKey, clock: Clock
) -> None:
    clock.now = 1_000
    commit(file_store, table_id, AddFiles((ref(key("a"), "p1"),)), request_ids=["old"])
    clock.now = 5_000
    commit(file_store, table_id, AddFiles((ref(key("b"), "p1"),)), request_ids=["new"])

    assert file_store.forget_requests(table_id, before=5_000) == 1

    assert set(file_store.committed_requests(table_id, ["old", "new"])) == {"new"}
    assert file_store.forget_requests(table_id, before=5_000) == 0


def test_delete_table_removes_every_row_of_that_table_only(
    file_store: FileReferenceStore, table_id: str, key: DataKey
) -> None:
    other = f"{table_id}-other"
    commit(file_store, table_id, AddFiles((ref(key("a"), "p1"),)), request_ids=["r"])
    commit(file_store, other, AddFiles((ref(data_key(other, "a"), "p1"),)), request_ids=["r"])

    file_store.delete_table(table_id)

    assert file_store.files(table_id) == {} and file_store.committed_requests(table_id, ["r"]) == {}
    assert set(file_store.files(other)) == {data_key(other, "a")}
    assert set(file_store.committed_requests(other, ["r"])) == {"r"}


def test_tables_are_kept_apart(file_store: FileReferenceStore, table_id: str, key: DataKey) -> None:
    other = f"{table_id}-other"
    committed(
        file_store, table_id, AddFiles((ref(key("a"), "p1"),), unreferenced_files=(key("u"),)), time=1_000
    )

    # The same names in another table (under its own data prefix) are other files; its claims, releases
    # and GC do not reach this one, nor this one's files it.
    other_a = data_key(other, "a")
    committed(file_store, other, AddFiles((ref(other_a, "p1"),)), time=1_000)
    committed(file_store, other, claim("job-1", "p1", other_a), time=2_000)
    assert isinstance(rejected(file_store, other, claim("job-2", "p1", key("u"))), FileNotFoundInStateError)
    committed(file_store, table_id, ReleaseClaims(("job-1",)), time=3_000)
    assert file_store.files(other)[other_a].references[0].job_id == "job-1"
    assert file_store.mark_unreferenced(other, now=5_000) == 0
    assert file_store.files_ready_for_gc(other, before=10**12) == []
    assert file_store.files_ready_for_gc(table_id, before=10**12) == [key("u")]
