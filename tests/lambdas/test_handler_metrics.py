"""The metrics each handler emits: CloudWatch embedded metric format documents printed to stdout.

Every document is read back from what the handler printed and checked for the names, units, values and
dimensions the dashboard and alarms are built on (namespace ``statestore``, the one dimension ``service``:
the per-table state size names its table in a ``TableId`` property, never a dimension).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from aws_lambda_powertools import Metrics

from lambdas import cleanup as cleanup_lambda
from lambdas import committer as committer_lambda
from lambdas import snapshot as snapshot_lambda
from lambdas._runtime import Runtime, use_runtime
from statestore.engine.log_store import TransactionLogStateStore
from statestore.engine.requests import CommitRequest
from statestore.model import layout
from statestore.services.leftovers import write_tombstone
from statestore.services.upkeep import UpkeepKind
from statestore.sizing import warm_state_bytes
from statestore.store.memory import InMemoryBlobStore
from statestore.store.tables import TableInfo
from statestore.transactions import (
    AddFiles,
    InitialisePartitions,
    ReplaceFileReferences,
    ReplaceFileReferencesJob,
)
from tests.builders import INT_SCHEMA, data_key, ref, tree
from tests.lambdas.events import LambdaContext, sqs_event, sqs_record, upkeep_records
from tests.lambdas.test_committer_handler import FlakyLog

SCHEDULED_EVENT = {"source": "aws.events", "detail-type": "Scheduled Event", "detail": {}}
PARTITIONS = len(tree(INT_SCHEMA))


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    values: tuple[float, ...]
    dimensions: dict[str, str]
    namespace: str
    table_id: str | None = None  # the document's TableId property: a table's state size


def emitted(capsys: pytest.CaptureFixture[str]) -> list[Metric]:
    """Every metric in the EMF documents printed since the last call (log lines are skipped)."""
    found = []
    for line in capsys.readouterr().out.splitlines():
        try:
            doc: dict[str, Any] = json.loads(line)
        except ValueError:
            continue
        if not isinstance(doc, dict) or "_aws" not in doc:
            continue
        for directive in doc["_aws"]["CloudWatchMetrics"]:
            (dimension_names,) = directive["Dimensions"]
            dimensions = {name: doc[name] for name in dimension_names}
            for definition in directive["Metrics"]:
                value = doc[definition["Name"]]
                values = tuple(value) if isinstance(value, list) else (value,)
                found.append(
                    Metric(
                        definition["Name"],
                        definition["Unit"],
                        values,
                        dimensions,
                        directive["Namespace"],
                        doc.get("TableId"),
                    )
                )
    return found


def by_name(metrics: list[Metric], service: str) -> dict[str, Metric]:
    """The invocation's metrics by name, checking each is in namespace ``statestore`` with only ``service``
    as a dimension."""
    result = {}
    for m in metrics:
        if m.table_id is not None:
            continue
        assert m.namespace == "statestore", m
        assert m.dimensions == {"service": service}, m
        assert m.name not in result, f"{m.name} emitted twice"
        result[m.name] = m
    return result


NOT_COUNTS = {
    "TableLoadTime",
    "TableGuardReadTime",
    "WarmCacheTables",
    "WarmCacheBytes",
}  # times, the cache's gauges


def counts(metrics: dict[str, Metric]) -> dict[str, float]:
    assert all(m.unit == "Count" for m in metrics.values() if m.name not in NOT_COUNTS)
    return {name: sum(m.values) for name, m in metrics.items() if m.name not in NOT_COUNTS}


@pytest.fixture
def rt(monkeypatch: pytest.MonkeyPatch) -> Iterator[Runtime]:
    monkeypatch.delenv("POWERTOOLS_METRICS_DISABLED", raising=False)
    monkeypatch.delenv("POWERTOOLS_DEV", raising=False)
    # The deployed functions get POWERTOOLS_SERVICE_NAME; the modules were imported without it.
    for module in (committer_lambda, snapshot_lambda, cleanup_lambda):
        handler_metrics: Metrics = module.metrics
        monkeypatch.setattr(handler_metrics, "service", f"statestore-{module.__name__.split('.')[-1]}")
        # What another test's invocation in this process left unflushed (with the metrics disabled,
        # Powertools keeps it) is not this test's to read.
        handler_metrics.clear_metrics()
    runtime = Runtime.in_memory()
    runtime.log = FlakyLog()
    use_runtime(runtime)
    yield runtime
    use_runtime(None)


def create_table(rt: Runtime, name: str) -> TransactionLogStateStore:
    info = TableInfo.new(name, INT_SCHEMA)
    rt.tables.create(info)
    store = TransactionLogStateStore(info.table_id, INT_SCHEMA, rt.log, rt.snapshots)
    store.commit(InitialisePartitions(tuple(tree(INT_SCHEMA))))
    return store


def add(table_id: str, *names: str) -> CommitRequest:
    """A request adding the data files ``names``: their keys under the table's data prefix."""
    return CommitRequest.new(table_id, AddFiles(tuple(ref(data_key(table_id, n)) for n in names)))


def commit(*records: dict[str, Any]) -> dict[str, Any]:
    return committer_lambda.handler(sqs_event(*records), LambdaContext())


def test_a_batch_counts_each_outcome_its_size_and_a_cold_load_with_its_time(
    rt: Runtime, capsys: pytest.CaptureFixture[str]
) -> None:
    table = create_table(rt, "t").table_id
    duplicated = add(table, "a", "b")
    compaction = CommitRequest.new(
        table,
        ReplaceFileReferences(
            (ReplaceFileReferencesJob("job", "root", ("x",), ref(data_key(table, "out"))),)
        ),
    )
    capsys.readouterr()

    commit(
        sqs_record(duplicated),
        sqs_record(duplicated),  # the same request twice: one commit, one duplicate
        sqs_record(compaction),  # names a file the table does not have: rejected
        sqs_record("not json", table),  # dead-lettered
    )

    metrics = emitted(capsys)
    invocation = by_name(metrics, "statestore-committer")
    assert counts(invocation) == {
        "RequestsCommitted": 1,
        "RequestsDuplicate": 1,
        "RequestsRejected": 1,
        "RequestsDeadLettered": 1,
        "BatchSize": 4,
        "LogAppendConflicts": 0,
        "TableLoadsWarm": 0,
        "TableLoadsCold": 1,
        "TableCommitsGuarded": 0,
        "TableGuardsCold": 0,
        "WarmCacheEvictions": 0,
        "WarmCacheDemotions": 0,
        "WarmCacheOversized": 0,
    }
    assert "TableGuardReadTime" not in invocation
    load_time = invocation["TableLoadTime"]
    assert load_time.unit == "Milliseconds" and len(load_time.values) == 1 and load_time.values[0] >= 0
    per_table = {(m.name, m.table_id): m for m in metrics if m.table_id is not None}
    assert per_table.keys() == {("StateReferences", table), ("StatePartitions", table)}
    for m in per_table.values():
        assert m.unit == "Count" and m.namespace == "statestore"
        assert m.dimensions == {"service": "statestore-committer"}
    assert per_table["StateReferences", table].values == (2,)
    assert per_table["StatePartitions", table].values == (PARTITIONS,)


def test_a_batch_over_three_tables_logs_each_tables_size_without_a_metric_per_table(
    rt: Runtime, capsys: pytest.CaptureFixture[str]
) -> None:
    tables = [create_table(rt, name).table_id for name in ("a", "b", "c")]
    capsys.readouterr()

    commit(
        sqs_record(add(tables[0], "x")),
        sqs_record(add(tables[1], "x", "y")),
        sqs_record(add(tables[2], "x", "y", "z")),
    )

    metrics = emitted(capsys)
    # No metric is made per table: every one has the service as its only dimension (a custom metric is
    # billed per distinct set of dimensions, so per table it would cost each table a metric a month).
    assert {tuple(sorted(m.dimensions)) for m in metrics} == {("service",)}
    figures = {
        (m.table_id, m.name): m.values for m in metrics if m.name in ("StateReferences", "StatePartitions")
    }
    assert figures == {
        **{(table, "StateReferences"): (n,) for table, n in zip(tables, (1, 2, 3), strict=True)},
        **{(table, "StatePartitions"): (PARTITIONS,) for table in tables},
    }


def test_the_next_batch_finds_the_table_warm_and_reports_its_grown_state(
    rt: Runtime, capsys: pytest.CaptureFixture[str]
) -> None:
    table = create_table(rt, "t").table_id
    commit(sqs_record(add(table, "a")))
    capsys.readouterr()

    commit(sqs_record(add(table, "b", "c")))

    metrics = emitted(capsys)
    invocation = by_name(metrics, "statestore-committer")
    assert counts(invocation) == {
        "RequestsCommitted": 1,
        "BatchSize": 1,
        "LogAppendConflicts": 0,
        "TableLoadsWarm": 1,
        "TableLoadsCold": 0,
        "TableCommitsGuarded": 0,
        "TableGuardsCold": 0,
        "WarmCacheEvictions": 0,
        "WarmCacheDemotions": 0,
        "WarmCacheOversized": 0,
    }
    assert "TableLoadTime" not in invocation
    references = [m for m in metrics if m.name == "StateReferences"]
    assert [(m.table_id, m.values) for m in references] == [(table, (3,))]


def test_a_guard_read_from_the_snapshot_is_counted_cold_with_its_time(
    rt: Runtime, capsys: pytest.CaptureFixture[str]
) -> None:
    store = create_table(rt, "t")
    store.commit(add(store.table_id, "a").transaction)
    assert rt.snapshots is not None
    rt.snapshots.write(store.table_id, store.state(), 1)
    rt.committer().guard_first_references = 1  # this table's snapshot counts one reference
    capsys.readouterr()

    commit(sqs_record(add(store.table_id, "b")))

    invocation = by_name(emitted(capsys), "statestore-committer")
    figures = counts(invocation)
    assert figures["RequestsCommitted"] == 1
    assert (figures["TableLoadsCold"], figures["TableCommitsGuarded"], figures["TableGuardsCold"]) == (
        0,
        1,
        1,
    )
    assert "TableLoadTime" not in invocation
    read_time = invocation["TableGuardReadTime"]
    assert read_time.unit == "Milliseconds" and len(read_time.values) == 1 and read_time.values[0] >= 0


def test_the_warm_cache_reports_its_evictions_and_what_it_keeps(
    rt: Runtime, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    one_table = warm_state_bytes(1, PARTITIONS)
    monkeypatch.setenv("STATESTORE_WARM_CACHE_MB", str(1.5 * one_table / (1 << 20)))  # one table at a time
    first, second = create_table(rt, "first").table_id, create_table(rt, "second").table_id
    commit(sqs_record(add(first, "a")))
    capsys.readouterr()

    commit(sqs_record(add(second, "b")))

    invocation = by_name(emitted(capsys), "statestore-committer")
    assert counts(invocation)["WarmCacheEvictions"] == 1
    assert counts(invocation)["TableLoadsCold"] == 1
    assert invocation["WarmCacheTables"].values == (1,)
    assert (invocation["WarmCacheBytes"].unit, invocation["WarmCacheBytes"].values) == ("Bytes", (one_table,))


def test_a_lost_race_for_the_next_log_number_is_counted_as_a_conflict(
    rt: Runtime, capsys: pytest.CaptureFixture[str]
) -> None:
    other_writer = create_table(rt, "t")
    table = other_writer.table_id
    commit(sqs_record(add(table, "a")))  # the committer now holds the table warm
    other_writer.commit(
        AddFiles((ref(data_key(table, "elsewhere")),))
    )  # and its cached state is one entry behind
    capsys.readouterr()

    commit(sqs_record(add(table, "b")))

    invocation = by_name(emitted(capsys), "statestore-committer")
    assert counts(invocation)["LogAppendConflicts"] == 1
    assert counts(invocation)["RequestsCommitted"] == 1


def test_messages_left_for_a_retry_are_counted(rt: Runtime, capsys: pytest.CaptureFixture[str]) -> None:
    table = create_table(rt, "t").table_id
    assert isinstance(rt.log, FlakyLog)
    rt.log.failing.add(table)
    capsys.readouterr()

    response = commit(sqs_record(add(table, "a")), sqs_record(add(table, "b")))

    assert len(response["batchItemFailures"]) == 2
    invocation = by_name(emitted(capsys), "statestore-committer")
    assert counts(invocation)["RequestsRetry"] == 2
    assert "RequestsCommitted" not in invocation


def test_the_snapshot_function_counts_tables_written_and_tables_that_did_not_move(
    rt: Runtime, capsys: pytest.CaptureFixture[str]
) -> None:
    moved, still = create_table(rt, "moved"), create_table(rt, "still")
    moved.create_snapshot()
    still.create_snapshot()
    moved.commit(AddFiles((ref(data_key(moved.table_id, "new")),)))
    capsys.readouterr()

    snapshot_lambda.handler(SCHEDULED_EVENT, LambdaContext())
    plan = counts(by_name(emitted(capsys), "statestore-snapshot"))
    [work] = upkeep_records(rt.upkeep_queue(UpkeepKind.SNAPSHOT))
    snapshot_lambda.handler(sqs_event(work), LambdaContext())
    worker = counts(by_name(emitted(capsys), "statestore-snapshot"))

    # The plan skips the unmoved table without a message; the worker writes the moved one.
    assert plan == {"SnapshotTablesPlanned": 1, "SnapshotTablesSkipped": 1}
    assert worker == {"SnapshotsWritten": 1, "SnapshotTablesSkipped": 0}


def test_the_cleanup_function_counts_what_it_deleted_including_orphan_files(
    rt: Runtime, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = create_table(rt, "t")
    for i in range(3):
        store.commit(AddFiles((ref(data_key(store.table_id, f"f{i}")),)))
    store.create_snapshot()
    assert isinstance(rt.blobs, InMemoryBlobStore)
    monkeypatch.setattr(rt.blobs, "_clock", lambda: 0)  # written long ago, named by nothing
    rt.blobs.put(f"{layout.data_prefix(store.table_id)}root/orphan.parquet", b"x")
    monkeypatch.setenv("STATESTORE_LOG_MIN_SNAPSHOT_AGE_MINUTES", "0")
    capsys.readouterr()

    cleanup_lambda.handler(SCHEDULED_EVENT, LambdaContext())
    assert counts(by_name(emitted(capsys), "statestore-cleanup")) == {
        "CleanupTablesPlanned": 1,
        "CleanupDeletedTablesPlanned": 0,
    }
    [work] = upkeep_records(rt.upkeep_queue(UpkeepKind.CLEANUP))
    cleanup_lambda.handler(sqs_event(work), LambdaContext())

    assert counts(by_name(emitted(capsys), "statestore-cleanup")) == {
        "LogEntriesDeleted": 3,  # entries 1-3 of 4 are covered by the snapshot at 4
        "SnapshotsDeleted": 0,
        "DataFilesDeleted": 0,
        "RefusedFiles": 0,
        "ClaimsReleased": 0,
        "OrphanFilesDeleted": 1,
        "LeftoverObjectsDeleted": 0,
    }


def test_the_cleanup_function_counts_deleted_tables_planned_and_what_late_writers_left_of_them(
    rt: Runtime, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    table = rt.tables.get(create_table(rt, "gone").table_id)
    assert isinstance(rt.blobs, InMemoryBlobStore)
    monkeypatch.setattr(rt.blobs, "_clock", lambda: 0)  # written long ago
    write_tombstone(rt.blobs, table, 0)
    rt.tables.delete(table.table_id)
    rt.blobs.put(f"{layout.data_prefix(table.table_id)}late.parquet", b"x")  # after the delete's pass
    capsys.readouterr()

    cleanup_lambda.handler(SCHEDULED_EVENT, LambdaContext())
    plan = counts(by_name(emitted(capsys), "statestore-cleanup"))
    [work] = upkeep_records(rt.upkeep_queue(UpkeepKind.CLEANUP))
    cleanup_lambda.handler(sqs_event(work), LambdaContext())
    worker = counts(by_name(emitted(capsys), "statestore-cleanup"))

    assert plan == {"CleanupTablesPlanned": 0, "CleanupDeletedTablesPlanned": 1}
    assert worker["LeftoverObjectsDeleted"] == 1
    assert rt.blobs.list(layout.table_prefix(table.table_id)) == []
