"""The one place that appends to a table's transaction log and rebuilds state from it.

Commit: catch up, validate, conditionally put number ``last + 1``; on a collision catch up, validate again
and retry after a full-jitter exponential backoff; apply locally only once the put succeeded.
Load: the newest snapshot at or before the wanted point, then the log after it.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from statestore.codec.transaction_json import decode_entry, encode_transaction
from statestore.errors import (
    CommitConflictError,
    StateStoreError,
    TransactionNotRetainedError,
    TransactionNumberTakenError,
)
from statestore.ports import LogEntry, SnapshotInfo, TransactionLogStore
from statestore.schema import Schema
from statestore.snapshots import SnapshotStore
from statestore.state import TableState
from statestore.transactions import Transaction


def now_millis() -> int:
    return time.time_ns() // 1_000_000


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
        return rng.uniform(0.0, min(self.max_delay, self.base_delay * (2**attempt)))


@dataclass(frozen=True)
class CommitResult:
    """Where a committed transaction landed, and the parts of it that were skipped with their reasons."""

    transaction_number: int
    update_time: int
    attempts: int = 1
    rejected_parts: tuple[tuple[str, str], ...] = field(default=())


class TransactionLogStateStore:
    """A table's state, kept up to date from its log; commits go through :meth:`commit`.

    Not thread-safe: give each thread its own instance (they coordinate through the log).
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
        on_follow: Callable[[LogEntry, Transaction], None] | None = None,
        max_unread_ms: int = 5 * 60_000,
    ) -> None:
        self.table_id = table_id
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
        # Told of every log entry this store applies from the log (the committer learns request ids from it).
        self._on_follow = on_follow
        self.retries = 0  # collisions seen by this instance, for benchmarks and metrics

    # --- reading --------------------------------------------------------------------------------

    def state(self) -> TableState:
        """The up-to-date state (strongly consistent). Treat it as read-only."""
        if self._state is None:
            self._state = self.load()
        else:
            self._state = self._catch_up(self._state)
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
            self._state = self._catch_up(self._state)
        return self._state

    def load(self, as_of: int | None = None) -> TableState:
        """A fresh, independent state: the newest snapshot at or before ``as_of``, then the log up to it.

        ``as_of=None`` means the latest transaction. Raises TransactionNotRetainedError when cleanup
        already deleted the entries needed, and StateStoreError when ``as_of`` is beyond the log.
        """
        if as_of is not None:
            if as_of < 0:
                raise StateStoreError(f"transaction number must be >= 0, got {as_of}")
            latest = self.log.latest_number(self.table_id)
            if as_of > latest:
                raise StateStoreError(
                    f"table {self.table_id!r} has no transaction {as_of} yet (latest is {latest})"
                )
        state = self._from_snapshot(as_of)
        self._follow(state, as_of)
        return state

    def _from_snapshot(self, as_of: int | None) -> TableState:
        info: SnapshotInfo | None = None
        if self.snapshots is not None:
            info = self.snapshots.latest_at_or_before(self.table_id, as_of)
        if info is None:
            return TableState(self.schema)
        return self.snapshots.read(info, self.schema)  # type: ignore[union-attr]

    def _catch_up(self, state: TableState) -> TableState:
        """``state`` brought up to date, or a fresh load if cleanup deleted entries it had not seen."""
        try:
            self._follow(state, None)
            return state
        except TransactionNotRetainedError:
            fresh = self._from_snapshot(None)
            if fresh.transaction_number <= state.transaction_number:
                raise
            self._follow(fresh, None)
            return fresh

    def _follow(self, state: TableState, to_number: int | None) -> None:
        expected = state.transaction_number + 1
        if to_number is not None and to_number < expected:
            return
        for entry in self.log.read(self.table_id, expected, to_number):
            if entry.transaction_number != expected:
                raise TransactionNotRetainedError(
                    f"table {self.table_id!r}: log entries {expected}..{entry.transaction_number - 1} were "
                    "deleted and no snapshot covers them"
                )
            transaction = decode_entry(entry)
            transaction.apply(state, entry.update_time)
            state.transaction_number = entry.transaction_number
            if self._on_follow is not None:
                self._on_follow(entry, transaction)
            expected += 1
        if to_number is None:
            # Read to the end. The log never deletes its latest entry, so an empty read means the state
            # is current, not that cleanup removed everything after it.
            self._read_to_end_at = self._clock()
            return
        if to_number is not None and state.transaction_number < to_number:
            raise TransactionNotRetainedError(
                f"table {self.table_id!r}: transaction {state.transaction_number + 1} is no longer in the log"
            )

    # --- writing --------------------------------------------------------------------------------

    def commit(self, transaction: Transaction) -> CommitResult:
        """Validate and append ``transaction`` as the next log entry, then apply it locally.

        Raises the transaction's TransactionValidationError (nothing is written), or CommitConflictError
        when every attempt lost the race for the next number.
        """
        state = self.state()
        encoded: tuple[bytes, bool] | None = None
        for attempt in range(self.retry.max_attempts):
            transaction.validate(state)
            # Encoded once, after the first validation, so a malformed transaction reports its own error.
            body, compressed = encoded = encoded or encode_transaction(transaction)
            rejected = tuple((part, str(error)) for part, error in transaction.rejected_parts(state))
            number = state.transaction_number + 1
            update_time = self._clock()
            entry = LogEntry(number, update_time, transaction.TYPE, body, compressed)
            try:
                self.log.append(self.table_id, entry)
            except TransactionNumberTakenError:
                self.retries += 1
                if attempt + 1 == self.retry.max_attempts:
                    break  # no point waiting or catching up just to give up
                self._sleep(self.retry.delay(attempt, self._rng))
                state = self._state = self._catch_up(state)
                continue
            transaction.apply(state, update_time)
            state.transaction_number = number
            return CommitResult(number, update_time, attempt + 1, rejected)
        raise CommitConflictError(
            f"table {self.table_id!r}: gave up after {self.retry.max_attempts} attempts to append a "
            f"{transaction.TYPE} transaction; other writers kept taking the next number"
        )

    def append_validated(self, transaction: Transaction, validated: TableState, update_time: int) -> int:
        """Append a transaction already applied to ``validated`` (a copy of this store's state).

        Used by the committer, which validates a group of requests on a copy before writing them as one
        entry. On success the copy becomes this store's state. Raises TransactionNumberTakenError if
        another writer got there first; this store's state is then unchanged.
        """
        current = self.cached_state()
        number = current.transaction_number + 1
        body, compressed = encode_transaction(transaction)
        self.log.append(self.table_id, LogEntry(number, update_time, transaction.TYPE, body, compressed))
        validated.transaction_number = number
        self._state = validated
        return number

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
