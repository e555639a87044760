"""A table whose partitions are on the log and whose files are rows of a file-reference store: every
transaction type through commit and commit_group, order across runs, found/rejected/skipped members,
rejections on a stale cached partition tree, and what needs a log of file transactions."""

from __future__ import annotations

import pytest

from statestore.codec.transaction_json import decode_entry
from statestore.engine.log_store import GroupMember
from statestore.engine.row_store import RowFilesStateStore
from statestore.errors import (
    FileAlreadyExistsError,
    FilesPresentError,
    PartitionNotFoundError,
    StateStoreError,
    TransactionValidationError,
    UnsupportedByFileStoreError,
)
from statestore.store.memory import InMemoryCommitStatusStore, InMemoryTransactionLog
from statestore.store.ports import FileReferenceStore
from statestore.transactions import (
    AddFiles,
    AssignJobIdRequest,
    AssignJobIds,
    BatchItem,
    ClearFiles,
    ClearTable,
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
from tests.builders import INT_SCHEMA, data_key, ref, tree
from tests.file_stores import file_store  # noqa: F401  (the fixture)

TABLE = "table-1"


def key(name: str) -> str:
    """A data file's key under the table's data prefix."""
    return data_key(TABLE, name)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000

    def __call__(self) -> int:
        self.now += 1
        return self.now


@pytest.fixture
def log() -> InMemoryTransactionLog:
    return InMemoryTransactionLog(None, InMemoryCommitStatusStore())


def open_store(log: InMemoryTransactionLog, files: FileReferenceStore) -> RowFilesStateStore:
    return RowFilesStateStore(TABLE, INT_SCHEMA, log, files, clock=Clock())


@pytest.fixture
def store(log: InMemoryTransactionLog, file_store: FileReferenceStore) -> RowFilesStateStore:  # noqa: F811
    opened = open_store(log, file_store)
    opened.commit(InitialisePartitions(tuple(tree(INT_SCHEMA))))
    return opened


def split_root(store: RowFilesStateStore) -> SplitPartition:
    parent, left, right = store.state().partition("root").split(0, 10, "left", "right")
    return SplitPartition(parent, (left, right))


def log_types(log: InMemoryTransactionLog) -> list[str]:
    """The types of the transactions on the log, those of a group's entry each on its own."""
    types: list[str] = []
    for entry in log.read(TABLE, 1, None):
        transaction = decode_entry(entry)
        if isinstance(transaction, TransactionBatch):
            types.extend(item.transaction.TYPE for item in transaction.items)
        else:
            types.append(transaction.TYPE)
    return types


def test_every_transaction_type_goes_where_it_belongs(
    store: RowFilesStateStore,
    log: InMemoryTransactionLog,
    file_store: FileReferenceStore,  # noqa: F811
) -> None:
    store.commit(AddFiles((ref(key("a")), ref(key("b")))))
    store.commit(split_root(store))
    store.commit(
        SplitFileReferences(
            (
                SplitFileReferenceRequest(
                    key("a"), "root", (ref(key("a"), "left", 50), ref(key("a"), "right", 50))
                ),
            )
        )
    )
    store.commit(AssignJobIds((AssignJobIdRequest("job-1", "left", (key("a"),)),)))
    store.commit(AssignJobIds((AssignJobIdRequest("job-2", "right", (key("a"),)),)))
    store.commit(ReleaseClaims(("job-2",)))
    store.commit(
        ReplaceFileReferences(
            (ReplaceFileReferencesJob("job-1", "left", (key("a"),), ref(key("c"), "left")),)
        )
    )
    store.commit(AssignJobIds((AssignJobIdRequest("job-3", "right", (key("a"),)),)))
    store.commit(
        ReplaceFileReferences(
            (ReplaceFileReferencesJob("job-3", "right", (key("a"),), ref(key("d"), "right")),)
        )
    )
    store.commit(DeleteFiles((key("a"),)))

    state = store.state()
    assert sorted(state.files_by_name) == [key("b"), key("c"), key("d")]
    assert {(r.filename, r.partition_id) for r in state.file_references()} == {
        (key("b"), "root"),
        (key("c"), "left"),
        (key("d"), "right"),
    }
    assert sorted(p.id for p in state.leaf_partitions()) == ["left", "right"]
    # The log holds the partitions only; its number numbers the state.
    assert log_types(log) == ["InitialisePartitions", "SplitPartition"]
    assert state.transaction_number == 2

    store.commit(ClearFiles())
    assert store.state().files_by_name == {}
    assert not file_store.has_files(TABLE)
    store.commit(AddFiles((ref(key("e"), "left"),)))
    store.commit(ClearTable())
    cleared = store.state()
    assert cleared.files_by_name == {} and cleared.partitions_by_id == {}
    store.commit(InitialisePartitions(tuple(tree(INT_SCHEMA))))
    assert [p.id for p in store.state().partitions()] == ["root"]


def test_a_rejected_row_transaction_raises_its_error_and_writes_nothing(store: RowFilesStateStore) -> None:
    store.commit(AddFiles((ref(key("a")),)))
    with pytest.raises(FileAlreadyExistsError):
        store.commit(AddFiles((ref(key("a")),)))
    with pytest.raises(PartitionNotFoundError):
        store.commit(AddFiles((ref(key("b"), "no-such-partition"),)))
    assert sorted(store.state().files_by_name) == [key("a")]


def test_initialising_partitions_with_files_present_is_refused_as_on_the_log(
    store: RowFilesStateStore,
) -> None:
    store.commit(AddFiles((ref(key("a")),)))
    with pytest.raises(FilesPresentError):
        store.commit(InitialisePartitions(tuple(tree(INT_SCHEMA, [5]))))
    outcome = store.commit_group([GroupMember("init", InitialisePartitions(tuple(tree(INT_SCHEMA, [5]))))])
    assert isinstance(outcome.rejected["init"], FilesPresentError)
    assert [p.id for p in store.state().partitions()] == ["root"]


def test_a_transaction_batch_is_refused_with_a_pointer_to_commit_group(store: RowFilesStateStore) -> None:
    with pytest.raises(StateStoreError, match="commit_group"):
        store.commit(TransactionBatch((BatchItem("r1", AddFiles((ref(key("a")),))),)))


def test_time_travel_needs_a_log_backed_table(store: RowFilesStateStore) -> None:
    store.commit(AddFiles((ref(key("a")),)))
    with pytest.raises(UnsupportedByFileStoreError, match="PostgreSQL.*time travel"):
        store.load(as_of=1)
    with pytest.raises(UnsupportedByFileStoreError):
        store.require_file_log("an incremental read")
    assert sorted(store.load().files_by_name) == [key("a")]


def test_a_group_keeps_its_order_across_runs_of_rows_and_log(
    store: RowFilesStateStore, log: InMemoryTransactionLog
) -> None:
    split = split_root(store)
    members = [
        GroupMember("add-root", AddFiles((ref(key("a")),))),
        GroupMember("split", split),
        # Valid only after the split before it: the runs must go in order.
        GroupMember("add-left", AddFiles((ref(key("b"), "left"),))),
        GroupMember("add-twice", AddFiles((ref(key("a"), "right"),))),
        GroupMember("add-right", AddFiles((ref(key("c"), "right"),))),
    ]
    outcome = store.commit_group(members)

    assert outcome.committed == ("add-root", "split", "add-left", "add-right")
    assert isinstance(outcome.rejected["add-twice"], FileAlreadyExistsError)
    assert outcome.number_of("split") == 2  # the log entry
    assert outcome.number_of("add-left") == outcome.number_of("add-right")  # one file-store commit
    assert outcome.number_of("add-root") != outcome.number_of("add-left")
    assert [entry[0] for entry in outcome.written_log_entries()] == [2]
    assert outcome.written_log_entries()[0][2] == ("split",)
    assert log_types(log) == ["InitialisePartitions", "SplitPartition"]
    assert sorted(store.state().files_by_name) == [key("a"), key("b"), key("c")]


def test_members_committed_before_are_found_not_applied_again(store: RowFilesStateStore) -> None:
    split = split_root(store)
    members = [
        GroupMember("add", AddFiles((ref(key("a")),))),
        GroupMember("split", split),
        GroupMember("clear", ClearFiles()),
        GroupMember("add-after", AddFiles((ref(key("b"), "left"),))),
    ]
    first = store.commit_group(members)
    assert first.committed == ("add", "split", "clear", "add-after")

    again = store.commit_group(members)
    assert again.committed == ()
    # Row members are found in the file store's request rows; log members have the status their entry
    # wrote with it.
    assert again.found == {key: first.number_of(key) for key in ("add", "add-after")}
    assert again.decided == ("split", "clear")
    assert again.transaction_number is None
    assert sorted(store.state().files_by_name) == [key("b")]  # the clear was not run again


def test_skipped_parts_of_committed_members_are_reported(store: RowFilesStateStore) -> None:
    store.commit(AddFiles((ref(key("a")), ref(key("b")))))
    store.commit(AssignJobIds((AssignJobIdRequest("job-1", "root", (key("a"),)),)))
    store.commit(AssignJobIds((AssignJobIdRequest("job-2", "root", (key("b"),)),)))
    both = ReplaceFileReferences(
        (
            ReplaceFileReferencesJob("job-1", "root", (key("a"),), ref(key("c"))),
            ReplaceFileReferencesJob("job-9", "root", (key("b"),), ref(key("d"))),  # b is not job-9's
        )
    )
    outcome = store.commit_group([GroupMember("compact", both)])
    assert outcome.committed == ("compact",)
    assert [part for part, _ in outcome.skipped_parts["compact"]] == ["job-9"]
    files = store.state().files_by_name
    assert sorted(files) == [key("a"), key("b"), key("c")]
    assert files[key("a")].references == () and [r.job_id for r in files[key("b")].references] == ["job-2"]


def test_a_rejection_on_a_stale_cached_partition_tree_is_decided_again(
    store: RowFilesStateStore,
    log: InMemoryTransactionLog,
    file_store: FileReferenceStore,  # noqa: F811
) -> None:
    store.state()  # caches the tree with only the root
    other = open_store(log, file_store)
    other.commit(split_root(other))

    # "left" is not in the cached tree: the store reads the log to the end and decides again.
    result = store.commit(AddFiles((ref(key("a"), "left"),)))
    assert result.transaction_number >= 1
    outcome = store.commit_group(
        [
            GroupMember("ok", AddFiles((ref(key("b"), "right"),))),
            GroupMember("bad", AddFiles((ref(key("c"), "nowhere"),))),
        ]
    )
    assert outcome.committed == ("ok",)
    assert isinstance(outcome.rejected["bad"], PartitionNotFoundError)
    assert sorted(store.state().files_by_name) == [key("a"), key("b")]


def test_a_partition_tree_read_to_the_end_is_not_read_again_for_a_rejection(
    store: RowFilesStateStore, log: InMemoryTransactionLog
) -> None:
    reads: list[int] = []
    original = log.read

    def counting_read(*args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        reads.append(1)
        return original(*args, **kwargs)  # type: ignore[arg-type]

    store.state()
    log.read = counting_read  # type: ignore[method-assign]
    with pytest.raises(TransactionValidationError):
        store.commit(AddFiles((ref(key("a"), "nowhere"),)))
    assert len(reads) == 1  # one catch-up read to check the tree, then the rejection stands


@pytest.mark.parametrize("transaction", [AddFiles((ref(key("a")),)), ClearFiles()])
def test_row_and_clear_commits_leave_the_log_alone_but_for_clears(
    store: RowFilesStateStore, log: InMemoryTransactionLog, transaction: Transaction
) -> None:
    before = log.latest_number(TABLE)
    store.commit(transaction)
    moved = log.latest_number(TABLE) - before
    assert moved == (1 if isinstance(transaction, ClearFiles) else 0)
