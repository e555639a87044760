"""Dead letters for an operator: one behaviour suite over the in-memory twin and SQS FIFO on moto.

The committer sends its dead letters to the queue under test, so what is listed is what it really sends.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from moto import mock_aws

from statestore.adapters.aws.clients import make_client
from statestore.adapters.aws.sqs_dead_letters import SqsDeadLetterQueue
from statestore.adapters.aws.sqs_queue import SqsCommitQueue, provision_queues, provision_upkeep_queues
from statestore.engine.requests import encode_request
from statestore.errors import DeadLetterNotFoundError, UnredrivableDeadLetterError
from statestore.services import dead_letters
from statestore.services.upkeep import UpkeepKind, UpkeepWork
from statestore.store.dead_letter_ports import DeadLetterQueue
from statestore.store.memory import InMemoryCommitQueue, InMemoryDeadLetterQueue
from statestore.store.ports import CommitQueue, QueueMessage
from tests.builders import data_key
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
    body = redriven.body.replace("placeholder", table_id)  # the table id, and its data files' keys
    [result] = h.committer().process([message(body, group_id=table_id)])

    assert result.outcome.value == "committed"
    assert data_key(table_id, "a.parquet") in h.state(table_id).files_by_name


# --- the upkeep dead-letter queue --------------------------------------------------------------------


@dataclass
class UpkeepQueues:
    sender: CommitQueue  # what the work queues' redrive policy moves failed work through
    dead_letters: DeadLetterQueue
    work: dict[UpkeepKind, CommitQueue]
    received: Callable[[UpkeepKind], list[QueueMessage]]  # what reached a work queue


@pytest.fixture(params=["memory", "moto"])
def upkeep_queues(request: pytest.FixtureRequest) -> Iterator[UpkeepQueues]:
    if request.param == "memory":
        dlq = InMemoryDeadLetterQueue()
        in_memory = {kind: InMemoryCommitQueue() for kind in UpkeepKind}
        yield UpkeepQueues(dlq, dlq, dict(in_memory), lambda kind: in_memory[kind].take(100))
        return
    with mock_aws():
        sqs = make_client("sqs", region="us-east-1")
        urls = provision_upkeep_queues(unique_resources("upkeep"), sqs)
        work = {kind: SqsCommitQueue(sqs, urls[kind.value]) for kind in UpkeepKind}

        def received(kind: UpkeepKind) -> list[QueueMessage]:
            out = []
            while records := work[kind].receive_event()["Records"]:
                out += [
                    QueueMessage(
                        r["body"],
                        r["attributes"]["MessageGroupId"],
                        r["attributes"]["MessageDeduplicationId"],
                    )
                    for r in records
                ]
                work[kind].delete([r["receiptHandle"] for r in records])
            return out

        yield UpkeepQueues(
            SqsCommitQueue(sqs, urls["dead_letters"]),
            SqsDeadLetterQueue(sqs, urls["dead_letters"], wait_seconds=0),
            dict(work),
            received,
        )


PERIOD_MS = 15 * 60_000
PLANNED_AT = 1_700_000_000_000


def dead_letter_upkeep(queues: UpkeepQueues) -> None:
    """As the work queues' redrive policy moves them: a snapshot of t-snap and a cleanup of t-clean that
    failed three times, and a body no plan writes."""
    queues.sender.send(
        [
            UpkeepWork(UpkeepKind.SNAPSHOT, "t-snap", PLANNED_AT, PERIOD_MS).to_message(),
            UpkeepWork(UpkeepKind.CLEANUP, "t-clean", PLANNED_AT, PERIOD_MS).to_message(),
            QueueMessage("not json {", "t-junk", "junk-1"),
        ]
    )


def test_an_upkeep_dead_letter_names_its_table_its_kind_of_work_and_why(upkeep_queues: UpkeepQueues) -> None:
    dead_letter_upkeep(upkeep_queues)

    described = {
        d.letter.group_id: d
        for d in (
            dead_letters.describe_upkeep(x, max_receive_count=3) for x in upkeep_queues.dead_letters.peek()
        )
    }

    snap, clean, junk = described["t-snap"], described["t-clean"], described["t-junk"]
    assert snap.work is not None and (snap.work.table_id, snap.work.kind) == ("t-snap", UpkeepKind.SNAPSHOT)
    assert clean.work is not None and (clean.work.table_id, clean.work.kind) == (
        "t-clean",
        UpkeepKind.CLEANUP,
    )
    assert "snapshot failed 3 time(s)" in snap.reason and "snapshot-errors" in snap.reason
    assert "cleanup failed 3 time(s)" in clean.reason
    assert (
        junk.work is None
        and junk.body_problem is not None
        and "not an upkeep work message" in junk.body_problem
    )


def test_upkeep_redrive_queues_fresh_work_on_the_queue_of_its_kind_then_removes_the_letter(
    upkeep_queues: UpkeepQueues,
) -> None:
    dead_letter_upkeep(upkeep_queues)
    by_group = {x.group_id: x for x in upkeep_queues.dead_letters.peek()}
    chosen = [by_group["t-snap"].message_id, by_group["t-clean"].message_id]
    now = PLANNED_AT + 10 * PERIOD_MS  # long after the plan: the old message would be dropped as superseded

    redriven = dead_letters.redrive_upkeep(
        upkeep_queues.dead_letters, upkeep_queues.work.__getitem__, chosen, now=lambda: now
    )

    assert sorted(d.letter.group_id for d in redriven) == ["t-clean", "t-snap"]
    [snapshot] = upkeep_queues.received(UpkeepKind.SNAPSHOT)
    [cleanup] = upkeep_queues.received(UpkeepKind.CLEANUP)
    for sent, table_id, kind in (
        (snapshot, "t-snap", UpkeepKind.SNAPSHOT),
        (cleanup, "t-clean", UpkeepKind.CLEANUP),
    ):
        work = UpkeepWork.from_body(sent.body)
        assert work == UpkeepWork(kind, table_id, now, PERIOD_MS) and sent.group_id == table_id
        assert not work.superseded(first_received_at=now + 1)
        old = UpkeepWork(kind, table_id, PLANNED_AT, PERIOD_MS).to_message()
        assert sent.deduplication_id != old.deduplication_id
    assert snapshot.deduplication_id != cleanup.deduplication_id
    assert [x.group_id for x in upkeep_queues.dead_letters.peek()] == ["t-junk"]


def test_upkeep_redrive_of_a_body_that_is_not_work_redrives_nothing_and_says_to_purge(
    upkeep_queues: UpkeepQueues,
) -> None:
    dead_letter_upkeep(upkeep_queues)

    with pytest.raises(UnredrivableDeadLetterError, match="not an upkeep work message") as raised:
        dead_letters.redrive_upkeep(upkeep_queues.dead_letters, upkeep_queues.work.__getitem__)

    junk = next(x for x in upkeep_queues.dead_letters.peek() if x.group_id == "t-junk")
    assert list(raised.value.problems) == [junk.message_id] and "purge" in str(raised.value)
    assert [upkeep_queues.received(kind) for kind in UpkeepKind] == [[], []]
    assert len(upkeep_queues.dead_letters.peek()) == 3
    assert len(dead_letters.purge(upkeep_queues.dead_letters, [junk.message_id])) == 1
    assert len(upkeep_queues.dead_letters.peek()) == 2
