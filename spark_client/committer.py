"""How the Spark jobs ask for commits: one small interface, a synchronous and a queue implementation.

The jobs never append to the log themselves. They hand a transaction to a :class:`JobCommitter` and get a
:class:`CommitReport` back: committed at transaction N, rejected with the reason, or (for an
asynchronous request not waited for) pending under its request id.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from statestore.engine.log_store import TableStateStore
from statestore.engine.requests import CommitSender
from statestore.errors import TransactionValidationError
from statestore.store.ports import CommitOutcome, CommitStatus
from statestore.transactions import Transaction


@dataclass(frozen=True)
class CommitReport:
    """What became of one commit request.

    ``committed`` with ``transaction_number`` set; or rejected with ``reason``; or ``pending`` when the
    caller chose not to wait (only the queue committer). ``rejected_parts`` lists parts of a transaction
    with independent parts (compaction jobs) that were skipped, as ``(part id, reason)``.
    """

    committed: bool
    transaction_number: int | None = None
    reason: str | None = None
    request_id: str | None = None
    rejected_parts: tuple[tuple[str, str], ...] = ()
    pending: bool = False

    @property
    def rejected(self) -> bool:
        return not self.committed and not self.pending


class JobCommitter(Protocol):
    """Commits transactions for the jobs."""

    def commit(
        self, table_id: str, transaction: Transaction, wait: bool = True, request_id: str | None = None
    ) -> CommitReport:
        """Request that ``transaction`` be committed to ``table_id``.

        With ``wait`` the outcome is final (committed or rejected) unless the committer did not answer in
        time (pending). Without it an asynchronous committer may return a pending outcome at once. A
        rejection is an outcome, not an exception; errors of the backend itself (unreachable, throttled
        past its retries) are raised as StateStoreError. ``request_id`` makes the request idempotent: a
        request with an id already decided is not applied again, and its first outcome comes back.
        """
        ...

    def previous_outcome(self, table_id: str, request_id: str) -> CommitReport | None:
        """The final outcome of an earlier request of ``table_id`` with this id, or None if there is none
        (yet). Request ids are scoped to their table."""
        ...


class SyncCommitter:
    """Commits directly through :meth:`TableStateStore.commit` (the caller does the conditional put).

    Fine for tests, benchmarks and rare writers. ``wait`` is ignored: the outcome is always final. A
    ``request_id`` makes a commit idempotent as through the queue: its status is written with its entry.
    Thread-safe: commits to one table are serialised on one store instance (the store is not
    thread-safe, and concurrent writers still coordinate through the log).
    """

    def __init__(self, stores: Callable[[str], TableStateStore]) -> None:
        """``stores(table_id)`` builds a state store for a table; one is built per table and reused."""
        self._factory = stores
        self._stores: dict[str, TableStateStore] = {}
        self._lock = threading.Lock()

    @classmethod
    def for_store(cls, store: TableStateStore) -> SyncCommitter:
        """A committer for the one table of ``store`` (used only by this committer from now on)."""

        def only(table_id: str) -> TableStateStore:
            if table_id != store.table_id:
                raise ValueError(f"this committer only commits to table {store.table_id!r}, not {table_id!r}")
            return store

        return cls(only)

    def commit(
        self, table_id: str, transaction: Transaction, wait: bool = True, request_id: str | None = None
    ) -> CommitReport:
        with self._lock:
            store = self._store(table_id)
            try:
                result = store.commit(transaction, request_id)
            except TransactionValidationError as e:
                return CommitReport(False, reason=f"{type(e).__name__}: {e}", request_id=request_id)
        return CommitReport(
            True, result.transaction_number, request_id=request_id, rejected_parts=result.rejected_parts
        )

    def previous_outcome(self, table_id: str, request_id: str) -> CommitReport | None:
        with self._lock:
            statuses = self._store(table_id).log.request_statuses
        if statuses is None:
            raise ValueError(
                "this table's log records no commit statuses, so a synchronous commit cannot be made "
                "idempotent; commit through the queue (QueueCommitter)"
            )
        status = statuses.get(table_id, request_id)
        return None if status is None or not status.is_final else report_of_status(request_id, status)

    def _store(self, table_id: str) -> TableStateStore:
        store = self._stores.get(table_id)
        if store is None:
            store = self._stores[table_id] = self._factory(table_id)
        return store


def report_of_status(request_id: str, status: CommitStatus) -> CommitReport:
    """A request's final status as a report."""
    if status.outcome is CommitOutcome.COMMITTED:
        # For a committed request the reason, if any, names the parts that were skipped.
        parts = (("skipped", status.reason),) if status.reason else ()
        return CommitReport(True, status.transaction_number, None, request_id, parts)
    return CommitReport(False, reason=f"{status.outcome.value}: {status.reason}", request_id=request_id)


class QueueCommitter:
    """Sends commit requests to the committer's SQS FIFO queue through a :class:`CommitSender`.

    A thin adapter: the sender owns message bodies (big ones go to the bucket), deduplication ids and
    looking outcomes up by request id; this maps its :class:`CommitStatus` onto :class:`CommitReport`.
    A request with no outcome after ``wait_timeout`` seconds comes back pending, with its request id.
    """

    def __init__(self, sender: CommitSender, wait_timeout: float = 120.0, poll_interval: float = 0.1) -> None:
        self.sender = sender
        self.wait_timeout = wait_timeout
        self.poll_interval = poll_interval

    def commit(
        self, table_id: str, transaction: Transaction, wait: bool = True, request_id: str | None = None
    ) -> CommitReport:
        if request_id is not None and (previous := self.previous_outcome(table_id, request_id)) is not None:
            return previous
        request_id = self.sender.send(table_id, transaction, request_id)
        if not wait:
            return CommitReport(False, request_id=request_id, pending=True)
        return self.outcome(table_id, request_id)

    def outcome(self, table_id: str, request_id: str) -> CommitReport:
        """Wait (up to ``wait_timeout``) for the outcome of an earlier request."""
        status = self.sender.wait(
            table_id, request_id, timeout=self.wait_timeout, poll_interval=self.poll_interval
        )
        if status is None:
            reason = f"no outcome after {self.wait_timeout:g}s; look it up later by request id {request_id!r}"
            return CommitReport(False, reason=reason, request_id=request_id, pending=True)
        return report_of_status(request_id, status)

    def previous_outcome(self, table_id: str, request_id: str) -> CommitReport | None:
        """The final outcome of an earlier request of the table with this id (committed, rejected or
        unknown), or None.

        A dead-lettered request is not final (it can be redriven), so it gives None: sending it again is
        how it gets processed. Outcomes are kept as long as the status table keeps them (its TTL).
        """
        status = self.sender.status(table_id, request_id)
        return None if status is None or not status.is_final else report_of_status(request_id, status)
