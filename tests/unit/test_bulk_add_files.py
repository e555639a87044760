"""A bulk AddFiles (a thousand references or more) is checked column by column and added as columns.

Each test compares it with the same AddFiles taken the small way, one reference and one object at a time
(``_MANY_REFERENCES`` raised past it): the same errors with the same messages, the same state after it,
the same state after an undo, and the same snapshot.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from statestore.codec.parquet import state_from_parquet, state_to_parquet
from statestore.errors import (
    FileAlreadyExistsError,
    FileReferenceAlreadyExistsError,
    InvalidTransactionError,
    PartitionNotFoundError,
    TransactionValidationError,
)
from statestore.model.files import FileReference, TableFile
from statestore.state import file_columns
from statestore.state import table_state as state_module
from statestore.state.table_state import TableState
from statestore.transactions import AddFiles, AssignJobIdRequest, AssignJobIds, file_changes
from tests.builders import STRING_SCHEMA, commit, new_state, ref

BULK = 1_200  # past file_changes._MANY_REFERENCES


def bulk_references(count: int = BULK, prefix: str = "bulk") -> list[FileReference]:
    return [
        ref(f"tables/t/data/partition=p{1 + i % 2}/{prefix}-{i:05d}.parquet", f"p{1 + i % 2}", rows=i + 1)
        for i in range(count)
    ]


def a_table_with_history() -> TableState:
    """Files in the base (a fold) and changes over it in the overlay: a file replaced, one removed."""
    state = new_state(STRING_SCHEMA, ["m"], [ref("a.parquet", "p1"), ref("b.parquet", "p2")])
    commit(state, AddFiles(tuple(bulk_references(300, "old"))))
    state.file_columns()  # fold
    state.put_file(TableFile("a.parquet", (ref("a.parquet", "p1", rows=7),), 2_000))
    state.remove_file("b.parquet")
    return state


@pytest.fixture
def the_small_way(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """Call to take every AddFiles from then on one reference and one object at a time."""
    return lambda: monkeypatch.setattr(file_changes, "_MANY_REFERENCES", 10**9)


def rejection(state: TableState, transaction: AddFiles) -> TransactionValidationError:
    before = state.copy()
    with pytest.raises(TransactionValidationError) as caught:
        transaction.validate(state)
    assert state == before
    return caught.value


@pytest.mark.parametrize(
    ("bad", "error", "match"),
    [
        (ref("a.parquet", "p1"), FileAlreadyExistsError, "a.parquet"),
        (ref("tables/t/data/partition=p1/bulk-00004.parquet", "p1"), FileReferenceAlreadyExistsError, "bulk"),
        (ref("new", "nope"), PartitionNotFoundError, "nope"),
        (ref("new", "p1", -1), InvalidTransactionError, "negative row count"),
        (ref("", "p1"), InvalidTransactionError, "non-empty filename"),
        (ref("new/\udc80.parquet", "p1"), InvalidTransactionError, "lone surrogate"),
        (ref("new", "p1", job_id="job"), InvalidTransactionError, "cannot already belong to a job"),
        (ref("new", "p1", rows=True), InvalidTransactionError, "new"),  # a bool is not a row count
        (FileReference("new", "p1", 5, last_update_time=1.5), InvalidTransactionError, "new"),  # type: ignore[arg-type]
        (FileReference(7, "p1", 5), InvalidTransactionError, "non-empty filename"),  # type: ignore[arg-type]
        (FileReference("new", 3, 5), InvalidTransactionError, "partition"),  # type: ignore[arg-type]
        (ref("new", "p1", approximate=1), InvalidTransactionError, "new"),  # type: ignore[arg-type]
        (ref("new", "p1", rows=1 << 63), InvalidTransactionError, "new"),
    ],
    ids=[
        "exists",
        "duplicate-reference",
        "no-partition",
        "negative",
        "no-name",
        "not-utf-8",
        "job",
        "bool-rows",
        "float-time",
        "int-name",
        "int-partition",
        "int-flag",
        "rows-past-int64",
    ],
)
@pytest.mark.parametrize("at", [0, 700, BULK])
def test_a_bulk_add_files_rejects_what_a_small_one_does_with_the_same_error(
    the_small_way: Callable[[], None],
    bad: FileReference,
    error: type[TransactionValidationError],
    match: str,
    at: int,
) -> None:
    references = bulk_references()
    references.insert(at, bad)
    transaction = AddFiles(tuple(references))
    state = a_table_with_history()

    bulk = rejection(state, transaction)
    the_small_way()
    small = rejection(state, transaction)

    assert isinstance(bulk, error)
    assert match in str(bulk)
    assert (type(bulk), str(bulk)) == (type(small), str(small))


def test_a_bulk_add_files_names_the_first_file_that_exists_already(the_small_way: Callable[[], None]) -> None:
    references = bulk_references()
    references[900:901] = [ref("tables/t/data/partition=p1/old-00010.parquet", "p1")]
    references[1000:1001] = [ref("a.parquet", "p1")]
    transaction = AddFiles(tuple(references))

    bulk = rejection(a_table_with_history(), transaction)
    the_small_way()

    assert str(bulk) == str(rejection(a_table_with_history(), transaction))
    assert "old-00010" in str(bulk)


def both_ways(
    transaction: AddFiles, the_small_way: Callable[[], None], update_time: int = 3_000
) -> tuple[TableState, TableState]:
    bulk = commit(a_table_with_history(), transaction, update_time)
    the_small_way()
    small = commit(a_table_with_history(), transaction, update_time)
    return bulk, small


@pytest.mark.parametrize("append_ratio", [0, 64, 10**9], ids=["into-the-overlay", "as-measured", "appended"])
def test_a_bulk_add_files_leaves_the_state_a_small_one_would(
    monkeypatch: pytest.MonkeyPatch, the_small_way: Callable[[], None], append_ratio: int
) -> None:
    monkeypatch.setattr(state_module, "_APPEND_RATIO", append_ratio)
    references = bulk_references()
    transaction = AddFiles(tuple(references), unreferenced_files=("tables/t/data/x/written.parquet", "bare"))

    bulk, small = both_ways(transaction, the_small_way)

    assert bulk == small
    assert bulk.reference_count() == small.reference_count() == 300 + 1 + BULK
    for reference in references[::97]:
        assert bulk.file(reference.filename).references == (reference._replace(last_update_time=3_000),)
    assert bulk.file("bare") == TableFile("bare", (), 3_000)
    assert bulk.file("a.parquet").references[0].number_of_rows == 7  # the overlay's change kept
    assert "b.parquet" not in bulk.files_by_name
    assert bulk.files_ready_for_gc(3_001) == small.files_ready_for_gc(3_001) != []
    # A fresh load of what it snapshots is the same state: the columns it appended write and read back.
    partitions, files = state_to_parquet(bulk)
    assert state_from_parquet(STRING_SCHEMA, partitions, files, bulk.transaction_number) == small


def test_a_bulk_add_files_of_a_file_with_several_references_leaves_the_state_a_small_one_would(
    the_small_way: Callable[[], None],
) -> None:
    references = bulk_references()
    references.append(ref("tables/t/data/partition=p1/bulk-00000.parquet", "p2", whole_file=False))
    bulk, small = both_ways(AddFiles(tuple(references)), the_small_way)

    assert bulk == small
    assert len(bulk.file("tables/t/data/partition=p1/bulk-00000.parquet").references) == 2


@pytest.mark.parametrize("append_ratio", [0, 10**9], ids=["into-the-overlay", "appended"])
def test_a_bulk_add_files_tried_under_an_undo_journal_is_undone_or_kept_with_the_changes_after_it(
    monkeypatch: pytest.MonkeyPatch, the_small_way: Callable[[], None], append_ratio: int
) -> None:
    monkeypatch.setattr(state_module, "_APPEND_RATIO", append_ratio)
    references = bulk_references()
    claimed = references[3].filename
    later = [
        AssignJobIds((AssignJobIdRequest("job", "p2", (claimed,)),)),
        AddFiles((ref("after", "p1"),)),
    ]

    def try_it(state: TableState, keep: bool) -> TableState:
        before = state.copy()
        mark = state.begin_changes()
        commit(state, AddFiles(tuple(references)), 3_000)
        inner = state.begin_changes()
        for transaction in later:
            commit(state, transaction, 3_001)
        state.remove_file("a.parquet")
        assert state.file(claimed).references[0].job_id == "job"
        if keep:
            state.keep_changes(inner)
            state.keep_changes(mark)
        else:
            state.undo_changes(inner)
            assert state.file(claimed).references[0].job_id is None
            assert "a.parquet" in state.files_by_name and "after" not in state.files_by_name
            state.undo_changes(mark)
            state.transaction_number = before.transaction_number
            assert state == before
            assert state.reference_count() == before.reference_count()
            assert state.files_present([r.filename for r in references]) == [False] * BULK
        return state

    undone = try_it(a_table_with_history(), keep=False)
    kept = try_it(a_table_with_history(), keep=True)
    the_small_way()
    kept_the_small_way = try_it(a_table_with_history(), keep=True)

    assert kept == kept_the_small_way
    assert kept.file(claimed).references[0].job_id == "job"
    assert undone == a_table_with_history()


def test_a_bulk_add_files_of_names_past_ascii_that_utf_8_stores_is_taken_as_a_small_one_is(
    the_small_way: Callable[[], None],
) -> None:
    references = bulk_references()
    references[500] = ref("tables/t/data/partition=p1/été-𝄞.parquet", "p1")
    bulk, small = both_ways(AddFiles(tuple(references)), the_small_way)

    assert bulk == small
    assert bulk.file("tables/t/data/partition=p1/été-𝄞.parquet").references[0].partition_id == "p1"


def test_a_bulk_add_files_is_the_same_value_after_validate_and_apply_and_applies_again_alike() -> None:
    transaction, twin = AddFiles(tuple(bulk_references())), AddFiles(tuple(bulk_references()))
    first = a_table_with_history()
    transaction.validate(first)  # transposes its references, kept for apply

    assert transaction == twin and hash(transaction) == hash(twin)
    commit(first, transaction, 3_000)
    second = commit(a_table_with_history(), transaction, 3_000)
    assert first == second == commit(a_table_with_history(), twin, 3_000)
    assert transaction == twin and hash(transaction) == hash(twin)
    # Validated again against a state that now holds its files, it is rejected.
    with pytest.raises(FileAlreadyExistsError):
        transaction.validate(first)


def test_a_bulk_add_files_applied_leaves_no_copy_of_its_names_or_fields_behind() -> None:
    # What validate prepared for apply (the fields transposed, the names split and hashed) is a batch's size
    # again: a committer holding it after the commit would hold a million names for nothing.
    transaction = AddFiles(tuple(bulk_references()))
    state = a_table_with_history()
    transaction.validate(state)
    assert file_columns._last_split[1] is not None  # the split validate made, for apply

    transaction.apply(state, 3_000)

    assert file_columns._last_split[1] is None
    assert "_columns" not in vars(transaction)
