"""The committer Lambda handler with real-shaped SQS FIFO events, on in-memory ports and on moto."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence

import pytest
from moto import mock_aws

from lambdas import committer as committer_lambda
from lambdas._runtime import Runtime, use_runtime
from statestore.adapters.aws.clients import make_client
from statestore.adapters.aws.provision import provision
from statestore.adapters.aws.sqs_queue import SqsCommitQueue, provision_queues
from statestore.engine.log_store import TransactionLogStateStore
from statestore.engine.requests import CommitRequest, CommitSender
from statestore.errors import StoreUnavailableError
from statestore.instance import ResourceNames
from statestore.services.committer import REASON_ATTRIBUTE
from statestore.store.memory import InMemoryCommitQueue, InMemoryTransactionLog
from statestore.store.ports import CommitOutcome, CommitStatus, LogEntry
from statestore.store.tables import TableInfo
from statestore.transactions import (
    AddFiles,
    InitialisePartitions,
    ReplaceFileReferences,
    ReplaceFileReferencesJob,
)
from tests.builders import INT_SCHEMA, data_key, data_keys, ref, tree
from tests.lambdas.events import LambdaContext, failures, redelivered, sqs_event, sqs_record


def create_table(rt: Runtime, name: str) -> str:
    info = TableInfo.new(name, INT_SCHEMA)
    rt.tables.create(info)
    TransactionLogStateStore(info.table_id, INT_SCHEMA, rt.log, rt.snapshots).commit(
        InitialisePartitions(tuple(tree(INT_SCHEMA)))
    )
    return info.table_id


def files_of(rt: Runtime, table_id: str) -> set[str]:
    state = TransactionLogStateStore(table_id, INT_SCHEMA, rt.log, rt.snapshots).load()
    return set(state.files_by_name)


def add(table_id: str, *names: str) -> CommitRequest:
    """A request adding the data files ``names``: their keys under the table's data prefix."""
    return CommitRequest.new(table_id, AddFiles(tuple(ref(data_key(table_id, n)) for n in names)))


class FlakyLog(InMemoryTransactionLog):
    def __init__(self) -> None:
        super().__init__()
        self.failing: set[str] = set()

    def append(self, table_id: str, entry: LogEntry, outcomes: Sequence[CommitStatus] = ()) -> None:
        if table_id in self.failing:
            raise StoreUnavailableError("ProvisionedThroughputExceededException")
        super().append(table_id, entry, outcomes)


@pytest.fixture
def rt() -> Iterator[Runtime]:
    runtime = Runtime.in_memory()
    runtime.log = FlakyLog()
    use_runtime(runtime)
    yield runtime
    use_runtime(None)


def test_a_batch_of_valid_requests_reports_no_failures_and_commits_one_entry(rt: Runtime) -> None:
    table = create_table(rt, "t")
    requests = [add(table, f"f{i}") for i in range(10)]

    response = committer_lambda.handler(sqs_event(*(sqs_record(r) for r in requests)), LambdaContext())

    assert response == {"batchItemFailures": []}
    assert rt.log.latest_number(table) == 2
    assert files_of(rt, table) == {data_key(table, f"f{i}") for i in range(10)}
    assert all(rt.statuses.get(r.table_id, r.request_id).outcome is CommitOutcome.COMMITTED for r in requests)  # type: ignore[union-attr]


def test_a_throttled_table_fails_only_its_own_messages(rt: Runtime) -> None:
    t1, t2 = create_table(rt, "t1"), create_table(rt, "t2")
    assert isinstance(rt.log, FlakyLog)
    rt.log.failing.add(t1)
    records = [
        sqs_record(add(t1, "a")),
        sqs_record(add(t2, "b")),
        sqs_record(add(t1, "c")),
        sqs_record(add(t2, "d")),
    ]

    response = committer_lambda.handler(sqs_event(*records), LambdaContext())

    assert failures(response) == [records[0]["messageId"], records[2]["messageId"]]
    assert files_of(rt, t2) == set(data_keys(t2, "b", "d"))
    assert files_of(rt, t1) == set()


def test_every_message_failing_is_reported_not_raised(rt: Runtime) -> None:
    table = create_table(rt, "t")
    assert isinstance(rt.log, FlakyLog)
    rt.log.failing.add(table)
    records = [sqs_record(add(table, "a")), sqs_record(add(table, "b"))]

    response = committer_lambda.process_event(sqs_event(*records), rt.committer())

    assert failures(response) == [r["messageId"] for r in records]


def test_bad_input_is_rejected_or_dead_lettered_and_acknowledged(rt: Runtime) -> None:
    t1, t2 = create_table(rt, "t1"), create_table(rt, "t2")
    compaction = CommitRequest.new(
        t1,
        ReplaceFileReferences((ReplaceFileReferencesJob("job", "root", ("x",), ref(data_key(t1, "out"))),)),
    )
    records = [
        sqs_record("not json", t1),
        sqs_record(compaction),
        sqs_record(add(t2, "b")),
        sqs_record(add("missing-table", "c")),
    ]

    response = committer_lambda.handler(sqs_event(*records), LambdaContext())

    assert response == {"batchItemFailures": []}
    assert files_of(rt, t2) == {data_key(t2, "b")}
    rejected = rt.statuses.get(compaction.table_id, compaction.request_id)
    assert rejected is not None and rejected.outcome is CommitOutcome.REJECTED
    assert "file not found: 'x'" in (rejected.reason or "")
    assert isinstance(rt.dead_letters, InMemoryCommitQueue)
    reasons = [dict(m.attributes)[REASON_ATTRIBUTE] for m in rt.dead_letters.messages]
    assert len(reasons) == 2
    assert "not valid JSON" in reasons[0] and "table not found: 'missing-table'" in reasons[1]


def test_a_redelivered_batch_is_applied_once(rt: Runtime) -> None:
    table = create_table(rt, "t")
    records = [sqs_record(add(table, "a")), sqs_record(add(table, "b"))]
    committer_lambda.handler(sqs_event(*records), LambdaContext())

    use_runtime(Runtime(rt.tables, rt.log, rt.snapshots, rt.blobs, rt.dead_letters))  # a new container
    response = committer_lambda.handler(sqs_event(*(redelivered(r) for r in records)), LambdaContext())

    assert response == {"batchItemFailures": []}
    assert rt.log.latest_number(table) == 2


# --- on moto: the real adapters, the real queues --------------------------------------------------------


@pytest.fixture
def aws_rt() -> Iterator[tuple[Runtime, SqsCommitQueue, SqsCommitQueue]]:
    with mock_aws():
        names = ResourceNames.for_instance("lambdatest")
        dynamodb, s3, sqs = (make_client(s, region="eu-west-2") for s in ("dynamodb", "s3", "sqs"))
        provision(names, dynamodb, s3)
        queue_url, dlq_url = provision_queues(names, sqs)
        runtime = Runtime.for_aws(names)
        use_runtime(runtime)
        yield runtime, SqsCommitQueue(sqs, queue_url), SqsCommitQueue(sqs, dlq_url)
        use_runtime(None)


def test_on_moto_requests_sent_to_the_queue_are_committed_and_bad_ones_dead_lettered(
    aws_rt: tuple[Runtime, SqsCommitQueue, SqsCommitQueue],
) -> None:
    rt, queue, dlq = aws_rt
    t1, t2 = create_table(rt, "t1"), create_table(rt, "t2")
    sender = CommitSender(queue, rt.statuses, rt.blobs, max_inline_bytes=2_000)
    big = AddFiles(tuple(ref(data_key(t2, f"big-{i}")) for i in range(100)))  # its body goes to the bucket
    ids = [
        sender.send(t1, AddFiles((ref(data_key(t1, "a")),))),
        sender.send(t2, big),
        sender.send(t1, AddFiles((ref(data_key(t1, "a")),))),
    ]
    queue.send(
        [__import__("statestore.store.ports", fromlist=["QueueMessage"]).QueueMessage("{oops", t2, "junk-1")]
    )

    event = queue.receive_event()
    assert len(event["Records"]) == 4
    response = committer_lambda.handler(event, LambdaContext())
    queue.delete([r["receiptHandle"] for r in event["Records"] if r["messageId"] not in failures(response)])

    assert response == {"batchItemFailures": []}
    assert files_of(rt, t1) == {data_key(t1, "a")}
    assert len(files_of(rt, t2)) == 100
    outcomes = [sender.wait(t, i, timeout=1) for t, i in zip((t1, t2, t1), ids, strict=True)]
    assert [o.outcome for o in outcomes if o] == [
        CommitOutcome.COMMITTED,
        CommitOutcome.COMMITTED,
        CommitOutcome.REJECTED,
    ]
    [letter] = dlq.receive_event()["Records"]
    assert letter["body"] == "{oops"
    assert letter["attributes"]["MessageGroupId"] == t2
    assert "not valid JSON" in letter["messageAttributes"][REASON_ATTRIBUTE]["stringValue"]
    assert queue.receive_event()["Records"] == []
    json.dumps(response)  # what Lambda returns must be JSON
