"""The dead-letter queues' port (the commit queue's and the upkeep work queues'), as an operator sees them;
its in-memory twin is ``memory.InMemoryDeadLetterQueue``."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A message on the dead-letter queue, as received (and left there).

    ``reason`` is the committer's (the message attribute it sends a dead letter with), None when the commit
    queue's redrive policy moved the message (received too often without being acknowledged).
    ``receive_count`` counts receives from the dead-letter queue itself (listing it receives too).
    """

    message_id: str
    body: str
    group_id: str
    sent_time: int  # epoch ms, when the message reached the dead-letter queue
    reason: str | None = None
    source_message_id: str | None = None
    receive_count: int = 1


class DeadLetterQueue(ABC):
    """A dead-letter queue (the commit queue's, or the upkeep work queues'), for an operator: look at the
    messages, remove chosen ones."""

    @abstractmethod
    def peek(self) -> list[DeadLetter]:
        """Every message on the queue, oldest first; they stay on it. Raises StoreUnavailableError."""

    @abstractmethod
    def delete(self, message_ids: Collection[str]) -> list[str]:
        """Delete the messages with these ids; returns the ids deleted (an id not on the queue is not).
        Raises StoreUnavailableError."""
