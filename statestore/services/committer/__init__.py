"""The committer: turns a batch of commit request messages into log entries, exactly once each.

The batch is sorted once (:mod:`.sorting`) into malformed messages, duplicates of requests already
decided, and fresh requests. Then for each table (message group), in message order (:mod:`.batch`):

1. Commit its fresh requests (those with no final status, read for the whole batch in one strongly
   consistent read) as one group through the engine (:mod:`.group`,
   :meth:`TransactionLogStateStore.commit_group`): each is validated against the state as changed by the
   ones before it, starting from the state the entry is appended after (optimistically the warm state,
   with no log read). A request that fails validation is *rejected* with the reason; the valid ones become
   **one** ``TransactionBatch`` log entry, written in one DynamoDB transaction with each one's
   ``committed`` status. A lost race for the number redoes the whole group against the caught-up state.

Whether a request was applied is answered by that status alone, a durable fact written with the commit: a
redelivery, a resend or a redrive finds it, however late and whatever committer gets it.

Each message ends with one decision value (:mod:`.decisions`), from which its result, the status to record
and its dead letter are derived. Then the other statuses (rejected, dead-lettered) are recorded in one
write, malformed messages (and those for unknown tables) go to the dead-letter queue with their reason, and
the results say which messages to retry. A crash at any point leaves the request to be recognised by its
status when its message comes back. A table that fails (throttling, an unavailable store) only sends its
own messages back to be retried.

Library code: ports only, no AWS imports. The Lambda handler (``lambdas/committer.py``) is a thin shell.
"""

from statestore.services.committer.batch import MAX_REASON_CHARS, REASON_ATTRIBUTE, BatchCommitter
from statestore.services.committer.messages import (
    CommitterStats,
    MessageOutcome,
    MessageResult,
    ReceivedMessage,
)
from statestore.store.ports import SOURCE_MESSAGE_ID_ATTRIBUTE

__all__ = [
    "MAX_REASON_CHARS",
    "REASON_ATTRIBUTE",
    "SOURCE_MESSAGE_ID_ATTRIBUTE",
    "BatchCommitter",
    "CommitterStats",
    "MessageOutcome",
    "MessageResult",
    "ReceivedMessage",
]
