"""The committer: turns a batch of commit request messages into log entries, exactly once each.

The batch is sorted once (:mod:`.sorting`) into malformed messages, duplicates of requests already
decided, and fresh requests. Then for each table (message group), in message order (:mod:`.batch`):

1. Skip requests already processed: a request id in a log entry this committer followed or wrote, or, for a
   redelivered message with no status (a committer died between its log write and recording the outcome),
   a request id in the log entries written since the message was sent.
2. Commit the rest as one group through the engine (:mod:`.group`,
   :meth:`TransactionLogStateStore.commit_group`): each is validated against the state as changed by the
   ones before it, starting from the state the entry is appended after (optimistically the warm state,
   with no log read). A request that fails validation is
   *rejected* with the reason; the valid ones become **one** ``TransactionBatch`` log entry. A lost race for
   the number redoes the whole group against the caught-up state.

Each message ends with one decision value (:mod:`.decisions`), from which its result, the status to record
and its dead letter are derived. Then every status is recorded in one write, malformed messages (and those
for unknown tables) go to the dead-letter queue with their reason, and the results say which messages to
retry. Work is ordered log write, statuses, acknowledgement, so a crash at any point leaves the request to
be recognised when its message comes back. A table that fails (throttling, an unavailable store) only sends
its own messages back to be retried.

Library code: ports only, no AWS imports. The Lambda handler (``lambdas/committer.py``) is a thin shell.
"""

from statestore.committer.batch import MAX_REASON_CHARS, REASON_ATTRIBUTE, SENT_TIME_SKEW_MS, BatchCommitter
from statestore.committer.messages import CommitterStats, MessageOutcome, MessageResult, ReceivedMessage
from statestore.ports import SOURCE_MESSAGE_ID_ATTRIBUTE

__all__ = [
    "MAX_REASON_CHARS",
    "REASON_ATTRIBUTE",
    "SENT_TIME_SKEW_MS",
    "SOURCE_MESSAGE_ID_ATTRIBUTE",
    "BatchCommitter",
    "CommitterStats",
    "MessageOutcome",
    "MessageResult",
    "ReceivedMessage",
]
