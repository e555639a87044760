"""Each deployed Lambda can do its job with exactly the permissions the synthesised stack gives its role.

Every handler is cold-started (no runtime built yet) with its deployed environment and runs one real
invocation in moto as an IAM user holding its role's statements, with IAM enforced; a call the stack does
not grant fails the test. moto 5.2.5 enforces IAM for DynamoDB, S3, SQS and Secrets Manager, but names the
wrong resource or action for some of their requests; ``tests/infra/deployed_iam.py`` says which and makes it
check what AWS checks. CloudWatch Logs and X-Ray are not exercised (the handlers do not call them here). The
stack's PostgreSQL option is exercised the same way in ``test_deployed_permissions_postgres.py``.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import boto3
import pytest
from moto import mock_aws

from lambdas import cleanup as cleanup_lambda
from lambdas import committer as committer_lambda
from lambdas import snapshot as snapshot_lambda
from lambdas._runtime import Runtime, use_runtime
from statestore.adapters.aws.backend import AwsBackend
from statestore.adapters.aws.clients import make_client
from statestore.adapters.aws.sqs_queue import SqsCommitQueue, provision_queues, provision_upkeep_queues
from statestore.engine.log_store import TransactionLogStateStore
from statestore.engine.requests import CommitSender
from statestore.errors import StateStoreError
from statestore.instance import ResourceNames
from statestore.model import layout
from statestore.model.clock import now_millis
from statestore.services.cleanup_policy import GC_DELAY_PROPERTY
from statestore.services.committer import REASON_ATTRIBUTE
from statestore.services.leftovers import write_tombstone
from statestore.services.upkeep import run_cleanup_work
from statestore.store.ports import CommitOutcome, QueueMessage
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
from tests.infra.deployed_iam import (
    REGION,
    create_user,
    function_environment,
    iam_enforced,
    role_statements,
)
from tests.lambdas.events import LambdaContext

pytestmark = pytest.mark.infra
DAY_MS = 24 * 60 * 60_000

COMMITTER = "lambdas.committer.handler"
SNAPSHOT = "lambdas.snapshot.handler"
CLEANUP = "lambdas.cleanup.handler"
SCHEDULED_EVENT = {"source": "aws.events", "detail-type": "Scheduled Event", "detail": {}}


@pytest.fixture(scope="module")
def template_json(template: Any) -> dict[str, Any]:
    result: dict[str, Any] = template.to_json()
    return result


@dataclass
class Deployed:
    """The stack's resources in moto, and an admin's view of them for setting up and checking."""

    template: dict[str, Any]
    names: ResourceNames
    admin: Runtime
    backend: AwsBackend
    commit_queue: SqsCommitQueue
    dead_letter_queue: SqsCommitQueue
    work_queues: dict[str, SqsCommitQueue]
    iam: Any
    monkeypatch: pytest.MonkeyPatch
    # Set beside the deployed environment: what stands in for AWS here needs (a database without TLS).
    local_environment: dict[str, str] = field(default_factory=dict)

    def create_table(self, name: str, properties: dict[str, str] | None = None) -> TransactionLogStateStore:
        info = TableInfo.new(name, INT_SCHEMA, properties)
        self.admin.tables.create(info)
        store = self.store(info.table_id)
        store.commit(InitialisePartitions(tuple(tree(INT_SCHEMA))))
        return store

    def store(self, table_id: str) -> TransactionLogStateStore:
        return TransactionLogStateStore(table_id, INT_SCHEMA, self.admin.log, self.admin.snapshots)

    def role_client(self, handler: str, service: str) -> Any:
        """A client of ``service`` as ``handler``'s role, as the Lambda service uses for its event source."""
        credentials = create_user(
            self.iam, f"{handler.split('.')[1]}-source-{len(self.iam.list_users()['Users'])}",
            role_statements(self.template, handler),
        )  # fmt: skip
        session = boto3.session.Session(
            aws_access_key_id=credentials["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=credentials["AWS_SECRET_ACCESS_KEY"],
            region_name=REGION,
        )
        return make_client(service, session=session)

    def work_event(self, handler: str, kind: str) -> tuple[dict[str, Any], SqsCommitQueue]:
        """Receive the next message of ``kind``'s work queue as the event source mapping does, with the
        function's role and IAM enforced; returns the event and the queue (as that role) to delete it."""
        queue = SqsCommitQueue(self.role_client(handler, "sqs"), self.work_queues[kind].queue_url)
        with iam_enforced():
            event = queue.receive_event(max_messages=1)
        assert len(event["Records"]) == 1, f"no {kind} work waiting"
        return event, queue

    def cleanup_once(self, table_id: str) -> dict[str, Any]:
        """One period of the cleanup Lambda on the one table there is: its plan, then its work on the table,
        acknowledged as the event source does; returns the work's summary."""
        plan = self.invoke(CLEANUP, SCHEDULED_EVENT)
        assert plan["planned"] == [table_id]
        event, source = self.work_event(CLEANUP, "cleanup")
        summary = self.invoke(CLEANUP, event)
        with iam_enforced():
            source.delete([r["receiptHandle"] for r in event["Records"]])
        return summary

    def invoke(
        self,
        handler: str,
        event: dict[str, Any],
        *,
        without: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Cold-start ``handler`` as its role (less the statement ``without``) with IAM enforced; run it."""
        statements = role_statements(self.template, handler)
        if without is not None:
            assert without in statements, f"{handler}'s role has no statement {without}"
            statements.remove(without)
        user = f"{handler.split('.')[1]}-{len(self.iam.list_users()['Users'])}"
        credentials = create_user(self.iam, user, statements)
        module = {COMMITTER: committer_lambda, SNAPSHOT: snapshot_lambda, CLEANUP: cleanup_lambda}[handler]
        with pytest.MonkeyPatch.context() as env:
            environment = function_environment(self.template, handler)
            for name, value in {**environment, **self.local_environment, **credentials}.items():
                env.setenv(name, value)
            env.delenv("AWS_SESSION_TOKEN", raising=False)
            use_runtime(None)  # a new container: the handler builds its runtime from the environment
            try:
                with iam_enforced():
                    result: dict[str, Any] = module.handler(event, LambdaContext())
            finally:
                use_runtime(None)
        return result


@pytest.fixture
def deployed(template_json: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Iterator[Deployed]:
    with mock_aws():
        yield deploy(template_json, monkeypatch)


def deploy(template_json: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Deployed:
    """The stack's tables, bucket and queues made in moto (which the caller has started)."""
    names = ResourceNames.from_json(function_environment(template_json, COMMITTER)["STATESTORE_RESOURCES"])
    backend = AwsBackend.connect(names)
    backend.provision()
    sqs = make_client("sqs")
    queue_url, dlq_url = provision_queues(names, sqs)
    return Deployed(
        template=template_json,
        names=names,
        admin=Runtime.for_aws(names),
        backend=backend,
        commit_queue=SqsCommitQueue(sqs, queue_url),
        dead_letter_queue=SqsCommitQueue(sqs, dlq_url),
        work_queues={
            kind: SqsCommitQueue(sqs, url)
            for kind, url in provision_upkeep_queues(names, sqs).items()
            if kind != "dead_letters"
        },
        iam=make_client("iam"),
        monkeypatch=monkeypatch,
    )


def as_list(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else value


def statement(template: dict[str, Any], handler: str, action: str, resource_part: str) -> dict[str, Any]:
    """The one statement of ``handler``'s role granting ``action`` on a resource containing
    ``resource_part``."""
    found = [
        s
        for s in role_statements(template, handler)
        if action in as_list(s["Action"]) and any(resource_part in r for r in as_list(s["Resource"]))
    ]
    assert len(found) == 1, f"expected one statement of {handler} granting {action} on *{resource_part}*"
    return copy.deepcopy(found[0])


# --- the committer ----------------------------------------------------------------------------------------


# Enough files that the request's body goes through the bucket, which the committer then reads (their names
# under a table's data prefix).
LARGE_BATCH = tuple(f"{i:05d}.parquet" for i in range(5_000))


# A table that keeps a queryable view asks for the log's leaf index with each entry (a TransactWriteItems
# with an update and puts of index items beside the entry's own put).
KEEPS_VIEW = pytest.mark.parametrize("properties", [{}, {"queryable_view": "true"}], ids=["plain", "view"])


def committer_event(deployed: Deployed, properties: dict[str, str]) -> tuple[dict[str, Any], str, str]:
    """A real (large) request for an existing table and a malformed one, as the queue hands them over."""
    table_id = deployed.create_table("orders", properties).table_id
    sender = CommitSender(deployed.commit_queue, deployed.admin.statuses, deployed.admin.blobs)
    request_id = sender.send(table_id, AddFiles(tuple(ref(data_key(table_id, n)) for n in LARGE_BATCH)))
    assert deployed.admin.blobs.list(layout.request_body_prefix(table_id))
    deployed.commit_queue.send([QueueMessage("{not json", table_id, "junk-1")])
    event = deployed.commit_queue.receive_event()
    assert len(event["Records"]) == 2
    return event, table_id, request_id


@KEEPS_VIEW
def test_the_committer_commits_and_dead_letters_with_its_role(
    deployed: Deployed, properties: dict[str, str]
) -> None:
    event, table_id, request_id = committer_event(deployed, properties)

    response = deployed.invoke(COMMITTER, event)

    assert response == {"batchItemFailures": []}
    assert set(deployed.store(table_id).load().files_by_name) == set(data_keys(table_id, *LARGE_BATCH))
    status = deployed.admin.statuses.get(table_id, request_id)
    assert status is not None and status.outcome is CommitOutcome.COMMITTED
    [letter] = deployed.dead_letter_queue.receive_event()["Records"]
    assert letter["body"] == "{not json" and REASON_ATTRIBUTE in letter["messageAttributes"]
    assert index_items(deployed, table_id) == (2 if properties else 0)  # the chain, the entry's hint


def test_the_committer_loads_a_cold_table_from_what_it_reads_at_once_with_its_role(
    deployed: Deployed, caplog: pytest.LogCaptureFixture
) -> None:
    """The latest snapshot's copy and the log's last entries, read beside the statuses: a read its role
    were denied would only cost a round trip, so the test looks for the warning it leaves."""
    store = deployed.create_table("orders")
    store.commit(AddFiles((ref(data_key(store.table_id, "a.parquet")),)))
    assert store.create_snapshot() is not None
    store.commit(AddFiles((ref(data_key(store.table_id, "b.parquet")),)))
    sender = CommitSender(deployed.commit_queue, deployed.admin.statuses, deployed.admin.blobs)
    sender.send(store.table_id, AddFiles((ref(data_key(store.table_id, "c.parquet")),)))

    with caplog.at_level(logging.WARNING, logger="statestore"):
        response = deployed.invoke(COMMITTER, deployed.commit_queue.receive_event())

    assert response == {"batchItemFailures": []}
    assert set(deployed.store(store.table_id).load().files_by_name) == set(
        data_keys(store.table_id, "a.parquet", "b.parquet", "c.parquet")
    )
    assert "first read" not in caplog.text


# --- the snapshot Lambda ----------------------------------------------------------------------------------


def test_the_snapshot_lambda_snapshots_a_table_whose_log_moved_with_its_role(deployed: Deployed) -> None:
    store = deployed.create_table("orders")
    store.commit(AddFiles((ref(data_key(store.table_id, "a.parquet")),)))

    plan = deployed.invoke(SNAPSHOT, SCHEDULED_EVENT)
    event, source = deployed.work_event(SNAPSHOT, "snapshot")
    summary = deployed.invoke(SNAPSHOT, event)
    with iam_enforced():  # the event source acknowledges the work
        source.delete([r["receiptHandle"] for r in event["Records"]])

    assert plan["planned"] == [store.table_id]
    assert summary["written"] == {store.table_id: 2} and summary["errors"] == {}
    assert deployed.work_queues["snapshot"].receive_event()["Records"] == []
    latest = deployed.admin.snapshots.metadata.latest(store.table_id)
    assert latest is not None and latest.transaction_number == 2
    copies = [deployed.admin.blobs.get(key) for key in layout.latest_snapshot_keys(store.table_id)]
    assert copies == [
        deployed.admin.blobs.get(latest.partitions_key),
        deployed.admin.blobs.get(latest.files_key),
    ]


# --- the cleanup Lambda -----------------------------------------------------------------------------------


@KEEPS_VIEW
def test_the_cleanup_lambda_deletes_old_snapshots_log_entries_and_garbage_with_its_role(
    deployed: Deployed, properties: dict[str, str]
) -> None:
    store = deployed.create_table("orders", {GC_DELAY_PROPERTY: "0", **properties})
    store.index_leaves = bool(properties)  # as the committer's store of such a table asks
    table_id = store.table_id
    old, new = (f"{layout.data_prefix(table_id)}{name}.parquet" for name in ("old", "new"))
    for name in (old, new):
        deployed.admin.blobs.put(name, b"parquet")
    store.commit(AddFiles((ref(old),)))
    store.create_snapshot()
    store.commit(AssignJobIds((AssignJobIdRequest("compaction", "root", (old,)),)))
    store.commit(ReplaceFileReferences((ReplaceFileReferencesJob("compaction", "root", (old,), ref(new)),)))
    store.create_snapshot()
    deployed.monkeypatch.setenv("STATESTORE_LOG_MIN_SNAPSHOT_AGE_MINUTES", "0")
    deployed.monkeypatch.setenv("STATESTORE_SNAPSHOT_RETENTION_MINUTES", "0")
    # A GC delay of 0 is below any clock skew: here every clock is this machine's one.
    deployed.monkeypatch.setenv("STATESTORE_MAX_CLOCK_SKEW_MINUTES", "0")

    summary = deployed.cleanup_once(table_id)

    assert summary["errors"] == {}
    assert summary["data_files_deleted"] == 1 and summary["snapshots_deleted"] == 1
    assert summary["log_entries_deleted"] == 3
    assert deployed.admin.blobs.list(layout.data_prefix(table_id)) == [new]
    assert [s.transaction_number for s in deployed.admin.snapshots.metadata.list(table_id)] == [4]
    assert set(deployed.store(table_id).load().files_by_name) == {new}
    # The chain, and the hints of the entries kept: the compaction's, and the DeleteFiles cleanup committed.
    assert index_items(deployed, table_id) == (3 if properties else 0)


def test_the_cleanup_lambda_deletes_what_late_writers_left_of_a_deleted_table_with_its_role(
    deployed: Deployed,
) -> None:
    store = deployed.create_table("orders")
    table_id = store.table_id
    # The table's delete as the client ends it: its tombstone, then its record. Then late writers: a job's
    # data file, a sender's request body, a cleanup's sweep progress saved just before it saw the delete.
    write_tombstone(deployed.admin.blobs, deployed.admin.tables.get(table_id), now_millis())
    deployed.admin.tables.delete(table_id)
    late = [
        f"{layout.data_prefix(table_id)}late.parquet",
        f"{layout.request_body_prefix(table_id)}late.json",
        layout.orphan_sweep_key(table_id),
    ]
    for key in late:
        deployed.admin.blobs.put(key, b"late")
    # The cleanup runs past the GC delay and the longest a request lives, so it deletes them all, and then
    # the tombstone (the deployed environment sets the delay).
    later = partial(run_cleanup_work, clock=lambda: now_millis() + 60 * DAY_MS)
    deployed.monkeypatch.setattr(cleanup_lambda, "run_cleanup_work", later)

    plan = deployed.invoke(CLEANUP, SCHEDULED_EVENT)
    event, source = deployed.work_event(CLEANUP, "cleanup")
    summary = deployed.invoke(CLEANUP, event)
    with iam_enforced():
        source.delete([r["receiptHandle"] for r in event["Records"]])

    assert plan["planned"] == [] and plan["deleted_tables"] == [table_id]
    assert summary["errors"] == {} and summary["leftover_objects_deleted"] == len(late)
    assert deployed.admin.blobs.list(layout.table_prefix(table_id)) == []
    assert deployed.admin.blobs.list(layout.DELETED_TABLES_PREFIX) == []  # old enough, nothing left


def index_items(deployed: Deployed, table_id: str) -> int:
    """How many items of the log's leaf index the table has (sort keys below its entries')."""
    response = deployed.backend.dynamodb.query(
        TableName=deployed.names.transaction_log_table,
        KeyConditionExpression="table_id = :t AND transaction_number < :zero",
        ExpressionAttributeValues={":t": {"S": table_id}, ":zero": {"N": "0"}},
    )
    return int(response["Count"])


# --- the harness bites ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("action", "resource_part"),
    [("dynamodb:PutItem", "table/statestore-main-snapshots"), ("s3:PutObject", "/tables/*/snapshots/*")],
    ids=["dynamodb", "s3"],
)
def test_without_a_statement_it_needs_the_snapshot_lambda_is_denied(
    deployed: Deployed, action: str, resource_part: str
) -> None:
    store = deployed.create_table("orders")
    missing = statement(deployed.template, SNAPSHOT, action, resource_part)
    deployed.invoke(SNAPSHOT, SCHEDULED_EVENT)
    event, _ = deployed.work_event(SNAPSHOT, "snapshot")

    with pytest.raises(snapshot_lambda.SnapshotFailedError, match="AccessDenied"):
        deployed.invoke(SNAPSHOT, event, without=missing)

    assert deployed.admin.snapshots.metadata.latest(store.table_id) is None


@pytest.mark.parametrize(("handler", "kind"), [(SNAPSHOT, "snapshot"), (CLEANUP, "cleanup")])
def test_without_its_work_queue_grant_a_plan_is_denied(deployed: Deployed, handler: str, kind: str) -> None:
    deployed.create_table("orders")
    missing = statement(deployed.template, handler, "sqs:SendMessage", f"{kind}-work.fifo")

    with pytest.raises(StateStoreError, match="AccessDenied"):
        deployed.invoke(handler, SCHEDULED_EVENT, without=missing)

    assert deployed.work_queues[kind].receive_event()["Records"] == []


def test_a_function_cannot_take_the_other_functions_work(deployed: Deployed) -> None:
    deployed.create_table("orders")
    deployed.invoke(CLEANUP, SCHEDULED_EVENT)
    as_snapshot = SqsCommitQueue(
        deployed.role_client(SNAPSHOT, "sqs"), deployed.work_queues["cleanup"].queue_url
    )

    with iam_enforced(), pytest.raises(StateStoreError, match="AccessDenied"):
        as_snapshot.receive_event(max_messages=1)


def test_without_its_dead_letter_queue_grant_the_committer_is_denied(deployed: Deployed) -> None:
    event, table_id, _ = committer_event(deployed, {})
    missing = statement(deployed.template, COMMITTER, "sqs:SendMessage", "commits-dlq.fifo")

    with pytest.raises(StateStoreError, match="AccessDenied"):
        deployed.invoke(COMMITTER, event, without=missing)

    assert set(deployed.store(table_id).load().files_by_name) == set()
