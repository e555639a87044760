"""Transactions: for each type the valid case and every way it is rejected, leaving the state as it was."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

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
    FilesPresentError,
    InvalidPartitionSplitError,
    InvalidPartitionTreeError,
    InvalidTransactionError,
    PartitionAlreadyExistsError,
    PartitionNotFoundError,
    PartitionNotLeafError,
    TransactionValidationError,
)
from statestore.model.files import FileReference, TableFile
from statestore.model.partitions import Partition, Range, Region, root_partition
from statestore.state.table_state import TableState
from statestore.transactions import (
    AddFiles,
    AssignJobIdRequest,
    AssignJobIds,
    BatchItem,
    ClearFiles,
    DeleteFiles,
    InitialisePartitions,
    ReleaseClaims,
    ReplaceFileReferences,
    ReplaceFileReferencesJob,
    SplitFileReferenceRequest,
    SplitFileReferences,
    SplitPartition,
    Transaction,
    TransactionBatch,
)
from tests.builders import INT_SCHEMA, STRING_SCHEMA, TWO_KEY_SCHEMA, commit, new_state, ref, tree

# The standard state: partitions root -> p1 ["", "m") and p2 ["m", ...), and three files:
#   a.parquet in p1, b.parquet in p1 and p2 (spans the split), c.parquet in p2.
T0 = 1_000


def standard_state() -> TableState:
    return new_state(
        STRING_SCHEMA,
        ["m"],
        [
            ref("a.parquet", "p1", 10),
            ref("b.parquet", "p1", 20),
            ref("b.parquet", "p2", 30),
            ref("c.parquet", "p2"),
        ],
        update_time=T0,
    )


def assert_rejected(
    state: TableState,
    transaction: Transaction,
    error: type[TransactionValidationError],
    match: str | None = None,
) -> TransactionValidationError:
    """``transaction`` fails validation on ``state`` with ``error``, and ``state`` is exactly as before."""
    before = state.copy()
    file_objects = dict(state.files_by_name)
    with pytest.raises(error, match=match) as caught:
        transaction.validate(state)
    assert state == before
    assert state.files_by_name == file_objects
    assert state.partitions_by_id == before.partitions_by_id
    return caught.value


def assign(state: TableState, job_id: str, partition_id: str, *filenames: str) -> None:
    commit(state, AssignJobIds((AssignJobIdRequest(job_id, partition_id, filenames),)), T0)


# --- InitialisePartitions -----------------------------------------------------------------------------


def test_initialise_partitions_replaces_the_whole_tree() -> None:
    state = new_state(STRING_SCHEMA, ["m"])
    new_tree = tree(STRING_SCHEMA, ["d", "t"])

    commit(state, InitialisePartitions(tuple(new_tree)))

    assert state.partitions_by_id == {p.id: p for p in new_tree}
    assert state.partition_tree.leaf_for_key(["e"]).region.ranges[0] == Range("d", "t")


def test_initialise_partitions_is_rejected_while_the_table_has_files() -> None:
    state = standard_state()

    error = assert_rejected(state, InitialisePartitions(tuple(tree(STRING_SCHEMA))), FilesPresentError)

    assert "3 file(s)" in str(error) and "clear them first" in str(error)


def test_initialise_partitions_is_allowed_again_after_clear_files() -> None:
    state = standard_state()
    commit(state, ClearFiles())

    commit(state, InitialisePartitions(tuple(tree(STRING_SCHEMA))))

    assert [p.id for p in state.partitions()] == ["root"]


def test_initialise_partitions_rejects_partitions_that_do_not_form_one_tree() -> None:
    state = new_state(STRING_SCHEMA)
    orphan = Partition("orphan", Region((Range("m"),)), parent_id="root")

    assert_rejected(
        state, InitialisePartitions((*tree(STRING_SCHEMA, ["m"]), orphan)), InvalidPartitionTreeError
    )
    assert_rejected(state, InitialisePartitions(()), InvalidPartitionTreeError, "at least one partition")


def test_initialise_partitions_rejects_split_points_of_the_wrong_key_type() -> None:
    state = new_state(INT_SCHEMA)
    parent, left, right = root_partition(INT_SCHEMA).split(0, 2**40, "L", "R")

    assert_rejected(
        state, InitialisePartitions((parent, left, right)), InvalidPartitionTreeError, "out of range"
    )


# --- SplitPartition -----------------------------------------------------------------------------------


def split_of(state: TableState, partition_id: str, point: object, dimension: int = 0) -> SplitPartition:
    parent, left, right = state.partition(partition_id).split(dimension, point, "L", "R")  # type: ignore[arg-type]
    return SplitPartition(parent, (left, right))


def test_split_partition_turns_a_leaf_into_two_leaves() -> None:
    state = standard_state()

    commit(state, split_of(state, "p2", "t"))

    assert not state.partition("p2").leaf
    assert state.partition("p2").child_ids == ("L", "R")
    assert state.partition_tree.leaf_for_key(["s"]).id == "L"
    assert state.partition_tree.leaf_for_key(["u"]).id == "R"
    assert sorted(p.id for p in state.leaf_partitions()) == ["L", "R", "p1"]
    # Splitting a partition leaves its file references where they were, until they are split down.
    assert {r.partition_id for r in state.file("c.parquet").references} == {"p2"}


def test_split_partition_on_a_second_dimension() -> None:
    state = new_state(TWO_KEY_SCHEMA, ["m"])

    commit(state, split_of(state, "p1", 100, dimension=1))

    assert state.partition_tree.leaf_for_key(["a", 5]).id == "L"
    assert state.partition_tree.leaf_for_key(["a", 500]).id == "R"
    assert state.partition_tree.leaf_for_key(["z", 5]).id == "p2"


def test_split_partition_of_an_unknown_partition_is_rejected() -> None:
    state = standard_state()
    txn = split_of(standard_state(), "p2", "t")
    txn = SplitPartition(
        replace(txn.parent, id="nope"), tuple(replace(c, parent_id="nope") for c in txn.children)
    )

    assert_rejected(state, txn, PartitionNotFoundError, "nope")


def test_split_partition_of_a_partition_that_is_not_a_leaf_is_rejected() -> None:
    state = standard_state()
    txn = split_of(state, "root", "c")
    txn = SplitPartition(replace(txn.parent, child_ids=("L", "R")), txn.children)

    assert_rejected(state, txn, PartitionNotLeafError, "root")


def test_split_partition_with_a_child_id_that_exists_is_rejected() -> None:
    state = standard_state()
    parent, left, right = state.partition("p2").split(0, "t", "p1", "R")

    assert_rejected(state, SplitPartition(parent, (left, right)), PartitionAlreadyExistsError, "p1")


def test_split_partition_that_changes_the_parent_of_the_split_partition_is_rejected() -> None:
    state = standard_state()
    txn = split_of(state, "p2", "t")

    assert_rejected(
        state, replace(txn, parent=replace(txn.parent, parent_id=None)), InvalidPartitionSplitError
    )


@pytest.mark.parametrize(
    "break_split",
    [
        lambda p, left, right: SplitPartition(p, (left,)),
        lambda p, left, right: SplitPartition(p, (left, replace(right, region=Region((Range("u"),))))),
        lambda p, left, right: SplitPartition(p, (left, replace(right, region=Region((Range("t", "z"),))))),
        lambda p, left, right: SplitPartition(replace(p, dimension=1), (left, right)),
        lambda p, left, right: SplitPartition(
            p, (left, replace(right, region=Region((Range("t"), Range(0)))))
        ),
    ],
    ids=["one-child", "gap", "not-covering", "missing-dimension", "wrong-range-count"],
)
def test_split_partition_that_is_not_a_valid_split_is_rejected(
    break_split: Callable[[Partition, Partition, Partition], SplitPartition],
) -> None:
    state = standard_state()
    txn = split_of(state, "p2", "t")

    assert_rejected(state, break_split(txn.parent, *txn.children), InvalidPartitionSplitError)


@pytest.mark.parametrize("point", [2**31, True, 1.5], ids=["beyond-int", "bool", "float"])
def test_split_partition_at_a_point_that_is_not_a_valid_key_is_rejected(point: object) -> None:
    state = new_state(INT_SCHEMA, [0])

    assert_rejected(state, split_of(state, "p2", point), InvalidPartitionSplitError)


# --- AddFiles -----------------------------------------------------------------------------------------


def test_add_files_adds_each_file_with_its_references_stamped_with_the_update_time() -> None:
    state = new_state(STRING_SCHEMA, ["m"])

    commit(state, AddFiles((ref("x", "p1", 5), ref("x", "p2", 7, whole_file=False), ref("y", "p2"))), 4242)

    x = state.file("x")
    assert x.last_update_time == 4242
    assert sorted(x.references) == [
        FileReference("x", "p1", 5, last_update_time=4242),
        FileReference("x", "p2", 7, only_contains_data_for_this_partition=False, last_update_time=4242),
    ]
    assert state.file("y").references == (FileReference("y", "p2", 100, last_update_time=4242),)
    assert state.has_files()


@pytest.mark.parametrize(
    ("references", "error", "match"),
    [
        ((), InvalidTransactionError, "at least one"),
        ((ref("a.parquet", "p1"),), FileAlreadyExistsError, "a.parquet"),
        ((ref("new", "p2"), ref("b.parquet", "p2")), FileAlreadyExistsError, "b.parquet"),
        ((ref("new", "p1"), ref("new", "p1")), FileReferenceAlreadyExistsError, "new"),
        ((ref("new", "nope"),), PartitionNotFoundError, "nope"),
        ((ref("new", "p1", -1),), InvalidTransactionError, "negative row count"),
        ((ref("", "p1"),), InvalidTransactionError, "non-empty filename"),
        ((ref("new/\udc80", "p1"),), InvalidTransactionError, "lone surrogate"),
        ((ref("new/é.parquet", "p1"), ref("b.parquet", "p2")), FileAlreadyExistsError, "b.parquet"),
        ((ref("new", "p1", job_id="job"),), InvalidTransactionError, "cannot already belong to a job"),
    ],
    ids=[
        "empty",
        "exists",
        "exists-later",
        "duplicate-reference",
        "no-partition",
        "negative",
        "no-name",
        "not-utf-8",
        "exists-after-a-non-ascii-name",
        "job",
    ],
)
def test_add_files_is_rejected(
    references: tuple[FileReference, ...], error: type[TransactionValidationError], match: str
) -> None:
    assert_rejected(standard_state(), AddFiles(references), error, match)


# --- AssignJobIds -------------------------------------------------------------------------------------


def test_assign_job_ids_gives_jobs_their_references_in_one_partition_only() -> None:
    state = standard_state()

    commit(
        state,
        AssignJobIds(
            (
                AssignJobIdRequest("job1", "p1", ("a.parquet", "b.parquet")),
                AssignJobIdRequest("job2", "p2", ("c.parquet",)),
            )
        ),
        5_000,
    )

    assert state.file("a.parquet").references == (
        ref("a.parquet", "p1", 10, job_id="job1")._replace(last_update_time=5_000),
    )
    b = {r.partition_id: r for r in state.file("b.parquet").references}
    assert (b["p1"].job_id, b["p1"].last_update_time) == ("job1", 5_000)
    assert (b["p2"].job_id, b["p2"].last_update_time) == (None, T0)
    assert state.file("c.parquet").references[0].job_id == "job2"
    assert [r.filename for r in state.references_with_no_job()] == ["b.parquet"]


@pytest.mark.parametrize(
    ("requests", "error", "match"),
    [
        ((), InvalidTransactionError, "at least one request"),
        ((AssignJobIdRequest("", "p1", ("a.parquet",)),), InvalidTransactionError, "non-empty"),
        ((AssignJobIdRequest("job", "p1", ()),), InvalidTransactionError, "assigns no files"),
        ((AssignJobIdRequest("job", "p1", ("nope",)),), FileNotFoundInStateError, "nope"),
        ((AssignJobIdRequest("job", "p2", ("a.parquet",)),), FileReferenceNotFoundError, "a.parquet"),
        ((AssignJobIdRequest("job", "nope", ("a.parquet",)),), FileReferenceNotFoundError, "nope"),
        (
            (
                AssignJobIdRequest("job1", "p1", ("a.parquet",)),
                AssignJobIdRequest("job2", "p1", ("a.parquet",)),
            ),
            FileReferenceAssignedToJobError,
            "already assigned to job 'job1'",
        ),
        (
            (AssignJobIdRequest("job1", "p1", ("a.parquet", "a.parquet")),),
            FileReferenceAssignedToJobError,
            "a.parquet",
        ),
    ],
    ids=[
        "empty",
        "no-job-id",
        "no-files",
        "no-file",
        "no-reference",
        "no-partition",
        "claimed-twice",
        "listed-twice",
    ],
)
def test_assign_job_ids_is_rejected(
    requests: tuple[AssignJobIdRequest, ...], error: type[TransactionValidationError], match: str
) -> None:
    assert_rejected(standard_state(), AssignJobIds(requests), error, match)


def test_assign_job_ids_fails_whole_when_any_reference_already_has_a_job() -> None:
    state = standard_state()
    assign(state, "old", "p2", "c.parquet")

    error = assert_rejected(
        state,
        AssignJobIds(
            (
                AssignJobIdRequest("new", "p1", ("a.parquet",)),
                AssignJobIdRequest("new", "p2", ("b.parquet", "c.parquet")),
            )
        ),
        FileReferenceAssignedToJobError,
    )

    assert isinstance(error, FileReferenceAssignedToJobError) and error.job_id == "old"
    assert state.file("a.parquet").references[0].job_id is None


# --- ReplaceFileReferences ----------------------------------------------------------------------------


def job(
    job_id: str, partition_id: str, inputs: tuple[str, ...], output: str, rows: int = 1
) -> ReplaceFileReferencesJob:
    return ReplaceFileReferencesJob(job_id, partition_id, inputs, ref(output, partition_id, rows))


def compacting_state() -> TableState:
    """The standard state with job1 owning a and b in p1, and job2 owning c in p2."""
    state = standard_state()
    assign(state, "job1", "p1", "a.parquet", "b.parquet")
    assign(state, "job2", "p2", "c.parquet")
    return state


def test_replace_file_references_swaps_a_jobs_inputs_for_its_output() -> None:
    state = compacting_state()

    commit(state, ReplaceFileReferences((job("job1", "p1", ("a.parquet", "b.parquet"), "out1", 30),)), 7_000)

    assert state.file("out1") == TableFile(
        "out1", (ref("out1", "p1", 30)._replace(last_update_time=7_000),), 7_000
    )
    # a.parquet has no reference left: it stays, waiting for garbage collection, stamped with the commit time.
    assert state.file("a.parquet") == TableFile("a.parquet", (), 7_000)
    # b.parquet keeps its reference in the other partition.
    assert [r.partition_id for r in state.file("b.parquet").references] == ["p2"]
    assert state.files_ready_for_gc(before=7_001) == ["a.parquet"]
    assert state.files_ready_for_gc(before=7_000) == []


def test_replace_file_references_applies_valid_jobs_and_reports_and_skips_the_invalid_ones() -> None:
    state = compacting_state()
    txn = ReplaceFileReferences(
        (
            job("job1", "p1", ("a.parquet", "b.parquet"), "out1"),
            job("wrong-job", "p2", ("c.parquet",), "out2"),
            job("job2", "p2", ("c.parquet",), "out3"),
        )
    )

    rejected = txn.rejected_parts(state)
    commit(state, txn)

    assert [(job_id, type(e)) for job_id, e in rejected] == [
        ("wrong-job", FileReferenceNotAssignedToJobError)
    ]
    assert "out2" not in state.files_by_name
    assert {"out1", "out3"} <= set(state.files_by_name)
    assert state.file("c.parquet").references == ()


def test_replace_file_references_with_every_job_invalid_is_rejected_listing_each_job() -> None:
    state = compacting_state()
    txn = ReplaceFileReferences(
        (job("job2", "p1", ("a.parquet",), "out1"), job("job1", "p1", ("nope",), "out2"))
    )

    error = assert_rejected(state, txn, AllJobsRejectedError)

    assert isinstance(error, AllJobsRejectedError)
    assert [(job_id, type(e)) for job_id, e in error.failures] == [
        ("job2", FileReferenceNotAssignedToJobError),
        ("job1", FileNotFoundInStateError),
    ]
    assert "job 'job2'" in str(error) and "job 'job1'" in str(error)


def test_replace_file_references_with_no_jobs_is_rejected() -> None:
    assert_rejected(
        compacting_state(), ReplaceFileReferences(()), InvalidTransactionError, "at least one job"
    )


def replace_job_failures() -> list[tuple[ReplaceFileReferencesJob, type[TransactionValidationError], str]]:
    return [
        (job("job1", "p1", (), "out"), InvalidTransactionError, "no input files"),
        (job("job1", "p1", ("a.parquet", "a.parquet"), "out"), InvalidTransactionError, "more than once"),
        (
            ReplaceFileReferencesJob("job1", "p1", ("a.parquet",), ref("out", "p2")),
            InvalidTransactionError,
            "not its own",
        ),
        (job("job1", "p1", ("a.parquet",), "a.parquet"), InvalidTransactionError, "also one of its inputs"),
        (job("job1", "p1", ("a.parquet",), "c.parquet"), FileAlreadyExistsError, "c.parquet"),
        (
            ReplaceFileReferencesJob("job1", "p1", ("a.parquet",), ref("out", "p1", -3)),
            InvalidTransactionError,
            "negative",
        ),
        (
            ReplaceFileReferencesJob("job1", "p1", ("a.parquet",), ref("out", "p1", job_id="job1")),
            InvalidTransactionError,
            "belong to a job",
        ),
        (job("job1", "nope", ("a.parquet",), "out"), PartitionNotFoundError, "nope"),
        (job("job1", "p1", ("nope",), "out"), FileNotFoundInStateError, "nope"),
        (job("job1", "p2", ("a.parquet",), "out"), FileReferenceNotFoundError, "a.parquet"),
        (
            job("job3", "p1", ("a.parquet",), "out"),
            FileReferenceNotAssignedToJobError,
            "assigned to job 'job1'",
        ),
        (job("job3", "p2", ("b.parquet",), "out"), FileReferenceNotAssignedToJobError, "assigned to no job"),
    ]


@pytest.mark.parametrize(
    ("bad_job", "error", "match"),
    replace_job_failures(),
    ids=[
        "no-inputs",
        "duplicate-input",
        "output-elsewhere",
        "output-is-input",
        "output-exists",
        "negative-rows",
        "output-has-job",
        "no-partition",
        "no-file",
        "no-reference",
        "other-job",
        "no-job",
    ],
)
def test_replace_file_references_rejects_a_job(
    bad_job: ReplaceFileReferencesJob, error: type[TransactionValidationError], match: str
) -> None:
    state = compacting_state()
    good_job = job("job2", "p2", ("c.parquet",), "good-out")

    # Alone, the bad job makes the whole transaction fail, with the precise reason.
    all_rejected = assert_rejected(state, ReplaceFileReferences((bad_job,)), AllJobsRejectedError)
    assert isinstance(all_rejected, AllJobsRejectedError)
    [(job_id, reason)] = all_rejected.failures
    assert job_id == bad_job.job_id and type(reason) is error and match in str(reason)

    # Beside a good job, it is reported and skipped; the good job is applied.
    txn = ReplaceFileReferences((bad_job, good_job))
    [(rejected_id, rejected_reason)] = txn.rejected_parts(state)
    assert rejected_id == bad_job.job_id and type(rejected_reason) is error
    before = state.copy()
    commit(state, txn)
    assert "good-out" in state.files_by_name and "out" not in state.files_by_name
    for name in ("a.parquet", "b.parquet"):
        assert state.file(name) == before.file(name)


def test_replace_file_references_rejects_a_job_reusing_what_an_earlier_job_in_it_consumed_or_produced() -> (
    None
):
    state = compacting_state()
    txn = ReplaceFileReferences(
        (
            job("job1", "p1", ("a.parquet",), "out1"),
            job("job1", "p1", ("a.parquet", "b.parquet"), "out2"),  # a.parquet already consumed
            job("job2", "p2", ("c.parquet",), "out1"),  # out1 already produced
        )
    )

    rejected = txn.rejected_parts(state)

    assert [type(e) for _, e in rejected] == [FileReferenceNotFoundError, FileAlreadyExistsError]


def test_a_compaction_committed_twice_is_reported_as_already_replaced_not_as_an_existing_output() -> None:
    state = compacting_state()
    compaction = ReplaceFileReferences((job("job1", "p1", ("a.parquet", "b.parquet"), "out1"),))
    commit(state, compaction)

    error = assert_rejected(state, compaction, AllJobsRejectedError)

    assert isinstance(error, AllJobsRejectedError)
    [(_, reason)] = error.failures
    assert isinstance(reason, FileReferenceNotFoundError)
    assert "'a.parquet' in partition 'p1'" in str(reason)
    assert "already exists" not in str(error)


def test_replace_file_references_applies_a_job_even_if_another_job_with_the_same_id_is_rejected() -> None:
    # A redelivered commit of the same compaction job lands twice in one transaction: the first is valid,
    # the second finds its inputs consumed. The first must still be applied, as rejected_parts reports.
    state = compacting_state()
    first = job("job1", "p1", ("a.parquet", "b.parquet"), "out1")
    txn = ReplaceFileReferences((first, replace(first, new_reference=ref("out1-again", "p1"))))

    assert [type(e) for _, e in txn.rejected_parts(state)] == [FileReferenceNotFoundError]
    commit(state, txn)

    assert "out1" in state.files_by_name
    assert "out1-again" not in state.files_by_name
    assert state.file("a.parquet").references == ()


# --- SplitFileReferences ------------------------------------------------------------------------------


def split_root_state() -> TableState:
    """Files referenced in the root, then the root split into L ["", "m") and R ["m", ...)."""
    state = new_state(STRING_SCHEMA, [], [ref("f", "root", 100), ref("g", "root", 50)])
    commit(state, split_of(state, "root", "m"))
    return state


def test_split_file_references_moves_a_reference_down_to_the_children() -> None:
    state = split_root_state()
    request = SplitFileReferenceRequest(
        "f",
        "root",
        (ref("f", "L", 50, approximate=True, whole_file=False), ref("f", "R", 50, whole_file=False)),
    )

    commit(state, SplitFileReferences((request,)), 9_000)

    f = state.file("f")
    assert f.last_update_time == 9_000
    assert sorted(f.references) == [
        FileReference("f", "L", 50, True, False, None, 9_000),
        FileReference("f", "R", 50, False, False, None, 9_000),
    ]
    assert [r.partition_id for r in state.file("g").references] == ["root"]
    assert sorted(state.references_by_partition()) == ["L", "R", "root"]


def test_split_file_references_can_move_a_reference_to_a_grandchild() -> None:
    state = split_root_state()
    commit(state, SplitPartition(*_split_r(state)))

    commit(state, SplitFileReferences((SplitFileReferenceRequest("f", "root", (ref("f", "RR", 1),)),)))

    assert [r.partition_id for r in state.file("f").references] == ["RR"]


def _split_r(state: TableState) -> tuple[Partition, tuple[Partition, Partition]]:
    parent, left, right = state.partition("R").split(0, "t", "RL", "RR")
    return parent, (left, right)


@pytest.mark.parametrize(
    ("requests", "error", "match"),
    [
        ((), InvalidTransactionError, "at least one request"),
        ((SplitFileReferenceRequest("f", "root", ()),), InvalidTransactionError, "no new references"),
        (
            (SplitFileReferenceRequest("f", "root", (ref("g", "L"),)),),
            InvalidTransactionError,
            "another file",
        ),
        (
            (SplitFileReferenceRequest("f", "root", (ref("f", "root"),)),),
            InvalidTransactionError,
            "not below",
        ),
        (
            (SplitFileReferenceRequest("f", "root", (ref("f", "L", -1),)),),
            InvalidTransactionError,
            "negative",
        ),
        ((SplitFileReferenceRequest("f", "root", (ref("f", "nope"),)),), PartitionNotFoundError, "nope"),
        ((SplitFileReferenceRequest("nope", "root", (ref("nope", "L"),)),), FileNotFoundInStateError, "nope"),
        ((SplitFileReferenceRequest("f", "L", (ref("f", "R"),)),), FileReferenceNotFoundError, "'L'"),
        (
            (SplitFileReferenceRequest("f", "root", (ref("f", "L"), ref("f", "L"))),),
            FileReferenceAlreadyExistsError,
            "'L'",
        ),
        (
            (
                SplitFileReferenceRequest("f", "root", (ref("f", "L"),)),
                SplitFileReferenceRequest("f", "root", (ref("f", "R"),)),
            ),
            FileReferenceNotFoundError,
            "'root'",
        ),
    ],
    ids=[
        "empty",
        "no-new",
        "other-file",
        "not-below",
        "negative",
        "no-partition",
        "no-file",
        "no-reference",
        "duplicate-new",
        "moved-twice",
    ],
)
def test_split_file_references_is_rejected(
    requests: tuple[SplitFileReferenceRequest, ...], error: type[TransactionValidationError], match: str
) -> None:
    assert_rejected(split_root_state(), SplitFileReferences(requests), error, match)


def test_split_file_references_into_a_sibling_partition_is_rejected() -> None:
    state = split_root_state()
    commit(state, SplitFileReferences((SplitFileReferenceRequest("f", "root", (ref("f", "L"),)),)))

    assert_rejected(
        state,
        SplitFileReferences((SplitFileReferenceRequest("f", "L", (ref("f", "R"),)),)),
        InvalidTransactionError,
        "not below",
    )


def test_split_file_references_onto_an_existing_reference_is_rejected() -> None:
    state = new_state(STRING_SCHEMA, [], [ref("f", "root")])
    parent, left, right = state.partition("root").split(0, "m", "L", "R")
    commit(state, SplitPartition(parent, (left, right)))
    commit(state, AddFiles((ref("h", "root"), ref("h", "L"))))

    assert_rejected(
        state,
        SplitFileReferences((SplitFileReferenceRequest("h", "root", (ref("h", "L"), ref("h", "R"))),)),
        FileReferenceAlreadyExistsError,
        "'L'",
    )


def test_split_file_references_of_a_reference_owned_by_a_job_is_rejected() -> None:
    state = split_root_state()
    assign(state, "job", "root", "f")

    assert_rejected(
        state,
        SplitFileReferences((SplitFileReferenceRequest("f", "root", (ref("f", "L"),)),)),
        FileReferenceAssignedToJobError,
        "job 'job'",
    )


# --- DeleteFiles and ClearFiles -----------------------------------------------------------------------


def gc_state() -> TableState:
    """a.parquet unreferenced since 7000; b and c still referenced."""
    state = compacting_state()
    commit(state, ReplaceFileReferences((job("job1", "p1", ("a.parquet",), "out1"),)), 7_000)
    return state


def test_delete_files_forgets_unreferenced_files() -> None:
    state = gc_state()

    commit(state, DeleteFiles(("a.parquet",)))

    assert "a.parquet" not in state.files_by_name
    assert state.files_ready_for_gc(before=10**15) == []


@pytest.mark.parametrize(
    ("filenames", "error", "match"),
    [
        ((), InvalidTransactionError, "at least one"),
        (("a.parquet", "a.parquet"), InvalidTransactionError, "more than once"),
        (("a.parquet", "nope"), FileNotFoundInStateError, "nope"),
        (("a.parquet", "b.parquet"), FileHasReferencesError, "b.parquet' still has 2 reference"),
    ],
    ids=["empty", "duplicate", "unknown", "referenced"],
)
def test_delete_files_is_rejected(
    filenames: tuple[str, ...], error: type[TransactionValidationError], match: str
) -> None:
    assert_rejected(gc_state(), DeleteFiles(filenames), error, match)


def test_clear_files_forgets_every_file_and_keeps_the_partitions() -> None:
    state = gc_state()
    partitions = dict(state.partitions_by_id)

    commit(state, ClearFiles())

    assert not state.has_files()
    assert state.partitions_by_id == partitions
    commit(state, ClearFiles())
    assert not state.has_files()


# --- queries used by compaction and garbage collection ------------------------------------------------


def test_garbage_collection_queries() -> None:
    state = gc_state()

    assert state.has_files()
    assert state.files_ready_for_gc(before=7_000) == []
    assert state.files_ready_for_gc(before=7_001) == ["a.parquet"]
    assert [f.filename for f in state.unreferenced_files()] == ["a.parquet"]
    assert sorted((r.filename, r.partition_id) for r in state.references_with_no_job()) == [
        ("b.parquet", "p2"),
        ("out1", "p1"),
    ]
    by_partition = {
        p: sorted(r.filename for r in refs) for p, refs in state.references_by_partition().items()
    }
    assert by_partition == {"p1": ["b.parquet", "out1"], "p2": ["b.parquet", "c.parquet"]}
    assert sorted(r.filename for r in state.references_in_partition("p2")) == ["b.parquet", "c.parquet"]
    assert not TableState(STRING_SCHEMA).has_files()


# --- update times come from the caller ----------------------------------------------------------------


def every_valid_transaction() -> list[tuple[Callable[[], TableState], Transaction]]:
    split_state = split_root_state
    return [
        (lambda: new_state(STRING_SCHEMA), InitialisePartitions(tuple(tree(STRING_SCHEMA, ["m"])))),
        (standard_state, SplitPartition(*_split_p2(standard_state()))),
        (standard_state, AddFiles((ref("new", "p1"),))),
        (standard_state, AssignJobIds((AssignJobIdRequest("j", "p1", ("a.parquet",)),))),
        (compacting_state, AssignJobIds((AssignJobIdRequest("j", "p1", ("a.parquet",)),), T0 + 1)),
        (compacting_state, ReleaseClaims(("job1", "job2"), claimed_before=T0 + 1)),
        (compacting_state, ReplaceFileReferences((job("job2", "p2", ("c.parquet",), "o"),))),
        (split_state, SplitFileReferences((SplitFileReferenceRequest("f", "root", (ref("f", "L"),)),))),
        (gc_state, DeleteFiles(("a.parquet",))),
        (standard_state, ClearFiles()),
        (standard_state, TransactionBatch((BatchItem("r1", AddFiles((ref("new", "p1"),))),))),
    ]


def _split_p2(state: TableState) -> tuple[Partition, tuple[Partition, Partition]]:
    parent, left, right = state.partition("p2").split(0, "t", "L", "R")
    return parent, (left, right)


@pytest.mark.parametrize(
    ("make_state", "transaction"), every_valid_transaction(), ids=lambda v: getattr(v, "TYPE", "")
)
def test_apply_stamps_changes_with_the_given_update_time_and_never_reads_the_clock(
    make_state: Callable[[], TableState], transaction: Transaction, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = make_state()
    before = {name: f.last_update_time for name, f in state.files_by_name.items()}
    references_before = set(state.file_references())

    def no_clock() -> float:
        raise AssertionError("a transaction read the clock")

    for clock in ("time", "time_ns", "monotonic", "monotonic_ns"):
        monkeypatch.setattr(time, clock, no_clock)
    transaction.validate(state)
    transaction.apply(state, 123_456)
    monkeypatch.undo()

    changed = {
        name: f.last_update_time
        for name, f in state.files_by_name.items()
        if before.get(name) != f.last_update_time
    }
    assert set(changed.values()) <= {123_456}
    for reference in state.file_references():
        assert reference in references_before or reference.last_update_time == 123_456


@pytest.mark.parametrize(
    ("make_state", "transaction"), every_valid_transaction(), ids=lambda v: getattr(v, "TYPE", "")
)
def test_what_a_transaction_says_it_adds_at_most_bounds_what_applying_it_adds(
    make_state: Callable[[], TableState], transaction: Transaction
) -> None:
    """A reader replaying a log makes room for a state's growth from ``most_added`` before applying each
    entry (statestore.services.warm_cache.WarmCache.grown): it must never be less than what is added."""
    state = make_state()
    references, partitions = state.reference_count(), len(state.partitions_by_id)
    transaction.validate(state)
    transaction.apply(state, 123_456)

    most_references, most_partitions = transaction.most_added()
    assert state.reference_count() - references <= most_references
    assert len(state.partitions_by_id) - partitions <= most_partitions


# --- TransactionBatch ---------------------------------------------------------------------------------


def test_batch_validates_each_item_against_the_state_changed_by_the_earlier_items() -> None:
    state = standard_state()
    batch = TransactionBatch(
        (
            BatchItem("r1", AddFiles((ref("new", "p1"),))),
            BatchItem("r2", AssignJobIds((AssignJobIdRequest("job", "p1", ("new", "a.parquet")),))),
            BatchItem("r3", ReplaceFileReferences((job("job", "p1", ("new", "a.parquet"), "merged"),))),
        )
    )

    commit(state, batch, 8_000)

    assert batch.request_ids == ("r1", "r2", "r3")
    assert state.file("new") == TableFile("new", (), 8_000)
    assert state.file("merged").references[0].last_update_time == 8_000


@pytest.mark.parametrize(
    ("items", "error", "match"),
    [
        ((), InvalidTransactionError, "at least one request"),
        (
            (BatchItem("r1", AddFiles((ref("x", "p1"),))), BatchItem("r1", AddFiles((ref("y", "p1"),)))),
            InvalidTransactionError,
            "more than once",
        ),
        (
            (BatchItem("r1", AddFiles((ref("x", "p1"),))), BatchItem("r2", AddFiles((ref("x", "p2"),)))),
            FileAlreadyExistsError,
            "'x'",
        ),
        (
            (
                BatchItem("r1", AssignJobIds((AssignJobIdRequest("j1", "p1", ("a.parquet",)),))),
                BatchItem("r2", AssignJobIds((AssignJobIdRequest("j2", "p1", ("a.parquet",)),))),
            ),
            FileReferenceAssignedToJobError,
            "'j1'",
        ),
        (
            (BatchItem("r1", TransactionBatch((BatchItem("r2", ClearFiles()),))),),
            InvalidTransactionError,
            "nested",
        ),
    ],
    ids=["empty", "duplicate-request", "same-file-twice", "same-reference-twice", "nested"],
)
def test_batch_is_rejected(
    items: tuple[BatchItem, ...], error: type[TransactionValidationError], match: str
) -> None:
    assert_rejected(standard_state(), TransactionBatch(items), error, match)
