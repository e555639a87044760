"""The rows a commit reads and writes: the SQL behind :mod:`statestore.views.row_decisions`' ``RowsRead`` and
``RowChanges`` (locks taken in key order; bulk writes by binary COPY and unnest arrays)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial
from typing import Any, cast

import psycopg

from statestore.adapters.postgres.schema import FILES, REFERENCES
from statestore.model.files import FileReference, TableFile
from statestore.views import row_decisions

# Builds a FileReference from a row of its seven fields in order, without a Python call per field.
file_reference = cast(Callable[[Iterable[Any]], FileReference], partial(tuple.__new__, FileReference))

REFERENCE_COLUMNS = (
    "filename, partition_id, number_of_rows, count_approximate, only_contains_data_for_this_partition, "
    "job_id, last_update_time"
)


def read_rows(conn: psycopg.Connection, table_id: str, rows: row_decisions.RowsRead) -> dict[str, TableFile]:
    """The rows ``rows`` names, locking what the commit may change (the reference rows read, in key order,
    and the file rows of ``rows.whole_files``, first: see ``PostgresFileReferenceStore``'s docstring)."""
    whole: dict[str, tuple[int, int | None]] = {}
    if rows.whole_files:
        cursor = conn.execute(
            f"SELECT filename, added_time, unreferenced_since FROM {FILES} "
            "WHERE table_id = %s AND filename = ANY(%s) ORDER BY filename FOR UPDATE",
            (table_id, sorted(rows.whole_files)),
        )
        whole = {name: (added, since) for name, added, since in cursor}
    # The reference rows to lock: those named, every one of the whole files (no other commit can add one
    # to them now: only a split adds references to an existing file, and it locks the file row first),
    # and those of the jobs (a claim made after this read belongs after this commit).
    keys = set(rows.references)
    # Two queries, not one with OR, so each uses its index (by file; the partial index by job).
    if whole:
        cursor = conn.execute(
            f"SELECT filename, partition_id FROM {REFERENCES} WHERE table_id = %s AND filename = ANY(%s)",
            (table_id, list(whole)),
        )
        keys.update(cursor.fetchall())
    if rows.job_ids:
        cursor = conn.execute(
            f"SELECT filename, partition_id FROM {REFERENCES} WHERE table_id = %s AND job_id = ANY(%s) "
            "AND job_id IS NOT NULL",
            (table_id, list(rows.job_ids)),
        )
        keys.update(cursor.fetchall())
    locked: list[FileReference] = []
    if keys:
        ordered = sorted(keys)
        cursor = conn.execute(
            f"SELECT {', '.join('r.' + c for c in REFERENCE_COLUMNS.split(', '))} FROM {REFERENCES} r "
            "JOIN unnest(%s::text[], %s::text[]) AS k(filename, partition_id) "
            "ON r.filename = k.filename AND r.partition_id = k.partition_id "
            "WHERE r.table_id = %s ORDER BY r.filename, r.partition_id FOR UPDATE OF r",
            ([f for f, _ in ordered], [p for _, p in ordered], table_id),
        )
        locked = [file_reference(row) for row in cursor]
    wanted = (set(rows.filenames) | {f for f, _ in rows.references} | {r.filename for r in locked}) - set(
        whole
    )
    times = dict(whole)
    if wanted:
        cursor = conn.execute(
            f"SELECT filename, added_time, unreferenced_since FROM {FILES} "
            "WHERE table_id = %s AND filename = ANY(%s)",
            (table_id, list(wanted)),
        )
        times.update((name, (added, since)) for name, added, since in cursor)
    references: dict[str, list[FileReference]] = {name: [] for name in times}
    for ref in locked:
        references[ref.filename].append(ref)
    return {
        name: TableFile(name, tuple(references[name]), added if since is None else since)
        for name, (added, since) in times.items()
    }


def write_changes(conn: psycopg.Connection, table_id: str, changes: row_decisions.RowChanges) -> None:
    if changes.deleted_references:
        conn.execute(
            f"DELETE FROM {REFERENCES} r "
            "USING unnest(%s::text[], %s::text[]) AS d(filename, partition_id) "
            "WHERE r.table_id = %s AND r.filename = d.filename AND r.partition_id = d.partition_id",
            (
                [f for f, _ in changes.deleted_references],
                [p for _, p in changes.deleted_references],
                table_id,
            ),
        )
    if changes.deleted_files:
        deleted = list(changes.deleted_files)
        conn.execute(
            f"DELETE FROM {REFERENCES} WHERE table_id = %s AND filename = ANY(%s)", (table_id, deleted)
        )
        conn.execute(f"DELETE FROM {FILES} WHERE table_id = %s AND filename = ANY(%s)", (table_id, deleted))
    if changes.added_files:
        with conn.cursor().copy(
            f"COPY {FILES} (table_id, filename, added_time, unreferenced_since) FROM STDIN (FORMAT BINARY)"
        ) as copy:
            copy.set_types(["text", "text", "int8", "int8"])
            for table_file in changes.added_files:
                added = table_file.last_update_time
                copy.write_row(
                    (table_id, table_file.filename, added, None if table_file.references else added)
                )
    new_references = [ref for f in changes.added_files for ref in f.references]
    new_references += changes.added_references
    if new_references:
        with conn.cursor().copy(
            f"COPY {REFERENCES} (table_id, {REFERENCE_COLUMNS}) FROM STDIN (FORMAT BINARY)"
        ) as copy:
            copy.set_types(["text", "text", "text", "int8", "bool", "bool", "text", "int8"])
            for ref in new_references:
                copy.write_row((table_id, *ref))
    if changes.changed_references:
        columns = list(zip(*changes.changed_references, strict=True))
        conn.execute(
            f"UPDATE {REFERENCES} r SET number_of_rows = c.number_of_rows, "
            "count_approximate = c.count_approximate, "
            "only_contains_data_for_this_partition = c.only_contains_data_for_this_partition, "
            "job_id = c.job_id, last_update_time = c.last_update_time "
            "FROM unnest(%s::text[], %s::text[], %s::bigint[], %s::boolean[], %s::boolean[], %s::text[], "
            f"%s::bigint[]) AS c({REFERENCE_COLUMNS}) "
            "WHERE r.table_id = %s AND r.filename = c.filename AND r.partition_id = c.partition_id",
            (*(list(column) for column in columns), table_id),
        )
