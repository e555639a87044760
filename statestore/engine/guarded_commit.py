"""A group of requests that only add files, appended from a table's :class:`FileGuard` instead of its state.

:meth:`GuardedCommits.commit_on_guard` validates each member with the very checks an ``AddFiles`` makes
against a state (the guard answers them), writes the group as one entry at the guard's number + 1 with its
members' ``committed`` statuses, exactly as :meth:`~statestore.engine.log_store.TransactionLogStateStore.
commit_group` would, and moves the guard on. Whenever the guard cannot decide, it writes nothing and
returns None, and the caller loads the state and commits through ``commit_group``, which decides exactly:

- a member that is not an ``AddFiles``, one the checks reject (a rejection must be made against a state
  read to the log's end), or one naming a file the guard may hold;
- a member whose request has a final status already (the log refuses the entry);
- a guard behind the log that cannot catch up (below).

**Catching up.** A guard is behind the log when another writer (another committer container, a client
committing directly) appended since: its conditional put fails, or, for a guard not known current for
longer than the store's ``max_unread_ms``, the log is read before the append (cleanup deletes only entries
older than that, so an append from the guard can never reuse a deleted number, as for a cached state). The
entries after the guard are read, once, to the log's end; where each of them only adds files (an
``AddFiles``, or a batch of them) the guard takes their names and number and the group is validated and
appended again (once: a second lost race loads the state). An entry of any other kind, more than
:data:`CATCH_UP_ENTRIES` of them, or entries cleanup deleted load the state instead. One read of the log's
tail instead of a snapshot's load: with several committer containers, one table's messages reach different
ones over time, and each container's guard is behind by the others' entries.

**From a snapshot.** A table not loaded at all can have its guard made from its latest snapshot instead of
its state (:meth:`GuardedCommits.guard_from_snapshot`): the snapshot's files object stores each file's name
hash, so the guard is one column of it and the partitions' ids, then the log after the snapshot, taken as
in catching up. A committer does so for a large table whose group only adds files: ~10 ms of decoding and
~10 MB kept for a million references, where a load decodes ~0.2 s and keeps ~200 MB (and makes room for
that first). The snapshot's bytes are read either way.

A put whose outcome is unknown is resolved as every append's is (``_put``: the entry's writer token read
back); if it stays unknown, CommitOutcomeUnknownError is raised, as ``commit_group`` raises it.
"""

from __future__ import annotations

import itertools
import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial

from statestore.codec.transaction_json import decode_entry, encode_transaction
from statestore.engine import overlap
from statestore.engine.log_loading import FirstReads, entries_after, usable_first_reads
from statestore.engine.results import GroupCommitResult, GroupMember, skipped_note
from statestore.engine.snapshots import SnapshotStore
from statestore.errors import (
    RequestsAlreadyDecidedError,
    SnapshotNotFoundError,
    TransactionNotRetainedError,
    TransactionValidationError,
    UnreadableLogEntryError,
    UnreadableSnapshotError,
)
from statestore.model import layout
from statestore.model.schema import Schema
from statestore.state.file_guard import FileGuard, GuardCannotTell
from statestore.state.string_column import ALL_HASH_BITS
from statestore.store.ports import CommitOutcome, CommitStatus, LogEntry, LogTail, TransactionLogStore
from statestore.transactions import AddFiles, BatchItem, TransactionBatch, leaves_added_to, only_adds

logger = logging.getLogger(__name__)

# A guard further behind the log than this many entries loads the state instead of catching up: the
# entries would cost more to read than the snapshot.
CATCH_UP_ENTRIES = 100


class _Taken:
    """The guard's append lost its number to another writer's entry."""


_TAKEN = _Taken()


class GuardedCommits:
    """The guard's half of :class:`~statestore.engine.log_store.TransactionLogStateStore` (a mixin)."""

    # Set by TransactionLogStateStore.__init__.
    table_id: str
    log: TransactionLogStore
    index_leaves: bool
    max_unread_ms: int
    schema: Schema
    snapshots: SnapshotStore | None
    _clock: Callable[[], int]
    _put: Callable[[LogEntry, Sequence[CommitStatus]], bool]
    _first_reads: FirstReads | None
    confirmed: Callable[[Callable[[], bool]], bool]

    def guard_from_snapshot(self) -> FileGuard | None:
        """A guard made without loading the state: the latest snapshot's name hashes and partition ids
        (:meth:`SnapshotStore.read_guard`), then the log after it, where each entry only adds files (see
        the module's docstring, "From a snapshot"). Starts from the first reads given
        (``use_first_reads``), if any.

        None where it cannot be made so: no snapshot, or one recorded without checksums or whose objects
        store no name hashes; one that cannot be read (the load then tries the one before it, and says
        why); an entry after it of another kind, or too many of them. Either way the next load starts from
        what was read here (the snapshot's objects and the log's tail), not reading them again: a caller
        whose commit from the guard landed lets them go (``use_first_reads(None)``). Raises a store's
        StateStoreError as a load does.
        """
        reads, self._first_reads = self._first_reads, None
        copy, tail = usable_first_reads(reads)
        snapshots = self.snapshots
        if snapshots is None:
            return None
        info = reads.record.get() if reads is not None else snapshots.latest_at_or_before(self.table_id, None)
        left = reads if reads is not None else FirstReads(overlap.outcome(lambda: info))
        if info is None or not info.checksums:
            self._first_reads = left
            return None
        try:
            columns, copy = snapshots.read_guard(info, self.schema, copy)
        except (SnapshotNotFoundError, UnreadableSnapshotError):
            self._first_reads = left  # the load finds it so again, and says so as it loads the one before
            return None
        self._first_reads = replace(left, copy=overlap.outcome(lambda: copy))
        if columns is None:
            return None
        guard = FileGuard(
            columns.hashes,
            ALL_HASH_BITS,
            (),
            data_prefix=layout.data_prefix(self.table_id),
            partition_ids=columns.partition_ids,
            leaf_ids=columns.partition_ids.leaves,
            transaction_number=info.transaction_number,
            last_update_time=columns.last_update_time,
            references=info.references or 0,
            read_to_end_at=0,
        )
        if not self.confirmed(partial(self._catch_up_guard, guard, tail)):
            return None
        return guard

    def commit_on_guard(self, guard: FileGuard, members: Sequence[GroupMember]) -> GroupCommitResult | None:
        """Commit ``members`` as one entry from ``guard`` (see the module's docstring), or None: nothing
        was written, and the guard cannot decide them. Raises a store's StateStoreError as
        ``commit_group`` does."""
        adds = adds_of(members)
        if adds is None:
            return None
        if guard.transaction_number and not guard.last_update_time:
            return None  # its entry's time unknown (read by the state's load): times never run backwards
        if not self._guard_current(guard):
            return None
        try:
            for caught_up in (False, True):
                appended = self._append_on_guard(guard, members, adds)
                if not isinstance(appended, _Taken):
                    return appended
                logger.debug("table %r: the guard's entry was taken; catching up", self.table_id)
                guard.drop_pending()
                if caught_up or not self._catch_up_guard(guard):
                    return None
            return None
        finally:
            guard.drop_pending()  # names held for a group that was not appended (a no-op after one)

    def _append_on_guard(
        self, guard: FileGuard, members: Sequence[GroupMember], adds: Sequence[AddFiles]
    ) -> GroupCommitResult | _Taken | None:
        try:
            for add in adds:
                add.validate(guard)
                # The next member is checked as if this one were in.
                guard.hold_pending(_names_added(add))
        except (TransactionValidationError, GuardCannotTell):
            return None
        number = guard.transaction_number + 1
        update_time = max(self._clock(), guard.last_update_time)
        batch = TransactionBatch(
            tuple(
                BatchItem(m.key, m.transaction, None if m.stored_body is None else m.stored_body[0])
                for m in members
            )
        )
        outcomes = [
            CommitStatus(m.key, self.table_id, CommitOutcome.COMMITTED, update_time, number, skipped_note(()))
            for m in members
            if self.log.request_statuses is not None
        ]
        body, compressed = encode_transaction(batch)
        entry = LogEntry(
            number,
            update_time,
            batch.TYPE,
            body,
            compressed,
            uuid.uuid4().hex,
            tuple(m.stored_body for m in members if m.stored_body is not None),
            leaves_added_to(batch, guard.leaf_ids),
            batch.most_added(),
            self.index_leaves,
        )
        try:
            appended = self._put(entry, outcomes)
        except RequestsAlreadyDecidedError:
            return None  # nothing written: the state's commit leaves those members out
        if not appended:
            return _TAKEN
        guard.keep_pending(sum(len(add.references) for add in adds), number, update_time)
        keys = tuple(m.key for m in members)
        return GroupCommitResult(number, update_time, 1, keys, {}, {}, dict.fromkeys(keys, ()))

    def _guard_current(self, guard: FileGuard) -> bool:
        """Whether the guard may append: read to the log's end within ``max_unread_ms``, or caught up
        with it now."""
        if self._clock() - guard.read_to_end_at <= self.max_unread_ms:
            return True
        return self._catch_up_guard(guard)

    def _catch_up_guard(self, guard: FileGuard, tail: tuple[int, LogTail] | None = None) -> bool:
        """Have ``guard`` take the entries after it, to the log's end; whether it could (each only adds
        files, there are at most :data:`CATCH_UP_ENTRIES`, none was deleted). Current from when the read
        began: the log's ``tail`` (when its read began, and what it read) where it reaches back to the
        guard, else a read now. Where it could not, it may have taken some: the caller loads the state,
        which supersedes it."""
        try:
            if tail is not None and tail[1].covers_after(guard.transaction_number):
                started, entries = tail[0], tail[1].after(guard.transaction_number)
            else:
                started = self._clock()
                after = entries_after(self.log, self.table_id, guard.transaction_number, None, "guard")
                entries = list(itertools.islice(after, CATCH_UP_ENTRIES + 1))
            if len(entries) > CATCH_UP_ENTRIES:
                return False
            for entry in entries:
                adds = only_adds(decode_entry(entry, self.table_id))
                if adds is None:
                    return False
                guard.take_entry(
                    [name for add in adds for name in _names_added(add)],
                    sum(len(add.references) for add in adds),
                    entry.transaction_number,
                    entry.update_time,
                )
        except (TransactionNotRetainedError, UnreadableLogEntryError, GuardCannotTell):
            return False  # the state's load decides (and reports what is wrong, where something is)
        guard.read_to_end_at = started
        return True


def adds_of(members: Sequence[GroupMember]) -> list[AddFiles] | None:
    """The ``AddFiles`` of a group a guard may decide: every member one, each request once; else None."""
    adds = [m.transaction for m in members if type(m.transaction) is AddFiles]
    if len(adds) != len(members) or len({m.key for m in members}) != len(members):
        return None
    return adds


def _names_added(add: AddFiles) -> list[str]:
    return [ref.filename for ref in add.references] + list(add.unreferenced_files)
