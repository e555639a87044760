"""What the committer is given (queue messages) and what it hands back (one result per message, counts)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


@dataclass(frozen=True)
class ReceivedMessage:
    """A commit request message as the queue delivered it."""

    message_id: str
    body: str
    group_id: str
    receive_count: int = 1  # > 1 means it was delivered before and not acknowledged
    sent_timestamp: int = 0  # epoch ms, when the queue accepted it
    sender_id: str | None = None  # the IAM principal that sent it (SQS's SenderId); None where unknown

    @classmethod
    def from_sqs_record(cls, record: Mapping[str, Any]) -> ReceivedMessage:
        """From one record of an SQS Lambda event (``Records[i]``)."""
        attributes = record.get("attributes") or {}
        return cls(
            message_id=str(record["messageId"]),
            body=str(record.get("body", "")),
            group_id=str(attributes.get("MessageGroupId", "")),
            receive_count=int(attributes.get("ApproximateReceiveCount", 1)),
            sent_timestamp=int(attributes.get("SentTimestamp", 0)),
            sender_id=str(attributes["SenderId"]) if attributes.get("SenderId") else None,
        )


class MessageOutcome(StrEnum):
    COMMITTED = "committed"
    REJECTED = "rejected"
    DUPLICATE = "duplicate"  # processed before; nothing changed now
    DEAD_LETTERED = "dead_lettered"
    RETRY = "retry"  # not processed; leave the message on the queue


@dataclass(frozen=True)
class MessageResult:
    """What the committer did with one message. Only ``RETRY`` messages must stay on the queue."""

    message_id: str
    outcome: MessageOutcome
    request_id: str | None = None
    table_id: str | None = None
    transaction_number: int | None = None
    reason: str | None = None

    @property
    def retry(self) -> bool:
        return self.outcome is MessageOutcome.RETRY


@dataclass
class CommitterStats:
    """Counts of store operations, for metrics and the benchmark (each write is one DynamoDB call)."""

    messages: int = 0
    committed: int = 0
    rejected: int = 0
    duplicates: int = 0
    dead_letters: int = 0
    retries: int = 0
    log_appends: int = 0  # successful conditional puts
    log_append_conflicts: int = 0  # puts that lost the race for the number
    status_writes: int = 0  # calls to record statuses
    status_items: int = 0
    status_reads: int = 0

    @property
    def log_writes(self) -> int:
        return self.log_appends + self.log_append_conflicts

    def count(self, outcome: MessageOutcome) -> None:
        """Count one message's result."""
        if outcome is MessageOutcome.COMMITTED:
            self.committed += 1
        elif outcome is MessageOutcome.REJECTED:
            self.rejected += 1
        elif outcome is MessageOutcome.DUPLICATE:
            self.duplicates += 1
        elif outcome is MessageOutcome.DEAD_LETTERED:
            self.dead_letters += 1
        else:
            self.retries += 1
