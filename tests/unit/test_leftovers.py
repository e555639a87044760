"""What late writers put under a deleted table's prefix is deleted by cleanup, on the word of the table's
tombstone and never on the absence of its record alone."""

from __future__ import annotations

import pytest

from statestore.errors import StoreUnavailableError
from statestore.model import layout
from statestore.services.cleanup import CleanupOutcome
from statestore.services.cleanup_policy import CleanupPolicy
from statestore.services.client import StateStoreClient
from statestore.services.leftovers import LeftoversReport, delete_leftovers, tombstones
from statestore.services.upkeep import UpkeepKind, UpkeepWork, plan_cleanup, run_cleanup_work
from statestore.store.memory import (
    InMemoryBlobStore,
    InMemoryCommitQueue,
    InMemoryCommitStatusStore,
    InMemorySnapshotMetadataStore,
    InMemoryTableIndex,
    InMemoryTransactionLog,
)
from statestore.transactions import AddFiles
from tests.builders import INT_SCHEMA, data_key, ref

T0 = 1_700_000_000_000
PERIOD = 60 * 60_000
POLICY = CleanupPolicy(gc_delay_ms=60 * 60_000, max_clock_skew_ms=60_000, max_request_age_ms=24 * PERIOD)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


def client_at(clock: Clock) -> StateStoreClient:
    blobs = InMemoryBlobStore(clock)
    return StateStoreClient(
        InMemoryTableIndex(),
        InMemoryTransactionLog(blobs, InMemoryCommitStatusStore()),
        InMemorySnapshotMetadataStore(),
        blobs,
    )


def deleted_table(client: StateStoreClient) -> str:
    """A table with a snapshot, deleted."""
    table_id = client.create_table("orders", INT_SCHEMA).table_id
    client.commit("orders", AddFiles((ref(data_key(table_id, "a")),)))
    client.create_snapshot("orders")
    client.delete_table("orders")
    return table_id


LATE = ("data/late.parquet", "requests/late.json", "upkeep/orphan-sweep.json")


def put_late(client: StateStoreClient, table_id: str) -> list[str]:
    """A job's data file, a sender's request body and a cleanup's sweep progress, put after the delete."""
    keys = [layout.table_prefix(table_id) + name for name in LATE]
    for key in keys:
        client.blobs.put(key, b"late")
    return keys


def plan_and_work(client: StateStoreClient, clock: Clock) -> tuple[list[str], list[UpkeepWork]]:
    """One cleanup period: the plan's tables with leftovers, and the work it queued."""
    queue = InMemoryCommitQueue(clock=clock)
    plan = plan_cleanup(client.table_index, queue, period_ms=PERIOD, now=clock(), blobs=client.blobs)
    return list(plan.leftovers), [UpkeepWork.from_body(m.body) for m in queue.take(10)]


def work_on(client: StateStoreClient, table_id: str, clock: Clock) -> CleanupOutcome:
    return run_cleanup_work(
        UpkeepWork(UpkeepKind.CLEANUP, table_id, clock(), PERIOD),
        client.table_index, client.log, client.snapshots, client.blobs,
        first_received_at=clock(), policy=POLICY, clock=clock,
    )  # fmt: skip


def test_what_late_writers_left_of_a_deleted_table_is_deleted_once_older_than_the_gc_delay() -> None:
    clock = Clock()
    client = client_at(clock)
    table_id = deleted_table(client)
    assert [t.table_id for t in tombstones(client.blobs)] == [table_id]
    put_late(client, table_id)

    clock.now += POLICY.gc_delay_ms - 1
    leftovers, work = plan_and_work(client, clock)
    young = work_on(client, table_id, clock)
    clock.now += 1
    old = work_on(client, table_id, clock)

    assert leftovers == [table_id]
    assert [(w.kind, w.table_id) for w in work] == [(UpkeepKind.CLEANUP, table_id)]
    assert young.leftovers == LeftoversReport(table_id, objects_deleted=0, objects_kept=len(LATE))
    assert old.leftovers == LeftoversReport(table_id, objects_deleted=len(LATE), objects_kept=0)
    assert old.error is None and old.report is None and old.skipped is not None
    assert client.blobs.list(layout.table_prefix(table_id)) == []  # before: these objects, for ever
    assert tombstones(client.blobs) != []  # a writer may still write: its requests can live that long


def test_a_tombstone_goes_once_no_writer_can_still_write_and_nothing_is_left() -> None:
    clock = Clock()
    client = client_at(clock)
    table_id = deleted_table(client)
    clock.now += POLICY.max_request_age_ms + POLICY.gc_delay_ms
    client.blobs.put(layout.data_prefix(table_id) + "latest.parquet", b"late")  # too young to delete

    kept = work_on(client, table_id, clock)
    clock.now += POLICY.gc_delay_ms
    gone = work_on(client, table_id, clock)

    assert kept.leftovers is not None and not kept.leftovers.tombstone_deleted
    assert gone.leftovers is not None and gone.leftovers.tombstone_deleted
    assert tombstones(client.blobs) == [] and client.blobs.list(layout.table_prefix(table_id)) == []
    assert plan_and_work(client, clock) == ([], [])


def test_objects_of_a_table_with_no_record_and_no_tombstone_are_kept() -> None:
    """A record can be missing for reasons that are no delete (an index restored from an older backup, a
    lost local DynamoDB): without a tombstone nothing says the table was deleted, and nothing is."""
    clock = Clock()
    client = client_at(clock)
    table_id = client.create_table("orders", INT_SCHEMA).table_id
    client.commit("orders", AddFiles((ref(data_key(table_id, "a")),)))
    client.create_snapshot("orders")
    client.table_index.delete(table_id)  # the record lost, not deleted by a delete
    objects = client.blobs.list(layout.table_prefix(table_id))
    clock.now += POLICY.max_request_age_ms + POLICY.gc_delay_ms

    planned = plan_and_work(client, clock)
    outcome = work_on(client, table_id, clock)

    assert planned == ([], []) and objects
    assert outcome.leftovers is None and outcome.skipped == "the table was deleted after the plan"
    assert client.blobs.list(layout.table_prefix(table_id)) == objects


def test_a_delete_interrupted_after_its_tombstone_is_left_to_the_delete(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = Clock()
    client = client_at(clock)
    table_id = client.create_table("orders", INT_SCHEMA).table_id

    def lost(table: str) -> None:
        raise StoreUnavailableError("the index is unavailable")

    monkeypatch.setattr(client.table_index, "delete", lost)
    with pytest.raises(StoreUnavailableError):
        client.delete_table("orders")
    monkeypatch.undo()
    assert [t.table_id for t in tombstones(client.blobs)] == [table_id]  # written before the record's delete
    late = put_late(client, table_id)
    clock.now += POLICY.gc_delay_ms

    assert plan_and_work(client, clock) == ([], [])  # its record, marked, is still there
    assert work_on(client, table_id, clock).skipped == "the table is being deleted"
    assert client.blobs.list(layout.table_prefix(table_id)) == late
    client.delete_table(table_id)  # run again, it finishes
    assert client.blobs.list(layout.table_prefix(table_id)) == []


def test_delete_leftovers_deletes_only_under_its_own_tables_prefix() -> None:
    clock = Clock()
    client = client_at(clock)
    table_id = deleted_table(client)
    other = client.create_table("other", INT_SCHEMA).table_id
    client.blobs.put(data_key(other, "a"), b"theirs")
    client.commit("other", AddFiles((ref(data_key(other, "a")),)))
    theirs = client.blobs.list(layout.TABLES_PREFIX)
    put_late(client, table_id)
    clock.now += POLICY.max_request_age_ms + POLICY.gc_delay_ms

    report = delete_leftovers(table_id, client.blobs, now=clock(), policy=POLICY)

    assert report is not None and report.objects_deleted == len(LATE) and report.tombstone_deleted
    assert client.blobs.list(layout.TABLES_PREFIX) == theirs
