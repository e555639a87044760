"""Sorting a batch and deriving each message's result, status and dead letter from its one decision."""

from __future__ import annotations

import pytest

from statestore.engine.requests import encode_request, parse_request
from statestore.services.committer import REASON_ATTRIBUTE, MessageOutcome, ReceivedMessage
from statestore.services.committer.decisions import (
    Committed,
    DeadLettered,
    Decision,
    Duplicate,
    FoundCommitted,
    ParsedMessage,
    Rejected,
    Retry,
    already_decided,
    dead_letter_reason,
    decision_for_copy,
    is_stray,
    result_of,
    status_of,
)
from statestore.services.committer.sorting import parse_message, sort_batch, split_copies
from statestore.store.memory import InMemoryCommitQueue
from statestore.store.ports import CommitOutcome, CommitStatus
from tests.builders import data_keys
from tests.committer.harness import Harness, add_files, message, outcomes, redelivered

TABLE = "t-1"


def parsed(request_id: str = "r1", group_id: str = TABLE) -> ParsedMessage:
    body = encode_request(add_files(TABLE, "a", request_id=request_id))
    return ParsedMessage(ReceivedMessage(f"m-{request_id}", body, group_id), parse_request(body))


def unparsable() -> ParsedMessage:
    return ParsedMessage(ReceivedMessage("m-bad", "{not json", TABLE), None)


def final(request_id: str, outcome: CommitOutcome, number: int | None = None) -> CommitStatus:
    return CommitStatus(request_id, TABLE, outcome, 5, number, None if number else "why")


# --- sorting the batch ----------------------------------------------------------------------------------


def test_a_body_that_is_not_a_commit_request_is_dead_lettered_with_no_status() -> None:
    one, decision = parse_message(ReceivedMessage("m", "{not json", TABLE), lambda: 7)

    assert one.envelope is None
    assert isinstance(decision, DeadLettered)
    assert decision.reason.startswith("malformed commit request:")
    assert status_of(one, decision) is None


def test_a_request_in_another_tables_message_group_is_dead_lettered_with_a_redrivable_status() -> None:
    body = encode_request(add_files(TABLE, "a", request_id="r1"))

    one, decision = parse_message(ReceivedMessage("m", body, "other-table"), lambda: 7)

    assert isinstance(decision, DeadLettered)
    assert "was sent in message group 'other-table'" in decision.reason
    assert status_of(one, decision) == CommitStatus(
        "r1", TABLE, CommitOutcome.DEAD_LETTERED, 7, None, decision.reason
    )


def test_a_well_formed_request_in_its_tables_group_is_not_decided_when_parsed() -> None:
    body = encode_request(add_files(TABLE, "a", request_id="r1"))

    one, decision = parse_message(ReceivedMessage("m", body, TABLE), lambda: 7)

    assert decision is None and one.envelope is not None and one.envelope.request_id == "r1"


@pytest.mark.parametrize("outcome", [CommitOutcome.COMMITTED, CommitOutcome.REJECTED, CommitOutcome.UNKNOWN])
@pytest.mark.parametrize("malformed", [False, True], ids=["in its group", "in the wrong group"])
def test_a_request_with_a_final_status_is_a_duplicate_wherever_it_turns_up(
    outcome: CommitOutcome, malformed: bool
) -> None:
    number = 4 if outcome is CommitOutcome.COMMITTED else None
    messages = [parsed("r1", "other-table" if malformed else TABLE)]
    wrong_group = {0: DeadLettered("wrong group", time=1)} if malformed else {}

    batch = sort_batch(messages, wrong_group, {(TABLE, "r1"): final("r1", outcome, number)})

    assert batch.decided == {0: Duplicate(number, f"already {outcome.value}")}
    assert batch.fresh == {}
    result = result_of(messages[0], batch.decided[0])
    assert (result.outcome, result.transaction_number) == (MessageOutcome.DUPLICATE, number)
    assert status_of(messages[0], batch.decided[0]) is None
    assert dead_letter_reason(batch.decided[0]) is None


def test_sorting_keeps_malformed_messages_decided_and_fresh_ones_by_table_in_message_order() -> None:
    messages = [parsed("r1"), unparsable(), parsed("r2", "t-2"), parsed("r3"), parsed("r4")]
    malformed = {1: DeadLettered("malformed", None), 2: DeadLettered("wrong group", time=1)}

    batch = sort_batch(messages, malformed, {(TABLE, "r4"): final("r4", CommitOutcome.COMMITTED, 3)})

    assert batch.decided == {**malformed, 4: Duplicate(3, "already committed")}
    assert {group: [r.position for r in fresh] for group, fresh in batch.fresh.items()} == {TABLE: [0, 3]}
    assert batch.groups == {TABLE: [0, 1, 3, 4], "t-2": [2]}


def test_a_request_sent_twice_is_split_into_its_first_copy_and_the_later_ones() -> None:
    messages = [parsed("r1"), parsed("r2"), parsed("r1"), parsed("r1")]
    fresh = sort_batch(messages, {}, {}).fresh[TABLE]

    firsts, copies = split_copies(fresh)

    assert [r.position for r in firsts] == [0, 1]
    assert [(copy.position, first.position) for copy, first in copies] == [(2, 0), (3, 0)]


# --- from one decision to result, status and dead letter ---------------------------------------------------

# decision -> (result outcome, result transaction number, result reason, status to record, dead-lettered)
DERIVED: list[tuple[Decision, MessageOutcome, int | None, str | None, tuple | None, bool]] = [
    (
        Committed(7, 100, None, status_written=True),  # the log wrote its status with the entry
        MessageOutcome.COMMITTED,
        7,
        None,
        None,
        False,
    ),
    (
        Committed(7, 100, None),  # committed to a file store: its status is recorded after
        MessageOutcome.COMMITTED,
        7,
        None,
        (CommitOutcome.COMMITTED, 100, 7, None),
        False,
    ),
    (
        Committed(7, 100, "skipped j: gone"),
        MessageOutcome.COMMITTED,
        7,
        "skipped j: gone",
        (CommitOutcome.COMMITTED, 100, 7, "skipped j: gone"),
        False,
    ),
    (
        Rejected("bad", 50),
        MessageOutcome.REJECTED,
        None,
        "bad",
        (CommitOutcome.REJECTED, 50, None, "bad"),
        False,
    ),
    (
        FoundCommitted(3, 60),
        MessageOutcome.DUPLICATE,
        3,
        "duplicate request: found in the file store",
        (CommitOutcome.COMMITTED, 60, 3, None),
        False,
    ),
    (Duplicate(3, "sent twice"), MessageOutcome.DUPLICATE, 3, "duplicate request: sent twice", None, False),
    (
        Duplicate(None, "already rejected"),
        MessageOutcome.DUPLICATE,
        None,
        "duplicate request: already rejected",
        None,
        False,
    ),
    (
        DeadLettered("no table", CommitOutcome.DEAD_LETTERED, 70),
        MessageOutcome.DEAD_LETTERED,
        None,
        "no table",
        (CommitOutcome.DEAD_LETTERED, 70, None, "no table"),
        True,
    ),
    (DeadLettered("copy", None), MessageOutcome.DEAD_LETTERED, None, "copy", None, True),
    (Retry("throttled"), MessageOutcome.RETRY, None, "throttled", None, False),
]


@pytest.mark.parametrize(
    ("decision", "outcome", "number", "reason", "status", "dead"), DERIVED, ids=lambda v: type(v).__name__
)
def test_a_message_result_status_and_dead_letter_follow_from_its_decision(
    decision: Decision,
    outcome: MessageOutcome,
    number: int | None,
    reason: str | None,
    status: tuple | None,
    dead: bool,
) -> None:
    one = parsed("r1")

    result = result_of(one, decision)
    recorded = status_of(one, decision)

    assert (result.message_id, result.request_id, result.table_id) == ("m-r1", "r1", TABLE)
    assert (result.outcome, result.transaction_number, result.reason) == (outcome, number, reason)
    assert result.retry is (outcome is MessageOutcome.RETRY)
    if status is None:
        assert recorded is None
    else:
        assert recorded is not None
        assert (recorded.request_id, recorded.table_id) == ("r1", TABLE)
        assert (
            recorded.outcome,
            recorded.recorded_time,
            recorded.transaction_number,
            recorded.reason,
        ) == status
    assert dead_letter_reason(decision) == (reason if dead else None)


@pytest.mark.parametrize("decision", [d for d, *_ in DERIVED], ids=lambda d: type(d).__name__)
def test_a_message_that_is_not_a_commit_request_names_no_request_and_records_no_status(
    decision: Decision,
) -> None:
    result = result_of(unparsable(), decision)

    assert (result.request_id, result.table_id) == (None, None)
    assert status_of(unparsable(), decision) is None


def test_a_successful_commit_is_never_reported_as_a_rejection() -> None:
    for decision, outcome, *_ in DERIVED:
        if isinstance(decision, Committed | FoundCommitted):
            assert outcome is not MessageOutcome.REJECTED
            status = status_of(parsed(), decision)
            written = isinstance(decision, Committed) and decision.status_written
            assert (status is None) if written else (status is not None)
            assert status is None or status.outcome is CommitOutcome.COMMITTED


@pytest.mark.parametrize(
    ("first", "expected"),
    [
        (Committed(7, 100), Duplicate(7, "sent twice in one batch")),
        (Rejected("bad", 50), Duplicate(None, "sent twice in one batch")),
        (FoundCommitted(3, 60), Duplicate(3, "sent twice in one batch")),
        (Duplicate(2, "already committed"), Duplicate(2, "sent twice in one batch")),
        (DeadLettered("body gone", CommitOutcome.DEAD_LETTERED, 70), DeadLettered("body gone", None)),
        (Retry("throttled"), Retry("throttled")),
    ],
    ids=lambda v: type(v).__name__,
)
def test_a_later_copy_follows_its_first_copy_without_recording_a_status(
    first: Decision, expected: Decision
) -> None:
    copy = decision_for_copy(first)

    assert copy == expected
    assert status_of(parsed(), copy) is None


def test_only_a_dead_letter_is_a_stray_copy() -> None:
    assert is_stray(DeadLettered("wrong group", CommitOutcome.DEAD_LETTERED, 1))
    assert is_stray(DeadLettered("copy", None))
    for decision in (Committed(1, 1), Rejected("r", 1), FoundCommitted(1, 1), Duplicate(1, "x"), Retry("x")):
        assert not is_stray(decision)


def test_a_duplicate_of_a_final_status_carries_its_transaction_number() -> None:
    assert already_decided(final("r1", CommitOutcome.COMMITTED, 9)) == Duplicate(9, "already committed")
    assert already_decided(final("r1", CommitOutcome.REJECTED), "decided in this batch") == Duplicate(
        None, "decided in this batch"
    )


# --- every kind of message in one batch -------------------------------------------------------------------


def test_one_batch_of_every_kind_of_message_gives_each_its_own_result() -> None:
    h = Harness()
    t1, t2 = h.create_table("t1"), h.create_table("t2")
    earlier = add_files(t1, "e", request_id="earlier")
    h.committer().process([message(earlier)])
    accepted, rejected = add_files(t1, "a", request_id="ok"), add_files(t1, "e", request_id="bad")
    gone_table = add_files("no-such-table", "x", request_id="nowhere")
    messages = [
        message("{not json", group_id=t1),  # 0 malformed
        message(accepted),  # 1 fresh, accepted
        message(rejected),  # 2 fresh, rejected (file e exists)
        message(earlier),  # 3 duplicate: committed in an earlier batch
        message(accepted),  # 4 copy of 1 in this batch
        message(rejected),  # 5 copy of 2 in this batch
        message(accepted, group_id=t2),  # 6 stray copy of 1 in another table's group
        message(add_files(t1, "w", request_id="wrong"), group_id=t2),  # 7 wrong group, never decided
        message(gone_table),  # 8 table not found
        redelivered(message(add_files(t2, "b", request_id="again"))),  # 9 redelivered, never reached the log
    ]

    results = h.committer().process(messages)

    assert outcomes(results) == [
        "dead_lettered",
        "committed",
        "rejected",
        "duplicate",
        "duplicate",
        "duplicate",
        "duplicate",
        "dead_lettered",
        "dead_lettered",
        "committed",
    ]
    assert [r.transaction_number for r in results] == [None, 3, None, 2, 3, None, 3, None, None, 2]
    assert [r.reason for r in results][3:7] == [
        "duplicate request: already committed",
        "duplicate request: sent twice in one batch",
        "duplicate request: sent twice in one batch",
        "duplicate request: decided in this batch",
    ]
    assert isinstance(h.dead_letters, InMemoryCommitQueue)
    letters = [(m.body, dict(m.attributes)[REASON_ATTRIBUTE]) for m in h.dead_letters.messages]
    assert [body for body, _ in letters] == [messages[i].body for i in (0, 7, 8)]
    keys = {
        "ok": t1,
        "bad": t1,
        "earlier": t1,
        "wrong": t1,
        "nowhere": "no-such-table",
        "again": t2,
    }
    statuses = {r: h.statuses.get(table, r) for r, table in keys.items()}
    assert {r: (s.outcome, s.transaction_number) for r, s in statuses.items() if s is not None} == {
        "ok": (CommitOutcome.COMMITTED, 3),
        "bad": (CommitOutcome.REJECTED, None),
        "earlier": (CommitOutcome.COMMITTED, 2),
        "wrong": (CommitOutcome.DEAD_LETTERED, None),
        "nowhere": (CommitOutcome.DEAD_LETTERED, None),
        "again": (CommitOutcome.COMMITTED, 2),
    }
    assert sorted(h.state(t1).files_by_name) == data_keys(t1, "a", "e")
    assert sorted(h.state(t2).files_by_name) == data_keys(t2, "b")
    assert h.log_length(t1) == 3 and h.log_length(t2) == 2


def test_a_redelivered_request_whose_log_entry_cleanup_deleted_is_found_by_its_status() -> None:
    h = Harness()
    table, other = h.create_table("t"), h.create_table("t2")
    old = add_files(table, "x", request_id="old")
    fresh = add_files(table, "z", request_id="never-committed")
    assert outcomes(h.committer().process([message(old)])) == ["committed"]
    writer = h.store(table)
    writer.commit(add_files(table, "y").transaction)
    h.snapshots.write(table, writer.state(), h.clock.now)
    h.log.delete_up_to(table, 3)  # cleanup: the entry that held the request is gone
    h.clock.advance(10 * 24 * 3600_000)  # days later, to a cold committer
    messages = [
        redelivered(message(old)),
        redelivered(message(old)),  # its copy in this batch
        message(old, group_id=other),  # a stray copy in another group
        redelivered(message(fresh)),  # redelivered, never reached the log
    ]

    results = h.committer().process(messages)

    assert outcomes(results) == ["duplicate", "duplicate", "duplicate", "committed"]
    assert [r.transaction_number for r in results] == [2, 2, 2, 4]
    assert sorted(h.state(table).files_by_name) == data_keys(table, "x", "y", "z")
    assert isinstance(h.dead_letters, InMemoryCommitQueue)
    assert h.dead_letters.messages == []  # a copy of a decided request is a duplicate wherever it turns up
