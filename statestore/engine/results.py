"""What a commit to a table's state store returns, and the surface callers use of a state store.

Kept apart from the engine so that both stores share them:
:class:`statestore.engine.log_store.TransactionLogStateStore` (files on the log) and
:class:`statestore.engine.row_store.RowFilesStateStore` (files as rows). The engine re-exports every name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from statestore.errors import RequestRejectedBeforeError, StateStoreError, TransactionValidationError
from statestore.model.schema import Schema
from statestore.state.table_state import TableState
from statestore.store.ports import CommitOutcome, CommitStatus, TransactionLogStore
from statestore.store.snapshot_ports import SnapshotInfo
from statestore.transactions import Transaction

T = TypeVar("T")


@dataclass(frozen=True)
class GroupMember:
    """One request of a group commit: ``key`` (the commit request id) names it in the log entry.

    ``stored_body`` is ``(blob key, bytes)`` of an object under the table's log body prefix that already
    holds the transaction's JSON: the entry then points at it (as an attachment) instead of holding it.
    """

    key: str
    transaction: Transaction
    stored_body: tuple[str, bytes] | None = None


@dataclass(frozen=True)
class GroupCommitResult:
    """What a group commit did with each member.

    ``committed`` members are in entry ``transaction_number`` (None when nothing was written); ``found``
    maps members a file store found committed before to their commit; ``rejected`` holds each invalid
    member's error; ``skipped_parts`` the parts of committed members that were skipped, with their
    reasons; ``decided`` the members left out because their request already had a final status when the
    entry was put (committed or rejected before: look the status up).

    A store that keeps files outside the log (:class:`statestore.engine.row_store.RowFilesStateStore`) may
    land one group in several commits: ``numbers`` and ``update_times`` then give each committed member its
    own (read them with :meth:`number_of` and :meth:`update_time_of`), ``transaction_number`` is the last
    commit's, and ``log_entries`` lists the log entries written as ``(number, update_time, keys)``.
    Left empty, every committed member is in the one entry ``transaction_number``.
    """

    transaction_number: int | None
    update_time: int | None
    attempts: int
    committed: tuple[str, ...]
    found: dict[str, int]
    rejected: dict[str, TransactionValidationError]
    skipped_parts: dict[str, tuple[tuple[str, str], ...]]
    numbers: Mapping[str, int] = field(default_factory=dict)
    update_times: Mapping[str, int] = field(default_factory=dict)
    log_entries: tuple[tuple[int, int, tuple[str, ...]], ...] | None = None
    decided: tuple[str, ...] = ()

    def number_of(self, key: str) -> int:
        """The number of the commit that holds committed member ``key``. Raises KeyError for another."""
        if key in self.numbers:
            return self.numbers[key]
        if key not in self.committed or self.transaction_number is None:
            raise KeyError(key)
        return self.transaction_number

    def update_time_of(self, key: str) -> int:
        """The update time of the commit that holds committed member ``key``. Raises KeyError for another."""
        if key in self.update_times:
            return self.update_times[key]
        if key not in self.committed or self.update_time is None:
            raise KeyError(key)
        return self.update_time

    def written_log_entries(self) -> tuple[tuple[int, int, tuple[str, ...]], ...]:
        """The log entries this group wrote, as ``(number, update_time, keys)``, oldest first."""
        if self.log_entries is not None:
            return self.log_entries
        if self.transaction_number is None or self.update_time is None:
            return ()
        return ((self.transaction_number, self.update_time, self.committed),)


@dataclass(frozen=True)
class CommitResult:
    """Where a committed transaction landed, and the parts of it that were skipped with their reasons.

    ``already_committed``: a commit with a request id that an earlier commit of that id had applied (this
    one applied nothing; the figures are the first's, its update time the time its status was recorded).
    """

    transaction_number: int
    update_time: int
    attempts: int = 1
    rejected_parts: tuple[tuple[str, str], ...] = field(default=())
    already_committed: bool = False


def skipped_note(parts: Sequence[tuple[str, str]]) -> str | None:
    """What a committed request's status says of its skipped parts (None: none was skipped)."""
    return "; ".join(f"skipped {part}: {error}" for part, error in parts) or None


def result_of_final_status(status: CommitStatus) -> CommitResult:
    """The result of a commit whose request id was decided before: committed (``already_committed``), or
    RequestRejectedBeforeError for a rejected one; StateStoreError for an outcome no commit can stand on."""
    if status.outcome is CommitOutcome.COMMITTED and status.transaction_number is not None:
        parts = (("skipped", status.reason),) if status.reason else ()
        return CommitResult(status.transaction_number, status.recorded_time, 0, parts, already_committed=True)
    if status.outcome is CommitOutcome.REJECTED:
        raise RequestRejectedBeforeError(status.table_id, status.request_id, status.reason or "")
    raise StateStoreError(
        f"table {status.table_id!r}: request {status.request_id!r} is {status.outcome.value}: "
        f"{status.reason or 'no reason recorded'}; send its changes again under a new request id"
    )


class TableStateStore(Protocol):
    """What callers use of a table's state store: :class:`TransactionLogStateStore` (files on the log) or
    :class:`statestore.engine.row_store.RowFilesStateStore` (partitions on the log, files in a database)."""

    table_id: str
    schema: Schema
    retries: int

    @property
    def log(self) -> TransactionLogStore: ...

    @property
    def loaded_state(self) -> TableState | None: ...

    def state(self) -> TableState: ...

    def cached_state(self) -> TableState: ...

    def load(self, as_of: int | None = None) -> TableState: ...

    def read_log_to_end(self) -> int: ...

    def confirmed(self, read: Callable[[], T]) -> T: ...

    def require_file_log(self, what: str) -> None: ...

    def commit(self, transaction: Transaction, request_id: str | None = None) -> CommitResult: ...

    def commit_group(self, members: Sequence[GroupMember]) -> GroupCommitResult: ...

    def create_snapshot(self) -> SnapshotInfo | None: ...
