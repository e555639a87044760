"""A table's delete: its record is marked first, and from then on nothing of the table is read, as the
partly deleted table it is while the delete runs (or after an interrupted one), nor written by upkeep."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from statestore.engine.snapshots import SnapshotStore
from statestore.errors import (
    StoreUnavailableError,
    TableAlreadyExistsError,
    TableBeingDeletedError,
    TableNotFoundError,
)
from statestore.model import layout
from statestore.services.cleanup_policy import CleanupPolicy
from statestore.services.client import StateStoreClient
from statestore.services.upkeep import (
    UpkeepKind,
    UpkeepWork,
    plan_cleanup,
    plan_snapshots,
    run_cleanup_work,
    run_snapshot_work,
)
from statestore.state.table_state import TableState
from statestore.store.memory import (
    InMemoryBlobStore,
    InMemoryCommitQueue,
    InMemoryCommitStatusStore,
    InMemorySnapshotMetadataStore,
    InMemoryTableIndex,
    InMemoryTransactionLog,
)
from statestore.store.memory_files import InMemoryFileReferenceStore
from statestore.store.ports import FileReferenceStore, LogEntry
from statestore.store.snapshot_ports import SnapshotInfo
from statestore.transactions import AddFiles
from tests.builders import INT_SCHEMA, data_key, ref

NOW = 1_700_000_000_000
PERIOD = 15 * 60_000


def orders(client: StateStoreClient) -> str:
    """A table with a snapshot and entries after it: a half-deleted one can look like an older state."""
    table = client.create_table("orders", INT_SCHEMA)
    client.commit("orders", AddFiles((ref(data_key(table.table_id, "a")),)))
    client.create_snapshot("orders")
    client.commit("orders", AddFiles((ref(data_key(table.table_id, "b")),)))
    return table.table_id


def nothing_left(client: StateStoreClient, table_id: str) -> bool:
    return (
        list(client.log.read(table_id, 0)) == []
        and client.snapshots.metadata.list(table_id) == []
        and client.snapshots.metadata.latest(table_id) is None
        and client.blobs.list(layout.table_prefix(table_id)) == []
    )


@pytest.mark.parametrize("step", ["log", "snapshots", "objects", "record"])
def test_a_table_whose_delete_was_interrupted_is_not_read_as_what_is_left(
    step: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = StateStoreClient.in_memory()
    table_id = orders(client)
    failing: dict[str, tuple[object, str]] = {
        "log": (client.log, "delete_table"),
        "snapshots": (client.snapshots, "delete_table"),
        "objects": (client.blobs, "delete"),
        "record": (client.table_index, "delete"),
    }
    target, method = failing[step]

    def unavailable(*args: object) -> None:
        raise StoreUnavailableError("simulated outage")

    with monkeypatch.context() as m:
        m.setattr(target, method, unavailable)
        with pytest.raises(StoreUnavailableError):
            client.delete_table("orders")

    # Before the mark: the table as of its snapshot, or an empty table at transaction 0.
    for read in (client.state, client.files, client.leaf_partitions):
        with pytest.raises(TableBeingDeletedError, match="'orders' .* is being deleted"):
            read("orders")
    with pytest.raises(TableBeingDeletedError):
        client.state(table_id)
    with pytest.raises(TableBeingDeletedError):
        client.commit("orders", AddFiles((ref(data_key(table_id, "c")),)))
    assert [t.deleting for t in client.list_tables()] == [True]
    client.delete_table("orders")  # run again, it finishes
    with pytest.raises(TableNotFoundError):
        client.state("orders")
    assert nothing_left(client, table_id)


def test_the_name_of_a_table_being_deleted_is_refused_saying_so() -> None:
    client = StateStoreClient.in_memory()
    orders(client)
    other = client.create_table("other", INT_SCHEMA)
    client.table_index.mark_deleting(client.table_record("orders").table_id)

    with pytest.raises(TableAlreadyExistsError, match="'orders' is being deleted") as created:
        client.create_table("orders", INT_SCHEMA)
    with pytest.raises(TableAlreadyExistsError, match="'orders' is being deleted"):
        client.rename_table("other", "orders")
    with pytest.raises(TableAlreadyExistsError, match="'other' already exists"):
        client.create_table("other", INT_SCHEMA)

    assert created.value.being_deleted
    assert client.get_table("other") == other
    client.delete_table("orders")
    assert client.create_table("orders", INT_SCHEMA).table_name == "orders"


class DeletedWhileRead(InMemoryTransactionLog):
    """A log whose next read of ``table_id`` runs ``meanwhile`` once the read has its entries: a delete that
    overtakes a reader."""

    meanwhile: Callable[[], object] | None = None

    def read(self, table_id: str, from_number: int, to_number: int | None = None) -> Iterator[LogEntry]:
        entries = list(super().read(table_id, from_number, to_number))
        run, self.meanwhile = self.meanwhile, None
        if run is not None:
            run()
        return iter(entries)


def racing_client(files: FileReferenceStore | None = None) -> tuple[StateStoreClient, DeletedWhileRead]:
    blobs = InMemoryBlobStore()
    log = DeletedWhileRead(blobs, InMemoryCommitStatusStore())
    client = StateStoreClient(
        InMemoryTableIndex(), log, InMemorySnapshotMetadataStore(), blobs, file_store=files
    )
    return client, log


def test_a_postgres_table_whose_delete_began_is_not_read_as_its_rows_or_partitions_left() -> None:
    files = InMemoryFileReferenceStore()
    client, log = racing_client(files)
    table = client.create_table("rows", INT_SCHEMA, file_store="postgres")
    client.commit("rows", AddFiles((ref(data_key(table.table_id, "a")),)))
    store = client.state_store("rows")
    # The delete overtakes the read: the rows were read before it, the partitions after them.
    log.meanwhile = lambda: client.delete_table("rows")

    with pytest.raises(TableNotFoundError):  # before: the rows of a table that no longer exists
        store.state()
    assert files.files(table.table_id) == {}


def test_a_read_the_delete_overtook_says_the_table_is_gone_rather_than_answer() -> None:
    client, log = racing_client()
    table_id = orders(client)
    store = client.state_store("orders")  # found before the delete began
    log.meanwhile = lambda: client.delete_table("orders")

    with pytest.raises(TableNotFoundError):  # before: the table as read, after it was deleted
        store.state()
    assert nothing_left(client, table_id)


def test_a_kept_store_catching_up_after_a_delete_says_the_table_is_gone() -> None:
    client, log = racing_client()
    orders(client)
    store = client.state_store("orders")
    assert store.state().transaction_number == 3
    log.meanwhile = lambda: client.delete_table("orders")

    with pytest.raises(TableNotFoundError):  # before: transaction 3, as if nothing had happened
        store.state()


class DeletedAfterCheck(InMemoryTableIndex):
    """A table index whose next check of a table that passes runs ``meanwhile`` after it: a delete that
    begins between a writer's read and its decision."""

    meanwhile: Callable[[], object] | None = None

    def check_live(self, table_id: str) -> None:
        super().check_live(table_id)
        run, self.meanwhile = self.meanwhile, None
        if run is not None:
            run()


def test_a_commit_judged_against_what_a_table_being_deleted_left_is_not_rejected() -> None:
    memory = StateStoreClient.in_memory()
    index = DeletedAfterCheck()
    client = StateStoreClient(index, memory.log, memory.snapshots.metadata, memory.blobs)
    table_id = orders(client)
    # The delete goes as far as the log: the writer's state holds file a, and an empty log reads as
    # nothing after it.
    index.meanwhile = lambda: (index.mark_deleting(table_id), client.log.delete_table(table_id))
    again = AddFiles((ref(data_key(table_id, "a")),))  # invalid against that state only

    with pytest.raises(TableBeingDeletedError):  # before: "file ... already exists", recorded as final
        client.commit("orders", again, request_id="r-1")
    assert client.log.request_statuses is not None
    assert client.log.request_statuses.get(table_id, "r-1") is None


def test_a_read_failing_on_a_half_deleted_log_says_the_table_is_being_deleted() -> None:
    client, log = racing_client()
    table_id = orders(client)
    store = client.state_store("orders")
    # The delete begins, and its log delete has gone as far as the entry after the snapshot.
    log.meanwhile = lambda: (client.table_index.mark_deleting(table_id), client.log.delete_up_to(table_id, 2))

    with pytest.raises(TableBeingDeletedError):  # before: "log entries ... were deleted"
        store.load()


# --- upkeep ---------------------------------------------------------------------------------------------


class DeletedBeforeWritten(SnapshotStore):
    """A snapshot store whose next write runs ``meanwhile`` first: a delete that began after the writer's
    load, and whose pass over the snapshots came before the write."""

    meanwhile: Callable[[], object] | None = None

    def write(self, table_id: str, state: TableState, created_time: int) -> SnapshotInfo:
        run, self.meanwhile = self.meanwhile, None
        if run is not None:
            run()
        return super().write(table_id, state, created_time)


def deleted_before_its_snapshot_is_written() -> tuple[StateStoreClient, DeletedBeforeWritten, str]:
    """A client whose next snapshot write runs the delete of table "orders" first; and the table's id."""
    memory = StateStoreClient.in_memory()
    snapshots = DeletedBeforeWritten(memory.snapshots.metadata, memory.blobs)
    client = StateStoreClient(memory.table_index, memory.log, snapshots.metadata, memory.blobs)
    client.snapshots = snapshots
    table_id = orders(client)
    snapshots.meanwhile = lambda: client.delete_table("orders")
    return client, snapshots, table_id


def test_a_snapshot_written_while_its_table_was_deleted_is_deleted_again() -> None:
    client, snapshots, table_id = deleted_before_its_snapshot_is_written()
    work = UpkeepWork(UpkeepKind.SNAPSHOT, table_id, NOW, PERIOD)

    outcome = run_snapshot_work(work, client.table_index, client.log, snapshots, first_received_at=NOW)

    assert outcome.snapshot is None and outcome.error is None
    assert outcome.skipped is not None and "the snapshot written meanwhile is deleted" in outcome.skipped
    assert nothing_left(client, table_id)  # before: the snapshot's record and objects, for ever


def test_a_snapshot_asked_for_while_its_table_was_deleted_is_deleted_again() -> None:
    client, _, table_id = deleted_before_its_snapshot_is_written()

    with pytest.raises(TableNotFoundError):  # before: the snapshot, reported written, left for ever
        client.create_snapshot("orders")
    assert nothing_left(client, table_id)


def test_the_jobs_of_a_table_the_delete_overtook_are_not_listed_as_none() -> None:
    client, log = racing_client()
    orders(client)
    log.meanwhile = lambda: client.delete_table("orders")

    with pytest.raises(TableNotFoundError):  # before: no job at all
        client.jobs("orders")


def test_snapshot_work_for_a_deleted_table_deletes_what_a_crashed_worker_left_of_it() -> None:
    client = StateStoreClient.in_memory()
    table_id = orders(client)
    state = client.state("orders")
    client.delete_table("orders")
    # A worker that loaded the table before the delete, wrote its snapshot after it, and crashed before its
    # check: its message is delivered again.
    client.snapshots.write(table_id, state, NOW)
    work = UpkeepWork(UpkeepKind.SNAPSHOT, table_id, NOW, PERIOD)

    outcome = run_snapshot_work(work, client.table_index, client.log, client.snapshots, first_received_at=NOW)

    assert outcome.skipped == "the table was deleted after the plan"
    assert nothing_left(client, table_id)  # before: the snapshot, for ever


def test_upkeep_plans_no_work_for_a_table_being_deleted_and_skips_work_planned_before() -> None:
    client = StateStoreClient.in_memory()
    table_id = orders(client)
    kept = client.create_table("kept", INT_SCHEMA).table_id
    client.commit("kept", AddFiles((ref(data_key(kept, "a")),)))
    client.table_index.mark_deleting(table_id)  # a delete that began and was interrupted
    queue = InMemoryCommitQueue(clock=lambda: NOW)

    plan_snapshots(client.table_index, client.log, client.snapshots, queue, period_ms=PERIOD, now=NOW)
    plan_cleanup(client.table_index, queue, period_ms=PERIOD, now=NOW)

    planned = [UpkeepWork.from_body(m.body) for m in queue.take(10)]
    assert {(w.kind, w.table_id) for w in planned} == {(kind, kept) for kind in UpkeepKind}
    snapshot = run_snapshot_work(
        UpkeepWork(UpkeepKind.SNAPSHOT, table_id, NOW, PERIOD),
        client.table_index, client.log, client.snapshots, first_received_at=NOW,
    )  # fmt: skip
    cleanup = run_cleanup_work(
        UpkeepWork(UpkeepKind.CLEANUP, table_id, NOW, PERIOD),
        client.table_index, client.log, client.snapshots, client.blobs, first_received_at=NOW,
    )  # fmt: skip
    assert snapshot.skipped == cleanup.skipped == "the table is being deleted"


def test_a_cleanup_the_delete_of_its_table_overtook_reports_it_skipped_not_done() -> None:
    client, log = racing_client()
    table_id = orders(client)
    log.meanwhile = lambda: client.delete_table("orders")
    work = UpkeepWork(UpkeepKind.CLEANUP, table_id, NOW, PERIOD)

    outcome = run_cleanup_work(
        work, client.table_index, client.log, client.snapshots, client.blobs,
        first_received_at=NOW, policy=CleanupPolicy(log_min_snapshot_age_ms=0),
    )  # fmt: skip

    assert outcome.report is None and outcome.error is None  # before: a report of the empty table
    assert outcome.skipped is not None and "not found" in outcome.skipped


def test_a_cleanup_overtaken_in_its_orphan_sweep_leaves_nothing_of_the_table_behind(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = StateStoreClient.in_memory()
    table_id = orders(client)
    read = client.blobs.get
    deletes = [lambda: client.delete_table("orders")]

    def get(key: str) -> bytes:
        if key == layout.orphan_sweep_key(table_id):  # the sweep reads its progress, then saves it
            while deletes:
                deletes.pop()()
        return read(key)

    monkeypatch.setattr(client.blobs, "get", get)
    work = UpkeepWork(UpkeepKind.CLEANUP, table_id, NOW, PERIOD)

    outcome = run_cleanup_work(
        work, client.table_index, client.log, client.snapshots, client.blobs,
        first_received_at=NOW, policy=CleanupPolicy(log_min_snapshot_age_ms=0),
    )  # fmt: skip

    assert outcome.report is None and outcome.skipped is not None and "not found" in outcome.skipped
    assert nothing_left(client, table_id)  # before: the orphan sweep's progress, for ever
