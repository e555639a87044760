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

The **upkeep dead-letter queue** holds the snapshot and cleanup work (:mod:`statestore.services.upkeep`) of a
table that failed as often as its work queue allows; the work queue's redrive policy moved it there, so it has
no reason attribute (the function's logs say why). Redriving it does not send the old message back: a message
first delivered more than one period after its plan is dropped as superseded, which a dead letter always
is. It queues *fresh* work of the same kind for the same table, planned now, on the work queue of that kind,
in the table's message group with a new deduplication id (the plan's id names the period, and the queue
would drop a second message with it). If the plan has queued the table in the same period, the table is
worked on twice back to back, which is harmless: a snapshot is checked again, cleanup is idempotent.

Library code: ports only, no AWS imports.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from statestore.engine.requests import parse_request
from statestore.errors import CodecError, DeadLetterNotFoundError, UnredrivableDeadLetterError
from statestore.model.clock import now_millis
from statestore.store.dead_letter_ports import DeadLetter, DeadLetterQueue
from statestore.store.ports import CommitQueue, QueueMessage

if (
    TYPE_CHECKING
):  # statestore.services.upkeep loads the engine and pyarrow: imported when an upkeep letter is read
    from statestore.services.upkeep import UpkeepKind, UpkeepWork

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


# --- the upkeep dead-letter queue ----------------------------------------------------------------------

MOVED_FROM_WORK_QUEUE = (
    "moved by its work queue's redrive policy: the table's {kind} failed {count} time(s) "
    "(the {kind} function's logs and its {kind}-errors alarm say why)"
)


@dataclass(frozen=True)
class DescribedUpkeepLetter:
    """An upkeep dead letter with why it is there, and the table and kind of work its body names."""

    letter: DeadLetter
    reason: str
    work: UpkeepWork | None = None
    body_problem: str | None = None  # why the body is not upkeep work, if it is not


def describe_upkeep(letter: DeadLetter, max_receive_count: int | None = None) -> DescribedUpkeepLetter:
    """``letter`` from the upkeep dead-letter queue with its reason (an attribute if one was sent, else the
    work queue's redrive policy; ``max_receive_count`` is the work queues', if known). A body that is not
    upkeep work is described too."""
    from statestore.services.upkeep import MalformedWorkError, UpkeepWork

    try:
        work: UpkeepWork | None = UpkeepWork.from_body(letter.body)
        problem = None
    except MalformedWorkError as e:
        work, problem = None, str(e)
    reason = letter.reason or MOVED_FROM_WORK_QUEUE.format(
        kind=work.kind.value if work else "work",
        count=max_receive_count if max_receive_count is not None else "several",
    )
    return DescribedUpkeepLetter(letter, reason, work, problem)


def redrive_upkeep(
    dead_letters: DeadLetterQueue,
    work_queue: Callable[[UpkeepKind], CommitQueue],
    message_ids: Collection[str] | None = None,
    *,
    now: Callable[[], int] = now_millis,
    new_deduplication_id: Callable[[], str] = lambda: f"redrive-{uuid.uuid4().hex}",
) -> list[DescribedUpkeepLetter]:
    """Queue fresh work for the table of each upkeep dead letter ``message_ids`` (all if None), on the work
    queue of its kind (``work_queue(kind)``), then delete the letters; see the module's docstring for why the
    work is fresh rather than the old message.

    Returns the letters redriven. Raises DeadLetterNotFoundError if an id is not on the queue, and
    UnredrivableDeadLetterError if a chosen letter's body is not upkeep work, redriving nothing either way;
    StoreUnavailableError if a queue fails (work sent but its letter not deleted is then queued twice, which
    is harmless).
    """
    described = [describe_upkeep(letter) for letter in _chosen(dead_letters, message_ids)]
    problems = {d.letter.message_id: d.body_problem for d in described if d.body_problem is not None}
    if problems:
        raise UnredrivableDeadLetterError(problems)
    from statestore.services.upkeep import UpkeepWork

    planned_at = now()
    by_kind: dict[UpkeepKind, list[QueueMessage]] = {}
    for work in (d.work for d in described if d.work is not None):  # every one, checked above
        fresh = UpkeepWork(work.kind, work.table_id, planned_at, work.period_ms).to_message()
        by_kind.setdefault(work.kind, []).append(
            QueueMessage(fresh.body, fresh.group_id, new_deduplication_id())
        )
    for kind, messages in by_kind.items():
        work_queue(kind).send(messages)
    dead_letters.delete([d.letter.message_id for d in described])
    return described


def group_sizes(letters: Sequence[DeadLetter]) -> dict[str, int]:
    """How many of ``letters`` each message group holds."""
    sizes: dict[str, int] = {}
    for letter in letters:
        sizes[letter.group_id] = sizes.get(letter.group_id, 0) + 1
    return sizes
