"""With the stack's PostgreSQL option (``-c postgres=true``) the committer and cleanup functions read the
database's secret and keep a table's file references in the database: each can do its job with exactly the
permissions the synthesised stack gives its role.

As in ``test_deployed_permissions.py``, each handler is cold-started with its deployed environment and runs a
real invocation in moto as an IAM user holding its role's statements, with IAM enforced. The database is a
real PostgreSQL server on loopback standing for the stack's proxy; its credentials are in a Secrets Manager
secret in moto, as RDS keeps them, and the secret's ARN is the one the template's role and environment name.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from aws_cdk import assertions
from moto import mock_aws

from statestore.adapters.postgres import PostgresFileReferenceStore
from statestore.engine.requests import CommitSender
from statestore.engine.row_store import RowFilesStateStore
from statestore.errors import StateStoreError
from statestore.instance import POSTGRES_SSLMODE_ENV
from statestore.model import layout
from statestore.services.cleanup_policy import GC_DELAY_PROPERTY
from statestore.store.ports import CommitOutcome
from statestore.store.tables import FILE_STORE_POSTGRES, TableInfo
from statestore.transactions import (
    AddFiles,
    AssignJobIdRequest,
    AssignJobIds,
    InitialisePartitions,
    ReplaceFileReferences,
    ReplaceFileReferencesJob,
)
from tests.builders import INT_SCHEMA, data_key, data_keys, ref, tree
from tests.fixtures.postgres import SUPERUSER, PostgresServer
from tests.infra.conftest import SynthStack
from tests.infra.deployed_iam import REGION
from tests.infra.test_deployed_permissions import (
    CLEANUP,
    COMMITTER,
    LARGE_BATCH,
    SCHEDULED_EVENT,
    Deployed,
    deploy,
    statement,
)

pytestmark = pytest.mark.infra


@pytest.fixture(scope="module")
def postgres_template(synth_stack: SynthStack) -> dict[str, Any]:
    template = assertions.Template.from_stack(synth_stack(postgres="true")).to_json()
    return dict(template)


@dataclass
class WithDatabase:
    """The stack in moto, and its database as an administrator sees it."""

    deployed: Deployed
    files: PostgresFileReferenceStore

    def create_postgres_table(
        self, name: str, properties: dict[str, str] | None = None
    ) -> RowFilesStateStore:
        info = TableInfo.new(name, INT_SCHEMA, properties, FILE_STORE_POSTGRES)
        admin = self.deployed.admin
        admin.tables.create(info)
        store = RowFilesStateStore(info.table_id, INT_SCHEMA, admin.log, self.files, admin.snapshots)
        store.commit(InitialisePartitions(tuple(tree(INT_SCHEMA))))
        return store


@pytest.fixture
def db(
    postgres_template: dict[str, Any], postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> Iterator[WithDatabase]:
    conninfo = postgres_server.create_database("deployed")
    dbname = conninfo.split("dbname=")[1].split()[0]
    with mock_aws():
        # The secret RDS makes for the cluster: the cluster's host (the function is told the proxy's).
        boto3.client("secretsmanager", region_name=REGION).create_secret(
            Name="statestore-main-postgres",
            SecretString=json.dumps(
                {
                    "engine": "postgres",
                    "host": "cluster.invalid",
                    "port": postgres_server.port,
                    "dbname": dbname,
                    "username": SUPERUSER,
                    "password": "unused",
                }
            ),
        )
        deployed = deploy(postgres_template, monkeypatch)
        deployed.local_environment = {POSTGRES_SSLMODE_ENV: "disable"}  # the local server has no TLS
        files = PostgresFileReferenceStore.connect(conninfo)
        try:
            yield WithDatabase(deployed, files)
        finally:
            files.close()


def test_the_committer_reads_the_secret_and_commits_to_the_database_with_its_role(
    db: WithDatabase,
) -> None:
    table_id = db.create_postgres_table("orders").table_id
    sender = CommitSender(db.deployed.commit_queue, db.deployed.admin.statuses, db.deployed.admin.blobs)
    request_id = sender.send(table_id, AddFiles(tuple(ref(data_key(table_id, n)) for n in LARGE_BATCH)))
    event = db.deployed.commit_queue.receive_event()

    response = db.deployed.invoke(COMMITTER, event)

    assert response == {"batchItemFailures": []}
    assert set(db.files.files(table_id)) == set(data_keys(table_id, *LARGE_BATCH))
    status = db.deployed.admin.statuses.get(table_id, request_id)
    assert status is not None and status.outcome is CommitOutcome.COMMITTED


def test_the_cleanup_lambda_collects_a_database_tables_garbage_with_its_role(
    db: WithDatabase,
) -> None:
    store = db.create_postgres_table("orders", {GC_DELAY_PROPERTY: "0"})
    table_id = store.table_id
    old, new = (f"{layout.data_prefix(table_id)}{name}.parquet" for name in ("old", "new"))
    for name in (old, new):
        db.deployed.admin.blobs.put(name, b"parquet")
    store.commit(AddFiles((ref(old),)))
    store.commit(AssignJobIds((AssignJobIdRequest("compaction", "root", (old,)),)))
    store.commit(ReplaceFileReferences((ReplaceFileReferencesJob("compaction", "root", (old,), ref(new)),)))

    # A GC delay of 0 is below any clock skew: here every clock is this machine's one.
    db.deployed.monkeypatch.setenv("STATESTORE_MAX_CLOCK_SKEW_MINUTES", "0")
    # The first run marks "old" unreferenced in the database; the next, a GC delay (0) later, deletes it.
    summaries = [db.deployed.cleanup_once(table_id) for _ in range(2)]

    assert [s["errors"] for s in summaries] == [{}, {}]
    assert [s["data_files_deleted"] for s in summaries] == [0, 1]
    assert db.deployed.admin.blobs.list(layout.data_prefix(table_id)) == [new]
    assert set(db.files.files(table_id)) == {new}


@pytest.mark.parametrize("handler", [COMMITTER, CLEANUP])
def test_without_its_grant_on_the_secret_a_function_cannot_reach_the_database(
    db: WithDatabase, handler: str
) -> None:
    table_id = db.create_postgres_table("orders", {GC_DELAY_PROPERTY: "0"}).table_id
    secret = statement(db.deployed.template, handler, "secretsmanager:GetSecretValue", ":secret:")
    if handler == COMMITTER:
        sender = CommitSender(db.deployed.commit_queue, db.deployed.admin.statuses, db.deployed.admin.blobs)
        sender.send(table_id, AddFiles((ref(data_key(table_id, "a.parquet")),)))
        event = db.deployed.commit_queue.receive_event()
    else:
        db.deployed.invoke(CLEANUP, SCHEDULED_EVENT)  # planning reads no database
        event, _ = db.deployed.work_event(CLEANUP, "cleanup")

    with pytest.raises(StateStoreError, match="AccessDenied"):
        db.deployed.invoke(handler, event, without=secret)

    assert set(db.files.files(table_id)) == set()
