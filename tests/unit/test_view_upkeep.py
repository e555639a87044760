"""The snapshot upkeep keeps the queryable view of a table that asks for one (property
``queryable_view=true``) current, after its snapshot, on in-memory ports: the plan queues the table, the
worker snapshots it and then moves its view to the log's head."""

from __future__ import annotations

import traceback
from collections.abc import Collection, Mapping

import pytest

from statestore.engine.log_loading import LogStateLoading
from statestore.engine.log_store import TransactionLogStateStore
from statestore.engine.queryable_view import QueryableView
from statestore.engine.snapshots import SnapshotStore
from statestore.errors import StoreUnavailableError
from statestore.model.partitions import Range, Region
from statestore.services.snapshot_upkeep import SnapshotOutcome
from statestore.services.upkeep import UpkeepPlan, UpkeepWork, plan_snapshots, run_snapshot_work
from statestore.services.view_upkeep import QUERYABLE_VIEWS_ENV, views_kept
from statestore.store.memory import (
    InMemoryBlobStore,
    InMemoryCommitQueue,
    InMemorySnapshotMetadataStore,
    InMemoryTableIndex,
    InMemoryTransactionLog,
)
from statestore.store.memory_view import InMemoryQueryableViewStore
from statestore.store.tables import TableInfo
from statestore.transactions import AddFiles, AssignJobIdRequest, AssignJobIds, InitialisePartitions
from statestore.views import view_answers
from statestore.views.queryable_view import ViewValue
from tests.builders import INT_SCHEMA, data_key, ref, tree

PERIOD = 15 * 60_000
NOW = 1_700_000_000_000
VIEW_ON = {"queryable_view": "true"}


class FailingViewStore(InMemoryQueryableViewStore):
    """A view store whose item writes fail while ``failing`` is set (DynamoDB throttling them)."""

    def __init__(self) -> None:
        super().__init__()
        self.failing = False

    def write(self, table_id: str, puts: Mapping[str, ViewValue], deletes: Collection[str]) -> None:
        if self.failing:
            raise StoreUnavailableError("DynamoDB kept throttling the view's writes")
        super().write(table_id, puts, deletes)


class Instance:
    def __init__(self) -> None:
        self.tables = InMemoryTableIndex()
        self.log = InMemoryTransactionLog()
        self.snapshots = SnapshotStore(InMemorySnapshotMetadataStore(), InMemoryBlobStore())
        self.now = NOW  # each plan is a period after the one before (its work is not a duplicate)
        self.queue = InMemoryCommitQueue(clock=lambda: self.now)
        self.views = FailingViewStore()
        self.stores: dict[str, TransactionLogStateStore] = {}  # the worker's warm stores

    def table(self, name: str, properties: Mapping[str, str] | None = None) -> TransactionLogStateStore:
        info = TableInfo.new(name, INT_SCHEMA, properties)
        self.tables.create(info)
        store = TransactionLogStateStore(info.table_id, INT_SCHEMA, self.log, self.snapshots)
        store.commit(InitialisePartitions(tuple(tree(INT_SCHEMA))))
        return store

    def plan(self) -> list[str]:
        made = self.plan_reporting()
        assert not made.errors
        return list(made.planned)

    def plan_reporting(self) -> UpkeepPlan:
        self.now += PERIOD
        return plan_snapshots(
            self.tables,
            self.log,
            self.snapshots,
            self.queue,
            period_ms=PERIOD,
            now=self.now,
            views=self.views,
        )

    def work(self, *, views: bool = True) -> list[SnapshotOutcome]:
        """What the worker does with each queued message."""
        return [
            run_snapshot_work(
                UpkeepWork.from_body(m.body),
                self.tables,
                self.log,
                self.snapshots,
                first_received_at=self.now,
                stores=self.stores,
                views=self.views if views else None,
            )
            for m in self.queue.take(1000)
        ]

    def run(self) -> list[SnapshotOutcome]:
        """One period: the plan, then the work."""
        self.plan()
        return self.work()


@pytest.fixture
def instance() -> Instance:
    return Instance()


@pytest.fixture
def view_loads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The table ids of every full load (a snapshot and the log after it) the view's upkeep makes."""
    loads: list[str] = []
    real = LogStateLoading.load

    def counting(self: LogStateLoading, as_of: int | None = None) -> object:
        if any(frame.name == "update_view" for frame in traceback.extract_stack()):
            loads.append(self.table_id)
        return real(self, as_of)

    monkeypatch.setattr(LogStateLoading, "load", counting)
    return loads


def add(store: TransactionLogStateStore, *names: str) -> None:
    store.commit(AddFiles(tuple(ref(data_key(store.table_id, n)) for n in names)))


def assert_answers_as_a_full_load(instance: Instance, store: TransactionLogStateStore) -> None:
    state = TransactionLogStateStore(store.table_id, INT_SCHEMA, instance.log, instance.snapshots).load()
    view = QueryableView(store.table_id, INT_SCHEMA, instance.log, instance.views)
    for partition_id in state.partitions_by_id:
        answer = view.references_in_partition(partition_id)
        assert answer.value == view_answers.references_in_partition(state, partition_id)
        assert answer.transaction_number == state.transaction_number
    for filename in state.files_by_name:
        assert view.file(filename).value == view_answers.file(state, filename)
    region = Region((Range(0, 10),))
    assert view.references_in_region(region).value == view_answers.references_in_region(state, region)
    for job_id in state.claimed_references():
        assert view.claimed_references(job_id).value == view_answers.claimed_references(state, job_id)


def test_the_worker_builds_the_view_after_the_snapshot_from_the_state_it_loaded_then_keeps_it_current(
    instance: Instance, view_loads: list[str]
) -> None:
    store = instance.table("orders", VIEW_ON)
    add(store, "a", "b")

    [outcome] = instance.run()

    head = instance.log.latest_number(store.table_id)
    assert (
        outcome.error is None and outcome.snapshot is not None and outcome.snapshot.transaction_number == head
    )
    assert outcome.view is not None and outcome.view.result is not None
    assert outcome.view.result.rebuilt and outcome.view.result.to_number == head
    assert view_loads == []  # built from the state the snapshot loaded
    assert_answers_as_a_full_load(instance, store)

    add(store, "c")
    store.commit(AssignJobIds((AssignJobIdRequest("job-1", "root", (data_key(store.table_id, "a"),)),)))
    [outcome] = instance.run()

    assert outcome.view is not None and outcome.view.result is not None
    result = outcome.view.result
    assert (result.from_number, result.to_number, result.rebuilt) == (head, head + 2, False)
    # What changed, not the table: c's two items, and a's file, reference and claim.
    assert result.writes == 2 + 3
    assert view_loads == []
    assert_answers_as_a_full_load(instance, store)


def test_a_table_without_the_setting_gets_no_view(instance: Instance) -> None:
    store = instance.table("plain")
    add(store, "a")

    [outcome] = instance.run()

    assert outcome.snapshot is not None and outcome.view is None
    assert instance.views.meta(store.table_id) is None
    assert instance.views.with_prefix(store.table_id, "") == {}
    assert instance.views.items_written == 0


def test_a_failed_view_update_keeps_the_snapshot_and_is_retried_next_period_without_a_commit(
    instance: Instance, caplog: pytest.LogCaptureFixture
) -> None:
    store = instance.table("orders", VIEW_ON)
    add(store, "a")
    instance.views.failing = True

    [outcome] = instance.run()

    head = instance.log.latest_number(store.table_id)
    assert outcome.error is None and outcome.snapshot is not None
    assert instance.snapshots.metadata.latest(store.table_id) == outcome.snapshot
    assert outcome.view is not None and "throttling" in str(outcome.view.error)
    assert "could not update the queryable view" in caplog.text

    # The log has not moved since the snapshot, yet the next period queues the table for its view.
    instance.views.failing = False
    assert instance.plan() == [store.table_id]
    [again] = instance.work()
    assert again.snapshot is None and again.skipped is not None  # no second snapshot
    assert again.view is not None and again.view.result is not None and again.view.result.to_number == head
    assert_answers_as_a_full_load(instance, store)
    assert instance.plan() == []  # current: nothing to do


def test_a_damaged_meta_is_planned_and_rebuilt_without_stopping_the_other_tables(instance: Instance) -> None:
    damaged, other = instance.table("damaged", VIEW_ON), instance.table("other", VIEW_ON)
    add(damaged, "a")
    add(other, "b")
    instance.run()
    assert instance.plan() == []  # both current
    instance.views.damage_meta(damaged.table_id)
    add(other, "c")

    made = instance.plan_reporting()

    assert not made.errors and set(made.planned) == {damaged.table_id, other.table_id}
    outcomes = {o.table_id: o for o in instance.work()}
    repaired = outcomes[damaged.table_id].view
    assert repaired is not None and repaired.result is not None and repaired.result.rebuilt
    assert instance.views.meta(damaged.table_id) is not None
    assert_answers_as_a_full_load(instance, damaged)
    assert_answers_as_a_full_load(instance, other)
    assert instance.plan() == []


def test_switching_the_view_on_later_builds_it_at_the_next_period(instance: Instance) -> None:
    store = instance.table("orders")
    add(store, "a")
    instance.run()
    assert instance.plan() == []

    instance.tables.set_property(store.table_id, "queryable_view", "true")

    assert instance.plan() == [store.table_id]
    [outcome] = instance.work()
    assert outcome.view is not None and outcome.view.result is not None and outcome.view.result.rebuilt
    assert_answers_as_a_full_load(instance, store)


def test_switching_the_view_off_stops_its_upkeep_and_keeps_its_items(instance: Instance) -> None:
    store = instance.table("orders", VIEW_ON)
    add(store, "a")
    instance.run()
    kept = instance.views.with_prefix(store.table_id, "")
    at = instance.views.meta(store.table_id)

    instance.tables.set_property(store.table_id, "queryable_view", "false")
    add(store, "b")
    [outcome] = instance.run()

    assert outcome.snapshot is not None and outcome.view is None
    assert instance.views.meta(store.table_id) == at
    assert instance.views.with_prefix(store.table_id, "") == kept
    # On again: the view continues from its number.
    instance.tables.set_property(store.table_id, "queryable_view", "true")
    assert instance.plan() == [store.table_id]
    [outcome] = instance.work()
    assert outcome.view is not None and outcome.view.result is not None
    assert not outcome.view.result.rebuilt and outcome.view.result.writes == 2
    assert_answers_as_a_full_load(instance, store)


def test_a_setting_written_before_it_was_checked_is_reported_and_the_snapshots_go_on(
    instance: Instance,
) -> None:
    unchecked = TableInfo("legacy-id", "legacy", INT_SCHEMA, {"queryable_view": "yes"})
    instance.tables.create(unchecked)  # as a record written before the property was checked
    store = TransactionLogStateStore(unchecked.table_id, INT_SCHEMA, instance.log, instance.snapshots)
    store.commit(InitialisePartitions(tuple(tree(INT_SCHEMA))))
    instance.run()  # its first snapshot

    add(store, "a")
    made = instance.plan_reporting()
    assert made.planned == (unchecked.table_id,) and made.errors == {}  # due anyway: not asked about its view
    [outcome] = instance.work()
    assert outcome.snapshot is not None and outcome.view is not None
    assert "queryable_view='yes' must be true or false" in str(outcome.view.error)

    made = instance.plan_reporting()  # not due: its view setting is looked at, and reported
    assert made.planned == () and "queryable_view='yes'" in made.errors[unchecked.table_id]


def test_a_deployment_without_the_stack_option_keeps_no_view(instance: Instance) -> None:
    store = instance.table("orders", VIEW_ON)
    add(store, "a")
    instance.plan()

    [outcome] = instance.work(views=False)

    assert outcome.snapshot is not None and outcome.view is None
    assert instance.views.meta(store.table_id) is None


def test_the_stack_option_reaches_the_function_as_true_or_false() -> None:
    assert views_kept({}) and views_kept({QUERYABLE_VIEWS_ENV: "true"})
    assert not views_kept({QUERYABLE_VIEWS_ENV: "False"})
    with pytest.raises(ValueError, match=f"{QUERYABLE_VIEWS_ENV}='on' must be true or false"):
        views_kept({QUERYABLE_VIEWS_ENV: "on"})
