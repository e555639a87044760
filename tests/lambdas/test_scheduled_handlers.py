"""The snapshot and cleanup Lambda handlers on in-memory ports: the scheduled plan queues one message per
table, and the worker, fed those messages as SQS records one at a time, does each table's work."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import pytest

from lambdas import cleanup as cleanup_lambda
from lambdas import snapshot as snapshot_lambda
from lambdas._runtime import Runtime, cleanup_policy, use_runtime
from statestore.engine.log_store import TransactionLogStateStore
from statestore.errors import StoreUnavailableError
from statestore.model import layout
from statestore.model.clock import now_millis
from statestore.services.upkeep import UpkeepKind
from statestore.store.memory import InMemoryTransactionLog
from statestore.store.ports import LogEntry
from statestore.store.tables import TableInfo
from statestore.transactions import (
    AddFiles,
    AssignJobIdRequest,
    AssignJobIds,
    InitialisePartitions,
    ReplaceFileReferences,
    ReplaceFileReferencesJob,
)
from tests.builders import INT_SCHEMA, data_key, data_keys, ref, tree
from tests.lambdas.events import LambdaContext, sqs_event, upkeep_records

SCHEDULED_EVENT = {"source": "aws.events", "detail-type": "Scheduled Event", "detail": {}}


class ReadCountingLog(InMemoryTransactionLog):
    def __init__(self) -> None:
        super().__init__()
        self.reads: dict[str, int] = {}

    def read(self, table_id: str, from_number: int, to_number: int | None = None) -> Iterator[LogEntry]:
        self.reads[table_id] = self.reads.get(table_id, 0) + 1
        return super().read(table_id, from_number, to_number)


@pytest.fixture
def rt() -> Iterator[Runtime]:
    runtime = Runtime.in_memory()
    runtime.log = ReadCountingLog()
    use_runtime(runtime)
    yield runtime
    use_runtime(None)


def run_schedule(rt: Runtime, module: ModuleType) -> dict[str, Any]:
    """What one scheduled run does: the plan, then each table's work in its own invocation; returns the
    plan's summary with the workers' summaries under ``work``."""
    plan: dict[str, Any] = module.handler(SCHEDULED_EVENT, LambdaContext())
    kind = UpkeepKind.SNAPSHOT if module is snapshot_lambda else UpkeepKind.CLEANUP
    records = upkeep_records(rt.upkeep_queue(kind))
    return {**plan, "work": [module.handler(sqs_event(r), LambdaContext()) for r in records]}


def written(summary: dict[str, Any]) -> dict[str, int]:
    return {table: n for work in summary["work"] for table, n in work["written"].items()}


def create_table(
    rt: Runtime, name: str, commits: int, clock: Callable[[], int] = now_millis
) -> TransactionLogStateStore:
    info = TableInfo.new(name, INT_SCHEMA)
    rt.tables.create(info)
    store = TransactionLogStateStore(info.table_id, INT_SCHEMA, rt.log, rt.snapshots, clock=clock)
    store.commit(InitialisePartitions(tuple(tree(INT_SCHEMA))))
    for i in range(commits):
        store.commit(AddFiles((ref(data_key(info.table_id, f"{name}-{i}")),)))
    return store


def test_snapshots_only_tables_whose_log_moved_without_loading_the_others(rt: Runtime) -> None:
    moved, still = create_table(rt, "moved", 2), create_table(rt, "still", 2)
    still.create_snapshot()
    assert isinstance(rt.log, ReadCountingLog)
    rt.log.reads.clear()

    summary = run_schedule(rt, snapshot_lambda)

    # The plan queued the moved table only; its worker snapshotted it.
    assert summary["planned"] == [moved.table_id] and summary["skipped"] == 1
    assert written(summary) == {moved.table_id: 3}
    assert still.table_id not in rt.log.reads
    again = run_schedule(rt, snapshot_lambda)
    assert again["planned"] == [] and again["skipped"] == 2 and again["work"] == []


def test_each_table_is_snapshotted_in_its_own_invocation_and_a_failing_one_fails_only_its_own(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    tables = [create_table(rt, f"t{i}", 1) for i in range(3)]
    broken = tables[1].table_id
    real_write = rt.snapshots.write

    def write(table_id: str, *args: Any, **kwargs: Any) -> Any:
        if table_id == broken:
            raise StoreUnavailableError("the bucket is throttling this table")
        return real_write(table_id, *args, **kwargs)

    monkeypatch.setattr(rt.snapshots, "write", write)
    snapshot_lambda.handler(SCHEDULED_EVENT, LambdaContext())
    records = {
        json.loads(r["body"])["table_id"]: r for r in upkeep_records(rt.upkeep_queue(UpkeepKind.SNAPSHOT))
    }
    assert set(records) == {t.table_id for t in tables}

    for table_id, record in records.items():
        if table_id == broken:
            # The invocation fails (the errors alarm sees it) and SQS retries this one message.
            with pytest.raises(snapshot_lambda.SnapshotFailedError, match="throttling"):
                snapshot_lambda.handler(sqs_event(record), LambdaContext())
        else:
            assert snapshot_lambda.handler(sqs_event(record), LambdaContext())["written"] == {table_id: 2}
    assert rt.snapshots.metadata.latest(broken) is None


def test_work_that_waited_a_period_behind_its_table_is_dropped_unloaded(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = create_table(rt, "t", 1)
    monkeypatch.setenv("STATESTORE_SNAPSHOT_PERIOD_MINUTES", "1")
    snapshot_lambda.handler(SCHEDULED_EVENT, LambdaContext())
    [record] = upkeep_records(rt.upkeep_queue(UpkeepKind.SNAPSHOT))
    late = now_millis() + 61_000
    record["attributes"]["ApproximateFirstReceiveTimestamp"] = str(late)
    assert isinstance(rt.log, ReadCountingLog)
    rt.log.reads.clear()

    summary = snapshot_lambda.handler(sqs_event(record), LambdaContext())

    assert summary == {"written": {}, "skipped": 1, "errors": {}, "views": {}, "view_errors": {}}
    assert rt.log.reads == {} and rt.snapshots.metadata.latest(store.table_id) is None


def test_a_table_must_move_the_configured_number_of_transactions(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = create_table(rt, "t", 1)
    store.create_snapshot()
    store.commit(AddFiles((ref(data_key(store.table_id, "late")),)))
    monkeypatch.setenv("STATESTORE_SNAPSHOT_MIN_TRANSACTIONS", "2")

    assert written(run_schedule(rt, snapshot_lambda)) == {}
    store.commit(AddFiles((ref(data_key(store.table_id, "later")),)))
    assert written(run_schedule(rt, snapshot_lambda)) == {store.table_id: 4}


def test_cleanup_reports_what_it_deleted(rt: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    store = create_table(rt, "t", 3)
    store.create_snapshot()
    monkeypatch.setenv("STATESTORE_LOG_MIN_SNAPSHOT_AGE_MINUTES", "0")

    summary = run_schedule(rt, cleanup_lambda)

    assert summary["planned"] == [store.table_id]
    [work] = summary["work"]
    assert work["tables"] == 1 and work["errors"] == {}
    # Entries 1-3 of 4 are covered by the snapshot at 4; the latest entry is always kept.
    assert work["log_entries_deleted"] == 3
    assert store.load().files_by_name.keys() == set(data_keys(store.table_id, "t-0", "t-1", "t-2"))


def test_cleanup_takes_the_instances_gc_delay_and_claim_expiry_from_its_environment(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The whole table is an hour old: log times never run backwards, so its entries are written an hour ago.
    an_hour_ago = create_table(rt, "t", 0, clock=lambda: now_millis() - 60 * 60_000)
    table_id = an_hour_ago.table_id
    store = TransactionLogStateStore(table_id, INT_SCHEMA, rt.log, rt.snapshots)
    names = [f"{layout.data_prefix(table_id)}{i}.parquet" for i in range(3)]
    for name in names:
        rt.blobs.put(name, b"rows")
    an_hour_ago.commit(AddFiles(tuple(ref(n) for n in names)))
    an_hour_ago.commit(AssignJobIds((AssignJobIdRequest("dead", "root", (names[0],)),)))
    an_hour_ago.commit(AssignJobIds((AssignJobIdRequest("done", "root", (names[1],)),)))
    job = ReplaceFileReferencesJob("done", "root", (names[1],), ref(f"{layout.data_prefix(table_id)}out"))
    an_hour_ago.commit(ReplaceFileReferences((job,)))

    [by_default] = run_schedule(rt, cleanup_lambda)["work"]
    monkeypatch.setenv("STATESTORE_GC_DELAY_MINUTES", "30")
    monkeypatch.setenv("STATESTORE_CLAIM_EXPIRY_MINUTES", "30")
    # Another schedule period (the queue would drop a repeat of the first run's message as a duplicate).
    monkeypatch.setenv("STATESTORE_CLEANUP_PERIOD_MINUTES", "30")
    [configured] = run_schedule(rt, cleanup_lambda)["work"]

    # By default both wait hours; set to 30 minutes, the hour-old garbage and claim go.
    assert (by_default["data_files_deleted"], by_default["claims_released"]) == (0, 0)
    assert (configured["data_files_deleted"], configured["claims_released"]) == (1, 1)
    state = store.load()
    assert names[1] not in state.files_by_name and not rt.blobs.list(names[1])
    assert state.claimed_references() == {}


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        (
            "STATESTORE_GC_DELAY_MINUTES",
            "12h",
            "STATESTORE_GC_DELAY_MINUTES='12h' is not a number of minutes",
        ),
        ("STATESTORE_CLAIM_EXPIRY_MINUTES", "nan", "STATESTORE_CLAIM_EXPIRY_MINUTES='nan' is not a number"),
        ("STATESTORE_GC_DELAY_MINUTES", "-5", "STATESTORE_GC_DELAY_MINUTES='-5'.*gc_delay_ms must be from 0"),
        ("STATESTORE_CLAIM_EXPIRY_MINUTES", "43201", "claim_expiry_ms must be from 0 to .* .30 days."),
    ],
    ids=["not-a-number", "nan", "negative", "beyond-30-days"],
)
def test_a_bad_cleanup_setting_in_the_environment_is_refused_naming_it(
    variable: str, value: str, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        cleanup_policy({variable: value})
