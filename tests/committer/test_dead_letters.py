"""Dead letters for an operator: one behaviour suite over the in-memory twin and SQS FIFO on moto.

The committer sends its dead letters to the queue under test, so what is listed is what it really sends.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from moto import mock_aws

from statestore import dead_letters
from statestore.aws.clients import make_client
from statestore.aws.sqs_dead_letters import SqsDeadLetterQueue
from statestore.aws.sqs_queue import SqsCommitQueue, provision_queues
from statestore.commit_requests import encode_request
from statestore.errors import DeadLetterNotFoundError
from statestore.memory import InMemoryCommitQueue, InMemoryDeadLetterQueue
from statestore.ports import CommitQueue, DeadLetterQueue, QueueMessage
from tests.committer.harness import Harness, add_files, message
from tests.fixtures.aws_servers import unique_resources


@dataclass
class Queues:
    sender: CommitQueue  # what the committer and the redrive policy send dead letters through
    dead_letters: DeadLetterQueue
    commit_queue: CommitQueue
    committed_queue_messages: Callable[[], list[QueueMessage]]  # what reached the commit queue


@pytest.fixture(params=["memory", "moto"])
def queues(request: pytest.FixtureRequest) -> Iterator[Queues]:
    if request.param == "memory":
        dlq, in_memory = InMemoryDeadLetterQueue(), InMemoryCommitQueue()
        yield Queues(dlq, dlq, in_memory, lambda: in_memory.take(100))
        return
    with mock_aws():
        sqs = make_client("sqs", region="us-east-1")
        queue_url, dlq_url = provision_queues(unique_resources("dlq"), sqs)
        commit_queue = SqsCommitQueue(sqs, queue_url)

        def received() -> list[QueueMessage]:
            out = []
            while records := commit_queue.receive_event()["Records"]:
                out += [
                    QueueMessage(
                        r["body"],
                        r["attributes"]["MessageGroupId"],
                        r["attributes"]["MessageDeduplicationId"],
                    )
                    for r in records
                ]
                commit_queue.delete([r["receiptHandle"] for r in records])
            return out

        yield Queues(
            SqsCommitQueue(sqs, dlq_url),
            SqsDeadLetterQueue(sqs, dlq_url, wait_seconds=0),
            commit_queue,
            received,
        )


def dead_letter_three(queues: Queues) -> tuple[str, str]:
    """The committer dead-letters a request for a missing table and a non-JSON body; the redrive policy
    moves a third message (no reason). Returns the missing table's id and the third message's body."""
    h = Harness(dead_letters=queues.sender)
    request = add_files("no-such-table", "a.parquet", request_id="req-1")
    results = h.committer().process([message(request), message("not json {", group_id="orders")])
    assert [r.outcome.value for r in results] == ["dead_lettered", "dead_lettered"]
    stuck = add_files("t-stuck", "b.parquet", request_id="req-stuck")
    queues.sender.send([QueueMessage(encode_request(stuck), "t-stuck", "moved-by-policy")])
    return "no-such-table", encode_request(stuck)


def test_every_dead_letter_is_listed_with_why_it_is_there_a_non_json_one_too(queues: Queues) -> None:
    _, stuck_body = dead_letter_three(queues)

    listed = queues.dead_letters.peek()
    described = sorted(
        (dead_letters.describe(letter, max_receive_count=5) for letter in listed),
        key=lambda d: d.letter.group_id,
    )

    # Order is kept within a group (a table), not across groups.
    assert [(d.letter.group_id, d.request_id) for d in described] == [
        ("no-such-table", "req-1"),
        ("orders", None),
        ("t-stuck", "req-stuck"),
    ]
    missing, junk, stuck = described
    assert "table" in missing.reason and "no-such-table" in missing.reason and "redrive" in missing.reason
    assert missing.transaction_type == "AddFiles" and missing.letter.source_message_id is not None
    assert junk.letter.body == "not json {" and junk.reason.startswith("malformed commit request")
    assert junk.body_problem is not None and "not valid JSON" in junk.body_problem
    assert stuck.letter.reason is None and "redrive policy" in stuck.reason and "5 time(s)" in stuck.reason
    assert stuck.letter.body == stuck_body
    # Looking changes nothing: every message is still there.
    assert sorted(x.message_id for x in listed) == sorted(x.message_id for x in queues.dead_letters.peek())


def test_redrive_sends_back_in_the_original_group_with_a_new_deduplication_id_then_removes(
    queues: Queues,
) -> None:
    dead_letter_three(queues)
    by_group = {x.group_id: x for x in queues.dead_letters.peek()}
    chosen = [by_group["no-such-table"].message_id, by_group["t-stuck"].message_id]

    redriven = dead_letters.redrive(queues.dead_letters, queues.commit_queue, chosen)

    sent = queues.committed_queue_messages()
    assert sorted((m.body, m.group_id) for m in sent) == sorted((x.body, x.group_id) for x in redriven)
    assert sorted(x.group_id for x in redriven) == ["no-such-table", "t-stuck"]
    assert len({m.deduplication_id for m in sent}) == 2
    assert not {m.deduplication_id for m in sent} & {
        "moved-by-policy",
        *(x.source_message_id or "" for x in redriven),
    }
    assert [x.group_id for x in queues.dead_letters.peek()] == ["orders"]


def test_redriving_an_id_not_on_the_queue_redrives_nothing_and_names_it(queues: Queues) -> None:
    dead_letter_three(queues)
    first = queues.dead_letters.peek()[0].message_id

    with pytest.raises(DeadLetterNotFoundError, match="'nope'"):
        dead_letters.redrive(queues.dead_letters, queues.commit_queue, [first, "nope"])

    assert queues.committed_queue_messages() == []
    assert len(queues.dead_letters.peek()) == 3


def test_purge_deletes_the_chosen_messages_or_all(queues: Queues) -> None:
    dead_letter_three(queues)
    junk = next(x for x in queues.dead_letters.peek() if x.group_id == "orders")

    assert [x.message_id for x in dead_letters.purge(queues.dead_letters, [junk.message_id])] == [
        junk.message_id
    ]
    assert sorted(x.group_id for x in queues.dead_letters.peek()) == ["no-such-table", "t-stuck"]
    assert len(dead_letters.purge(queues.dead_letters)) == 2
    assert queues.dead_letters.peek() == []
    assert queues.committed_queue_messages() == []


def test_a_redriven_request_for_a_table_created_since_is_committed() -> None:
    queues = InMemoryDeadLetterQueue()
    h = Harness(dead_letters=queues)
    request = add_files("placeholder", "a.parquet", request_id="req-late")
    h.committer().process([message(request)])  # no such table yet
    commit_queue = InMemoryCommitQueue()
    dead_letters.redrive(queues, commit_queue)

    table_id = h.create_table("late")
    [redriven] = commit_queue.take()
    body = redriven.body.replace("placeholder", table_id)
    [result] = h.committer().process([message(body, group_id=table_id)])

    assert result.outcome.value == "committed"
    assert "a.parquet" in h.state(table_id).files_by_name
