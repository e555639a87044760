"""Tables isolated from each other under IAM enforced from the synthesised policies (``scoped_tables``):
a Spark job running as table A's job role reads, lists, writes, deletes and commits on A, and can do none of
those on table B; its commit request for B, which the shared queue lets through, is refused by the committer
because B lists its allowed senders. ``tests/infra/deployed_iam.py`` says how moto is made to enforce IAM
(its conditions included) as AWS does.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from lambdas._runtime import Runtime
from statestore.adapters.aws.backend import AwsBackend
from statestore.adapters.aws.clients import make_client
from statestore.adapters.aws.dynamodb_log import DynamoDBTransactionLog
from statestore.adapters.aws.sqs_queue import SqsCommitQueue, provision_queues, provision_upkeep_queues
from statestore.engine.log_store import TransactionLogStateStore
from statestore.errors import StateStoreError
from statestore.instance import ResourceNames
from statestore.model import layout
from statestore.services.committer import MessageOutcome, ReceivedMessage
from statestore.store.ports import CommitOutcome
from statestore.store.tables import TableInfo
from statestore.transactions import AddFiles, InitialisePartitions
from tests.builders import INT_SCHEMA, data_key, data_keys, ref, tree
from tests.infra.conftest import SynthStack
from tests.infra.deployed_iam import (
    REGION,
    attached_statements,
    create_user,
    function_environment,
    iam_enforced,
    managed_policy_statements,
    sender_id,
)
from tests.infra.test_deployed_access import Caller

pytestmark = pytest.mark.infra

TABLE_A = "0a0a0a0a-1111-4222-8333-444444444444"
# Enough files that a request's body goes through the bucket.
LARGE_BATCH = tuple(f"{i:05d}.parquet" for i in range(5_000))


@pytest.fixture(scope="module")
def template_json(synth_stack: SynthStack) -> dict[str, Any]:
    from aws_cdk import assertions

    stack = synth_stack(scoped_tables=TABLE_A)
    return dict(assertions.Template.from_stack(stack).to_json())


class Instance:
    """The stack's resources in moto, tables A (scoped) and B, each with a snapshot and a log body in the
    bucket, a data file each, and an admin unrestricted by IAM to set up and check."""

    def __init__(self, template: dict[str, Any]) -> None:
        self.template = template
        environment = function_environment(template, "lambdas.committer.handler")
        self.names = ResourceNames.from_json(environment["STATESTORE_RESOURCES"])
        self.backend = AwsBackend.connect(self.names)
        self.backend.provision()
        sqs = make_client("sqs")
        queue_url, _ = provision_queues(self.names, sqs)
        provision_upkeep_queues(self.names, sqs)
        self.commit_queue = SqsCommitQueue(sqs, queue_url)
        self.admin = Runtime.for_aws(self.names)
        self.iam = make_client("iam")
        self.snapshot_objects: dict[str, list[str]] = {}
        self.other_user = self.iam.create_user(UserName="table-b-writer")["User"]["UserId"]
        self.a = self.create_table(TableInfo(TABLE_A, "alpha", INT_SCHEMA))
        b_senders = (sender_id(self.other_user),)
        self.b = self.create_table(TableInfo.new("beta", INT_SCHEMA, allowed_senders=b_senders))

    def create_table(self, info: TableInfo) -> str:
        self.admin.tables.create(info)
        store = self.store(info.table_id)
        store.commit(InitialisePartitions(tuple(tree(INT_SCHEMA))))
        store.commit(AddFiles((ref(data_key(info.table_id, "early.parquet")),)))
        store.create_snapshot()
        log_via_bucket = DynamoDBTransactionLog(
            self.backend.dynamodb,
            self.names.transaction_log_table,
            self.backend.blobs,
            max_inline_body_bytes=0,
        )
        TransactionLogStateStore(info.table_id, INT_SCHEMA, log_via_bucket, self.admin.snapshots).commit(
            AddFiles((ref(data_key(info.table_id, "late.parquet")),))
        )
        self.backend.blobs.put(self.data_file(info.table_id), b"parquet")
        self.snapshot_objects[info.table_id] = self.backend.blobs.list(layout.snapshot_prefix(info.table_id))
        return info.table_id

    def data_file(self, table_id: str, name: str = "root/existing.parquet") -> str:
        return f"{layout.data_prefix(table_id)}{name}"

    def store(self, table_id: str) -> TransactionLogStateStore:
        return TransactionLogStateStore(table_id, INT_SCHEMA, self.admin.log, self.admin.snapshots)

    def files(self, table_id: str) -> set[str]:
        return set(self.store(table_id).load().files_by_name)

    def commit_waiting_requests(self) -> list[Any]:
        """What the committer Lambda does with the requests waiting in the queue."""
        event = self.commit_queue.receive_event()
        results = self.admin.committer().process(
            [ReceivedMessage.from_sqs_record(r) for r in event["Records"]]
        )
        self.commit_queue.delete([r["receiptHandle"] for r in event["Records"]])
        return results

    def caller(self, name: str, statements: list[dict[str, Any]]) -> Caller:
        keys = create_user(self.iam, name, statements)
        session = boto3.session.Session(
            aws_access_key_id=keys["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=keys["AWS_SECRET_ACCESS_KEY"],
            region_name=REGION,
        )
        backend = AwsBackend(
            self.names, make_client("dynamodb", session=session), make_client("s3", session=session)
        )
        return Caller(backend, make_client("sqs", session=session))


@pytest.fixture
def instance(template_json: dict[str, Any]) -> Iterator[Instance]:
    with mock_aws():
        yield Instance(template_json)


def table_job_role(template: dict[str, Any], table_id: str) -> str:
    [role] = [
        logical_id
        for logical_id, r in template["Resources"].items()
        if r["Type"] == "AWS::IAM::Role" and f"of table {table_id}" in r["Properties"].get("Description", "")
    ]
    return role


def job_of_table_a(instance: Instance) -> Caller:
    return instance.caller(
        "job-alpha", attached_statements(instance.template, table_job_role(instance.template, TABLE_A))
    )


def test_table_a_s_job_role_reads_lists_writes_deletes_and_commits_on_table_a(instance: Instance) -> None:
    job = job_of_table_a(instance)
    new_file = instance.data_file(TABLE_A, "root/new.parquet")

    with iam_enforced():
        client = job.client()
        assert client.get_table("alpha").table_id == TABLE_A
        assert set(client.state("alpha").files_by_name) == set(
            data_keys(TABLE_A, "early.parquet", "late.parquet")
        )
        job.backend.blobs.put(new_file, b"parquet")
        assert job.backend.blobs.get(new_file) == b"parquet"
        assert sorted(job.backend.blobs.list(layout.data_prefix(TABLE_A))) == sorted(
            [instance.data_file(TABLE_A), new_file]
        )
        job.backend.blobs.delete([instance.data_file(TABLE_A)])
        sender = job.backend.commit_sender(job.sqs)
        request_id = sender.send(
            TABLE_A, AddFiles(tuple(ref(name) for name in data_keys(TABLE_A, *LARGE_BATCH)))
        )

    [result] = instance.commit_waiting_requests()
    assert result.outcome is MessageOutcome.COMMITTED
    with iam_enforced():
        status = sender.status(TABLE_A, request_id)
        assert status is not None and status.outcome is CommitOutcome.COMMITTED
    assert len(instance.files(TABLE_A)) == 2 + len(LARGE_BATCH)
    assert instance.backend.blobs.list(layout.data_prefix(TABLE_A)) == [new_file]


B_DENIED: dict[str, Callable[[Caller, Instance], object]] = {
    "read its record": lambda job, i: job.client().get_table("beta"),
    "load its state": lambda job, i: job.store(i.b).load(),
    "read its log": lambda job, i: list(job.backend.log.read(i.b, 1)),
    "read a snapshot object": lambda job, i: job.backend.blobs.get(i.snapshot_objects[i.b][0]),
    "read a data file": lambda job, i: job.backend.blobs.get(i.data_file(i.b)),
    "list its data files": lambda job, i: job.backend.blobs.list(layout.data_prefix(i.b)),
    "list its whole prefix": lambda job, i: job.backend.blobs.list(layout.table_prefix(i.b)),
    "list every table": lambda job, i: job.backend.blobs.list("tables/"),
    "list the table index": lambda job, i: job.client().list_tables(),
    "write a data file": lambda job, i: job.backend.blobs.put(i.data_file(i.b, "root/x.parquet"), b"x"),
    "delete a data file": lambda job, i: job.backend.blobs.delete([i.data_file(i.b)]),
    "stage a large request body": lambda job, i: job.backend.commit_sender(job.sqs).send(
        i.b, AddFiles(tuple(ref(name) for name in data_keys(i.b, *LARGE_BATCH)))
    ),
    "read its requests' statuses": lambda job, i: job.backend.commit_statuses.get(i.b, "any-request"),
}


@pytest.mark.parametrize("what", sorted(B_DENIED))
def test_table_a_s_job_role_cannot_touch_table_b(instance: Instance, what: str) -> None:
    job = job_of_table_a(instance)
    before = instance.files(instance.b)

    with iam_enforced(), pytest.raises(StateStoreError, match="AccessDenied"):
        B_DENIED[what](job, instance)

    assert instance.files(instance.b) == before
    assert instance.backend.blobs.get(instance.data_file(instance.b)) == b"parquet"
    assert instance.backend.blobs.list(layout.request_body_prefix(instance.b)) == []


def test_a_commit_for_table_b_sent_as_table_a_s_job_is_refused_by_the_committer(instance: Instance) -> None:
    """SQS cannot condition a send on the message group, so the request reaches the queue; table B lists
    its allowed senders, and the committer refuses it without recording a status for its request id."""
    job = job_of_table_a(instance)
    before = instance.files(instance.b)

    with iam_enforced():
        request_id = job.backend.commit_sender(job.sqs).send(
            instance.b, AddFiles((ref(data_key(instance.b, "forged.parquet")),))
        )
    [result] = instance.commit_waiting_requests()

    assert result.outcome is MessageOutcome.DEAD_LETTERED
    assert "not among the table's allowed senders" in (result.reason or "")
    assert instance.files(instance.b) == before
    assert instance.admin.statuses.get(instance.b, request_id) is None


def test_a_commit_for_table_b_from_its_allowed_sender_is_committed(instance: Instance) -> None:
    keys = create_user_keys(instance, "table-b-writer")
    with iam_enforced():
        request_id = keys.backend.commit_sender(keys.sqs).send(
            instance.b, AddFiles((ref(data_key(instance.b, "genuine.parquet")),))
        )
    [result] = instance.commit_waiting_requests()

    assert result.outcome is MessageOutcome.COMMITTED, result.reason
    assert data_key(instance.b, "genuine.parquet") in instance.files(instance.b)
    status = instance.admin.statuses.get(instance.b, request_id)
    assert status is not None and status.outcome is CommitOutcome.COMMITTED


def create_user_keys(instance: Instance, user: str) -> Caller:
    """Keys of the existing user ``user`` (table B's allowed sender), holding the instance-wide commit
    policy."""
    statements = managed_policy_statements(
        instance.template, f"statestore-{instance.names.instance_id}-commit-{REGION}"
    )
    instance.iam.put_user_policy(
        UserName=user,
        PolicyName="commit",
        PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": statements}),
    )
    key = instance.iam.create_access_key(UserName=user)["AccessKey"]
    session = boto3.session.Session(
        aws_access_key_id=key["AccessKeyId"], aws_secret_access_key=key["SecretAccessKey"], region_name=REGION
    )
    backend = AwsBackend(
        instance.names, make_client("dynamodb", session=session), make_client("s3", session=session)
    )
    return Caller(backend, make_client("sqs", session=session))


def test_table_a_s_job_role_stages_reads_and_writes_only_under_its_own_spark_prefixes(
    instance: Instance,
) -> None:
    own_input = f"{layout.SPARK_INPUT_PREFIX}{TABLE_A}/rows.parquet"
    other_input = f"{layout.SPARK_INPUT_PREFIX}{instance.b}/rows.parquet"
    code = layout.SPARK_ARTIFACTS_PREFIX + layout.SPARK_CODE_ARCHIVE
    for key in (own_input, other_input, code):
        instance.backend.blobs.put(key, b"staged")
    job = job_of_table_a(instance)
    blobs = job.backend.blobs

    with iam_enforced():
        assert blobs.get(own_input) == b"staged" and blobs.get(code) == b"staged"
        assert blobs.list(f"{layout.SPARK_INPUT_PREFIX}{TABLE_A}/") == [own_input]
        blobs.put(f"{layout.SPARK_OUTPUT_PREFIX}{TABLE_A}/answer.json", b"{}")
        blobs.put(f"{layout.SPARK_LOGS_PREFIX}{TABLE_A}/driver.log", b"log")
        for denied in (
            lambda: blobs.get(other_input),
            lambda: blobs.list(layout.SPARK_INPUT_PREFIX),
            lambda: blobs.put(f"{layout.SPARK_OUTPUT_PREFIX}{instance.b}/answer.json", b"{}"),
            lambda: blobs.put(f"{layout.SPARK_LOGS_PREFIX}driver.log", b"log"),
            lambda: blobs.put(code, b"replaced"),
        ):
            with pytest.raises(StateStoreError, match="AccessDenied"):
                denied()

    assert instance.backend.blobs.get(code) == b"staged"
