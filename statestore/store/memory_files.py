"""The in-memory twin of the file reference store (:class:`statestore.store.ports.FileReferenceStore`): a
table's files as rows in a dictionary, each row transaction decided by :mod:`statestore.views.row_decisions`
with the rules the PostgreSQL store uses. Used by tests, benchmarks and the in-memory demo; thread-safe.
The twins of the other ports are in ``memory.py``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence

from statestore.model import layout
from statestore.model.clock import now_millis
from statestore.model.files import FileReference, TableFile
from statestore.model.partitions import Partition
from statestore.model.schema import Schema
from statestore.store.ports import (
    FileCommitMember,
    FileCommitOutcome,
    FileReferenceStore,
)
from statestore.views import row_decisions


class InMemoryFileReferenceStore(FileReferenceStore):
    """File and reference rows in dicts, one lock for every commit: the twin of the PostgreSQL store, deciding
    commits with the same :mod:`statestore.views.row_decisions` on the same rows."""

    def __init__(self, clock: Callable[[], int] = now_millis) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        # Per table: filename -> (added time, time marked unreferenced or None); filename -> partition ->
        # reference; request id -> (commit number, recorded time).
        self._files: dict[str, dict[str, tuple[int, int | None]]] = {}
        self._references: dict[str, dict[str, dict[str, FileReference]]] = {}
        self._requests: dict[str, dict[str, tuple[int, int]]] = {}
        self._last_number = 0

    def commit(
        self,
        table_id: str,
        schema: Schema,
        partitions_by_id: Mapping[str, Partition],
        members: Sequence[FileCommitMember],
        update_time: int,
    ) -> FileCommitOutcome:
        with self._lock:
            requests = self._requests.setdefault(table_id, {})
            found = {i: requests[m.request_id][0] for i, m in enumerate(members) if m.request_id in requests}
            todo = [i for i in range(len(members)) if i not in found]
            transactions = [members[i].transaction for i in todo]
            read = self._read(table_id, row_decisions.rows_read(transactions))
            decision = row_decisions.decide(
                schema, partitions_by_id, read, transactions, update_time, layout.data_prefix(table_id)
            )
            number = None
            if decision.committed:
                self._last_number += 1
                number = self._last_number
                self._write(table_id, decision.changes)
                for position in decision.committed:
                    requests[members[todo[position]].request_id] = (number, self._clock())
            return FileCommitOutcome(
                number,
                update_time,
                tuple(todo[p] for p in decision.committed),
                found,
                {todo[p]: e for p, e in decision.rejected.items()},
                {todo[p]: parts for p, parts in decision.skipped_parts.items()},
            )

    def _read(self, table_id: str, rows: row_decisions.RowsRead) -> dict[str, TableFile]:
        files = self._files.get(table_id, {})
        references = self._references.get(table_id, {})
        read: dict[str, dict[str, FileReference]] = {}
        for filename in rows.filenames:
            if filename in files:
                read.setdefault(filename, {})
        for filename, partition_id in rows.references:
            if filename in files:
                held = read.setdefault(filename, {})
                ref = references.get(filename, {}).get(partition_id)
                if ref is not None:
                    held[partition_id] = ref
        for filename in rows.whole_files:
            if filename in files:
                read.setdefault(filename, {}).update(references.get(filename, {}))
        if rows.job_ids:
            for filename, by_partition in references.items():
                for partition_id, ref in by_partition.items():
                    if ref.job_id in rows.job_ids:
                        read.setdefault(filename, {})[partition_id] = ref
        return {name: self._table_file(files, name, refs.values()) for name, refs in read.items()}

    @staticmethod
    def _table_file(
        files: Mapping[str, tuple[int, int | None]], filename: str, refs: Iterable[FileReference]
    ) -> TableFile:
        added, unreferenced_since = files[filename]
        return TableFile(filename, tuple(refs), added if unreferenced_since is None else unreferenced_since)

    def _write(self, table_id: str, changes: row_decisions.RowChanges) -> None:
        files = self._files.setdefault(table_id, {})
        references = self._references.setdefault(table_id, {})
        for filename in changes.deleted_files:
            del files[filename]
            references.pop(filename, None)
        for table_file in changes.added_files:
            time = table_file.last_update_time
            files[table_file.filename] = (time, None if table_file.references else time)
            references[table_file.filename] = {ref.partition_id: ref for ref in table_file.references}
        for ref in changes.added_references:
            held = references.setdefault(ref.filename, {})
            if ref.partition_id in held:
                raise AssertionError(f"reference {ref.filename!r} in {ref.partition_id!r} added twice")
            held[ref.partition_id] = ref
        for ref in changes.changed_references:
            references[ref.filename][ref.partition_id] = ref
        for filename, partition_id in changes.deleted_references:
            del references[filename][partition_id]

    def files(self, table_id: str) -> dict[str, TableFile]:
        with self._lock:
            files = self._files.get(table_id, {})
            references = self._references.get(table_id, {})
            return {name: self._table_file(files, name, references.get(name, {}).values()) for name in files}

    def has_files(self, table_id: str) -> bool:
        with self._lock:
            return bool(self._files.get(table_id))

    def committed_requests(self, table_id: str, request_ids: Iterable[str]) -> dict[str, int]:
        with self._lock:
            requests = self._requests.get(table_id, {})
            return {r: requests[r][0] for r in request_ids if r in requests}

    def clear(self, table_id: str) -> int:
        with self._lock:
            self._files.pop(table_id, None)
            self._references.pop(table_id, None)
            self._last_number += 1
            return self._last_number

    def mark_unreferenced(self, table_id: str, now: int) -> int:
        with self._lock:
            files = self._files.get(table_id, {})
            references = self._references.get(table_id, {})
            lost = [n for n, (_, since) in files.items() if since is None and not references.get(n)]
            for name in lost:
                files[name] = (files[name][0], now)
            return len(lost)

    def files_ready_for_gc(self, table_id: str, before: int, limit: int | None = None) -> list[str]:
        with self._lock:
            files = self._files.get(table_id, {})
            references = self._references.get(table_id, {})
            ready = sorted(
                (since, name)
                for name, (_, since) in files.items()
                if since is not None and since < before and not references.get(name)
            )
            return [name for _, name in ready[:limit]]

    def forget_requests(self, table_id: str, before: int) -> int:
        with self._lock:
            requests = self._requests.get(table_id, {})
            old = [r for r, (_, recorded) in requests.items() if recorded < before]
            for request_id in old:
                del requests[request_id]
            return len(old)

    def delete_table(self, table_id: str) -> None:
        with self._lock:
            for rows in (self._files, self._references, self._requests):
                rows.pop(table_id, None)
