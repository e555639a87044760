"""Callers outside the Lambdas, each in moto as an IAM user holding exactly its synthesized statements, with
IAM enforced (``tests/infra/deployed_iam.py`` says how): a Spark job as the EMR Serverless job role, a sender
holding only the commit policy, and the ``statestore`` CLI holding only the admin policy. What each needs is
allowed; what is another's is denied, and changes nothing.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from lambdas._runtime import Runtime
from statestore.adapters.aws.backend import AwsBackend
from statestore.adapters.aws.clients import make_client
from statestore.adapters.aws.dynamodb_log import DynamoDBTransactionLog
from statestore.adapters.aws.sqs_queue import SqsCommitQueue, provision_queues, provision_upkeep_queues
from statestore.cli import main
from statestore.codec.transaction_json import transaction_to_json
from statestore.engine.log_store import TransactionLogStateStore
from statestore.engine.snapshots import SnapshotStore
from statestore.errors import StateStoreError
from statestore.instance import ResourceNames
from statestore.model import layout
from statestore.services.client import StateStoreClient
from statestore.services.committer import ReceivedMessage
from statestore.services.upkeep import UpkeepKind, UpkeepWork
from statestore.store.ports import CommitOutcome, QueueMessage
from statestore.store.tables import TableInfo
from statestore.transactions import AddFiles, InitialisePartitions
from tests.builders import INT_SCHEMA, data_key, data_keys, ref, tree
from tests.infra.deployed_iam import (
    REGION,
    attached_statements,
    create_user,
    function_environment,
    iam_enforced,
    managed_policy_statements,
    service_role,
)

pytestmark = pytest.mark.infra

EMR = "emr-serverless.amazonaws.com"
# Enough files that a request's body goes through the bucket (their names under a table's data prefix).
LARGE_BATCH = tuple(f"{i:05d}.parquet" for i in range(5_000))
CODE = layout.SPARK_ARTIFACTS_PREFIX + layout.SPARK_CODE_ARCHIVE
ENVIRONMENT = layout.SPARK_ARTIFACTS_PREFIX + layout.SPARK_ENVIRONMENT_ARCHIVE
INPUT = layout.SPARK_INPUT_PREFIX + "orders/rows.parquet"


@pytest.fixture(scope="module")
def template_json(template: Any) -> dict[str, Any]:
    result: dict[str, Any] = template.to_json()
    return result


@dataclass
class Instance:
    """The stack's resources in moto, an admin unrestricted by IAM to set up and check, and the committer."""

    template: dict[str, Any]
    names: ResourceNames
    backend: AwsBackend
    admin: Runtime
    commit_queue: SqsCommitQueue
    upkeep_queues: dict[str, SqsCommitQueue]  # the work queues by kind, and "dead_letters"
    iam: Any

    def create_table(self, name: str) -> TransactionLogStateStore:
        info = TableInfo.new(name, INT_SCHEMA)
        self.admin.tables.create(info)
        store = self.store(info.table_id)
        store.commit(InitialisePartitions(tuple(tree(INT_SCHEMA))))
        return store

    def store(self, table_id: str) -> TransactionLogStateStore:
        return TransactionLogStateStore(table_id, INT_SCHEMA, self.admin.log, self.admin.snapshots)

    def apply_commits(self) -> None:
        """What the committer Lambda does with the requests waiting in the queue."""
        event = self.commit_queue.receive_event()
        assert event["Records"], "no commit request is waiting"
        results = self.admin.committer().process(
            [ReceivedMessage.from_sqs_record(r) for r in event["Records"]]
        )
        assert not [r for r in results if r.retry], results
        # The event source deletes what was processed; a FIFO group is held while a message is in flight.
        self.commit_queue.delete([r["receiptHandle"] for r in event["Records"]])

    def caller(self, name: str, statements: list[dict[str, Any]]) -> Caller:
        """Clients of a new IAM user holding exactly ``statements``."""
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


@dataclass
class Caller:
    backend: AwsBackend
    sqs: Any

    def client(self) -> StateStoreClient:
        b = self.backend
        return StateStoreClient(b.table_index, b.log, b.snapshot_metadata, b.blobs)

    def store(self, table_id: str) -> TransactionLogStateStore:
        b = self.backend
        return TransactionLogStateStore(
            table_id, INT_SCHEMA, b.log, SnapshotStore(b.snapshot_metadata, b.blobs)
        )


@pytest.fixture
def instance(template_json: dict[str, Any]) -> Iterator[Instance]:
    environment = function_environment(template_json, "lambdas.committer.handler")
    names = ResourceNames.from_json(environment["STATESTORE_RESOURCES"])
    with mock_aws():
        backend = AwsBackend.connect(names)
        backend.provision()
        sqs = make_client("sqs")
        queue_url, _ = provision_queues(names, sqs)
        upkeep_urls = provision_upkeep_queues(names, sqs)
        yield Instance(
            template=template_json,
            names=names,
            backend=backend,
            admin=Runtime.for_aws(names),
            commit_queue=SqsCommitQueue(sqs, queue_url),
            upkeep_queues={name: SqsCommitQueue(sqs, url) for name, url in upkeep_urls.items()},
            iam=make_client("iam"),
        )


def policy(instance: Instance, grant: str) -> list[dict[str, Any]]:
    return managed_policy_statements(
        instance.template, f"statestore-{instance.names.instance_id}-{grant}-{REGION}"
    )


# --- a Spark job on EMR Serverless ------------------------------------------------------------------------


def table_with_history(instance: Instance) -> TransactionLogStateStore:
    """A table with a snapshot, and after it a log entry whose body is in the bucket: loading its state
    reads every kind of state object."""
    store = instance.create_table("orders")
    store.commit(AddFiles((ref(data_key(store.table_id, "early.parquet")),)))
    store.create_snapshot()
    names, backend = instance.names, instance.backend
    log_via_bucket = DynamoDBTransactionLog(
        backend.dynamodb, names.transaction_log_table, backend.blobs, max_inline_body_bytes=0
    )
    TransactionLogStateStore(store.table_id, INT_SCHEMA, log_via_bucket, instance.admin.snapshots).commit(
        AddFiles((ref(data_key(store.table_id, "late.parquet")),))
    )
    assert backend.blobs.list(layout.log_body_prefix(store.table_id))
    for key, content in ((CODE, b"code"), (ENVIRONMENT, b"environment"), (INPUT, b"rows")):
        backend.blobs.put(key, content)
    return store


def job(instance: Instance) -> Caller:
    return instance.caller(
        "spark-job", attached_statements(instance.template, service_role(instance.template, EMR))
    )


def test_a_spark_job_reads_state_writes_data_and_commits_through_the_queue_as_the_job_role(
    instance: Instance,
) -> None:
    table_id = table_with_history(instance).table_id
    spark = job(instance)
    blobs = spark.backend.blobs
    data_file = f"{layout.data_prefix(table_id)}root/output.parquet"
    log_file = f"{layout.SPARK_LOGS_PREFIX}applications/app/jobs/run/SPARK_DRIVER/stdout.gz"

    with iam_enforced():
        client = spark.client()
        assert client.get_table("orders").table_id == table_id
        assert set(client.state("orders").files_by_name) == set(
            data_keys(table_id, "early.parquet", "late.parquet")
        )
        assert [blobs.get(key) for key in (CODE, ENVIRONMENT, INPUT)] == [b"code", b"environment", b"rows"]
        blobs.put(data_file, b"parquet")
        assert blobs.get(data_file) == b"parquet"
        assert blobs.list(layout.data_prefix(table_id)) == [data_file]
        blobs.put(log_file, b"driver log")
        sender = spark.backend.commit_sender(spark.sqs)
        request_id = sender.send(table_id, AddFiles(tuple(ref(data_key(table_id, n)) for n in LARGE_BATCH)))

    assert instance.backend.blobs.list(layout.request_body_prefix(table_id)), "the body went to the bucket"
    instance.apply_commits()

    with iam_enforced():
        status = sender.status(table_id, request_id)
        assert status is not None and status.outcome is CommitOutcome.COMMITTED
        blobs.delete([data_file])  # as compaction deletes a losing job's output

    assert instance.backend.blobs.list(layout.data_prefix(table_id)) == []
    assert instance.backend.blobs.get(log_file) == b"driver log"
    assert len(instance.store(table_id).load().files_by_name) == 2 + len(LARGE_BATCH)


JOB_MAY_NOT: dict[str, Callable[[Caller, str], object]] = {
    "append to the log": lambda job, table_id: job.store(table_id).commit(
        AddFiles((ref(data_key(table_id, "direct.parquet")),))
    ),
    "delete a table": lambda job, table_id: job.client().delete_table(table_id),
    "rename a table": lambda job, table_id: job.client().rename_table(table_id, "renamed"),
    "write a snapshot object": lambda job, table_id: job.backend.blobs.put(
        f"{layout.snapshot_prefix(table_id)}999/files.parquet", b"forged"
    ),
    "replace the job code": lambda job, _: job.backend.blobs.put(CODE, b"other code"),
    "delete the staged input": lambda job, _: job.backend.blobs.delete([INPUT]),
}


@pytest.mark.parametrize("what", sorted(JOB_MAY_NOT))
def test_a_spark_job_may_not_do_what_is_not_a_jobs(instance: Instance, what: str) -> None:
    store = table_with_history(instance)
    before = store.load()
    spark = job(instance)

    with iam_enforced(), pytest.raises(StateStoreError, match="AccessDenied"):
        JOB_MAY_NOT[what](spark, store.table_id)

    after = instance.store(store.table_id).load()
    assert (after.transaction_number, set(after.files_by_name)) == (
        before.transaction_number,
        set(before.files_by_name),
    )
    assert instance.admin.tables.get(store.table_id).table_name == "orders"
    assert not [
        k for k in instance.backend.blobs.list(layout.snapshot_prefix(store.table_id)) if "/999/" in k
    ]
    assert [instance.backend.blobs.get(k) for k in (CODE, INPUT)] == [b"code", b"rows"]


# --- the commit policy ----------------------------------------------------------------------------------


def test_the_commit_policy_sends_a_large_request_and_reads_its_outcome_and_nothing_more(
    instance: Instance,
) -> None:
    table_id = instance.create_table("orders").table_id
    committer = instance.caller("sender", policy(instance, "commit"))

    with iam_enforced():
        sender = committer.backend.commit_sender(committer.sqs)
        request_id = sender.send(table_id, AddFiles(tuple(ref(data_key(table_id, n)) for n in LARGE_BATCH)))
    instance.apply_commits()

    with iam_enforced():
        status = sender.status(table_id, request_id)
        assert status is not None and status.outcome is CommitOutcome.COMMITTED
        # Reading the state is read-state's, data files are data's.
        with pytest.raises(StateStoreError, match="AccessDenied"):
            committer.client().state(table_id)
        with pytest.raises(StateStoreError, match="AccessDenied"):
            committer.backend.blobs.put(f"{layout.data_prefix(table_id)}root/x.parquet", b"parquet")
    assert instance.backend.blobs.list(layout.data_prefix(table_id)) == []


# --- the admin policy: the CLI ----------------------------------------------------------------------------


def test_the_admin_policy_runs_every_statestore_cli_command(
    instance: Instance, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    keys = create_user(instance.iam, "cli-admin", policy(instance, "admin"))
    for name, value in {**keys, "STATESTORE_RESOURCES": instance.names.to_json()}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(INT_SCHEMA.to_json()))

    def add_files(table_id: str, *names: str) -> str:
        path = tmp_path / f"{names[0]}.json"
        transaction = AddFiles(tuple(ref(data_key(table_id, n)) for n in names))
        path.write_text(json.dumps(transaction_to_json(transaction)))
        return str(path)

    def cli(*args: str) -> Any:
        capsys.readouterr()
        with iam_enforced():
            code = main(["--json", "--quiet", *args])
        out, err = capsys.readouterr()
        assert code == 0, f"statestore {' '.join(args)} exited {code}: {err}"
        return json.loads(out)

    cli("tables", "create", "orders", "--schema", str(schema))
    assert [t["table_name"] for t in cli("tables", "list")] == ["orders"]
    created_id = cli("tables", "show", "orders")["table_id"]
    for batch in (("a.parquet",), ("b.parquet", "c.parquet")):
        request_id = cli("commit", "orders", add_files(created_id, *batch))["request_id"]
        instance.apply_commits()
        assert cli("status", "orders", request_id)["outcome"] == "committed"
        assert cli("snapshot", "orders")["written"] is True
    assert {f["filename"] for f in cli("files", "orders")} == set(
        data_keys(created_id, "a.parquet", "b.parquet", "c.parquet")
    )
    assert [p["leaf"] for p in cli("partitions", "orders", "--leaves")] == [True]
    assert cli("log", "orders")
    # The reports, the job model and the orphan listing read state, log, snapshots and the data prefix.
    assert cli("report", "gc", "orders")["total"] == 0
    assert cli("report", "files", "orders")
    assert cli("report", "references", "orders")
    assert cli("report", "partitions", "orders", "--split-threshold", "1")
    assert cli("jobs", "orders") == []
    assert cli("files", "orders", "--orphans") == []

    # A request the committer cannot read is dead-lettered; the admin lists it, redrives it (it comes back,
    # still unreadable) and purges it.
    instance.commit_queue.sqs.send_message(
        QueueUrl=instance.commit_queue.queue_url,
        MessageBody="not a commit request",
        MessageGroupId="garbage",
        MessageDeduplicationId="garbage-1",
    )
    instance.apply_commits()
    [letter] = cli("dead-letters", "list")
    assert letter["request_id"] is None and letter["body"] == "not a commit request"
    assert cli("dead-letters", "show", letter["message_id"])["reason"] == letter["reason"]
    assert cli("dead-letters", "redrive", "--all")["redriven"][0]["group_id"] == "garbage"
    instance.apply_commits()
    [again] = cli("dead-letters", "list")
    assert cli("dead-letters", "purge", again["message_id"])["purged"] == [again["message_id"]]
    assert cli("dead-letters", "list") == []

    # A table's snapshot and cleanup failed 3 times, and a body no plan writes is there too: the admin lists
    # them, redrives the work (fresh, each to its own work queue) and purges the rest.
    orders_id = cli("tables", "show", "orders")["table_id"]
    long_ago = 1_700_000_000_000
    instance.upkeep_queues["dead_letters"].send(
        [UpkeepWork(kind, orders_id, long_ago, 900_000).to_message() for kind in UpkeepKind]
        + [QueueMessage("not work", "junk", "junk-1")]
    )
    upkeep = ("dead-letters", "--queue", "upkeep")
    letters = {d["kind"]: d for d in cli(*upkeep, "list")}
    assert set(letters) == {"snapshot", "cleanup", None}
    assert letters["snapshot"]["table_id"] == letters["cleanup"]["table_id"] == orders_id
    assert cli(*upkeep, "show", letters["cleanup"]["message_id"])["kind"] == "cleanup"
    work = [letters["snapshot"]["message_id"], letters["cleanup"]["message_id"]]
    assert sorted(d["kind"] for d in cli(*upkeep, "redrive", *work)["redriven"]) == ["cleanup", "snapshot"]
    for kind in UpkeepKind:
        [fresh] = instance.upkeep_queues[kind.value].receive_event()["Records"]
        redriven = UpkeepWork.from_body(fresh["body"])
        assert (redriven.kind, redriven.table_id) == (kind, orders_id) and redriven.planned_at > long_ago
    assert cli(*upkeep, "purge", "--all")["purged"] == [letters[None]["message_id"]]
    assert cli(*upkeep, "list") == []
    report = cli("cleanup", "orders", "--log-min-snapshot-age", "0", "--snapshot-retention", "0")
    assert report["errors"] == {} and report["tables"][0]["snapshots_deleted"] == 1
    cli("tables", "rename", "orders", "orders2")
    table_id = cli("tables", "show", "orders2")["table_id"]
    cli("tables", "delete", "orders2", "--yes")

    assert cli("tables", "list") == []
    assert instance.backend.blobs.list(layout.table_prefix(table_id)) == []
    assert list(instance.admin.log.read(table_id, 1, 100)) == []
    # A job that still wrote a data file after the delete: cleanup deletes it, then the table's tombstone.
    instance.backend.blobs.put(data_key(table_id, "late"), b"late")
    monkeypatch.setenv("STATESTORE_MAX_REQUEST_AGE_MINUTES", "0")
    swept = cli("cleanup", "--gc-delay", "0", "--max-clock-skew", "0")
    assert swept["errors"] == {} and swept["deleted_tables"] == [
        {"table_id": table_id, "objects_deleted": 1, "objects_kept": 0, "tombstone_deleted": True}
    ]
    assert instance.backend.blobs.list("") == []


def test_the_admin_policy_may_not_take_upkeep_work_nor_send_to_the_upkeep_dead_letter_queue(
    instance: Instance,
) -> None:
    """Redriving needs only SendMessage on the work queues: receiving from them is the workers', and only
    the work queues' redrive policy sends to the dead-letter queue."""
    table_id = instance.create_table("orders").table_id
    work = UpkeepWork(UpkeepKind.SNAPSHOT, table_id, 1_700_000_000_000, 900_000).to_message()
    instance.upkeep_queues["snapshot"].send([work])
    admin = instance.caller("cli-admin", policy(instance, "admin"))
    urls = {name: queue.queue_url for name, queue in instance.upkeep_queues.items()}

    with iam_enforced():
        for kind in UpkeepKind:
            with pytest.raises(StateStoreError, match="AccessDenied"):
                SqsCommitQueue(admin.sqs, urls[kind.value]).receive_event()
        with pytest.raises(StateStoreError, match="AccessDenied"):
            SqsCommitQueue(admin.sqs, urls["dead_letters"]).send([work])

    assert instance.upkeep_queues["dead_letters"].receive_event()["Records"] == []
    [waiting] = instance.upkeep_queues["snapshot"].receive_event()["Records"]
    assert waiting["body"] == work.body


def committer_function_with_its_mapping(instance: Instance) -> None:
    """The committer Lambda, as the stack names it, fed by the commit queue (moto runs no code for it here:
    no message is sent after the mapping exists)."""
    iam, lambda_client = instance.iam, make_client("lambda")
    role = iam.create_role(
        RoleName="committer", AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": []})
    )["Role"]["Arn"]
    code = io.BytesIO()
    with zipfile.ZipFile(code, "w") as z:
        z.writestr("handler.py", "def handler(event, context):\n    return {}\n")
    lambda_client.create_function(
        FunctionName=instance.names.committer_function, Runtime="python3.12", Role=role,
        Handler="handler.handler", Code={"ZipFile": code.getvalue()},
    )  # fmt: skip
    queue_arn = instance.commit_queue.sqs.get_queue_attributes(
        QueueUrl=instance.commit_queue.queue_url, AttributeNames=["QueueArn"]
    )["Attributes"]["QueueArn"]
    lambda_client.create_event_source_mapping(
        EventSourceArn=queue_arn, FunctionName=instance.names.committer_function, BatchSize=10
    )


def test_the_admin_policy_pauses_and_resumes_the_committer_and_nothing_else_may(
    instance: Instance, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    instance.commit_queue.sqs.send_message(
        QueueUrl=instance.commit_queue.queue_url,
        MessageBody="waiting",
        MessageGroupId="t",
        MessageDeduplicationId="waiting-1",
    )
    committer_function_with_its_mapping(instance)
    admin_keys = create_user(instance.iam, "cli-admin", policy(instance, "admin"))
    sender_keys = create_user(instance.iam, "sender", policy(instance, "commit"))
    monkeypatch.setenv("STATESTORE_RESOURCES", instance.names.to_json())
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)

    def cli(keys: dict[str, str], *args: str) -> tuple[int, Any]:
        for name, value in keys.items():
            monkeypatch.setenv(name, value)
        capsys.readouterr()
        with iam_enforced():
            code = main(["--json", "--quiet", "committer", *args])
        out, err = capsys.readouterr()
        return code, (json.loads(out) if code == 0 else err)

    code, status = cli(admin_keys, "status")
    assert code == 0, status
    assert status["paused"] is False and status["queue"]["waiting"] == 1
    code, paused = cli(admin_keys, "pause")
    assert code == 0 and paused["paused"] is True and paused["state"] == "Disabled"
    code, error = cli(sender_keys, "resume")  # the commit policy may not switch the committer
    assert code != 0 and "AccessDenied" in error
    assert cli(admin_keys, "status")[1]["paused"] is True
    code, resumed = cli(admin_keys, "resume")
    assert code == 0 and resumed["paused"] is False and resumed["state"] == "Enabled"
