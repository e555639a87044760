"""Dead letters for an operator: what is on the dead-letter queue and why, redriving and purging messages.

A commit request reaches the dead-letter queue in one of two ways:

- the **committer** sends it there at once, with its reason in the ``reason`` message attribute, when it
  cannot process it however often it tries: a malformed message, a request for a table that does not exist,
  a request sent in another table's message group, or a redelivered request it can no longer tell was
  committed or not (its status is then final "unknown": redriving it changes nothing);
- the commit queue's **redrive policy** moves a message the committer received ``max_receive_count`` times
  without acknowledging it (it kept failing on it, or timed out): no reason attribute; the committer's logs
  say what went wrong.

Redriving sends a message back to the commit queue in its original message group (its table) with a new
deduplication id, so the queue takes it even within five minutes of the first send; the committer then
recognises a request it already decided by its request id. A message is only deleted from the
dead-letter queue once it is on the commit queue: a failure in between leaves it on both, which is safe.

Library code: ports only, no AWS imports.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from statestore.commit_requests import parse_request
from statestore.errors import CodecError, DeadLetterNotFoundError
from statestore.ports import CommitQueue, DeadLetter, DeadLetterQueue, QueueMessage

MOVED_BY_REDRIVE_POLICY = (
    "moved by the commit queue's redrive policy: received {count} time(s) or more without being acknowledged "
    "(the committer kept failing or timing out on it; its logs say why)"
)


@dataclass(frozen=True)
class DescribedDeadLetter:
    """A dead letter with why it is there, and what it asks for when its body is a commit request."""

    letter: DeadLetter
    reason: str
    request_id: str | None = None
    table_id: str | None = None
    transaction_type: str | None = None
    body_problem: str | None = None  # why the body is not a commit request, if it is not


def describe(letter: DeadLetter, max_receive_count: int | None = None) -> DescribedDeadLetter:
    """``letter`` with its reason: the committer's, else the redrive policy's (``max_receive_count`` is the
    commit queue's, if known). A body that is not a commit request (not even JSON) is described too."""
    reason = letter.reason or MOVED_BY_REDRIVE_POLICY.format(
        count=max_receive_count if max_receive_count is not None else "several"
    )
    try:
        envelope = parse_request(letter.body)
    except CodecError as e:
        return DescribedDeadLetter(letter, reason, body_problem=str(e))
    return DescribedDeadLetter(
        letter, reason, envelope.request_id, envelope.table_id, envelope.transaction_type
    )


def find(queue: DeadLetterQueue, message_id: str) -> DeadLetter:
    """The dead letter with ``message_id``; raises DeadLetterNotFoundError."""
    for letter in queue.peek():
        if letter.message_id == message_id:
            return letter
    raise DeadLetterNotFoundError([message_id])


def _chosen(queue: DeadLetterQueue, message_ids: Collection[str] | None) -> list[DeadLetter]:
    letters = queue.peek()
    if message_ids is None:
        return letters
    wanted = set(message_ids)
    missing = sorted(wanted - {letter.message_id for letter in letters})
    if missing:
        raise DeadLetterNotFoundError(missing)
    return [letter for letter in letters if letter.message_id in wanted]


def redrive(
    dead_letters: DeadLetterQueue,
    commit_queue: CommitQueue,
    message_ids: Collection[str] | None = None,
    *,
    new_deduplication_id: Callable[[], str] = lambda: f"redrive-{uuid.uuid4().hex}",
) -> list[DeadLetter]:
    """Send the messages ``message_ids`` (all if None) back to the commit queue, oldest first, each in its
    own message group with a new deduplication id, then delete them from the dead-letter queue.

    Returns the messages redriven. Raises DeadLetterNotFoundError (redriving nothing) if an id is not on the
    queue; StoreUnavailableError if a queue fails (a message sent but not deleted is then on both queues,
    which is safe: the committer recognises a request it already decided).
    """
    letters = _chosen(dead_letters, message_ids)
    if not letters:
        return []
    commit_queue.send(
        [QueueMessage(letter.body, letter.group_id, new_deduplication_id()) for letter in letters]
    )
    dead_letters.delete([letter.message_id for letter in letters])
    return letters


def purge(dead_letters: DeadLetterQueue, message_ids: Collection[str] | None = None) -> list[DeadLetter]:
    """Delete the messages ``message_ids`` (all if None) from the dead-letter queue; returns them.

    Raises DeadLetterNotFoundError (deleting nothing) if an id is not on the queue.
    """
    letters = _chosen(dead_letters, message_ids)
    deleted: set[str] = set(dead_letters.delete([letter.message_id for letter in letters]))
    return [letter for letter in letters if letter.message_id in deleted]


def group_sizes(letters: Sequence[DeadLetter]) -> dict[str, int]:
    """How many of ``letters`` each message group holds."""
    sizes: dict[str, int] = {}
    for letter in letters:
        sizes[letter.group_id] = sizes.get(letter.group_id, 0) + 1
    return sizes
