"""The PostgreSQL store's reads and upkeep: a table's files, which requests it committed, clearing it, and
the two phases of garbage collection (marking files no reference holds, then listing those ready).

:class:`PostgresRowReads` is a mixin
:class:`statestore.adapters.postgres.file_store.PostgresFileReferenceStore` inherits; the commit path and
the connections are in ``file_store.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg
import psycopg.errors

from statestore.adapters.postgres.rows import REFERENCE_COLUMNS, file_reference
from statestore.adapters.postgres.schema import COMMIT_NUMBERS, FILES, REFERENCES, REQUESTS
from statestore.adapters.postgres.storable import check_text, text_problem
from statestore.errors import StoreUnavailableError
from statestore.model.files import FileReference, TableFile
from statestore.state.cycle_collector import collector_paused

_READ_BATCH = 50_000
# Files marked unreferenced per transaction by garbage collection's first phase.
_MARK_CHUNK = 10_000
_T = TypeVar("_T")


def _one_value(cursor: psycopg.Cursor[Any]) -> Any:
    row = cursor.fetchone()
    if row is None:
        raise StoreUnavailableError("PostgreSQL returned no row where one was expected")
    return row[0]


class PostgresRowReads:
    """The reads and upkeep of the PostgreSQL file reference store (see the module docstring)."""

    if TYPE_CHECKING:

        def _run(
            self, what: str, work: Callable[[psycopg.Connection], _T], begin: str | None = None
        ) -> _T: ...

    @staticmethod
    def _found_requests(
        conn: psycopg.Connection, table_id: str, request_ids: Sequence[str]
    ) -> dict[str, int]:
        if not request_ids:
            return {}
        cursor = conn.execute(
            f"SELECT request_id, commit_number FROM {REQUESTS} WHERE table_id = %s AND request_id = ANY(%s)",
            (table_id, list(request_ids)),
        )
        return dict(cursor.fetchall())

    # --- reads and upkeep -----------------------------------------------------------------------------

    def files(self, table_id: str) -> dict[str, TableFile]:
        check_text("table id", table_id)

        def read(conn: psycopg.Connection) -> dict[str, TableFile]:
            with collector_paused():
                times = conn.execute(
                    f"SELECT filename, added_time, unreferenced_since FROM {FILES} WHERE table_id = %s",
                    (table_id,),
                ).fetchall()
                references: dict[str, list[FileReference]] = {name: [] for name, _, _ in times}
                # A server-side cursor streams the references in batches: a million never sit in memory
                # twice.
                with conn.cursor(name="statestore_files") as cursor:
                    cursor.execute(
                        f"SELECT {REFERENCE_COLUMNS} FROM {REFERENCES} WHERE table_id = %s", (table_id,)
                    )
                    while rows := cursor.fetchmany(_READ_BATCH):
                        for row in rows:
                            references[row[0]].append(file_reference(row))
                return {
                    name: TableFile(name, tuple(references[name]), added if since is None else since)
                    for name, added, since in times
                }

        return self._run("reading a table's files", read, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")

    def has_files(self, table_id: str) -> bool:
        check_text("table id", table_id)
        query = f"SELECT EXISTS (SELECT 1 FROM {FILES} WHERE table_id = %s)"
        return bool(
            self._run(
                "reading whether a table has files", lambda conn: _one_value(conn.execute(query, (table_id,)))
            )
        )

    def committed_requests(self, table_id: str, request_ids: Iterable[str]) -> dict[str, int]:
        check_text("table id", table_id)
        # A request id no row can hold was never committed here.
        wanted = [r for r in request_ids if text_problem(r) is None]
        return self._run(
            "reading committed requests", lambda conn: self._found_requests(conn, table_id, wanted)
        )

    def clear(self, table_id: str) -> int:
        check_text("table id", table_id)

        def clear(conn: psycopg.Connection) -> int:
            conn.execute(f"DELETE FROM {REFERENCES} WHERE table_id = %s", (table_id,))
            conn.execute(f"DELETE FROM {FILES} WHERE table_id = %s", (table_id,))
            number: int = _one_value(conn.execute(f"SELECT nextval('{COMMIT_NUMBERS}')"))
            return number

        return self._run("clearing a table's files", clear, "BEGIN ISOLATION LEVEL READ COMMITTED")

    def mark_unreferenced(self, table_id: str, now: int) -> int:
        # A file never gains a reference once it has none, so a file found with none stays so. The set
        # difference is an EXCEPT, not a NOT EXISTS: with statistics that predate the table's rows (a new
        # table id is in no histogram) the planner made the anti-join a nested loop over every reference of
        # the table for every file, and 2,000 files took 36 s; a set operation has no such plan. The rows are
        # then locked in name order, as commits lock them, so a concurrent DeleteFiles cannot deadlock with
        # it, a chunk per transaction so no lock is held for the whole table; each chunk is a range of names,
        # so it reads its own part of the primary key, not the table's.
        check_text("table id", table_id)
        names = sorted(
            name
            for (name,) in self._run(
                "finding unreferenced files",
                lambda conn: conn.execute(
                    f"SELECT filename FROM {FILES} WHERE table_id = %s AND unreferenced_since IS NULL "
                    f"EXCEPT SELECT filename FROM {REFERENCES} WHERE table_id = %s",
                    (table_id, table_id),
                ).fetchall(),
            )
        )

        def mark(conn: psycopg.Connection, chunk: list[str]) -> int:
            locked = [
                name
                for (name,) in conn.execute(
                    f"SELECT filename FROM {FILES} WHERE table_id = %s AND filename BETWEEN %s AND %s "
                    "AND filename = ANY(%s) AND unreferenced_since IS NULL ORDER BY filename FOR UPDATE",
                    (table_id, chunk[0], chunk[-1], chunk),
                )
            ]
            # Checked again under the lock: a file deleted and added again with references since the
            # difference was read is a new row, and would otherwise be marked as if it had none.
            referenced = {
                name
                for (name,) in conn.execute(
                    f"SELECT DISTINCT filename FROM {REFERENCES} WHERE table_id = %s AND filename = ANY(%s)",
                    (table_id, locked),
                )
            }
            return conn.execute(
                f"UPDATE {FILES} SET unreferenced_since = %s WHERE table_id = %s "
                "AND filename BETWEEN %s AND %s AND filename = ANY(%s)",
                (now, table_id, chunk[0], chunk[-1], [n for n in locked if n not in referenced]),
            ).rowcount

        marked = 0
        for start in range(0, len(names), _MARK_CHUNK):
            chunk = names[start : start + _MARK_CHUNK]
            begin = "BEGIN ISOLATION LEVEL READ COMMITTED"
            marked += self._run("marking unreferenced files", partial(mark, chunk=chunk), begin)
        return marked

    def files_ready_for_gc(self, table_id: str, before: int, limit: int | None = None) -> list[str]:
        if limit is not None and limit < 0:
            raise ValueError(f"limit must not be negative, got {limit}")
        check_text("table id", table_id)

        def find(conn: psycopg.Connection) -> list[str]:
            marked = [
                name
                for (name,) in conn.execute(
                    f"SELECT filename FROM {FILES} WHERE table_id = %s AND unreferenced_since IS NOT NULL "
                    "AND unreferenced_since < %s ORDER BY unreferenced_since, filename LIMIT %s",
                    (table_id, before, limit),
                )
            ]
            # A marked file has no references; checked again by name (an index lookup, whatever the
            # statistics say) rather than trusted.
            referenced = {
                name
                for (name,) in conn.execute(
                    f"SELECT DISTINCT filename FROM {REFERENCES} WHERE table_id = %s AND filename = ANY(%s)",
                    (table_id, marked),
                )
            }
            return [name for name in marked if name not in referenced]

        return self._run("finding files ready for garbage collection", find)

    def forget_requests(self, table_id: str, before: int) -> int:
        check_text("table id", table_id)
        return self._run(
            "forgetting old requests",
            lambda conn: (
                conn.execute(
                    f"DELETE FROM {REQUESTS} WHERE table_id = %s AND recorded_time < %s", (table_id, before)
                ).rowcount
            ),
        )

    def delete_table(self, table_id: str) -> None:
        check_text("table id", table_id)

        def delete(conn: psycopg.Connection) -> None:
            for table in (REFERENCES, FILES, REQUESTS):
                conn.execute(f"DELETE FROM {table} WHERE table_id = %s", (table_id,))

        self._run("deleting a table's rows", delete, "BEGIN ISOLATION LEVEL READ COMMITTED")
