"""The commit status store and the commit queue: one behaviour suite, in memory and on moto."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from moto import mock_aws

from statestore.adapters.aws.clients import make_client
from statestore.adapters.aws.commit_status import DynamoDBCommitStatusStore
from statestore.adapters.aws.provision import provision
from statestore.adapters.aws.sqs_queue import SqsCommitQueue, provision_queues
from statestore.instance import ResourceNames
from statestore.store.memory import InMemoryCommitQueue, InMemoryCommitStatusStore
from statestore.store.ports import CommitOutcome, CommitQueue, CommitStatus, CommitStatusStore, QueueMessage
from tests.fixtures.aws_servers import *  # noqa: F403  (session fixtures: dynamodb_local)
from tests.fixtures.aws_servers import unique_resources


@dataclass
class CommitPorts:
    statuses: CommitStatusStore
    queue: CommitQueue

    def sent(self) -> list[QueueMessage]:
        if isinstance(self.queue, InMemoryCommitQueue):
            return self.queue.take(100)
        assert isinstance(self.queue, SqsCommitQueue)
        out = []
        while records := self.queue.receive_event()["Records"]:
            for r in records:
                attributes = tuple((k, v["stringValue"]) for k, v in r["messageAttributes"].items())
                out.append(
                    QueueMessage(
                        r["body"],
                        r["attributes"]["MessageGroupId"],
                        r["attributes"]["MessageDeduplicationId"],
                        attributes,
                    )
                )
            self.queue.delete([r["receiptHandle"] for r in records])
        return out


@pytest.fixture(params=["memory", "moto", pytest.param("dynamodb_local", marks=pytest.mark.dynamodb_local)])
def ports(request: pytest.FixtureRequest) -> Iterator[CommitPorts]:
    if request.param == "memory":
        yield CommitPorts(InMemoryCommitStatusStore(), InMemoryCommitQueue())
        return
    if request.param == "dynamodb_local":
        # Conditional transactions are where DynamoDB's own behaviour decides; the queue stays on moto.
        endpoint = request.getfixturevalue("dynamodb_local")
        names = unique_resources("status")
        dynamodb = make_client("dynamodb", endpoint_url=endpoint, region="eu-west-2")
        with mock_aws():
            s3, sqs = (make_client(s, region="eu-west-2") for s in ("s3", "sqs"))
            provision(names, dynamodb, s3)
            queue_url, _ = provision_queues(names, sqs)
            yield CommitPorts(
                DynamoDBCommitStatusStore(dynamodb, names.commit_status_table), SqsCommitQueue(sqs, queue_url)
            )
        return
    with mock_aws():
        names = ResourceNames.for_instance("ports")
        dynamodb, s3, sqs = (make_client(s, region="eu-west-2") for s in ("dynamodb", "s3", "sqs"))
        provision(names, dynamodb, s3)
        queue_url, _ = provision_queues(names, sqs)
        yield CommitPorts(
            DynamoDBCommitStatusStore(dynamodb, names.commit_status_table), SqsCommitQueue(sqs, queue_url)
        )


TABLE = "table-1"


def status(
    request_id: str, outcome: CommitOutcome = CommitOutcome.COMMITTED, number: int | None = 3
) -> CommitStatus:
    reason = None if outcome is CommitOutcome.COMMITTED else f"why {request_id}"
    return CommitStatus(request_id, TABLE, outcome, 1_900_000_000_000, number, reason)


def test_recorded_statuses_are_read_back_one_and_many(ports: CommitPorts) -> None:
    statuses = [status(f"r{i}") for i in range(60)] + [status("bad", CommitOutcome.REJECTED, None)]

    ports.statuses.record(statuses)

    assert ports.statuses.get(TABLE, "r7") == statuses[7]
    assert ports.statuses.get(TABLE, "bad") == statuses[-1]
    assert ports.statuses.get(TABLE, "nope") is None
    wanted = [f"r{i}" for i in range(0, 60, 2)] * 2 + ["bad", "nope"] + [f"x{i}" for i in range(150)]
    assert ports.statuses.get_many((TABLE, r) for r in wanted) == {
        s.key: s for s in statuses[0:60:2] + [statuses[-1]]
    }
    assert ports.statuses.get_many([]) == {}


def test_request_ids_are_scoped_to_their_table(ports: CommitPorts) -> None:
    alpha = CommitStatus("job-7", "alpha", CommitOutcome.COMMITTED, 1_900_000_000_000, 2)
    ports.statuses.record([alpha])

    assert ports.statuses.get("beta", "job-7") is None  # beta's request of the same id is another request
    beta = CommitStatus("job-7", "beta", CommitOutcome.REJECTED, 1_900_000_000_001, None, "why")
    assert ports.statuses.record([beta]) == {}  # not "already final": alpha's status is not beta's
    assert ports.statuses.get("alpha", "job-7") == alpha
    assert ports.statuses.get("beta", "job-7") == beta
    assert ports.statuses.get_many([("alpha", "job-7"), ("beta", "job-7")]) == {
        alpha.key: alpha,
        beta.key: beta,
    }


def test_a_final_status_replaces_a_dead_lettered_one(ports: CommitPorts) -> None:
    ports.statuses.record([status("r", CommitOutcome.DEAD_LETTERED, None)])

    kept = ports.statuses.record([status("r", CommitOutcome.COMMITTED, 9)])

    assert kept == {}
    assert ports.statuses.get(TABLE, "r") == status("r", CommitOutcome.COMMITTED, 9)


def test_a_final_status_never_changes(ports: CommitPorts) -> None:
    committed = status("r", CommitOutcome.COMMITTED, 9)
    ports.statuses.record([committed, status("other", CommitOutcome.COMMITTED, 9)])

    kept = ports.statuses.record(
        [
            status("r", CommitOutcome.DEAD_LETTERED, None),  # a stray copy of the request
            status("fresh", CommitOutcome.REJECTED, None),
            status("other", CommitOutcome.REJECTED, None),
        ]
    )

    assert kept == {(TABLE, "r"): committed, (TABLE, "other"): status("other", CommitOutcome.COMMITTED, 9)}
    assert ports.statuses.get(TABLE, "r") == committed
    # the others in the same write are recorded all the same
    assert ports.statuses.get(TABLE, "fresh") == status("fresh", CommitOutcome.REJECTED, None)
    assert ports.statuses.get(TABLE, "other") == status("other", CommitOutcome.COMMITTED, 9)


def test_within_one_write_a_final_status_wins_over_a_dead_lettered_copy(ports: CommitPorts) -> None:
    kept = ports.statuses.record(
        [status("r", CommitOutcome.DEAD_LETTERED, None), status("r", CommitOutcome.COMMITTED, 4)]
    )

    assert kept == {}
    assert ports.statuses.get(TABLE, "r") == status("r", CommitOutcome.COMMITTED, 4)


def test_more_statuses_than_one_transaction_holds_are_all_conditional(ports: CommitPorts) -> None:
    ports.statuses.record([status("r150", CommitOutcome.REJECTED, None)])

    kept = ports.statuses.record([status(f"r{i}") for i in range(230)])

    assert kept == {(TABLE, "r150"): status("r150", CommitOutcome.REJECTED, None)}
    assert ports.statuses.get(TABLE, "r229") == status("r229")
    assert ports.statuses.get(TABLE, "r150") == status("r150", CommitOutcome.REJECTED, None)


def test_messages_are_sent_in_order_with_group_deduplication_id_and_attributes(ports: CommitPorts) -> None:
    messages = [
        QueueMessage(json.dumps({"n": i}), f"table-{i % 2}", f"request-{i}", (("reason", f"because {i}"),))
        for i in range(23)
    ]

    ports.queue.send(messages)
    ports.queue.send(messages[:3])  # resent within the deduplication window: dropped

    received = ports.sent()
    for group in ("table-0", "table-1"):
        assert [m for m in received if m.group_id == group] == [m for m in messages if m.group_id == group]
