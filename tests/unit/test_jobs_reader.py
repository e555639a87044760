"""JobStatusReader: the job model read incrementally from the log, saved beside the state snapshots."""

from __future__ import annotations

import itertools

from statestore.engine.jobs_reader import JobStatusReader
from statestore.engine.log_store import TransactionLogStateStore
from statestore.engine.snapshots import SnapshotStore
from statestore.model import layout
from statestore.services.client import StateStoreClient
from statestore.services.snapshot_upkeep import snapshot_tables
from statestore.store.memory import (
    InMemoryBlobStore,
    InMemorySnapshotMetadataStore,
    InMemoryTableIndex,
    InMemoryTransactionLog,
)
from statestore.store.tables import TableInfo
from statestore.transactions import AddFiles, AssignJobIdRequest, AssignJobIds, InitialisePartitions
from statestore.views.jobs_model import JobState
from tests.builders import STRING_SCHEMA, data_key, ref, tree

TABLE = "t"


def table() -> tuple[TransactionLogStateStore, InMemoryTransactionLog, SnapshotStore]:
    log = InMemoryTransactionLog()
    snapshots = SnapshotStore(InMemorySnapshotMetadataStore(), InMemoryBlobStore())
    clock = itertools.count(1_000, 10)
    store = TransactionLogStateStore(TABLE, STRING_SCHEMA, log, snapshots, clock=lambda: next(clock))
    store.commit(InitialisePartitions(tuple(tree(STRING_SCHEMA))))
    store.commit(AddFiles(tuple(ref(data_key(TABLE, f"f{i}")) for i in range(6))))
    return store, log, snapshots


def claim(store: TransactionLogStateStore, job_id: str, name: str) -> None:
    """Assign the data file ``name`` (its key under the table's data prefix) to ``job_id``."""
    store.commit(AssignJobIds((AssignJobIdRequest(job_id, "root", (data_key(TABLE, name),)),)))


def reader(log: InMemoryTransactionLog, snapshots: SnapshotStore) -> JobStatusReader:
    return JobStatusReader(TABLE, STRING_SCHEMA, log, snapshots)


def test_a_reader_reads_only_the_entries_written_since_it_last_looked() -> None:
    store, log, snapshots = table()
    jobs = reader(log, snapshots)
    claim(store, "job-1", "f0")
    assert jobs.model().job("job-1")[-1].state is JobState.CLAIMED
    folded = jobs.entries_folded

    claim(store, "job-2", "f1")
    assert jobs.model().job("job-2")[-1].state is JobState.CLAIMED
    assert jobs.entries_folded == folded + 1


def test_saving_keeps_only_the_newest_saved_models() -> None:
    store, log, snapshots = table()
    jobs = JobStatusReader(TABLE, STRING_SCHEMA, log, snapshots, keep_saved=2)
    for i in range(3):
        claim(store, f"job-{i}", f"f{i}")
        jobs.save()

    keys = snapshots.blobs.list(layout.jobs_model_prefix(TABLE))
    assert keys == [layout.jobs_model_key(TABLE, n) for n in (4, 5)]


def test_an_unreadable_saved_model_is_passed_over_for_the_log() -> None:
    store, log, snapshots = table()
    claim(store, "job-1", "f0")
    snapshots.blobs.put(layout.jobs_model_key(TABLE, 3), b"{not json")

    assert reader(log, snapshots).model().job("job-1")[-1].claim_transaction == 3


def test_with_the_log_start_deleted_and_nothing_saved_the_history_starts_at_the_snapshot() -> None:
    store, log, snapshots = table()
    claim(store, "job-1", "f0")
    store.create_snapshot()
    log.delete_up_to(TABLE, 3)
    claim(store, "job-2", "f1")

    model = reader(log, snapshots).model()
    assert model.history_from == 4
    assert model.job("job-1")[-1].claim_transaction is None  # held, but its claim entry is gone
    assert model.job("job-2")[-1].claim_transaction == 4


def test_the_scheduled_snapshot_saves_the_job_model_at_the_snapshot_number() -> None:
    store, log, snapshots = table()
    claim(store, "job-1", "f0")
    index = InMemoryTableIndex()
    index.create(TableInfo(TABLE, "events", STRING_SCHEMA))

    (outcome,) = snapshot_tables(index, log, snapshots)

    assert outcome.snapshot is not None and outcome.snapshot.transaction_number == 3
    assert snapshots.blobs.list(layout.jobs_model_prefix(TABLE)) == [layout.jobs_model_key(TABLE, 3)]
    log.delete_up_to(TABLE, 3)  # cleanup after the snapshot: the claim entry is gone, the saved model has it
    assert reader(log, snapshots).model().job("job-1")[-1].claim_transaction == 3


def test_the_client_lists_a_tables_jobs_and_snapshots_their_model() -> None:
    client = StateStoreClient.in_memory()
    info = client.create_table("events", STRING_SCHEMA)
    f0, f1 = data_key(info.table_id, "f0"), data_key(info.table_id, "f1")
    client.commit("events", AddFiles((ref(f0), ref(f1))))
    client.commit("events", AssignJobIds((AssignJobIdRequest("job-1", "root", (f0,)),)))
    written = client.create_snapshot("events")

    assert [r.job_id for r in client.jobs("events", states=[JobState.CLAIMED])] == ["job-1"]
    assert client.job("events", "job-1")[-1].input_files == (f0,)
    assert written is not None
    keys = client.blobs.list(layout.jobs_model_prefix(info.table_id))
    assert keys == [layout.jobs_model_key(info.table_id, written.transaction_number)]
