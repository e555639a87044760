"""The snapshot and cleanup Lambda handlers on in-memory ports."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lambdas import cleanup as cleanup_lambda
from lambdas import snapshot as snapshot_lambda
from lambdas._runtime import Runtime, use_runtime
from statestore.catalog import TableInfo
from statestore.engine import TransactionLogStateStore
from statestore.memory import InMemoryTransactionLog
from statestore.ports import LogEntry
from statestore.transactions import AddFiles, InitialisePartitions
from tests.builders import INT_SCHEMA, ref, tree
from tests.lambdas.events import LambdaContext

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


def create_table(rt: Runtime, name: str, commits: int) -> TransactionLogStateStore:
    info = TableInfo.new(name, INT_SCHEMA)
    rt.tables.create(info)
    store = TransactionLogStateStore(info.table_id, INT_SCHEMA, rt.log, rt.snapshots)
    store.commit(InitialisePartitions(tuple(tree(INT_SCHEMA))))
    for i in range(commits):
        store.commit(AddFiles((ref(f"{name}-{i}"),)))
    return store


def test_snapshots_only_tables_whose_log_moved_without_loading_the_others(rt: Runtime) -> None:
    moved, still = create_table(rt, "moved", 2), create_table(rt, "still", 2)
    still.create_snapshot()
    assert isinstance(rt.log, ReadCountingLog)
    rt.log.reads.clear()

    summary = snapshot_lambda.handler(SCHEDULED_EVENT, LambdaContext())

    assert summary["written"] == {moved.table_id: 3}
    assert summary["skipped"] == 1
    assert still.table_id not in rt.log.reads
    again = snapshot_lambda.handler(SCHEDULED_EVENT, LambdaContext())
    assert again["written"] == {} and again["skipped"] == 2


def test_a_table_must_move_the_configured_number_of_transactions(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = create_table(rt, "t", 1)
    store.create_snapshot()
    store.commit(AddFiles((ref("late"),)))
    monkeypatch.setenv("STATESTORE_SNAPSHOT_MIN_TRANSACTIONS", "2")

    assert snapshot_lambda.handler(SCHEDULED_EVENT, LambdaContext())["written"] == {}
    store.commit(AddFiles((ref("later"),)))
    assert snapshot_lambda.handler(SCHEDULED_EVENT, LambdaContext())["written"] == {store.table_id: 4}


def test_cleanup_reports_what_it_deleted(rt: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    store = create_table(rt, "t", 3)
    store.create_snapshot()
    monkeypatch.setenv("STATESTORE_LOG_MIN_SNAPSHOT_AGE_MINUTES", "0")

    summary = cleanup_lambda.handler(SCHEDULED_EVENT, LambdaContext())

    assert summary["tables"] == 1 and summary["errors"] == {}
    # Entries 1-3 of 4 are covered by the snapshot at 4; the latest entry is always kept.
    assert summary["log_entries_deleted"] == 3
    assert store.load().files_by_name.keys() == {"t-0", "t-1", "t-2"}
