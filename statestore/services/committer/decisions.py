"""What the committer decided for one message, as a value, and everything that follows from it.

Each message of a batch ends with exactly one :data:`Decision`. Its result (what the handler acknowledges,
retries or reports), the status to record for its request and the reason to dead-letter it with are all
derived from that one value by the functions here, so they cannot disagree.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from statestore.engine.requests import RequestEnvelope
from statestore.services.committer.messages import MessageOutcome, MessageResult, ReceivedMessage
from statestore.store.ports import CommitOutcome, CommitStatus


@dataclass(frozen=True, slots=True)
class Committed:
    """Applied now, in log entry ``transaction_number``; ``note`` names the parts that were skipped.

    ``status_written``: the log wrote its status with the entry (a request committed to a file store has
    its status recorded after).
    """

    transaction_number: int
    update_time: int
    note: str | None = None
    status_written: bool = False


@dataclass(frozen=True, slots=True)
class Rejected:
    """Failed validation against the state just before it: never applied."""

    reason: str
    time: int


@dataclass(frozen=True, slots=True)
class FoundCommitted:
    """Committed before to a file store, whose rows hold its request id (its message came back before its
    status was recorded)."""

    transaction_number: int
    time: int


@dataclass(frozen=True, slots=True)
class Duplicate:
    """A copy of a request already decided (or decided by another copy in this batch): changes nothing,
    records nothing."""

    transaction_number: int | None
    why: str


@dataclass(frozen=True, slots=True)
class DeadLettered:
    """Sent to the dead-letter queue with ``reason``.

    ``status`` is the outcome to record for its request: ``DEAD_LETTERED`` (it can be redriven), or None
    (nothing to record: not a commit request at all, or a copy of a request in this batch whose status the
    first copy records).
    """

    reason: str
    status: CommitOutcome | None = CommitOutcome.DEAD_LETTERED
    time: int = 0


@dataclass(frozen=True, slots=True)
class Retry:
    """Not processed: the message stays on the queue to be delivered again."""

    reason: str


Decision = Committed | Rejected | FoundCommitted | Duplicate | DeadLettered | Retry


class ParsedMessage(NamedTuple):
    """A message and its request envelope (None: the body is not a commit request)."""

    message: ReceivedMessage
    envelope: RequestEnvelope | None


def result_of(parsed: ParsedMessage, decision: Decision) -> MessageResult:
    """The message's result, as the handler reports it."""
    # isinstance rather than ``match``: this runs for every message, and class patterns cost twice as much.
    envelope = parsed.envelope
    request_id = envelope.request_id if envelope is not None else None
    table_id = envelope.table_id if envelope is not None else None
    message_id = parsed.message.message_id
    if isinstance(decision, Committed):
        return MessageResult(
            message_id,
            MessageOutcome.COMMITTED,
            request_id,
            table_id,
            decision.transaction_number,
            decision.note,
        )
    if isinstance(decision, Rejected):
        return MessageResult(message_id, MessageOutcome.REJECTED, request_id, table_id, None, decision.reason)
    if isinstance(decision, FoundCommitted | Duplicate):
        why = "found in the file store" if isinstance(decision, FoundCommitted) else decision.why
        number = decision.transaction_number
        return MessageResult(
            message_id, MessageOutcome.DUPLICATE, request_id, table_id, number, f"duplicate request: {why}"
        )
    if isinstance(decision, DeadLettered):
        reason = decision.reason
        return MessageResult(message_id, MessageOutcome.DEAD_LETTERED, request_id, table_id, None, reason)
    return MessageResult(message_id, MessageOutcome.RETRY, request_id, table_id, None, decision.reason)


def status_of(parsed: ParsedMessage, decision: Decision) -> CommitStatus | None:
    """The status to record for the message's request, or None to record nothing."""
    envelope = parsed.envelope
    if envelope is None:
        return None
    request_id, table_id = envelope.request_id, envelope.table_id
    if isinstance(decision, Committed):
        if decision.status_written:
            return None  # written with its log entry
        return CommitStatus(
            request_id,
            table_id,
            CommitOutcome.COMMITTED,
            decision.update_time,
            decision.transaction_number,
            decision.note,
        )
    if isinstance(decision, Rejected):
        return CommitStatus(
            request_id, table_id, CommitOutcome.REJECTED, decision.time, None, decision.reason
        )
    if isinstance(decision, FoundCommitted):
        number = decision.transaction_number
        return CommitStatus(request_id, table_id, CommitOutcome.COMMITTED, decision.time, number)
    if isinstance(decision, DeadLettered) and decision.status is not None:
        return CommitStatus(request_id, table_id, decision.status, decision.time, None, decision.reason)
    return None  # a duplicate, a copy, a retry: nothing to record


def dead_letter_reason(decision: Decision) -> str | None:
    """The reason to send the message to the dead-letter queue with, or None to not send it."""
    return decision.reason if isinstance(decision, DeadLettered) else None


def transaction_number_of(decision: Decision) -> int | None:
    """The log entry holding the request, where the decision knows it."""
    if isinstance(decision, Committed | FoundCommitted | Duplicate):
        return decision.transaction_number
    return None


def is_final(decision: Decision) -> bool:
    """Whether the decision gives its request a final status (committed or rejected)."""
    return isinstance(decision, Committed | Rejected | FoundCommitted)


def decision_for_copy(first: Decision) -> Decision:
    """What becomes of a second copy of a request in one table's messages, given the first copy's decision.

    A copy never changes anything itself: it follows a dead-lettered first copy to the dead-letter queue
    (without a status of its own), and is otherwise a duplicate of it.
    """
    if isinstance(first, DeadLettered):
        return DeadLettered(first.reason, None)
    if isinstance(first, Retry):
        return first
    return Duplicate(transaction_number_of(first), "sent twice in one batch")


def is_stray(decision: Decision) -> bool:
    """Dead-lettered without a final status: a copy of its request decided elsewhere makes it a duplicate."""
    return isinstance(decision, DeadLettered)


def already_decided(final: CommitStatus, why: str | None = None) -> Duplicate:
    """A duplicate of a request whose final status is ``final``."""
    return Duplicate(final.transaction_number, why or f"already {final.outcome.value}")


def rejected_without_append(decisions: Iterable[Decision]) -> bool:
    """Whether some requests were rejected and none committed (nothing appended after their state)."""
    kinds = {type(d) for d in decisions}
    return Rejected in kinds and Committed not in kinds
