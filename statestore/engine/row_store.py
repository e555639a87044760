"""A table whose partitions are on the transaction log and whose files are rows in a file-reference store.

Design record 002, option 3: file references live in PostgreSQL (a :class:`FileReferenceStore`), partitions
stay on the log. :class:`RowFilesStateStore` has the surface of
:class:`statestore.engine.log_store.TransactionLogStateStore` that callers use (:class:`TableStateStore`), so
the client, the committer, the CLI and the Spark jobs work unchanged on either kind of table.

Where each transaction goes: partition transactions to the log (an inner ``TransactionLogStateStore`` that
only ever holds partition transactions); row transactions (``statestore.views.row_decisions``) to the file
store, validated against the log's partition tree; ``ClearFiles`` and ``ClearTable`` clear the file store,
then are written to the log too (``ClearTable`` clears the partitions there; both record their request id
there, so a redelivered clear is found like any log request). The file store keeps only the current state:
time travel and whatever reads the history of file transactions raise :class:`UnsupportedByFileStoreError`.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from statestore.engine.log_store import (
    CommitResult,
    GroupCommitResult,
    GroupMember,
    RetryPolicy,
    TableStateStore,
    TransactionLogStateStore,
)
from statestore.engine.results import T, result_of_final_status, skipped_note
from statestore.engine.snapshots import SnapshotStore
from statestore.errors import (
    FilesPresentError,
    StateStoreError,
    TableNotInitialisedError,
    TransactionValidationError,
    UnsupportedByFileStoreError,
)
from statestore.model.clock import now_millis
from statestore.model.files import TableFile
from statestore.model.schema import Schema
from statestore.state.table_state import TableState
from statestore.store.ports import (
    CommitOutcome,
    CommitStatus,
    FileCommitMember,
    FileCommitOutcome,
    FileReferenceStore,
    TransactionLogStore,
)
from statestore.store.snapshot_ports import SnapshotInfo
from statestore.store.tables import TableInfo
from statestore.transactions import (
    ClearFiles,
    ClearTable,
    InitialisePartitions,
    Transaction,
    TransactionBatch,
)
from statestore.views.row_decisions import is_row_transaction

_CLEARS = (ClearFiles, ClearTable)


@dataclass
class _Merged:
    """A group's outcome gathered over its runs, in the members' order."""

    committed: list[str] = field(default_factory=list)
    found: dict[str, int] = field(default_factory=dict)
    rejected: dict[str, TransactionValidationError] = field(default_factory=dict)
    skipped: dict[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)
    numbers: dict[str, int] = field(default_factory=dict)
    update_times: dict[str, int] = field(default_factory=dict)
    log_entries: list[tuple[int, int, tuple[str, ...]]] = field(default_factory=list)
    decided: list[str] = field(default_factory=list)
    attempts: int = 0
    last: tuple[int, int] | None = None  # (number, update time) of the last commit written

    def add_committed(self, key: str, number: int, update_time: int) -> None:
        self.committed.append(key)
        self.numbers[key] = number
        self.update_times[key] = update_time
        self.last = (number, update_time)

    def result(self) -> GroupCommitResult:
        number, update_time = self.last if self.last is not None else (None, None)
        return GroupCommitResult(
            number,
            update_time,
            max(self.attempts, 1),
            tuple(self.committed),
            self.found,
            self.rejected,
            self.skipped,
            self.numbers,
            self.update_times,
            tuple(self.log_entries),
            tuple(self.decided),
        )


class RowFilesStateStore:
    """A table's state: partitions from its log, files from a :class:`FileReferenceStore`.

    Not thread-safe: give each thread its own instance (they coordinate through the log and the file store).
    """

    def __init__(
        self,
        table_id: str,
        schema: Schema,
        log: TransactionLogStore,
        file_store: FileReferenceStore,
        snapshots: SnapshotStore | None = None,
        *,
        retry: RetryPolicy | None = None,
        clock: Callable[[], int] = now_millis,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
        max_unread_ms: int = 5 * 60_000,
        creating: bool = True,
    ) -> None:
        self.table_id = table_id
        self.schema = schema
        self.file_store = file_store
        self._clock = clock
        # Holds partition transactions (and clears) only: its state never has a file.
        self.partition_log = TransactionLogStateStore(
            table_id,
            schema,
            log,
            snapshots,
            retry=retry,
            clock=clock,
            sleep=sleep,
            rng=rng,
            max_unread_ms=max_unread_ms,
            creating=creating,
        )
        self._state: TableState | None = None

    @property
    def log(self) -> TransactionLogStore:
        return self.partition_log.log

    @property
    def snapshots(self) -> SnapshotStore | None:
        return self.partition_log.snapshots

    @property
    def retries(self) -> int:
        """Collisions seen on the log (the file store redoes its own races inside a commit)."""
        return self.partition_log.retries

    @retries.setter
    def retries(self, value: int) -> None:
        self.partition_log.retries = value

    def require_file_log(self, what: str) -> None:
        """Raise UnsupportedByFileStoreError: ``what`` needs the history of file transactions, which this
        table does not keep."""
        raise UnsupportedByFileStoreError(self.table_id, what)

    # --- reading --------------------------------------------------------------------------------

    def state(self) -> TableState:
        """The up-to-date state: the file store's files, then the log's partitions (read after the files, so
        every partition a reference names is there). Numbered by the log. Treat it as read-only."""
        files = self.file_store.files(self.table_id)
        self._state = self._combined(self.partition_log.state(), files)
        return self._state

    @property
    def loaded_state(self) -> TableState | None:
        """The state as last read, or None if it was never read; reads nothing."""
        return self._state

    def cached_state(self) -> TableState:
        """The cached partition tree with the files as they are now (the file store is read: it keeps no
        history to catch up from)."""
        files = self.file_store.files(self.table_id)
        self._state = self._combined(self.partition_log.cached_state(), files)
        return self._state

    def load(self, as_of: int | None = None) -> TableState:
        """A fresh state; ``as_of`` (time travel) raises UnsupportedByFileStoreError."""
        if as_of is not None:
            self.require_file_log(f"the state as of transaction {as_of} (time travel)")
        files = self.file_store.files(self.table_id)
        return self._combined(self.partition_log.load(), files)

    def confirmed(self, read: Callable[[], T]) -> T:
        return self.partition_log.confirmed(read)

    def read_log_to_end(self) -> int:
        """Catch the partition tree up with the log; returns the number of its last entry."""
        return self.partition_log.state().transaction_number

    def _combined(self, partitions: TableState, files: dict[str, TableFile]) -> TableState:
        state = TableState(
            self.schema, dict(partitions.partitions_by_id), files, partitions.transaction_number
        )
        state.data_prefix = partitions.data_prefix
        return state

    # --- writing --------------------------------------------------------------------------------

    def commit(self, transaction: Transaction, request_id: str | None = None) -> CommitResult:
        """Commit one transaction where it belongs (see the module's docstring).

        With a ``request_id`` it is idempotent as on the log (see
        :meth:`TransactionLogStateStore.commit`): a row transaction records the id with its rows, where a
        second commit of it finds it; its status is recorded after.

        Raises the transaction's TransactionValidationError (a row transaction is only rejected against a
        partition tree read to the end of the log), or a store's StateStoreError. A TransactionBatch is
        refused (StateStoreError): groups go through :meth:`commit_group`.
        """
        if isinstance(transaction, TransactionBatch):
            raise StateStoreError(
                f"table {self.table_id!r} keeps its files in a file-reference store: commit a group of "
                "requests with commit_group, not a TransactionBatch"
            )
        if not is_row_transaction(transaction):
            if request_id is None:
                if isinstance(transaction, _CLEARS):
                    self.file_store.clear(self.table_id)
                elif isinstance(transaction, InitialisePartitions):
                    self._check_no_files()
            elif isinstance(transaction, _CLEARS | InitialisePartitions):
                return self._commit_log_request(transaction, request_id)
            return self.partition_log.commit(transaction, request_id)
        statuses = self.partition_log._statuses("commit with a request id") if request_id else None
        if statuses is not None and request_id is not None:
            known = statuses.get(self.table_id, request_id)
            if known is not None and known.is_final:
                return result_of_final_status(known)
        key = request_id or uuid.uuid4().hex
        merged = _Merged()
        self._commit_rows([GroupMember(key, transaction)], merged)
        if key in merged.found:
            assert statuses is not None
            found = CommitStatus(
                key, self.table_id, CommitOutcome.COMMITTED, self._clock(), merged.found[key]
            )
            return result_of_final_status(statuses.record([found]).get(found.key, found))
        if key in merged.rejected:
            error = merged.rejected[key]
            if statuses is not None:
                rejected = CommitStatus(
                    key, self.table_id, CommitOutcome.REJECTED, self._clock(), None, str(error)
                )
                kept = statuses.record([rejected])
                if rejected.key in kept:
                    return result_of_final_status(kept[rejected.key])
            raise error
        number, update_time, skipped = (
            merged.numbers[key],
            merged.update_times[key],
            merged.skipped.get(key, ()),
        )
        if statuses is not None:
            # The file store holds the request id with the rows (the durable fact); the status tells senders.
            statuses.record(
                [
                    CommitStatus(
                        key,
                        self.table_id,
                        CommitOutcome.COMMITTED,
                        update_time,
                        number,
                        skipped_note(skipped),
                    )
                ]
            )
        return CommitResult(number, update_time, 1, skipped)

    def _commit_log_request(self, transaction: Transaction, request_id: str) -> CommitResult:
        """A clear or an initialisation with a request id, as a group of one (which checks its status)."""
        outcome = self.commit_group([GroupMember(request_id, transaction)])
        if request_id in outcome.committed:
            return CommitResult(
                outcome.number_of(request_id),
                outcome.update_time_of(request_id),
                outcome.attempts,
                outcome.skipped_parts.get(request_id, ()),
            )
        statuses = self.partition_log._statuses("commit with a request id")
        if request_id in outcome.rejected:
            error = outcome.rejected[request_id]
            rejected = CommitStatus(
                request_id, self.table_id, CommitOutcome.REJECTED, self._clock(), None, str(error)
            )
            kept = statuses.record([rejected])
            if rejected.key in kept:
                return result_of_final_status(kept[rejected.key])
            raise error
        known = statuses.get(self.table_id, request_id)
        if known is None:
            raise StateStoreError(
                f"table {self.table_id!r}: request {request_id!r} was decided, but its status is gone"
            )
        return result_of_final_status(known)

    def commit_group(self, members: Sequence[GroupMember]) -> GroupCommitResult:
        """Commit requests in their order: each run of consecutive row transactions in one file-store
        commit, each run of partition transactions in one log entry, each clear on its own.

        Members whose request id the file store (row transactions) knows are found; log members whose
        request already has a final status are ``decided`` (see
        :meth:`TransactionLogStateStore.commit_group`). Raises as that does; runs committed before the one
        that raised stay committed (their requests are found when they come back).
        """
        keys = [m.key for m in members]
        if len(set(keys)) != len(keys):
            raise ValueError("a commit group names a key more than once")
        merged = _Merged()
        for kind, run in _runs(members):
            if kind == "rows":
                self._commit_rows(run, merged)
            elif kind == "clear":
                self._commit_clear(run[0], merged)
            else:
                self._commit_log_run(run, merged)
        return merged.result()

    def _commit_rows(self, run: Sequence[GroupMember], merged: _Merged) -> None:
        """One file-store commit of ``run``, validated on the cached partition tree; members rejected on it
        are decided once more on the tree read to the end of the log, if the log had moved."""
        tree = self.partition_log.cached_state()
        if tree.transaction_number == 0 and not self.partition_log.creating:
            raise TableNotInitialisedError(self.table_id)  # no partitions to judge rows against
        seen = tree.transaction_number  # the cached state is caught up in place: remember where it was
        outcome = self._file_commit(tree, run)
        self._merge_rows(run, outcome, merged, final=False)
        retry = [run[i] for i in sorted(outcome.rejected)]
        if retry:
            caught_up = self.partition_log.state()
            if caught_up.transaction_number != seen:
                # A rejection made on a stale tree is never reported: decide those members again (they
                # land after the run's other members, which did not depend on them).
                again = self._file_commit(caught_up, retry)
                self._merge_rows(retry, again, merged, final=True)
            else:
                for i, error in outcome.rejected.items():
                    merged.rejected[run[i].key] = error

    def _file_commit(self, tree: TableState, run: Sequence[GroupMember]) -> FileCommitOutcome:
        merged_members = [FileCommitMember(m.transaction, m.key) for m in run]
        return self.file_store.commit(
            self.table_id, self.schema, tree.partitions_by_id, merged_members, self._clock()
        )

    def _merge_rows(
        self, run: Sequence[GroupMember], outcome: FileCommitOutcome, merged: _Merged, *, final: bool
    ) -> None:
        merged.attempts += 1
        for i, number in outcome.found.items():
            merged.found[run[i].key] = number
        if outcome.commit_number is not None:
            for i in outcome.committed:
                merged.add_committed(run[i].key, outcome.commit_number, outcome.update_time)
                merged.skipped[run[i].key] = outcome.skipped_parts.get(i, ())
        if final:
            for i, error in outcome.rejected.items():
                merged.rejected[run[i].key] = error

    def _commit_clear(self, member: GroupMember, merged: _Merged) -> None:
        """Clear the file store, then write the clear to the log, where its status is recorded with it (and,
        for ClearTable, the partitions go). A crash between the two clears again on redelivery: harmless."""
        statuses = self.partition_log.log.request_statuses
        known = statuses.get(self.table_id, member.key) if statuses is not None else None
        if known is not None and known.is_final:
            merged.decided.append(member.key)
            return
        self.file_store.clear(self.table_id)
        self._commit_log_run([member], merged)

    def _commit_log_run(self, run: Sequence[GroupMember], merged: _Merged) -> None:
        todo = []
        for member in run:
            if isinstance(member.transaction, InitialisePartitions):
                try:
                    self._check_no_files()
                except FilesPresentError as e:
                    merged.rejected[member.key] = e
                    continue
            todo.append(member)
        if not todo:
            return
        outcome = self.partition_log.commit_group(todo)
        merged.attempts += outcome.attempts
        merged.rejected.update(outcome.rejected)
        merged.decided.extend(outcome.decided)
        if outcome.transaction_number is None or outcome.update_time is None:
            return
        merged.log_entries.append((outcome.transaction_number, outcome.update_time, outcome.committed))
        for key in outcome.committed:
            merged.add_committed(key, outcome.transaction_number, outcome.update_time)
            merged.skipped[key] = outcome.skipped_parts.get(key, ())

    def _check_no_files(self) -> None:
        if self.file_store.has_files(self.table_id):
            raise FilesPresentError(len(self.file_store.files(self.table_id)))

    # --- snapshots ------------------------------------------------------------------------------

    def create_snapshot(self) -> SnapshotInfo | None:
        """Snapshot the partitions (the log holds no file transaction; the file store keeps the files);
        None if the log has not moved since the last one."""
        return self.partition_log.create_snapshot()


def _runs(members: Sequence[GroupMember]) -> list[tuple[str, list[GroupMember]]]:
    """``members`` cut, in order, into runs of row transactions, runs of log transactions, and clears (one
    each)."""
    runs: list[tuple[str, list[GroupMember]]] = []
    for member in members:
        if is_row_transaction(member.transaction):
            kind = "rows"
        elif isinstance(member.transaction, _CLEARS):
            runs.append(("clear", [member]))
            continue
        else:
            kind = "log"
        if runs and runs[-1][0] == kind:
            runs[-1][1].append(member)
        else:
            runs.append((kind, [member]))
    return runs


def open_state_store(
    info: TableInfo,
    log: TransactionLogStore,
    snapshots: SnapshotStore | None,
    file_store: FileReferenceStore | None,
    *,
    missing_file_store: str,
    retry: RetryPolicy | None = None,
    clock: Callable[[], int] = now_millis,
    sleep: Callable[[float], None] = time.sleep,
    rng: random.Random | None = None,
    creating: bool = False,
    table_check: Callable[[], object] | None = None,
) -> TableStateStore:
    """The state store of ``info``'s table, as its record says: on the log, or partitions on the log and
    files in ``file_store``. The one place that decides, for the client, the committer and cleanup.

    ``table_check`` runs after each read of the log (``LogStateLoading.table_check``): a reader gives one
    that raises for a table whose delete began, so it never answers with a partly deleted table's state.

    Only the store of a table being ``creating`` may append its transaction 1: any other raises
    TableNotInitialisedError on a commit to a table whose log and snapshots hold nothing (it is being
    created or deleted).

    Raises StateStoreError when the table keeps its files in a file store and ``file_store`` is None, its
    message ending with ``missing_file_store`` (what the caller's user can do about it).
    """
    if not info.files_in_rows:
        store = TransactionLogStateStore(
            info.table_id,
            info.schema,
            log,
            snapshots,
            retry=retry,
            clock=clock,
            sleep=sleep,
            rng=rng,
            index_leaves=asks_for_leaf_index(info),
            creating=creating,
        )
        store.table_check = table_check
        return store
    if file_store is None:
        raise StateStoreError(
            f"table {info.table_name!r} keeps its file references in {info.file_store}, and "
            + missing_file_store
        )
    rows = RowFilesStateStore(
        info.table_id, info.schema, log, file_store, snapshots,
        retry=retry, clock=clock, sleep=sleep, rng=rng, creating=creating,
    )  # fmt: skip
    rows.partition_log.table_check = table_check  # read after the files: the check follows both
    return rows


def asks_for_leaf_index(info: TableInfo) -> bool:
    """Whether the entries of ``info``'s table ask for the log's leaf index: the table keeps a queryable
    view. A property the store cannot read counts as no view here: the index only spares readers work, and
    the view's upkeep reports the property."""
    try:
        return info.queryable_view
    except StateStoreError:
        return False
