"""The committer's loop: a batch of messages in, one result per message out, each request applied once."""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial

from statestore import instance, sizing
from statestore.engine import overlap
from statestore.engine.log_store import RetryPolicy, TransactionLogStateStore
from statestore.engine.row_store import asks_for_leaf_index, open_state_store
from statestore.engine.snapshots import SnapshotStore
from statestore.errors import StateStoreError, TableBeingDeletedError, TableNotFoundError
from statestore.model.clock import now_millis
from statestore.services.committer.decisions import (
    DeadLettered,
    Decision,
    ParsedMessage,
    Retry,
    already_decided,
    decision_for_copy,
    rejected_without_append,
    result_of,
    status_of,
)
from statestore.services.committer.first_reads import TableReads, read_first
from statestore.services.committer.group import WarmTable, commit_fresh
from statestore.services.committer.messages import CommitterStats, MessageResult, ReceivedMessage
from statestore.services.committer.senders import refusal, sender_allowed
from statestore.services.committer.sorting import (
    FreshRequest,
    SortedBatch,
    parse_message,
    sort_batch,
    split_copies,
    strays_decided_here,
)
from statestore.services.committer.warm_tables import (
    demote,
    first_read_snapshot,
    snapshot_bytes,
    warm_table_bytes,
)
from statestore.services.committer_stats import BatchStats, BatchStatsBuilder, TableSize
from statestore.services.warm_cache import CacheCounts, HeapRelease, WarmCache
from statestore.store.ports import (
    DEAD_LETTER_REASON_ATTRIBUTE,
    SOURCE_MESSAGE_ID_ATTRIBUTE,
    BlobStore,
    CommitOutcome,
    CommitQueue,
    CommitStatus,
    CommitStatusStore,
    FileReferenceStore,
    QueueMessage,
    RequestKey,
    TableIndex,
    TransactionLogStore,
)

logger = logging.getLogger("statestore.committer")  # one logger for the whole committer, as before the split

# The warm budget of a committer given none: that of the stack's default committer (1,024 MB).
DEFAULT_WARM_BUDGET = sizing.warm_budget(1024)

# Message attributes of a dead letter (defined beside the ports, which read them back).
REASON_ATTRIBUTE = DEAD_LETTER_REASON_ATTRIBUTE
MAX_REASON_CHARS = instance.MAX_DEAD_LETTER_REASON_CHARS


@dataclass
class BatchCommitter:
    """Commits batches of commit request messages. Keep one per process: it keeps tables warm between calls.

    Not thread-safe; the queue gives each table's messages to one consumer at a time.

    Whether a request was applied is answered by one durable fact: its status, which the log writes in the
    same transaction as the entry that holds it (``log.request_statuses``, required). So a redelivery, a
    resend or a redrive is recognised by any committer, warm or cold, at any time within the status
    retention.

    ``file_store`` holds the files of tables whose record says they keep them as rows (postgres). Without
    one, such a table's messages are retried (not dead-lettered): the committer is misconfigured, the
    requests are fine, and they commit once it is given one; the queue's redrive policy dead-letters them
    if that never happens.

    Tables are kept warm within ``warm_budget`` of estimated state (:mod:`statestore.services.
    warm_cache`): the least recently used is evicted, and loaded again (snapshot + log) when next needed.
    Before a load, room is made for its peak (the budget's load factor times its state's estimate: measured
    at an earlier load, else counted in its snapshot's record).
    """

    tables: TableIndex
    log: TransactionLogStore
    snapshots: SnapshotStore | None
    blobs: BlobStore
    dead_letters: CommitQueue
    file_store: FileReferenceStore | None = None
    retry_policy: RetryPolicy = field(default_factory=lambda: RetryPolicy(max_attempts=8))
    clock: Callable[[], int] = now_millis
    sleep: Callable[[float], None] = time.sleep
    rng: random.Random = field(default_factory=random.Random)
    # How long a table's record is trusted before it is read again (a deleted table stops being committed to).
    table_info_ttl_ms: int = 60_000
    # The fewest references a table's latest snapshot counts for a group that only adds files to have the
    # table's guard read from that snapshot rather than its state loaded (see _guard_from_snapshot).
    guard_first_references: int = 100_000
    stats: CommitterStats = field(default_factory=CommitterStats)
    # Seconds from an arbitrary origin, to time cold table loads.
    timer: Callable[[], float] = time.perf_counter
    # What the latest call of :meth:`process` did (for metrics).
    last_batch: BatchStats = field(default_factory=BatchStats, init=False)
    _batch: BatchStatsBuilder = field(default_factory=BatchStatsBuilder, init=False, repr=False)
    # Estimated bytes of table state kept warm between batches, and a load's peak over the state it keeps
    # (see statestore.sizing.WarmBudget).
    warm_budget: sizing.WarmBudget = DEFAULT_WARM_BUDGET
    # Told the (estimated) bytes a load or an eviction freed, gives freed memory back to the system once
    # enough was (a no-op where it cannot); None: unknown, given back at once.
    release_heap: Callable[[int | None], object] = field(default_factory=HeapRelease)
    _tables: WarmCache[WarmTable] = field(init=False, repr=False)
    _first_reads: dict[str, TableReads] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.log.request_statuses is None:
            raise ValueError(
                "the committer needs a log that writes each request's status with its entry "
                "(build the log with its commit status store)"
            )
        self._tables = WarmCache(
            self.warm_budget.bytes,
            warm_table_bytes,
            load_factor=self.warm_budget.load_factor,
            demote=demote,
            release=self.release_heap,
            name="committer",
        )

    @property
    def statuses(self) -> CommitStatusStore:
        """Where requests' outcomes are (the log's status store)."""
        statuses = self.log.request_statuses
        assert statuses is not None  # checked when built
        return statuses

    # --- the batch ------------------------------------------------------------------------------

    def process(self, messages: Sequence[ReceivedMessage]) -> list[MessageResult]:
        """Process a batch of messages; returns one result per message, in the same order.

        Never raises for a message's content or a store's failure: those become DEAD_LETTERED or RETRY
        results. Messages of one group are retried all together, keeping their order.
        """
        self._batch = BatchStatsBuilder(messages=len(messages))
        before = self._tables.counts
        try:
            return self._process(messages)
        finally:
            self._first_reads = {}  # a batch's reads are for its own tables
            after = self._tables.counts
            self._batch.evictions = after.evictions - before.evictions
            self._batch.oversized = after.oversized - before.oversized
            self._batch.demotions = after.demotions - before.demotions
            self._batch.warm_tables = len(self._tables)
            self._batch.warm_bytes = self._tables.used_bytes
            self.last_batch = self._batch.build()

    @property
    def warm_counts(self) -> CacheCounts:
        """What the warm cache did since this committer was made (evictions, oversized tables dropped)."""
        return self._tables.counts

    @property
    def guarded_tables(self) -> set[str]:
        """The tables kept only as their guard (their state dropped), among :attr:`warm_tables`."""
        return {t for t, table in self._tables.items() if table.store.loaded_state is None and table.guard}

    @property
    def warm_tables(self) -> dict[str, int]:
        """The tables kept warm, least recently used first, with each one's estimated bytes."""
        return {table_id: warm_table_bytes(table) for table_id, table in self._tables.items()}

    def _process(self, messages: Sequence[ReceivedMessage]) -> list[MessageResult]:
        parsed: list[ParsedMessage] = []
        malformed: dict[int, Decision] = {}
        for index, message in enumerate(messages):
            one, decision = parse_message(message, self.clock)
            parsed.append(one)
            if decision is not None:
                malformed[index] = decision
        self.stats.messages += len(parsed)

        keys = sorted({p.envelope.key for p in parsed if p.envelope is not None})
        # The first reads of tables not kept warm are made at once with the statuses' (see first_reads).
        needed = self._first_reads_needed(parsed, malformed)
        read_statuses: Callable[[], Mapping[RequestKey, CommitStatus]] = (
            partial(self.statuses.get_many, keys) if keys else dict
        )
        if needed:
            statuses_read, first = overlap.both(
                read_statuses, partial(read_first, self.tables, self.log, self.snapshots, needed, self.clock)
            )
            self._first_reads = first.get()  # never raises
        else:
            statuses_read = overlap.outcome(read_statuses)
        try:
            known = statuses_read.get()
            self.stats.status_reads += 1 if keys else 0
        except StateStoreError as e:
            reason = f"could not read commit statuses: {e}"
            logger.warning("retrying a whole batch of %d message(s): %s", len(parsed), reason)
            self.stats.retries += len(parsed)
            return [result_of(p, Retry(reason)) for p in parsed]
        final = {key: s for key, s in known.items() if s.is_final}
        batch = sort_batch(parsed, malformed, final)

        decisions = dict(batch.decided)
        for group_id, indexes in batch.groups.items():
            fresh = batch.fresh.get(group_id)
            if not fresh:
                continue
            try:
                decisions.update(self._decide_table(group_id, fresh))
            except Exception as e:
                if not isinstance(e, StateStoreError):
                    # A bug, or a state we cannot trust: start the table afresh next time.
                    logger.exception("committing to table %r failed unexpectedly", group_id)
                    self._tables.pop(group_id, None)
                else:
                    logger.warning(
                        "committing to table %r failed; its messages will be retried: %s", group_id, e
                    )
                    if isinstance(e, TableNotFoundError):  # its log is gone: read its record afresh
                        self._tables.pop(group_id, None)
                decisions.update(_retry(indexes, f"could not commit to table {group_id!r}: {e}"))
            # Measure it now (loaded even if its commit failed), and evict to stay within the budget.
            self._tables.settle([group_id])

        decisions.update(strays_decided_here(batch.messages, decisions))
        decisions.update(self._record_statuses(batch, decisions))
        decisions.update(self._send_dead_letters(batch, decisions))
        results = [result_of(p, decisions[index]) for index, p in enumerate(batch.messages)]
        for result in results:
            self.stats.count(result.outcome)
        return results

    # --- one table ------------------------------------------------------------------------------

    def _decide_table(self, table_id: str, fresh: Sequence[FreshRequest]) -> dict[int, Decision]:
        """Decide one table's fresh requests (by batch position). Raises StateStoreError (or a bug's error):
        the caller retries the table's messages then."""
        try:
            table = self._table(table_id)
        except TableBeingDeletedError as e:
            return {request.position: DeadLettered(str(e), time=self.clock()) for request in fresh}
        except TableNotFoundError as e:
            reason = f"{e}; create the table (or fix the request's table id), then redrive the message"
            return {request.position: DeadLettered(reason, time=self.clock()) for request in fresh}
        # Requests from senders the table does not allow are refused before anything of theirs is read.
        refused: dict[int, Decision] = (
            {
                r.position: refusal(table.info, r.message.sender_id, r.request_id, self.clock())
                for r in fresh
                if not sender_allowed(r.message.sender_id, table.info.allowed_senders)
            }
            if table.info.allowed_senders
            else {}
        )
        fresh = [r for r in fresh if r.position not in refused]
        if not fresh:
            if isinstance(table.store, TransactionLogStateStore):
                table.store.use_first_reads(None)  # no load: the snapshot's bytes read for it are let go
            return refused
        firsts, copies = split_copies(fresh)
        by_request = commit_fresh(
            table, firsts, self.blobs, self.statuses, self.clock, self.stats, self._batch,
            partial(self._load, table), partial(self._guard_from_snapshot, table),
        )  # fmt: skip
        if rejected_without_append(by_request.values()):
            # Judged against a state read to the log's end, with no append to prove it current: the log of
            # a table whose delete began reads as current too. Its record says (raises: retried, then the
            # requests are dead-lettered as for a table being deleted, never rejected against what is left).
            self.tables.check_live(table_id)
        state, guard = table.store.loaded_state, table.guard
        if state is not None:
            self._batch.table_sizes[table_id] = TableSize.of(table_id, state)
        elif guard is not None:
            self._batch.table_sizes[table_id] = TableSize(
                table_id, guard.references, len(guard.partition_ids)
            )
        decisions = {request.position: by_request[request.request_id] for request in firsts}
        for copy, first in copies:
            decisions[copy.position] = decision_for_copy(by_request[first.request_id])
        return {**decisions, **refused}

    def _load(self, table: WarmTable) -> None:
        """Make sure the table's state is loaded, counting a warm (kept) or cold (read) load."""
        if table.store.loaded_state is not None:
            self._batch.warm_loads += 1
            return
        guard, table.guard = table.guard, None  # the state, loaded, supersedes what its guard kept
        expected = snapshot_bytes(table.snapshot)
        if guard is not None:
            expected = sizing.warm_state_bytes(guard.references, len(guard.partition_ids))
        self._tables.make_room(table.info.table_id, expected)
        started = self.timer()
        table.store.cached_state()
        # The load's temporaries, freed: its peak over the state it keeps.
        self.release_heap(None if expected is None else round(expected * (sizing.LOAD_FACTOR - 1)))
        self._batch.cold_load_ms.append((self.timer() - started) * 1000)

    def _guard_from_snapshot(self, table: WarmTable) -> bool:
        """Give a table not kept at all its guard from its latest snapshot instead of loading its state,
        where the snapshot counts at least :attr:`guard_first_references` references (a smaller state costs
        little more to load, and then serves any commit). Room is made first for the read's peak. Whether
        the guard was made."""
        store = table.store
        references = None if table.snapshot is None else table.snapshot.references
        if not isinstance(store, TransactionLogStateStore) or references is None:
            return False
        if references < self.guard_first_references:
            return False
        peak = sizing.guard_read_bytes(references)
        self._tables.make_room(table.info.table_id, math.ceil(peak / self.warm_budget.load_factor))
        started = self.timer()
        table.guard = store.guard_from_snapshot()
        self.release_heap(peak)
        self._batch.cold_guard_ms.append((self.timer() - started) * 1000)
        return table.guard is not None

    def _first_reads_needed(
        self, parsed: Sequence[ParsedMessage], malformed: Mapping[int, Decision]
    ) -> dict[str, bool]:
        """The tables of the batch whose record :meth:`_table` will read (not kept, or kept past its time to
        live), each mapped to whether the load will read its latest snapshot's record too (not kept)."""
        now = self.clock()
        needed: dict[str, bool] = {}
        for index, p in enumerate(parsed):
            if p.envelope is None or index in malformed or p.envelope.table_id in needed:
                continue
            table = self._tables.peek(p.envelope.table_id)
            if table is None:
                needed[p.envelope.table_id] = True
            elif now - table.checked_time >= self.table_info_ttl_ms:
                needed[p.envelope.table_id] = False
        return needed

    def _table(self, table_id: str) -> WarmTable:
        now = self.clock()
        first = self._first_reads.pop(table_id, None)
        table = self._tables.lookup(table_id)
        if table is not None and now - table.checked_time < self.table_info_ttl_ms:
            return table
        try:
            info = (first.info.get() if first is not None else self.tables.get(table_id)).live()
        except TableNotFoundError:
            self._tables.pop(table_id, None)
            raise
        if table is not None and (table.info.schema, table.info.file_store) == (info.schema, info.file_store):
            table.info, table.checked_time = info, now
            if isinstance(table.store, TransactionLogStateStore):  # a view switched on or off since
                table.store.index_leaves = asks_for_leaf_index(info)
            return table
        store = open_state_store(
            info,
            self.log,
            self.snapshots,
            self.file_store,
            missing_file_store="this committer has no file store (set STATESTORE_POSTGRES_URL); its "
            "requests wait for one",
            retry=self.retry_policy,
            clock=self.clock,
            sleep=self.sleep,
            rng=self.rng,
        )
        snapshot = None
        if first is not None and first.load is not None and isinstance(store, TransactionLogStateStore):
            store.use_first_reads(first.load)
            snapshot = first_read_snapshot(first.load.record)
        table = self._tables[table_id] = WarmTable(info, store, now, snapshot)
        if isinstance(store, TransactionLogStateStore):  # a log since its snapshot may hold far more
            store.growth_watch = self._tables.growth_watch(table_id)
        return table

    def forget(self, table_id: str) -> None:
        """Drop a table's warm state (the next batch for it loads it again)."""
        self._tables.pop(table_id, None)

    # --- after the tables -----------------------------------------------------------------------

    def _record_statuses(self, batch: SortedBatch, decisions: Mapping[int, Decision]) -> dict[int, Decision]:
        """Record every status in one write; returns the decisions that change: duplicates where a final
        status was recorded before, or retries of every group with a status to record if the write fails."""
        statuses = {
            index: status
            for index, p in enumerate(batch.messages)
            if (status := status_of(p, decisions[index])) is not None
        }
        if not statuses:
            return {}
        try:
            kept = self.statuses.record(list(statuses.values()))
        except StateStoreError as e:
            # The log holds the commits: when the messages come back they are recognised there.
            logger.warning(
                "could not record %d commit status(es); retrying their messages: %s", len(statuses), e
            )
            failed = {batch.messages[index].message.group_id for index in statuses}
            return _retry_groups(batch, failed, f"could not record commit statuses: {e}")
        self.stats.status_writes += 1
        self.stats.status_items += len(statuses)
        changed: dict[int, Decision] = {}
        for index, status in statuses.items():
            final = kept.get(status.key)
            if final is None or (final.outcome, final.transaction_number) == (
                status.outcome,
                status.transaction_number,
            ):
                continue  # recorded, or the same outcome was (by a committer that died before acking)
            if status.outcome is CommitOutcome.COMMITTED:
                # Only a request committed to a file store (whose rows hold its id) records its committed
                # status here; a final status other than that one means it was processed concurrently,
                # which the queue's visibility timeout rules out.
                logger.error(
                    "request %r was committed at %s but its status was already final: %s",
                    status.request_id, status.transaction_number, final,
                )  # fmt: skip
            changed[index] = already_decided(final)
        return changed

    def _send_dead_letters(
        self, batch: SortedBatch, decisions: Mapping[int, Decision]
    ) -> dict[int, Decision]:
        """Send every dead letter in one call; if that fails, returns retries of every group with one."""
        dead = [
            (batch.messages[index].message, decision.reason)
            for index, decision in sorted(decisions.items())
            if isinstance(decision, DeadLettered)
        ]
        if not dead:
            return {}
        letters = [
            QueueMessage(
                body=message.body,
                group_id=message.group_id or "ungrouped",
                deduplication_id=message.message_id,
                attributes=(
                    (REASON_ATTRIBUTE, reason[:MAX_REASON_CHARS]),
                    (SOURCE_MESSAGE_ID_ATTRIBUTE, message.message_id),
                ),
            )
            for message, reason in dead
        ]
        for message, reason in dead:
            logger.warning("dead-lettering message %s: %s", message.message_id, reason)
        try:
            self.dead_letters.send(letters)
        except StateStoreError as e:
            failed = {message.group_id for message, _ in dead}
            return _retry_groups(batch, failed, f"could not send to the dead-letter queue: {e}")
        return {}


def _retry(indexes: Sequence[int], reason: str) -> dict[int, Decision]:
    return dict.fromkeys(indexes, Retry(reason))


def _retry_groups(batch: SortedBatch, group_ids: set[str], reason: str) -> dict[int, Decision]:
    """Retry every message of the groups (a group's messages are retried together, keeping their order)."""
    retries: dict[int, Decision] = {}
    for group_id in group_ids:
        retries.update(_retry(batch.groups[group_id], reason))
    return retries
