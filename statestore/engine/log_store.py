"""The one place that appends to a table's transaction log and rebuilds state from it.

Commit (one transaction, or a group of requests as one entry): validate against a state, conditionally put
number ``state + 1``; on a collision catch up, validate again and retry after a full-jitter exponential
backoff; apply locally only once the put succeeded. Each entry carries a unique writer token, by which a
writer whose put failed ambiguously recognises its own entry.
Load: the newest snapshot at or before the wanted point, then the log after it (``log_loading.py``, a
mixin the store inherits).
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from statestore.codec.transaction_json import encode_transaction
from statestore.engine.guarded_commit import GuardedCommits
from statestore.engine.log_loading import LogStateLoading
from statestore.engine.log_loading import entries_after as entries_after
from statestore.engine.results import (
    CommitResult,
    GroupCommitResult,
    GroupMember,
    result_of_final_status,
    skipped_note,
)
from statestore.engine.results import TableStateStore as TableStateStore
from statestore.engine.snapshots import SnapshotStore
from statestore.errors import (
    CommitConflictError,
    CommitOutcomeUnknownError,
    PreviousEntryGoneError,
    RequestsAlreadyDecidedError,
    StateStoreError,
    StoreUnavailableError,
    TableLogGoneError,
    TableNotInitialisedError,
    ThrottledError,
    TransactionNumberTakenError,
    TransactionValidationError,
)
from statestore.model.backoff import full_jitter_delay
from statestore.model.clock import now_millis
from statestore.model.schema import Schema
from statestore.state.table_state import TableState
from statestore.store.ports import (
    CommitOutcome,
    CommitStatus,
    CommitStatusStore,
    LogEntry,
    TransactionLogStore,
)
from statestore.store.snapshot_ports import SnapshotInfo
from statestore.transactions import BatchItem, Transaction, TransactionBatch, leaves_added_to

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries with full-jitter exponential backoff: sleep ~ U(0, min(cap, base * 2**attempt))."""

    max_attempts: int = 12
    base_delay: float = 0.005
    max_delay: float = 1.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1 or self.base_delay < 0 or self.max_delay < 0:
            raise ValueError(f"invalid retry policy: {self}")

    def delay(self, attempt: int, rng: random.Random) -> float:
        return full_jitter_delay(attempt, self.base_delay, self.max_delay, rng)


@dataclass(frozen=True)
class _Draft:
    """What one attempt would append: the transaction, the undo mark it was applied under (None: not applied
    yet, apply it on success to the state it was validated on), its encoded body, the bodies that body
    points at, and the ``committed`` statuses of the requests it holds (written with it)."""

    transaction: Transaction
    undo_mark: int | None
    encoded: tuple[bytes, bool]
    rejected_parts: tuple[tuple[str, str], ...]
    attachments: tuple[tuple[str, bytes], ...] = ()
    outcomes: tuple[CommitStatus, ...] = ()


class TransactionLogStateStore(LogStateLoading, GuardedCommits):
    """A table's state, kept up to date from its log; commits go through :meth:`commit`.

    Not thread-safe: give each thread its own instance (they coordinate through the log). ``index_leaves``:
    ask the log to index the leaves each entry concerns (a table that keeps a queryable view).
    """

    def __init__(
        self,
        table_id: str,
        schema: Schema,
        log: TransactionLogStore,
        snapshots: SnapshotStore | None = None,
        *,
        retry: RetryPolicy | None = None,
        clock: Callable[[], int] = now_millis,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
        max_unread_ms: int = 5 * 60_000,
        index_leaves: bool = False,
        creating: bool = True,
    ) -> None:
        self.table_id = table_id
        self.index_leaves = index_leaves  # LogEntry.index_leaves of every entry appended
        # Whether this writer may append transaction 1, the table's creation. One opened for a table that
        # exists (open_state_store) may not: a log and snapshots holding nothing mean the table is being
        # created or deleted, and a commit then raises TableNotInitialisedError, writing nothing.
        self.creating = creating
        self.schema = schema
        self.log = log
        self.snapshots = snapshots
        self.retry = retry or RetryPolicy()
        self._clock = clock
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._state: TableState | None = None
        self.max_unread_ms = max_unread_ms
        self._read_to_end_at = 0
        self.retries = 0  # collisions seen by this instance, for benchmarks and metrics

    # --- writing --------------------------------------------------------------------------------

    def commit(self, transaction: Transaction, request_id: str | None = None) -> CommitResult:
        """Validate and append ``transaction`` as the next log entry, then apply it locally.

        With a ``request_id`` the commit is idempotent, as a queued request is: the entry holds the request
        (a batch of one) and its ``committed`` status is written with it; a request already decided is not
        applied again (a committed one gives its first result, with ``already_committed``; a rejected one
        raises RequestRejectedBeforeError), and a rejection is recorded as the request's final status.
        That needs a log that records statuses (StateStoreError otherwise).

        Raises the transaction's TransactionValidationError (nothing is written; the state it was checked
        against was read to the end of the log), CommitConflictError when every attempt lost the race for
        the next number, CommitOutcomeUnknownError when the store failed so that it cannot be told
        whether the entry was stored, or ThrottledError when the log kept refusing the put (not stored).
        """
        if request_id is not None:
            return self._commit_request(transaction, request_id)
        encoded: list[tuple[bytes, bool]] = []
        errors: list[TransactionValidationError] = []

        def draft(state: TableState, update_time: int) -> _Draft | None:
            errors.clear()
            try:
                transaction.validate(state)
            except TransactionValidationError as e:
                errors.append(e)
                return None
            if not encoded:  # once, after the first validation: a malformed transaction reports its own error
                encoded.append(encode_transaction(transaction))
            rejected = tuple((part, str(error)) for part, error in transaction.rejected_parts(state))
            return _Draft(transaction, None, encoded[0], rejected)

        appended = self._append(draft, optimistic=False, what=transaction.TYPE)
        if appended is None:
            raise errors[0]
        number, update_time, attempts, made = appended
        return CommitResult(number, update_time, attempts, made.rejected_parts)

    def _commit_request(self, transaction: Transaction, request_id: str) -> CommitResult:
        statuses = self._statuses("commit with a request id")
        known = statuses.get(self.table_id, request_id)
        if known is not None and known.is_final:
            return result_of_final_status(known)
        outcome = self._commit_group([GroupMember(request_id, transaction)], optimistic=False)
        if request_id in outcome.rejected:
            error = outcome.rejected[request_id]
            rejected = CommitStatus(
                request_id, self.table_id, CommitOutcome.REJECTED, self._clock(), None, str(error)
            )
            kept = statuses.record([rejected])
            if rejected.key in kept:  # decided meanwhile by another writer: that decision stands
                return result_of_final_status(kept[rejected.key])
            raise error
        if request_id in outcome.decided:
            decided = statuses.get(self.table_id, request_id)
            if decided is None:  # a final status cannot go; only its expiry could lose it
                raise StateStoreError(
                    f"table {self.table_id!r}: request {request_id!r} was decided, but its status is gone"
                )
            return result_of_final_status(decided)
        return CommitResult(
            outcome.number_of(request_id),
            outcome.update_time_of(request_id),
            outcome.attempts,
            outcome.skipped_parts.get(request_id, ()),
        )

    def _statuses(self, what: str) -> CommitStatusStore:
        statuses = self.log.request_statuses
        if statuses is None:
            raise StateStoreError(f"table {self.table_id!r}: {what} needs a log that records commit statuses")
        return statuses

    def commit_group(self, members: Sequence[GroupMember]) -> GroupCommitResult:
        """Commit several independent requests as **one** log entry (a :class:`TransactionBatch`).

        Each member is validated against the state as changed by the members before it, starting from the
        state the entry will be appended after; invalid members are rejected, the others written together
        at exactly that state's number + 1. On a lost race the whole group is redone against the caught-up
        state. A rejection is only reported once it was made against a state read to the end of the log or
        proven current by the append that followed it.

        Where the log records statuses, the ``committed`` status of each member written is put with the
        entry, atomically; a member whose request already has a final status is then left out (listed in
        ``decided``: look its status up), and the group redone without it.

        Optimistic: starts from the cached state, without reading the log. Raises CommitConflictError,
        CommitOutcomeUnknownError, or a store's StateStoreError; nothing is reported then.
        """
        return self._commit_group(members, optimistic=True)

    def _commit_group(self, members: Sequence[GroupMember], *, optimistic: bool) -> GroupCommitResult:
        keys = [m.key for m in members]
        if len(set(keys)) != len(keys):
            raise ValueError("a commit group names a key more than once")
        records_statuses = self.log.request_statuses is not None
        decided: list[str] = []  # members whose request had a final status when the entry was put
        rejected: dict[str, TransactionValidationError] = {}
        skipped: dict[str, tuple[tuple[str, str], ...]] = {}

        def draft(state: TableState, update_time: int) -> _Draft | None:
            rejected.clear()
            skipped.clear()
            todo = [member for member in members if member.key not in decided]
            # One member is validated on the state and applied after the append. Several are each validated
            # against the state as the ones before it changed it: applied to the state itself under an undo
            # mark, kept if the append succeeds and undone otherwise, so a group costs what it changes.
            mark = state.begin_changes() if len(todo) > 1 else None
            try:
                items = []
                attachments = []
                outcomes = []
                for member in todo:
                    try:
                        member.transaction.validate(state)
                    except TransactionValidationError as e:
                        rejected[member.key] = e
                        continue
                    parts = tuple(
                        (part, str(error)) for part, error in member.transaction.rejected_parts(state)
                    )
                    skipped[member.key] = parts
                    if mark is not None:
                        member.transaction.apply(state, update_time)
                    if member.stored_body is None:
                        items.append(BatchItem(member.key, member.transaction))
                    else:
                        items.append(BatchItem(member.key, member.transaction, member.stored_body[0]))
                        attachments.append(member.stored_body)
                    if records_statuses:
                        outcomes.append(
                            CommitStatus(
                                member.key,
                                self.table_id,
                                CommitOutcome.COMMITTED,
                                update_time,
                                state.transaction_number + 1,
                                skipped_note(parts),
                            )
                        )
                if not items:
                    if mark is not None:
                        state.undo_changes(mark)
                    return None
                batch = TransactionBatch(tuple(items))
                return _Draft(batch, mark, encode_transaction(batch), (), tuple(attachments), tuple(outcomes))
            except BaseException:
                if mark is not None:
                    state.undo_changes(mark)
                raise

        appended = self._append(
            draft, optimistic=optimistic, what=f"group of {len(members)}", recheck=lambda: bool(rejected),
            decided=decided,
        )  # fmt: skip
        if rejected and records_statuses:
            # A member another writer committed is invalid on the state that holds it (its file exists):
            # its request's final status, not this rejection, is the truth.
            finals = self._statuses("a group commit").get_many((self.table_id, key) for key in rejected)
            for key in [key for key in rejected if (f := finals.get((self.table_id, key))) and f.is_final]:
                del rejected[key]
                decided.append(key)
        if appended is None:
            return GroupCommitResult(None, None, 1, (), {}, dict(rejected), {}, decided=tuple(decided))
        number, update_time, attempts, made = appended
        batch = made.transaction
        assert isinstance(batch, TransactionBatch)
        return GroupCommitResult(
            number,
            update_time,
            attempts,
            batch.request_ids,
            {},
            dict(rejected),
            dict(skipped),
            decided=tuple(decided),
        )

    def _append(
        self,
        draft: Callable[[TableState, int], _Draft | None],
        *,
        optimistic: bool,
        what: str,
        recheck: Callable[[], bool] = lambda: False,
        decided: list[str] | None = None,
    ) -> tuple[int, int, int, _Draft] | None:
        """The append loop every commit goes through.

        ``draft(state, update_time)`` validates against ``state`` and returns what to append, or None when
        there is nothing to write. Its entry goes in at exactly ``state.transaction_number + 1``; on a lost
        race the state is caught up and ``draft`` asked again, after a full-jitter backoff. When nothing is
        to be written from an ``optimistic`` (cached) state and ``recheck()`` says the decision depended on
        that state (a rejection), the state is read to the end and ``draft`` asked again. When the log
        refuses the entry because some of its requests already have a final status, their ids are added to
        ``decided`` and ``draft`` asked again (it leaves them out). Returns ``(number, update_time,
        attempts, draft)``, or None if the last draft had nothing to write.

        An entry's update time is never before the previous entry's, whatever this writer's clock says, so
        the log's times never run backwards (readers select entries by time).
        """
        state = self.cached_state() if optimistic else self.state()
        current = not optimistic  # whether ``state`` was just read to the end of the log
        attempt = 0
        while True:
            if state.transaction_number == 0 and not self.creating:
                if not current:  # loaded before the table's first transaction was written, perhaps
                    state = self._state = self._catch_up(state)
                    current = True
                    continue
                raise TableNotInitialisedError(self.table_id)  # nothing judged against no table either
            update_time = max(self._clock(), self._last_update_time(state))
            made = draft(state, update_time)
            if made is None:
                if not current and recheck():
                    # Nothing to write, so no append proves the cached state current: a rejection made
                    # against it may be stale. Read to the end and decide again.
                    state = self._state = self._catch_up(state)
                    current = True
                    continue
                # A decision no append proves current: a table whose delete began says so instead.
                self.confirm_table()
                return None
            number = state.transaction_number + 1
            body, compressed = made.encoded
            entry = LogEntry(
                number,
                update_time,
                made.transaction.TYPE,
                body,
                compressed,
                uuid.uuid4().hex,
                made.attachments,
                leaves_added_to(made.transaction, state.is_leaf),
                made.transaction.most_added(),
                self.index_leaves,
            )
            try:
                appended = self._put(entry, made.outcomes)
            except RequestsAlreadyDecidedError as e:
                if made.undo_mark is not None:
                    state.undo_changes(made.undo_mark)
                if decided is None or not set(e.request_ids) - set(decided):
                    raise  # nothing left out would change the next draft
                decided.extend(r for r in e.request_ids if r not in decided)
                continue  # nothing was written: draft again without them, on the same state
            except BaseException:
                if made.undo_mark is not None:
                    state.undo_changes(made.undo_mark)  # the cached state stays as the log was last read
                raise
            if appended:
                if made.undo_mark is None:
                    made.transaction.apply(state, update_time)
                else:
                    state.keep_changes(made.undo_mark)
                state.transaction_number = number
                state.last_update_time = update_time
                self._state = state
                return number, update_time, attempt + 1, made
            if made.undo_mark is not None:
                state.undo_changes(made.undo_mark)
            self.retries += 1
            attempt += 1
            if attempt == self.retry.max_attempts:
                raise CommitConflictError(
                    f"table {self.table_id!r}: gave up after {self.retry.max_attempts} attempts to append a "
                    f"{what} transaction; other writers kept taking the next number"
                )
            self._sleep(self.retry.delay(attempt - 1, self._rng))
            state = self._state = self._catch_up(state)
            current = True

    def _put(self, entry: LogEntry, outcomes: Sequence[CommitStatus] = ()) -> bool:
        """Append ``entry`` (with ``outcomes``): True once it is in the log, False if another writer holds its
        number.

        An ambiguous failure (StoreUnavailableError: the put may have landed) is resolved by reading the
        entry's number back and comparing writer tokens (the outcomes are written with the entry or not at
        all); while that cannot be told, the identical entry is put again (safe: the condition lets at most
        one copy in). Raises CommitOutcomeUnknownError if the outcome stays unknown, and
        RequestsAlreadyDecidedError (nothing written) as the log does. A throttled first put
        (ThrottledError: refused, so not stored) is raised as it is: botocore has retried it already. Each
        put and read-back is one call of at most botocore's attempts, so a log that always fails sees at
        most ``retry.max_attempts`` of each.
        """
        number = entry.transaction_number
        last_error: StoreUnavailableError | None = None
        for attempt in range(self.retry.max_attempts):
            try:
                if outcomes:
                    self.log.append(self.table_id, entry, outcomes)
                else:
                    self.log.append(self.table_id, entry)
                return True
            except PreviousEntryGoneError:
                # Nothing was written (the number itself is free, or it would be reported taken): the state
                # is behind entries cleanup deleted. Lost, as a race is: the caller catches up and reloads.
                # Unless nothing is left at or after the state's entry: cleanup keeps the latest, so the
                # log was emptied, and no retry can land.
                if self.log.latest_number(self.table_id) < number - 1:
                    raise TableLogGoneError(self.table_id, number - 1) from None
                return False
            except TransactionNumberTakenError:
                holder = self._writer_at(number)
                if holder is None:
                    raise CommitOutcomeUnknownError(
                        self.table_id, number, entry.writer_token, "the number is taken but its entry is gone"
                    ) from None
                return holder == entry.writer_token
            except RequestsAlreadyDecidedError:
                if last_error is None:
                    raise
                # A retry after an ambiguous failure: the first try may have landed, writing these very
                # statuses. Only the entry can tell.
                holder = self._writer_at(number)
                if holder == entry.writer_token:
                    return True
                raise
            except StoreUnavailableError as e:
                if isinstance(e, ThrottledError) and last_error is None:
                    raise  # refused, so surely not stored (botocore has retried it already)
                last_error = e
            try:
                holder = self._writer_at(number)
            except StoreUnavailableError as e:
                last_error = e
            else:
                if holder is not None:
                    return holder == entry.writer_token
            self._sleep(self.retry.delay(attempt, self._rng))
        raise CommitOutcomeUnknownError(self.table_id, number, entry.writer_token, str(last_error))

    def _last_update_time(self, state: TableState) -> int:
        """The update time of the entry ``state`` is at: kept by the state, else read from the log (a state
        loaded from an older snapshot with no entry after it; the log always keeps its latest entry, and an
        entry it no longer has is followed by the one that took the next number)."""
        if state.last_update_time or not state.transaction_number:
            return state.last_update_time
        for entry in self.log.read(self.table_id, state.transaction_number, state.transaction_number):
            state.last_update_time = entry.update_time
        return state.last_update_time

    def _writer_at(self, number: int) -> str | None:
        """The writer token of entry ``number``, or None if there is no such entry."""
        for entry in self.log.read(self.table_id, number, number):
            return entry.writer_token
        return None

    # --- snapshots ------------------------------------------------------------------------------

    def create_snapshot(self) -> SnapshotInfo | None:
        """Write a snapshot of the latest state; None if the log has not moved since the last one."""
        if self.snapshots is None:
            raise StateStoreError("this state store has no snapshot store")
        latest = self.snapshots.metadata.latest(self.table_id)
        latest_number = latest.transaction_number if latest else 0
        if self.log.latest_number(self.table_id) <= latest_number:
            return None
        state = self.state()
        return self.snapshots.write(self.table_id, state, self._clock())
