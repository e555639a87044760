"""A table whose files are in PostgreSQL, end to end through the local runtime: requests sent to the SQS FIFO
queue are committed by the committer Lambda handler into a real PostgreSQL server, partitions stay on the
log (DynamoDB Local), and each request lands once — the same client and sender as for a log table."""

from __future__ import annotations

import pytest

from statestore.errors import UnsupportedByFileStoreError
from statestore.instance import POSTGRES_URL_ENV
from statestore.local.runtime import LocalRuntime
from statestore.model.files import FileReference
from statestore.store.ports import CommitOutcome
from statestore.transactions import (
    AddFiles,
    AssignJobIdRequest,
    AssignJobIds,
    ReplaceFileReferences,
    ReplaceFileReferencesJob,
    SplitPartition,
)
from tests.e2e.conftest import StartRuntime
from tests.fixtures.postgres import PostgresServer

pytestmark = [pytest.mark.e2e, pytest.mark.dynamodb_local]

SCHEMA = {"row_keys": [{"name": "key", "type": "long"}], "values": [{"name": "value", "type": "string"}]}


@pytest.fixture
def postgres_runtime(
    start_runtime: StartRuntime, postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> LocalRuntime:
    monkeypatch.setenv(POSTGRES_URL_ENV, postgres_server.create_database("e2e"))
    return start_runtime()


def test_queued_commits_of_a_postgres_table_land_once_in_postgresql_and_partitions_stay_on_the_log(
    postgres_runtime: LocalRuntime,
) -> None:
    client = postgres_runtime.client()
    table = client.create_table("rows", SCHEMA, [100], file_store="postgres")
    leaves = sorted(p.id for p in client.leaf_partitions(table.table_id))
    sender = postgres_runtime.sender()

    def file(name: str, leaf: str) -> FileReference:
        return FileReference(f"tables/{table.table_id}/data/{name}", leaf, 10)

    adds = [sender.send(table.table_id, AddFiles((file(f"f{i}", leaves[i % 2]),))) for i in range(6)]
    # Sent twice under one request id: the queue or the committer must drop the copy.
    again = sender.send(table.table_id, AddFiles((file("f0", leaves[0]),)), request_id=adds[0])
    for request_id in [*adds, again]:
        status = sender.wait(table.table_id, request_id, timeout=60)
        assert status is not None and status.outcome is CommitOutcome.COMMITTED, status

    left = [f"tables/{table.table_id}/data/f{i}" for i in (0, 2, 4)]
    claim = AssignJobIds((AssignJobIdRequest("job-1", leaves[0], tuple(left)),))
    compact = ReplaceFileReferences(
        (ReplaceFileReferencesJob("job-1", leaves[0], tuple(left), file("out", leaves[0])),)
    )
    duplicate = AddFiles((file("f1", leaves[1]),))  # already there: rejected, nothing changes
    statuses = {}
    for name, transaction in (("claim", claim), ("compact", compact), ("duplicate", duplicate)):
        request_id = sender.send(table.table_id, transaction)
        statuses[name] = sender.wait(table.table_id, request_id, timeout=60)
    assert statuses["claim"] is not None and statuses["claim"].outcome is CommitOutcome.COMMITTED
    assert statuses["compact"] is not None and statuses["compact"].outcome is CommitOutcome.COMMITTED
    assert statuses["duplicate"] is not None and statuses["duplicate"].outcome is CommitOutcome.REJECTED
    assert "already exists" in (statuses["duplicate"].reason or "")

    state = client.state(table.table_id)
    referenced = {f.filename: [r.partition_id for r in f.references] for f in state.files()}
    assert referenced == {
        **{name: [] for name in left},
        **{f"tables/{table.table_id}/data/f{i}": [leaves[1]] for i in (1, 3, 5)},
        f"tables/{table.table_id}/data/out": [leaves[0]],
    }
    # The files are rows in PostgreSQL, not entries of the log: the log holds the partitions only.
    assert client.file_store is not None
    assert set(client.file_store.files(table.table_id)) == set(referenced)
    assert postgres_runtime.client().state(table.table_id).transaction_number == 1  # InitialisePartitions

    # A partition split goes to the log through the same queue; a file can then be added to a child.
    parent = next(p for p in client.leaf_partitions(table.table_id) if p.region.ranges[0].min == 100)
    updated, low, high = parent.split(0, 500, "low", "high")
    split = sender.send(table.table_id, SplitPartition(updated, (low, high)))
    added = sender.send(table.table_id, AddFiles((file("child", "low"),)))
    for request_id in (split, added):
        status = sender.wait(table.table_id, request_id, timeout=60)
        assert status is not None and status.outcome is CommitOutcome.COMMITTED, status
    child = client.state(table.table_id).file(f"tables/{table.table_id}/data/child")
    assert [r.partition_id for r in child.references] == ["low"]

    with pytest.raises(UnsupportedByFileStoreError):
        client.state(table.table_id, as_of=1)
