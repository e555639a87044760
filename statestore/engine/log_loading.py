"""Loading a table's state from its log: the newest readable snapshot at or before the wanted point, then
the log entries after it, with no gap.

:class:`LogStateLoading` is a mixin :class:`statestore.engine.log_store.TransactionLogStateStore`
inherits: the state it keeps, caught up on each read; the appending is in ``log_store.py``.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

from statestore.codec.transaction_json import decode_entry
from statestore.engine import overlap
from statestore.engine.overlap import Outcome
from statestore.engine.snapshots import Copy, SnapshotStore
from statestore.errors import (
    SnapshotNotFoundError,
    StateNotRecoverableError,
    StateStoreError,
    TransactionNotRetainedError,
    UnreadableSnapshotError,
)
from statestore.model import layout
from statestore.model.schema import Schema
from statestore.state.table_state import TableState
from statestore.store.ports import LogEntry, LogTail, TransactionLogStore
from statestore.store.snapshot_ports import SnapshotInfo

logger = logging.getLogger(__name__)

T = TypeVar("T")

# The log entries a cold load reads while the snapshot's objects are read: a page or two of a log
# whose snapshots keep up. Held until the snapshot is decoded, so bounded; the rest is read after.
READ_AHEAD = 100
# When a read of the log after a snapshot began, and its entries.
_Ahead = tuple[int, Iterator[LogEntry]]


@dataclass(frozen=True)
class FirstReads:
    """What a caller read for a table's next load of its latest state, all at once, before knowing where
    its latest snapshot is: that snapshot's ``record``; the objects at the table's latest copy's keys
    (``SnapshotStore.latest_copy``; used where they are that snapshot's); and when a read of the log's
    last entries began, with what it read (``TransactionLogStore.read_tail``; used if it reaches back to
    the snapshot). Each is the read's outcome: a failed one is read again where the load needs it."""

    record: Outcome[SnapshotInfo | None]
    copy: Outcome[Copy] | None = None
    tail: Outcome[tuple[int, LogTail]] | None = None


def entries_after(
    log: TransactionLogStore, table_id: str, after: int, to_number: int | None, covered_by: str
) -> Iterator[LogEntry]:
    """The log entries numbered ``after + 1`` to ``to_number`` (to the end if None), with no gap.

    A gap means cleanup deleted entries a reader still needed: raises TransactionNotRetainedError saying no
    ``covered_by`` (a snapshot, a saved model) covers them.
    """
    return _without_gap(log.read(table_id, after + 1, to_number), table_id, after, covered_by)


def _without_gap(
    entries: Iterable[LogEntry], table_id: str, after: int, covered_by: str
) -> Iterator[LogEntry]:
    """``entries``, checked to be numbered ``after + 1``, ``after + 2``, ... (see :func:`entries_after`)."""
    expected = after + 1
    for entry in entries:
        if entry.transaction_number != expected:
            raise TransactionNotRetainedError(
                f"table {table_id!r}: log entries {expected}..{entry.transaction_number - 1} were deleted "
                f"and no {covered_by} covers them"
            )
        yield entry
        expected += 1


def entries_about(
    log: TransactionLogStore,
    table_id: str,
    after: int,
    to_number: int,
    partition_ids: Collection[str],
    covered_by: str,
) -> list[LogEntry]:
    """The entries numbered ``after + 1`` to ``to_number`` that may concern ``partition_ids``
    (``TransactionLogStore.read_about``), with none of the range deleted: raises TransactionNotRetainedError
    as :func:`entries_after` does if cleanup deleted some."""
    if to_number <= after:
        return []
    entries, held = log.read_about(table_id, after + 1, to_number, partition_ids)
    if held != to_number - after:
        raise TransactionNotRetainedError(
            f"table {table_id!r}: {to_number - after - held} of log entries {after + 1}..{to_number} were "
            f"deleted and no {covered_by} covers them"
        )
    return entries


class LogStateLoading:
    """The reading half of :class:`~statestore.engine.log_store.TransactionLogStateStore`."""

    # Set by TransactionLogStateStore.__init__.
    table_id: str
    schema: Schema
    log: TransactionLogStore
    snapshots: SnapshotStore | None
    max_unread_ms: int
    _clock: Callable[[], int]
    _state: TableState | None
    _read_to_end_at: int
    # What a caller already read for the next load of the latest state.
    _first_reads: FirstReads | None = None
    # Told, before each log entry that may grow the state is decoded (from the entry's ``most_added``, where
    # written with it) and applied (from ``Transaction.most_added``), the state's file references and
    # partitions and what the entry adds at most: a caller keeping other tables in memory makes room for a
    # state that outgrows what it made room for (a snapshot counts only what was before it: a bulk import
    # since then is in the log alone).
    growth_watch: Callable[[int, int, int, int], object] | None = None
    # Called after each read of the log (and when one fails): raises TableNotFoundError (or
    # TableBeingDeletedError) for a table whose delete began before it returns. The mark is the first thing a
    # delete writes, so a read it lets through saw the log whole, not part way through being deleted.
    table_check: Callable[[], object] | None = None

    # --- reading --------------------------------------------------------------------------------

    def require_file_log(self, what: str) -> None:
        """Nothing: every file transaction of this table is on its log (``what`` needs them)."""

    def read_log_to_end(self) -> int:
        """Catch up with the log; returns the number of its last entry."""
        return self.state().transaction_number

    def state(self) -> TableState:
        """The up-to-date state (strongly consistent). Treat it as read-only."""
        if self._state is None:
            self._state = self.load()
        else:
            self._state = self.confirmed(partial(self._catch_up, self._state))
        return self._state

    @property
    def loaded_state(self) -> TableState | None:
        """The state as last seen, or None if it was never loaded; reads nothing. Treat it as read-only."""
        return self._state

    def cached_state(self) -> TableState:
        """The state as last seen, without reading the log (loads it the first time).

        A state not read to the end of the log for ``max_unread_ms`` is caught up first: cleanup deletes
        only entries older than its minimum age, so an append from a state read more recently than that
        can never reuse a deleted number (a collision on a live number is caught by the conditional put).
        """
        if self._state is None:
            self._state = self.load()
        elif self._clock() - self._read_to_end_at > self.max_unread_ms:
            self._state = self.confirmed(partial(self._catch_up, self._state))
        return self._state

    def load(self, as_of: int | None = None) -> TableState:
        """A fresh, independent state: the newest snapshot at or before ``as_of``, then the log up to it.

        ``as_of=None`` means the latest transaction. A snapshot that cannot be read (an object gone,
        truncated or altered) is skipped with a warning naming it, and the one before it is used with the
        log after it: a damaged snapshot never stops a table while an intact one and the log cover it.
        Raises StateNotRecoverableError (naming each snapshot tried and why) when none does,
        TransactionNotRetainedError when cleanup already deleted the entries needed, and StateStoreError
        when ``as_of`` is beyond the log.
        """
        if as_of is not None and as_of < 0:
            raise StateStoreError(f"transaction number must be >= 0, got {as_of}")
        return self.confirmed(partial(self._fresh_at, as_of))

    def confirm_table(self) -> None:
        """Run :attr:`table_check`, if given."""
        if self.table_check is not None:
            self.table_check()

    def confirmed(self, read: Callable[[], T]) -> T:
        """``read()``, then :attr:`table_check` (also when the read fails: a table whose delete began says
        so, rather than what its partly deleted log and snapshots looked like). The store's own reads go
        through it, and so does a read made beside the store (through the queryable view)."""
        check = self.table_check
        if check is None:
            return read()
        try:
            result = read()
        except StateStoreError:
            check()
            raise
        check()
        return result

    def _fresh_at(self, as_of: int | None) -> TableState:
        if as_of is not None:
            latest = self.log.latest_number(self.table_id)
            if as_of > latest:
                raise StateStoreError(
                    f"table {self.table_id!r} has no transaction {as_of} yet (latest is {latest})"
                )
        return self._fresh(as_of)

    def _fresh(self, as_of: int | None) -> TableState:
        """The newest readable snapshot at or before ``as_of`` (or none), followed by the log up to it."""
        unreadable: list[str] = []
        first_reads, self._first_reads = self._first_reads, None  # used once, by the load they were read for
        if as_of is not None:
            first_reads = None
        copy, tail = usable_first_reads(first_reads)
        for info in self._snapshots_to_try(as_of, first_reads):
            after = 0 if info is None else info.transaction_number
            ahead: Outcome[_Ahead] | None = None
            if tail is not None and tail[1].covers_after(after):
                ahead = overlap.outcome(partial(self._ahead_in_tail, tail, after))
            if info is None:
                state = TableState(self.schema)
            else:
                # The snapshot's objects and the log after it at once: their round trips overlap. Either
                # may have been read already, with the snapshot's record.
                snapshots = self.snapshots
                assert snapshots is not None  # it gave the snapshot to try
                read_snapshot = partial(snapshots.read, info, self.schema, copy)
                copy = None  # the latest copy can be only the first snapshot tried
                if ahead is None:
                    loaded, ahead = overlap.both(read_snapshot, partial(self._read_ahead, after, as_of))
                else:
                    loaded = overlap.outcome(read_snapshot)
                try:
                    state = loaded.get()
                except (SnapshotNotFoundError, UnreadableSnapshotError) as e:
                    logger.warning("%s; loading from the snapshot before it, and the log after that", e)
                    unreadable.append(str(e))
                    continue
            state.data_prefix = layout.data_prefix(self.table_id)
            try:
                self._follow(state, as_of, ahead)
            except TransactionNotRetainedError as e:
                if not unreadable:
                    raise
                raise StateNotRecoverableError(self.table_id, [*unreadable, str(e)]) from e
            return state
        raise AssertionError("the last candidate, no snapshot, always loads or raises")

    def unload(self) -> tuple[TableState, int] | None:
        """Drop the state kept (the next read loads it afresh): it, and when it was last known current (its
        read to the log's end began), or None when none was kept."""
        state, self._state = self._state, None
        return None if state is None else (state, self._read_to_end_at)

    def use_first_reads(self, reads: FirstReads | None) -> None:
        """The next load of the latest state starts from ``reads``, made by the caller at once with other
        reads, instead of reading them. Any snapshot will do, however new: the log after it is read to its
        end. None drops reads given and not used (what they hold is not kept for a load that may never
        come)."""
        self._first_reads = reads

    def _snapshots_to_try(self, as_of: int | None, reads: FirstReads | None) -> Iterator[SnapshotInfo | None]:
        """The snapshot to load from, then (only if it cannot be read) each older one, then none."""
        if self.snapshots is not None:
            if reads is not None:
                first = reads.record.get()
            else:
                first = self.snapshots.latest_at_or_before(self.table_id, as_of)
            if first is not None:
                yield first
                older = self.snapshots.at_or_before(self.table_id, first.transaction_number - 1)
                yield from older
        yield None

    def _catch_up(self, state: TableState) -> TableState:
        """``state`` brought up to date, or a fresh load if cleanup deleted entries it had not seen."""
        try:
            self._follow(state, None)
            return state
        except TransactionNotRetainedError:
            return self._fresh(None)

    def _ahead_in_tail(self, tail: tuple[int, LogTail], after: int) -> _Ahead:
        """The entries after ``after`` in a log's tail whose read began at ``tail[0]`` (it reaches back)."""
        started, read = tail
        return started, _without_gap(read.after(after), self.table_id, after, "snapshot")

    def _read_ahead(self, after: int, to_number: int | None) -> _Ahead:
        """The entries after ``after`` (to ``to_number``), the first :data:`READ_AHEAD` of them read now."""
        started = self._clock()
        if to_number is not None and to_number <= after:
            return started, iter(())
        entries = entries_after(self.log, self.table_id, after, to_number, "snapshot")
        return started, itertools.chain(list(itertools.islice(entries, READ_AHEAD)), entries)

    def _follow(self, state: TableState, to_number: int | None, ahead: Outcome[_Ahead] | None = None) -> None:
        """Apply the log after ``state`` to ``to_number`` (the end if None): the entries ``ahead`` began to
        read from the state's number when given, else read now."""
        if to_number is not None and to_number <= state.transaction_number:
            return
        if ahead is None:
            started = self._clock()
            entries = entries_after(self.log, self.table_id, state.transaction_number, to_number, "snapshot")
        else:
            started, entries = ahead.get()
        watch = self.growth_watch
        for entry in entries:
            if watch is not None and entry.most_added is not None and any(entry.most_added):
                # Room before the decode, which costs about as much as applying: from the entry's counts.
                watch(state.reference_count(), len(state.partitions_by_id), *entry.most_added)
            transaction = decode_entry(entry, self.table_id)
            if watch is not None:
                # From the transaction too: an entry written before the counts were kept has none (the
                # cache asked again for room it already made does nothing).
                references, partitions = transaction.most_added()
                if references or partitions:
                    watch(state.reference_count(), len(state.partitions_by_id), references, partitions)
            transaction.apply(state, entry.update_time)
            state.transaction_number = entry.transaction_number
            state.last_update_time = entry.update_time
        if to_number is None:
            # Read to the end. The log never deletes its latest entry, so an empty read means the state
            # is current, not that cleanup removed everything after it. Current as of when the read
            # began, at the latest (what the unread time is counted from).
            self._read_to_end_at = started
            return
        if to_number is not None and state.transaction_number < to_number:
            raise TransactionNotRetainedError(
                f"table {self.table_id!r}: transaction {state.transaction_number + 1} is no longer in the log"
            )


def usable_first_reads(reads: FirstReads | None) -> tuple[Copy | None, tuple[int, LogTail] | None]:
    """The latest copy and the log's tail among ``reads``, each None where not read or its read failed (the
    load then reads what it needs itself, and meets any failure there)."""
    if reads is None:
        return None, None
    for what, read in (("latest snapshot copy", reads.copy), ("log's last entries", reads.tail)):
        if read is not None and read.error is not None:
            logger.warning("the first read of the %s failed; the load reads it again: %s", what, read.error)
    copy = reads.copy.value if reads.copy is not None and reads.copy.error is None else None
    tail = reads.tail.value if reads.tail is not None and reads.tail.error is None else None
    return copy, tail
