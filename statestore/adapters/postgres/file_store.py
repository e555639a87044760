"""PostgresFileReferenceStore: file and reference rows in PostgreSQL, commits decided by
:mod:`statestore.views.row_decisions`."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from typing import Self, TypeVar

import psycopg
import psycopg.errors
from psycopg_pool import ConnectionPool, PoolTimeout

from statestore.adapters.postgres import schema
from statestore.adapters.postgres.row_reads import PostgresRowReads, _one_value
from statestore.adapters.postgres.rows import read_rows, write_changes
from statestore.adapters.postgres.schema import COMMIT_NUMBERS, REQUESTS
from statestore.adapters.postgres.storable import check_text, transaction_problem
from statestore.adapters.postgres.tls import secure_conninfo
from statestore.errors import (
    AccessDeniedError,
    CommitConflictError,
    CommitOutcomeUnknownError,
    InvalidTransactionError,
    ResourceNotFoundError,
    StateStoreError,
    StoreUnavailableError,
    TransactionValidationError,
    UnstorableValueError,
)
from statestore.model import layout
from statestore.model.backoff import full_jitter_delay
from statestore.model.clock import now_millis
from statestore.model.partitions import Partition
from statestore.model.schema import Schema
from statestore.store.ports import FileCommitMember, FileCommitOutcome, FileReferenceStore
from statestore.views import row_decisions

# A lost race: roll back and decide again. (psycopg's SerializationFailure and DeadlockDetected are not
# subclasses of its TransactionRollback, so each is named.)
_RACE_LOST: tuple[type[psycopg.Error], ...] = (
    psycopg.errors.UniqueViolation,
    psycopg.errors.SerializationFailure,
    psycopg.errors.DeadlockDetected,
    psycopg.errors.TransactionRollback,
)

_T = TypeVar("_T")


class _Redo(Exception):
    """An attempt lost a race (a unique key taken, a deadlock, a serialisation failure, or a COMMIT that did
    not land): roll back and decide again on the rows the winner left."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


class _Refused(Exception):
    """The server (or psycopg, encoding it) refused a value of the commit: a data error, not a failure."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


class PostgresFileReferenceStore(PostgresRowReads, FileReferenceStore):
    """A table's files and references as rows in PostgreSQL (see :mod:`statestore.adapters.postgres.schema`).

    Isolation: READ COMMITTED with explicit row locks, not SERIALIZABLE. A commit locks exactly the rows it
    reads: the reference rows ``row_decisions.rows_read`` names (``SELECT ... FOR UPDATE``, in key order so
    two commits never deadlock on them) and the file rows of ``whole_files`` (locked first, also in order, so
    a split or a garbage-collection delete of a file sees every reference of it). Rows read only for whether a
    file exists are not locked: a file that does not exist is guarded by the primary key (a concurrent insert
    of it makes ours fail with a unique violation, and the commit is redone), and one that exists can only
    be rejected against. Compactions of different partitions of the same input files lock disjoint
    reference rows and never touch their inputs' file rows, so they neither wait for nor abort each other.
    SERIALIZABLE would give the same answers with no locking code, but its predicate locks are taken per
    index page, so commits touching neighbouring keys (the same files, other partitions: design record 002's
    1,024 compactions of 11 files) fail with false serialisation conflicts and are redone. Measured on the
    contention test (64 compactions of 11 shared files committed at once from 16 threads, one machine):
    READ COMMITTED redid no commit (0.4 s); SERIALIZABLE redid 162 attempts (1.9 s), and in another run one
    commit failed all 10 attempts.

    Every psycopg error is translated at this boundary into :mod:`statestore.errors`. Connections come from
    a small pool per process (``min_size=0``: idle connections are closed after ``idle_timeout`` seconds,
    so many idle compaction tasks hold none, as the record asks); :meth:`close` closes it.
    """

    def __init__(
        self,
        pool: ConnectionPool,
        *,
        clock: Callable[[], int] = now_millis,
        max_attempts: int = 10,
        base_delay: float = 0.01,
        max_delay: float = 1.0,
        rng: random.Random | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {max_attempts}")
        self._pool = pool
        self._clock = clock
        self._max_attempts = max_attempts
        self._base_delay = base_delay
        self._max_delay = max_delay
        self._rng = rng or random.Random()
        self._sleep = sleep
        self._counter_lock = threading.Lock()
        self._redone = 0

    @classmethod
    def connect(
        cls,
        conninfo: str,
        *,
        max_connections: int = 4,
        ensure_schema: bool = True,
        idle_timeout: float = 60.0,
        connect_timeout: float = 10.0,
        clock: Callable[[], int] = now_millis,
        max_attempts: int = 10,
    ) -> Self:
        """A store on a pool of at most ``max_connections`` connections to ``conninfo`` (a libpq
        connection string or ``postgresql://`` URL, see :func:`conninfo_from_secret`). Connections are
        opened when needed and closed after ``idle_timeout`` seconds unused; waiting longer than
        ``connect_timeout`` for one raises StoreUnavailableError. With ``ensure_schema`` the tables are
        created if missing (needs the CREATE privilege on the database). Raises StoreUnavailableError if
        the database cannot be reached, AccessDeniedError if it refuses the user."""
        if max_connections < 1:
            raise ValueError(f"max_connections must be at least 1, got {max_connections}")
        conninfo = secure_conninfo(conninfo)
        if ensure_schema:
            # Connecting now anyway: one connection first, outside the pool, which retries a refused
            # connection until its timeout and then reports only that it waited, losing why (a certificate
            # that fails verification, a wrong password, an unknown host). Without ensure_schema the store
            # connects on first use, so a process whose database is down still serves its log tables.
            try:
                psycopg.connect(conninfo, connect_timeout=max(1, round(connect_timeout))).close()
            except psycopg.Error as e:
                raise _translated(e, "connecting") from e
        try:
            pool = ConnectionPool(
                conninfo,
                min_size=0,
                max_size=max_connections,
                max_idle=idle_timeout,
                timeout=connect_timeout,
                kwargs={"autocommit": True},
                open=True,
                name="statestore-file-references",
            )
        except psycopg.Error as e:
            raise _translated(e, "opening the connection pool") from e
        store = cls(pool, clock=clock, max_attempts=max_attempts)
        if ensure_schema:
            try:
                store.ensure_schema()
            except BaseException:
                store.close()
                raise
        return store

    def ensure_schema(self) -> None:
        """Create the store's tables, indexes and sequence where missing (idempotent)."""
        self._run("creating the schema", schema.ensure_schema)

    def close(self) -> None:
        """Close every connection of the pool; the store cannot be used afterwards."""
        self._pool.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def redo_count(self) -> int:
        """How many commit attempts were redone after losing a race, since the store was made."""
        with self._counter_lock:
            return self._redone

    # --- connections and errors -----------------------------------------------------------------------

    def _run(self, what: str, work: Callable[[psycopg.Connection], _T], begin: str | None = None) -> _T:
        """``work`` on a pooled connection, in a transaction opened with ``begin`` (committed when ``work``
        returns, rolled back when it raises) or in autocommit; every psycopg error translated.

        A pooled connection the server dropped while it sat idle (a restart, a failover, an idle timeout)
        fails on its first use: it is discarded and ``work`` runs once more on a fresh one, as a commit
        does. Everything run through here is a read or an idempotent write (a clear, a delete, marking
        files already found unreferenced), so running it again is safe even if the first COMMIT landed.
        """
        for attempt in range(2):
            used: list[psycopg.Connection] = []
            try:
                with self._pool.connection() as conn:
                    used.append(conn)
                    if begin is None:
                        return work(conn)
                    conn.execute(begin)
                    try:
                        result = work(conn)
                    except BaseException:
                        _rollback(conn)
                        raise
                    conn.execute("COMMIT")
                    return result
            except UnicodeEncodeError as e:
                raise UnstorableValueError(f"PostgreSQL cannot hold a value while {what}: {e}") from e
            except psycopg.Error as e:
                lost = bool(used) and (used[0].broken or used[0].closed)
                if attempt == 0 and lost and not _is_refused_value(e):
                    continue
                raise _translated(e, what) from e
        raise AssertionError("unreachable: the second attempt returns or raises")

    # --- commits --------------------------------------------------------------------------------------

    def commit(
        self,
        table_id: str,
        schema: Schema,
        partitions_by_id: Mapping[str, Partition],
        members: Sequence[FileCommitMember],
        update_time: int,
    ) -> FileCommitOutcome:
        # Raises ValueError for a member that is not a row transaction, before any connection is taken.
        row_decisions.rows_read(m.transaction for m in members)
        check_text("table id", table_id)
        # A member holding a value no row can hold is rejected before anything is queried (see
        # statestore.adapters.postgres.storable); the others are committed.
        excluded: dict[int, TransactionValidationError] = {
            i: problem
            for i, m in enumerate(members)
            if (problem := transaction_problem(m.transaction, m.request_id)) is not None
        }
        while True:
            kept = [i for i in range(len(members)) if i not in excluded]
            if not kept:
                return FileCommitOutcome(None, update_time, (), {}, excluded, {})
            run = [members[i] for i in kept]
            try:
                outcome = self._commit_storable(table_id, schema, partitions_by_id, run, update_time)
            except _Refused as refused:
                # The server refused a value the checks let through: find the members that carry it (each
                # tried alone, rolled back) and commit the others; with none to blame, the input as a whole
                # is invalid.
                culprits = self._refused_members(table_id, schema, partitions_by_id, run, update_time)
                if not culprits:
                    raise UnstorableValueError(
                        f"table {table_id!r}: PostgreSQL refused a value of a file-reference commit: "
                        f"{refused.cause}"
                    ) from refused.cause
                excluded.update((kept[j], error) for j, error in culprits.items())
                continue
            return _remapped(outcome, kept, excluded)

    def _commit_storable(
        self,
        table_id: str,
        schema: Schema,
        partitions_by_id: Mapping[str, Partition],
        members: Sequence[FileCommitMember],
        update_time: int,
    ) -> FileCommitOutcome:
        """Commit members whose values passed the checks, redoing a lost race; raises _Refused when the
        server refuses a value anyway."""
        last_cause: BaseException | None = None
        for attempt in range(self._max_attempts):
            if attempt:
                with self._counter_lock:
                    self._redone += 1
                self._sleep(full_jitter_delay(attempt - 1, self._base_delay, self._max_delay, self._rng))
            try:
                return self._commit_once(table_id, schema, partitions_by_id, members, update_time)
            except _Redo as redo:
                last_cause = redo.cause
            except PoolTimeout as e:
                raise _translated(e, "committing file references") from e
            except (psycopg.Error, UnicodeEncodeError) as e:
                if _is_refused_value(e) or not isinstance(e, psycopg.Error):
                    raise _Refused(e) from e
                if not isinstance(e, psycopg.OperationalError | psycopg.InterfaceError):
                    raise _translated(e, "committing file references") from e
                # The connection failed before COMMIT was sent: nothing was written, so it is safe to try
                # again on another connection.
                last_cause = e
        if isinstance(last_cause, psycopg.OperationalError | psycopg.InterfaceError) and not isinstance(
            last_cause, _RACE_LOST
        ):
            raise StoreUnavailableError(
                f"table {table_id!r}: PostgreSQL failed on each of {self._max_attempts} attempts to commit "
                f"file references (nothing was written): {last_cause}"
            ) from last_cause
        raise CommitConflictError(
            f"table {table_id!r}: a file-reference commit lost the race to concurrent commits "
            f"{self._max_attempts} times (last: {last_cause}); try again later"
        ) from last_cause

    def _commit_once(
        self,
        table_id: str,
        schema: Schema,
        partitions_by_id: Mapping[str, Partition],
        members: Sequence[FileCommitMember],
        update_time: int,
    ) -> FileCommitOutcome:
        with self._pool.connection() as conn:
            conn.execute("BEGIN ISOLATION LEVEL READ COMMITTED")
            try:
                # The rows first, then the request ids: each statement sees at least what the one before it
                # saw, so a concurrent commit of the same request that wrote rows read here is seen in its
                # request rows (found), never only in the rows (which would reject the request as invalid).
                read = read_rows(conn, table_id, row_decisions.rows_read(m.transaction for m in members))
                found = self._found_requests(conn, table_id, [m.request_id for m in members])
                found_at = {i: found[m.request_id] for i, m in enumerate(members) if m.request_id in found}
                todo = [i for i in range(len(members)) if i not in found_at]
                transactions = [members[i].transaction for i in todo]
                decision = row_decisions.decide(
                    schema, partitions_by_id, read, transactions, update_time, layout.data_prefix(table_id)
                )
                number: int | None = None
                request_ids = list(dict.fromkeys(members[todo[p]].request_id for p in decision.committed))
                if decision.committed:
                    number = _one_value(conn.execute(f"SELECT nextval('{COMMIT_NUMBERS}')"))
                    write_changes(conn, table_id, decision.changes)
                    conn.execute(
                        f"INSERT INTO {REQUESTS} (table_id, request_id, commit_number, recorded_time) "
                        "SELECT %s, r, %s, %s FROM unnest(%s::text[]) AS r",
                        (table_id, number, self._clock(), request_ids),
                    )
            except _RACE_LOST as e:
                _rollback(conn)
                raise _Redo(e) from e
            except BaseException:
                _rollback(conn)
                raise
            outcome = FileCommitOutcome(
                number,
                update_time,
                tuple(todo[p] for p in decision.committed),
                found_at,
                {todo[p]: e for p, e in decision.rejected.items()},
                {todo[p]: parts for p, parts in decision.skipped_parts.items()},
            )
            try:
                self._send_commit(conn)
            except psycopg.Error as e:
                if number is None:
                    return outcome  # nothing was written: what was read and decided stands
                if e.sqlstate is not None:
                    raise _Redo(e) from e  # the server answered: it rolled the transaction back
                cause = e
            else:
                return outcome
        # The connection failed during COMMIT: whether it landed is in the request rows.
        landed = self._landed(table_id, request_ids, number)
        if landed is None:
            raise CommitOutcomeUnknownError(table_id, number, ",".join(request_ids), str(cause)) from cause
        if landed:
            return outcome
        raise _Redo(cause)

    def _send_commit(self, conn: psycopg.Connection) -> None:
        """Send COMMIT (a method of its own so tests can fail it as a lost connection would)."""
        conn.execute("COMMIT")

    def _landed(self, table_id: str, request_ids: Sequence[str], number: int) -> bool | None:
        """Whether a commit whose COMMIT failed on the way wrote its request rows under ``number``; None if
        the database cannot be asked."""
        for attempt in range(3):
            if attempt:
                self._sleep(full_jitter_delay(attempt - 1, self._base_delay, self._max_delay, self._rng))
            try:
                with self._pool.connection() as conn:
                    found = self._found_requests(conn, table_id, request_ids[:1])
            except psycopg.Error:
                continue
            return found.get(request_ids[0]) == number
        return None

    def _refused_members(
        self,
        table_id: str,
        schema: Schema,
        partitions_by_id: Mapping[str, Partition],
        members: Sequence[FileCommitMember],
        update_time: int,
    ) -> dict[int, TransactionValidationError]:
        """The members whose values the server refuses, each tried alone in a transaction that is always
        rolled back (nothing is written here). Other failures are not a member's fault: left to the commit."""
        refused: dict[int, TransactionValidationError] = {}
        for position, member in enumerate(members):
            try:
                with self._pool.connection() as conn:
                    conn.execute("BEGIN ISOLATION LEVEL READ COMMITTED")
                    try:
                        transactions = [member.transaction]
                        read = read_rows(conn, table_id, row_decisions.rows_read(transactions))
                        decision = row_decisions.decide(
                            schema, partitions_by_id, read, transactions, update_time
                        )
                        if decision.committed:
                            write_changes(conn, table_id, decision.changes)
                    finally:
                        _rollback(conn)
            except (psycopg.Error, UnicodeEncodeError) as e:
                if _is_refused_value(e):
                    refused[position] = InvalidTransactionError(
                        f"{member.transaction.TYPE}: PostgreSQL cannot hold a value of it: {e}"
                    )
        return refused


def _rollback(conn: psycopg.Connection) -> None:
    if not conn.closed:
        with suppress(psycopg.Error):
            conn.execute("ROLLBACK")


def _translated(error: psycopg.Error, what: str) -> StateStoreError:
    """The statestore error for a psycopg one (none of psycopg's leaves this package)."""
    if isinstance(error, psycopg.errors.InsufficientPrivilege | psycopg.errors.InvalidPassword) or (
        error.sqlstate == "28000"  # invalid_authorization_specification: no such role, or pg_hba refused
    ):
        return AccessDeniedError(f"PostgreSQL refused the user while {what}: {error}; check the credentials")
    if isinstance(
        error,
        psycopg.errors.UndefinedTable | psycopg.errors.InvalidSchemaName | psycopg.errors.UndefinedObject,
    ):
        return ResourceNotFoundError(
            f"the statestore schema is missing in the database while {what}: {error}; run the schema "
            "migration (statestore.adapters.postgres.schema.migrate; the stack's deploy does), or connect as "
            "a user that may create it with ensure_schema=True (PostgresFileReferenceStore.connect)"
        )
    if isinstance(error, PoolTimeout):
        return StoreUnavailableError(
            f"no PostgreSQL connection could be had while {what} (the database is unreachable, or every "
            f"pooled connection stayed busy): {error}"
        )
    return StoreUnavailableError(f"PostgreSQL failed while {what}: {error}")


def _is_refused_value(error: BaseException) -> bool:
    """Whether ``error`` refuses a value (a data exception, a program limit such as an index row too large,
    text psycopg cannot encode), which no retry can change."""
    if isinstance(error, UnicodeEncodeError | psycopg.DataError):
        return True
    return isinstance(error, psycopg.Error) and (error.sqlstate or "")[:2] in ("22", "54")


def _remapped(
    outcome: FileCommitOutcome, kept: Sequence[int], excluded: Mapping[int, TransactionValidationError]
) -> FileCommitOutcome:
    """``outcome`` of a commit of the members at positions ``kept``, as positions of the whole commit, the
    ``excluded`` members rejected."""
    if not excluded:
        return outcome
    return FileCommitOutcome(
        outcome.commit_number,
        outcome.update_time,
        tuple(kept[p] for p in outcome.committed),
        {kept[p]: number for p, number in outcome.found.items()},
        {**{kept[p]: e for p, e in outcome.rejected.items()}, **excluded},
        {kept[p]: parts for p, parts in outcome.skipped_parts.items()},
    )
