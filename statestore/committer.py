"""The committer: turns a batch of commit request messages into log entries, exactly once each.

For each table (message group) in a batch, in message order:

1. Skip requests already processed: a final status in the status store, a request id in a log entry this
   committer followed or wrote, or, for a redelivered message with no status (a committer died between its
   log write and recording the outcome), a request id in the log entries written since the message was sent.
2. Commit the rest as one group through the engine (:meth:`TransactionLogStateStore.commit_group`): each is
   validated against the state as changed by the ones before it, starting from the state the entry is
   appended after (optimistically the warm state, with no log read). A request that fails validation is
   *rejected* with the reason; the valid ones become **one** ``TransactionBatch``
   log entry. A lost race for the number redoes the whole group against the caught-up state.

Then record every outcome in one status write, send malformed messages (and those for unknown tables) to the
dead-letter queue with their reason, and report which messages to retry. Work is ordered log write, statuses,
acknowledgement, so a crash at any point leaves the request to be recognised when its message comes back.
A table that fails (throttling, an unavailable store) only sends its own messages back to be retried.

Library code: ports only, no AWS imports. The Lambda handler (``lambdas/committer.py``) is a thin shell.
"""

from __future__ import annotations

import logging
import random
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from statestore import layout, resources
from statestore.catalog import TableIndex, TableInfo
from statestore.codec.transaction_json import decode_entry
from statestore.commit_requests import RequestEnvelope, parse_request
from statestore.committer_stats import BatchStats, BatchStatsBuilder, TableSize
from statestore.engine import GroupMember, RetryPolicy, TransactionLogStateStore, now_millis
from statestore.errors import BlobNotFoundError, CodecError, StateStoreError, TableNotFoundError
from statestore.ports import (
    DEAD_LETTER_REASON_ATTRIBUTE,
    SOURCE_MESSAGE_ID_ATTRIBUTE,
    BlobStore,
    CommitOutcome,
    CommitQueue,
    CommitStatus,
    CommitStatusStore,
    LogEntry,
    QueueMessage,
    TransactionLogStore,
)
from statestore.snapshots import SnapshotStore
from statestore.transactions import Transaction, request_ids_of

logger = logging.getLogger(__name__)

# A log entry's update time comes from the committer's clock, a message's sent time from the queue's: look
# back this much further than the sent time when searching the log for a redelivered request.
SENT_TIME_SKEW_MS = 5 * 60 * 1000
# Message attributes of a dead letter (defined beside the ports, which read them back).
REASON_ATTRIBUTE = DEAD_LETTER_REASON_ATTRIBUTE
MAX_REASON_CHARS = resources.MAX_DEAD_LETTER_REASON_CHARS
_LOG_SCAN_CHUNK = 32


@dataclass(frozen=True)
class ReceivedMessage:
    """A commit request message as the queue delivered it."""

    message_id: str
    body: str
    group_id: str
    receive_count: int = 1  # > 1 means it was delivered before and not acknowledged
    sent_timestamp: int = 0  # epoch ms, when the queue accepted it

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
    log_scans: int = 0  # searches of the log for a redelivered request

    @property
    def log_writes(self) -> int:
        return self.log_appends + self.log_append_conflicts


class _FollowedRequests:
    """Request ids of the newest log entries of a table this committer followed or wrote, oldest first.

    The entries held are consecutive, so any request written from ``first_number`` on is found here.
    """

    def __init__(self, max_entries: int) -> None:
        self._max_entries = max_entries
        self._entries: deque[tuple[int, int, tuple[str, ...]]] = deque()
        self._numbers: dict[str, int] = {}

    def add(self, number: int, update_time: int, request_ids: Iterable[str]) -> None:
        if self._entries:
            last = self._entries[-1][0]
            if number <= last:
                return
            if number != last + 1:  # entries were skipped (loaded from a newer snapshot): start again
                self._entries.clear()
                self._numbers.clear()
        ids = tuple(request_ids)
        self._entries.append((number, update_time, ids))
        for request_id in ids:
            self._numbers[request_id] = number
        while len(self._entries) > self._max_entries:
            old_number, _, old_ids = self._entries.popleft()
            for request_id in old_ids:
                if self._numbers.get(request_id) == old_number:
                    del self._numbers[request_id]

    def follow(self, entry: LogEntry, transaction: Transaction) -> None:
        self.add(entry.transaction_number, entry.update_time, request_ids_of(transaction))

    def remember(self, request_id: str, number: int) -> None:
        """Note a request found in an older entry (read back from the log, outside the held entries)."""
        self._numbers.setdefault(request_id, number)

    def number_of(self, request_id: str) -> int | None:
        return self._numbers.get(request_id)

    def covers_since(self, since: int) -> bool:
        """Whether every entry written at or after ``since`` (epoch ms) up to the newest held is held."""
        return bool(self._entries) and self._entries[0][1] < since

    def follow_to(self, transaction_number: int) -> None:
        """Forget the held entries unless they end at ``transaction_number`` (the state's).

        A state brought up to date from a newer snapshot skips entries without following them; held
        entries that stop before it would claim to cover entries they never saw.
        """
        if self._entries and self._entries[-1][0] != transaction_number:
            self._entries.clear()
            self._numbers.clear()

    @property
    def first_number(self) -> int | None:
        return self._entries[0][0] if self._entries else None


@dataclass
class _Table:
    info: TableInfo
    store: TransactionLogStateStore
    followed: _FollowedRequests
    checked_time: int


@dataclass
class _Pending:
    """One message on its way through :meth:`Committer.process`."""

    message: ReceivedMessage
    envelope: RequestEnvelope | None
    result: MessageResult | None = None
    status: CommitStatus | None = None  # to record
    dead_reason: str | None = None  # to send to the dead-letter queue with
    transaction: Transaction | None = None
    body: bytes | None = None  # the body stored aside, as read from the bucket
    copy_of: _Pending | None = None  # the same request earlier in this batch


@dataclass
class Committer:
    """Commits batches of commit request messages. Keep one per process: it keeps tables warm between calls.

    Not thread-safe; the queue gives each table's messages to one consumer at a time.
    """

    tables: TableIndex
    log: TransactionLogStore
    snapshots: SnapshotStore | None
    statuses: CommitStatusStore
    blobs: BlobStore
    dead_letters: CommitQueue
    retry_policy: RetryPolicy = field(default_factory=lambda: RetryPolicy(max_attempts=8))
    clock: Callable[[], int] = now_millis
    sleep: Callable[[float], None] = time.sleep
    rng: random.Random = field(default_factory=random.Random)
    sent_time_skew_ms: int = SENT_TIME_SKEW_MS
    # How long a table's record is trusted before it is read again (a deleted table stops being committed to).
    table_info_ttl_ms: int = 60_000
    remembered_entries: int = 10_000
    # A redelivered request is looked for in at most this many log entries before those followed.
    max_log_scan_entries: int = 10_000
    stats: CommitterStats = field(default_factory=CommitterStats)
    # Seconds from an arbitrary origin, to time cold table loads.
    timer: Callable[[], float] = time.perf_counter
    # What the latest call of :meth:`process` did (for metrics).
    last_batch: BatchStats = field(default_factory=BatchStats, init=False)
    _batch: BatchStatsBuilder = field(default_factory=BatchStatsBuilder, init=False, repr=False)
    _tables: dict[str, _Table] = field(default_factory=dict, init=False, repr=False)

    # --- the batch ------------------------------------------------------------------------------

    def process(self, messages: Sequence[ReceivedMessage]) -> list[MessageResult]:
        """Process a batch of messages; returns one result per message, in the same order.

        Never raises for a message's content or a store's failure: those become DEAD_LETTERED or RETRY
        results. Messages of one group are retried all together, keeping their order.
        """
        self._batch = BatchStatsBuilder(messages=len(messages))
        try:
            return self._process(messages)
        finally:
            self.last_batch = self._batch.build()

    def _process(self, messages: Sequence[ReceivedMessage]) -> list[MessageResult]:
        pending = [self._parse(m) for m in messages]
        self.stats.messages += len(pending)
        groups: dict[str, list[_Pending]] = {}
        for p in pending:
            groups.setdefault(p.message.group_id, []).append(p)

        request_ids = sorted({p.envelope.request_id for p in pending if p.envelope is not None})
        try:
            known = self.statuses.get_many(request_ids) if request_ids else {}
            self.stats.status_reads += 1 if request_ids else 0
        except StateStoreError as e:
            return self._finish_all_retry(pending, f"could not read commit statuses: {e}")
        final = {request_id: s for request_id, s in known.items() if s.is_final}
        for p in pending:
            # A request already decided is a duplicate wherever its copy turns up: in its table's group, in
            # another group, or naming a table that is gone. It changes nothing, not even its status.
            status = final.get(p.envelope.request_id) if p.envelope is not None else None
            if status is not None:
                self._settled(p, status, f"already {status.outcome.value}")

        for group_id, group in groups.items():
            try:
                self._process_group(group_id, group)
            except Exception as e:
                if not isinstance(e, StateStoreError):
                    # A bug, or a state we cannot trust: start the table afresh next time.
                    logger.exception("committing to table %r failed unexpectedly", group_id)
                    self._tables.pop(group_id, None)
                else:
                    logger.warning(
                        "committing to table %r failed; its messages will be retried: %s", group_id, e
                    )
                self._retry_group(group, f"could not commit to table {group_id!r}: {e}")

        decided = {s.request_id: s for p in pending if (s := p.status) is not None and s.is_final}
        for p in pending:
            # A stray copy (wrong group) of a request this very batch decided is a duplicate of it.
            stray = p.dead_reason is not None and (p.status is None or not p.status.is_final)
            if stray and p.envelope is not None and p.envelope.request_id in decided:
                self._settled(p, decided[p.envelope.request_id], "decided in this batch")
        self._record_statuses(pending, groups)
        self._send_dead_letters(pending, groups)
        results = []
        for p in pending:
            assert p.result is not None
            results.append(p.result)
            self._count(p.result.outcome)
        return results

    def _parse(self, message: ReceivedMessage) -> _Pending:
        try:
            envelope = parse_request(message.body)
        except CodecError as e:
            p = _Pending(message, None)
            self._dead(p, f"malformed commit request: {e}")
            return p
        p = _Pending(message, envelope)
        if envelope.table_id != message.group_id:
            self._dead(
                p,
                f"commit request {envelope.request_id!r} is for table {envelope.table_id!r} but was sent in "
                f"message group {message.group_id!r}; send it with MessageGroupId = table id",
            )
        return p

    # --- one table ------------------------------------------------------------------------------

    def _process_group(self, table_id: str, group: list[_Pending]) -> None:
        live = [p for p in group if p.result is None]
        if not live:
            return
        try:
            table = self._table(table_id)
        except TableNotFoundError as e:
            for p in live:
                self._dead(
                    p, f"{e}; create the table (or fix the request's table id), then redrive the message"
                )
            return
        self._load(table)

        first_of: dict[str, _Pending] = {}
        fresh: list[_Pending] = []
        for p in live:
            assert p.envelope is not None
            request_id = p.envelope.request_id
            if request_id in first_of:
                p.copy_of = first_of[request_id]
                continue
            first_of[request_id] = p
            fresh.append(p)

        redelivered = [p for p in fresh if p.message.receive_count > 1]
        if redelivered:
            since = min(p.message.sent_timestamp for p in redelivered) - self.sent_time_skew_ms
            undecided = self._find_in_log(
                table, since, {p.envelope.request_id for p in redelivered if p.envelope}
            )
            for p in redelivered:
                assert p.envelope is not None
                if p.envelope.request_id in undecided:
                    # Validating it again could apply it twice, or reject a committed request: it is
                    # dead-lettered for an operator to see, with a final "unknown" status so that no copy of
                    # it is ever applied.
                    reason = (
                        f"cannot tell whether commit request {p.envelope.request_id!r} was committed: it was "
                        "sent before the oldest log entry still kept. No copy of it will be applied; if its "
                        "changes are not in the table, send them again under a new request id"
                    )
                    self._dead(p, reason)
                    p.status = _status(p, CommitOutcome.UNKNOWN, self.clock(), None, reason)
            fresh = [p for p in fresh if p.result is None]

        self._commit(table, fresh)
        state = table.store.loaded_state
        if state is not None:
            self._batch.table_sizes[table_id] = TableSize.of(table_id, state)
        for p in live:
            if p.copy_of is not None:
                first = p.copy_of.result
                assert first is not None
                if first.retry or first.outcome is MessageOutcome.DEAD_LETTERED:
                    p.result = MessageResult(
                        p.message.message_id,
                        first.outcome,
                        first.request_id,
                        table_id,
                        first.transaction_number,
                        first.reason,
                    )
                    if first.outcome is MessageOutcome.DEAD_LETTERED:
                        p.dead_reason = first.reason
                else:
                    p.result = _duplicate(p, first.transaction_number, "sent twice in one batch")

    def _commit(self, table: _Table, fresh: list[_Pending]) -> None:
        """Commit ``fresh`` as one group through the engine, which validates it against the state it is
        appended after and redoes it on a lost race; requests found in the log are duplicates."""
        table_id = table.info.table_id
        members: list[GroupMember] = []
        by_request: dict[str, _Pending] = {}
        for p in fresh:
            assert p.envelope is not None
            request_id = p.envelope.request_id
            number = table.followed.number_of(request_id)
            if number is not None:
                self._found_in_log(p, number)
                continue
            try:
                if p.transaction is None:
                    if p.envelope.body_key is not None:
                        p.body = p.envelope.read_body(self.blobs)
                    p.transaction = p.envelope.transaction(self.blobs, p.body)
            except CodecError as e:
                self._dead(p, f"malformed commit request: {e}")
                continue
            members.append(GroupMember(request_id, p.transaction))
            by_request[request_id] = p
        if not members:
            return
        members = self._attach_stored_bodies(table_id, members, by_request)
        conflicts_before = table.store.retries
        try:
            outcome = table.store.commit_group(members, already_committed=table.followed.number_of)
        finally:
            conflicts = table.store.retries - conflicts_before
            self.stats.log_append_conflicts += conflicts
            self._batch.log_append_conflicts += conflicts
        # Copies the entry does not point at (members rejected, or found in the log). Had the commit raised,
        # the entry might point at any of them: they are left to the cleanup's sweep of the log prefix.
        unused = [
            m.stored_body[0] for m in members if m.stored_body is not None and m.key not in outcome.committed
        ]
        if unused:
            try:
                self.blobs.delete(unused)
            except StateStoreError as e:  # the outcome stands; the sweep collects them later
                logger.warning("could not delete %d unused request body copies: %s", len(unused), e)
        now = self.clock()
        for request_id, number in outcome.found.items():
            self._found_in_log(by_request[request_id], number)
        for request_id, error in outcome.rejected.items():
            p = by_request[request_id]
            p.result = MessageResult(
                p.message.message_id, MessageOutcome.REJECTED, request_id, table_id, None, str(error)
            )
            p.status = _status(p, CommitOutcome.REJECTED, now, None, str(error))
        if outcome.transaction_number is None or outcome.update_time is None:
            return
        number = outcome.transaction_number
        self.stats.log_appends += 1
        table.followed.add(number, outcome.update_time, outcome.committed)
        for request_id in outcome.committed:
            p = by_request[request_id]
            skipped = outcome.skipped_parts.get(request_id, ())
            note = "; ".join(f"skipped {part}: {error}" for part, error in skipped) or None
            p.result = MessageResult(
                p.message.message_id, MessageOutcome.COMMITTED, request_id, table_id, number, note
            )
            p.status = _status(p, CommitOutcome.COMMITTED, outcome.update_time, number, note)

    def _attach_stored_bodies(
        self, table_id: str, members: list[GroupMember], by_request: dict[str, _Pending]
    ) -> list[GroupMember]:
        """Members whose request body is in the bucket, pointing at a server-side copy of it under the log
        prefix: the log entry then names that copy instead of holding the transaction again, so a big
        request is uploaded once. The copy outlives the request body's lifecycle rule and is deleted with
        its entry."""
        out = []
        for member in members:
            p = by_request[member.key]
            assert p.envelope is not None
            if p.envelope.body_key is None or p.body is None:
                out.append(member)
                continue
            copy_key = layout.log_attachment_key(table_id, member.key)
            try:
                self.blobs.copy(p.envelope.body_key, copy_key)
            except BlobNotFoundError:
                out.append(member)  # gone since it was read (expired): the entry holds the transaction itself
                continue
            out.append(GroupMember(member.key, member.transaction, (copy_key, p.body)))
        return out

    def _found_in_log(self, p: _Pending, number: int) -> None:
        p.result = _duplicate(p, number, "found in the log")
        p.status = _status(p, CommitOutcome.COMMITTED, self.clock(), number)

    def _find_in_log(self, table: _Table, since: int, request_ids: set[str]) -> set[str]:
        """Make sure ``table.followed`` knows which of ``request_ids`` are in log entries written since
        ``since`` (epoch ms): catch up with the log, then read back over entries not followed yet.

        Returns the request ids it could not decide: not found, but the search could not reach back to
        ``since`` (cleanup deleted the entries, or the scan limit was reached).
        """
        self.stats.log_scans += 1
        state = table.store.state()
        table.followed.follow_to(state.transaction_number)
        missing = {r for r in request_ids if table.followed.number_of(r) is None}
        if not missing or table.followed.covers_since(since):
            return set()
        first = table.followed.first_number
        high = (first - 1) if first is not None else state.transaction_number
        lowest = max(1, high - self.max_log_scan_entries + 1)
        reached_since = high < 1  # nothing before the followed entries: the whole log was seen
        while high >= lowest and missing:
            low = max(lowest, high - _LOG_SCAN_CHUNK + 1)
            entries = list(self.log.read(table.info.table_id, low, high))
            for entry in entries:
                for request_id in request_ids_of(decode_entry(entry)):
                    if request_id in missing:
                        table.followed.remember(request_id, entry.transaction_number)
                        missing.discard(request_id)
            if entries and entries[0].update_time < since:
                reached_since = True
                break
            if not entries or entries[0].transaction_number != low:
                break  # cleanup deleted what came before
            if low == 1:
                reached_since = True
            high = low - 1
        return set() if reached_since else missing

    def _load(self, table: _Table) -> None:
        """Make sure the table's state is loaded, counting a warm (kept) or cold (read) load."""
        if table.store.loaded_state is not None:
            self._batch.warm_loads += 1
            return
        started = self.timer()
        table.store.cached_state()
        self._batch.cold_load_ms.append((self.timer() - started) * 1000)

    def _table(self, table_id: str) -> _Table:
        now = self.clock()
        table = self._tables.get(table_id)
        if table is not None and now - table.checked_time < self.table_info_ttl_ms:
            return table
        try:
            info = self.tables.get(table_id)
        except TableNotFoundError:
            self._tables.pop(table_id, None)
            raise
        if table is not None and table.info.schema == info.schema:
            table.info, table.checked_time = info, now
            return table
        followed = _FollowedRequests(self.remembered_entries)
        store = TransactionLogStateStore(
            table_id,
            info.schema,
            self.log,
            self.snapshots,
            retry=self.retry_policy,
            clock=self.clock,
            sleep=self.sleep,
            rng=self.rng,
            on_follow=followed.follow,
        )
        table = self._tables[table_id] = _Table(info, store, followed, now)
        return table

    # --- outcomes -------------------------------------------------------------------------------

    def _dead(self, p: _Pending, reason: str) -> None:
        request_id = p.envelope.request_id if p.envelope else None
        table_id = p.envelope.table_id if p.envelope else None
        p.dead_reason = reason
        p.result = MessageResult(
            p.message.message_id, MessageOutcome.DEAD_LETTERED, request_id, table_id, None, reason
        )
        if p.envelope is not None:
            p.status = _status(p, CommitOutcome.DEAD_LETTERED, self.clock(), None, reason)

    def _settled(self, p: _Pending, final: CommitStatus, why: str) -> None:
        """``p`` is a copy of a request whose final status is ``final``: a duplicate that changes nothing."""
        p.result = _duplicate(p, final.transaction_number, why)
        p.status = None
        p.dead_reason = None

    def _retry_group(self, group: list[_Pending], reason: str) -> None:
        for p in group:
            envelope = p.envelope
            p.result = MessageResult(
                p.message.message_id,
                MessageOutcome.RETRY,
                envelope.request_id if envelope else None,
                envelope.table_id if envelope else None,
                None,
                reason,
            )
            p.status = None
            p.dead_reason = None

    def _finish_all_retry(self, pending: list[_Pending], reason: str) -> list[MessageResult]:
        logger.warning("retrying a whole batch of %d message(s): %s", len(pending), reason)
        self._retry_group(pending, reason)
        self.stats.retries += len(pending)
        return [p.result for p in pending if p.result is not None]

    def _record_statuses(self, pending: list[_Pending], groups: dict[str, list[_Pending]]) -> None:
        statuses = [p.status for p in pending if p.status is not None]
        if not statuses:
            return
        try:
            kept = self.statuses.record(statuses)
        except StateStoreError as e:
            # The log holds the commits: when the messages come back they are recognised there.
            logger.warning(
                "could not record %d commit status(es); retrying their messages: %s", len(statuses), e
            )
            for group in groups.values():
                if any(p.status is not None for p in group):
                    self._retry_group(group, f"could not record commit statuses: {e}")
            return
        self.stats.status_writes += 1
        self.stats.status_items += len(statuses)
        for p in pending:
            if p.status is None or p.status.request_id not in kept:
                continue
            final = kept[p.status.request_id]
            if (final.outcome, final.transaction_number) == (p.status.outcome, p.status.transaction_number):
                continue  # the same outcome, recorded before (e.g. by a committer that died before acking)
            if p.status.outcome is CommitOutcome.COMMITTED:
                # Only concurrent processing of one request, which the queue's visibility timeout rules out,
                # can get here: the log holds it, its recorded status says otherwise.
                logger.error(
                    "request %r was committed at %s but its status was already final: %s",
                    p.status.request_id, p.status.transaction_number, final,
                )  # fmt: skip
            self._settled(p, final, f"already {final.outcome.value}")

    def _send_dead_letters(self, pending: list[_Pending], groups: dict[str, list[_Pending]]) -> None:
        dead = [p for p in pending if p.dead_reason is not None]
        if not dead:
            return
        letters = [
            QueueMessage(
                body=p.message.body,
                group_id=p.message.group_id or "ungrouped",
                deduplication_id=p.message.message_id,
                attributes=(
                    (REASON_ATTRIBUTE, p.dead_reason[:MAX_REASON_CHARS]),
                    (SOURCE_MESSAGE_ID_ATTRIBUTE, p.message.message_id),
                ),
            )
            for p in dead
            if p.dead_reason is not None
        ]
        for p in dead:
            logger.warning("dead-lettering message %s: %s", p.message.message_id, p.dead_reason)
        try:
            self.dead_letters.send(letters)
        except StateStoreError as e:
            failed_groups = {p.message.group_id for p in dead}
            for group_id in failed_groups:
                self._retry_group(groups[group_id], f"could not send to the dead-letter queue: {e}")

    def _count(self, outcome: MessageOutcome) -> None:
        s = self.stats
        if outcome is MessageOutcome.COMMITTED:
            s.committed += 1
        elif outcome is MessageOutcome.REJECTED:
            s.rejected += 1
        elif outcome is MessageOutcome.DUPLICATE:
            s.duplicates += 1
        elif outcome is MessageOutcome.DEAD_LETTERED:
            s.dead_letters += 1
        else:
            s.retries += 1

    def forget(self, table_id: str) -> None:
        """Drop a table's warm state (the next batch for it loads it again)."""
        self._tables.pop(table_id, None)


def _duplicate(p: _Pending, transaction_number: int | None, why: str) -> MessageResult:
    assert p.envelope is not None
    return MessageResult(
        p.message.message_id,
        MessageOutcome.DUPLICATE,
        p.envelope.request_id,
        p.envelope.table_id,
        transaction_number,
        f"duplicate request: {why}",
    )


def _status(
    p: _Pending,
    outcome: CommitOutcome,
    time_ms: int,
    transaction_number: int | None,
    reason: str | None = None,
) -> CommitStatus:
    assert p.envelope is not None
    return CommitStatus(
        p.envelope.request_id, p.envelope.table_id, outcome, time_ms, transaction_number, reason
    )
