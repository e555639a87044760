"""Upkeep fanned out per table: the plan queues one message per table that needs work, the worker does one."""

from __future__ import annotations

import random

import pytest

from statestore.engine.log_store import TransactionLogStateStore
from statestore.engine.snapshots import SnapshotStore
from statestore.services.cleanup_policy import CleanupPolicy
from statestore.services.upkeep import (
    MalformedWorkError,
    UpkeepKind,
    UpkeepWork,
    plan_cleanup,
    plan_snapshots,
    run_cleanup_work,
    run_snapshot_work,
)
from statestore.store.memory import (
    InMemoryBlobStore,
    InMemoryCommitQueue,
    InMemorySnapshotMetadataStore,
    InMemoryTableIndex,
    InMemoryTransactionLog,
)
from statestore.store.tables import TableInfo
from statestore.transactions import AddFiles, InitialisePartitions
from tests.builders import INT_SCHEMA, data_key, ref, tree

PERIOD = 15 * 60_000
NOW = 1_700_000_000_000


class Instance:
    def __init__(self) -> None:
        self.tables = InMemoryTableIndex()
        self.log = InMemoryTransactionLog()
        self.blobs = InMemoryBlobStore()
        self.snapshots = SnapshotStore(InMemorySnapshotMetadataStore(), self.blobs)
        self.queue = InMemoryCommitQueue(clock=lambda: NOW)

    def table(self, name: str, commits: int) -> TransactionLogStateStore:
        info = TableInfo.new(name, INT_SCHEMA)
        self.tables.create(info)
        store = TransactionLogStateStore(info.table_id, INT_SCHEMA, self.log, self.snapshots)
        store.commit(InitialisePartitions(tuple(tree(INT_SCHEMA))))
        for i in range(commits):
            store.commit(AddFiles((ref(data_key(info.table_id, f"{name}-{i}")),)))
        return store

    def work(self) -> list[UpkeepWork]:
        return [UpkeepWork.from_body(m.body) for m in self.queue.take(1000)]


@pytest.fixture
def instance() -> Instance:
    return Instance()


def test_the_snapshot_plan_queues_only_tables_whose_log_moved_one_message_group_each(
    instance: Instance,
) -> None:
    moved, still = instance.table("moved", 2), instance.table("still", 1)
    still.create_snapshot()

    plan = plan_snapshots(
        instance.tables, instance.log, instance.snapshots, instance.queue, period_ms=PERIOD, now=NOW
    )

    assert plan.planned == (moved.table_id,) and plan.skipped == (still.table_id,)
    [message] = instance.queue.messages
    assert message.group_id == moved.table_id
    assert UpkeepWork.from_body(message.body) == UpkeepWork(UpkeepKind.SNAPSHOT, moved.table_id, NOW, PERIOD)


def test_a_plan_run_twice_in_one_period_queues_each_table_once(instance: Instance) -> None:
    store = instance.table("t", 1)

    start = NOW - NOW % PERIOD
    for now in (start + 5, start + 65_000):  # the schedule's event delivered twice, a minute apart
        plan_cleanup(instance.tables, instance.queue, period_ms=PERIOD, now=now)

    assert [w.table_id for w in instance.work()] == [store.table_id]


def test_a_thousand_tables_get_a_thousand_messages(instance: Instance) -> None:
    for i in range(1000):
        instance.tables.create(TableInfo.new(f"t{i}", INT_SCHEMA))

    plan = plan_cleanup(instance.tables, instance.queue, period_ms=PERIOD, now=NOW)

    assert len(plan.planned) == 1000
    assert len({m.group_id for m in instance.queue.messages}) == 1000


def test_each_plan_queues_the_tables_in_a_new_order_so_an_overrun_does_not_always_drop_the_same(
    instance: Instance,
) -> None:
    for i in range(50):
        instance.tables.create(TableInfo.new(f"t{i}", INT_SCHEMA))
    orders = []
    for seed, period in ((1, 1), (2, 2)):  # two periods, so neither plan's messages are duplicates
        plan_cleanup(
            instance.tables, instance.queue, period_ms=period * PERIOD, now=NOW, rng=random.Random(seed)
        )
        orders.append([m.group_id for m in instance.queue.take(1000)])

    assert sorted(orders[0]) == sorted(orders[1]) == sorted(t.table_id for t in instance.tables.list())
    assert orders[0] != orders[1]


def test_the_worker_snapshots_the_table_of_its_message(instance: Instance) -> None:
    store = instance.table("t", 2)
    plan_snapshots(
        instance.tables, instance.log, instance.snapshots, instance.queue, period_ms=PERIOD, now=NOW
    )
    [work] = instance.work()

    outcome = run_snapshot_work(
        work, instance.tables, instance.log, instance.snapshots, first_received_at=NOW + 10
    )

    assert outcome.snapshot is not None and outcome.snapshot.transaction_number == 3
    latest = instance.snapshots.metadata.latest(store.table_id)
    assert latest is not None and latest.transaction_number == 3
    again = run_snapshot_work(
        work, instance.tables, instance.log, instance.snapshots, first_received_at=NOW + 20
    )
    assert again.snapshot is None and again.skipped == "0 transaction(s) since the last snapshot"


def test_work_that_waited_over_a_period_behind_a_slow_run_is_superseded_without_loading(
    instance: Instance,
) -> None:
    store = instance.table("t", 2)
    work = UpkeepWork(UpkeepKind.SNAPSHOT, store.table_id, NOW, PERIOD)

    outcome = run_snapshot_work(
        work, instance.tables, instance.log, instance.snapshots, first_received_at=NOW + PERIOD + 1
    )

    assert outcome.snapshot is None and outcome.skipped is not None and "superseded" in outcome.skipped
    assert instance.snapshots.metadata.latest(store.table_id) is None
    # Waiting exactly one period is still in time.
    on_time = run_snapshot_work(
        work, instance.tables, instance.log, instance.snapshots, first_received_at=NOW + PERIOD
    )
    assert on_time.snapshot is not None


def test_the_cleanup_worker_cleans_its_table_and_skips_a_deleted_one(instance: Instance) -> None:
    store = instance.table("t", 3)
    store.create_snapshot()
    gone = UpkeepWork(UpkeepKind.CLEANUP, "no-such-table", NOW, PERIOD)
    work = UpkeepWork(UpkeepKind.CLEANUP, store.table_id, NOW, PERIOD)
    policy = CleanupPolicy(log_min_snapshot_age_ms=0)

    outcome = run_cleanup_work(
        work, instance.tables, instance.log, instance.snapshots, instance.blobs,
        first_received_at=NOW, policy=policy,
    )  # fmt: skip
    skipped = run_cleanup_work(
        gone, instance.tables, instance.log, instance.snapshots, instance.blobs,
        first_received_at=NOW, policy=policy,
    )  # fmt: skip

    assert outcome.report is not None and outcome.report.log_entries_deleted == 3
    assert skipped.report is None and skipped.skipped == "the table was deleted after the plan"


@pytest.mark.parametrize(
    "body",
    ["{not json", '{"version": 2}', '{"version": 1, "kind": "compact", "table_id": "t"}', "[]"],
    ids=["not-json", "version", "kind", "not-an-object"],
)
def test_a_message_no_plan_wrote_is_refused_naming_it(body: str) -> None:
    with pytest.raises(MalformedWorkError, match="not an upkeep work message"):
        UpkeepWork.from_body(body)


def test_work_of_the_other_kind_is_refused(instance: Instance) -> None:
    work = UpkeepWork(UpkeepKind.CLEANUP, "t", NOW, PERIOD)
    with pytest.raises(MalformedWorkError, match="cleanup work on the snapshot queue"):
        run_snapshot_work(work, instance.tables, instance.log, instance.snapshots, first_received_at=NOW)
