"""Which principals may commit to a table through the shared queue.

The commit queue is shared by every table, and SQS cannot condition a send on the message's group, so
IAM alone lets whoever may send to the queue send a request for any table. A table that lists its allowed
senders (``TableInfo.allowed_senders``) closes that gap here: the committer compares each message's sender,
as SQS reports it (the ``SenderId`` system attribute: an IAM user's id, or a role's id and the session's
name), with the list, and refuses a request from anyone else before it is read.

A refused request is dead-lettered with the reason and records **no** status: its request id is the
sender's claim, not a fact, and a status under it would stand for the table's real request with that id
(one whose id another sender can predict) and make it a duplicate. The table's own sender never sees the
refusal as its outcome; an operator sees it in the dead-letter queue.
"""

from __future__ import annotations

from collections.abc import Sequence

from statestore.services.committer.decisions import DeadLettered
from statestore.store.tables import TableInfo


def sender_allowed(sender_id: str | None, allowed: Sequence[str]) -> bool:
    """Whether a message from ``sender_id`` may commit where ``allowed`` lists the senders (empty: anyone).
    An entry is a user's or role's id, matching any session of the role, or ``<role id>:<session>``. A
    message whose sender is unknown is refused by a table that lists any."""
    if not allowed:
        return True
    if not sender_id:
        return False
    principal = sender_id.split(":", 1)[0]
    return sender_id in allowed or principal in allowed


def refusal(table: TableInfo, sender_id: str | None, request_id: str, time: int) -> DeadLettered:
    """The decision for a request from a sender the table does not allow: dead-lettered, no status."""
    who = f"sender {sender_id!r}" if sender_id else "a sender SQS did not name"
    reason = (
        f"commit request {request_id!r} for table {table.table_name!r} ({table.table_id}) refused: {who} is "
        "not among the table's allowed senders. Send it as one of them, or add the sender with "
        "`statestore tables senders`"
    )
    return DeadLettered(reason, status=None, time=time)
