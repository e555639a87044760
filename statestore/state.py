"""TableState: the partitions and files of one table, as of one transaction number.

The state is changed only by :meth:`statestore.transactions.Transaction.apply`, always after the
transaction's ``validate`` passed, so a rejected transaction never leaves a trace. Every value held is
immutable, which makes :meth:`TableState.copy` a pair of dictionary copies.

To try changes without copying the whole state (the committer's group commit, a batch's validation), open
an undo journal with :meth:`TableState.begin_changes`: every mutator then records what it replaced, and
:meth:`TableState.undo_changes` puts it back, so trying a batch costs in proportion to the batch, not to
the table. Undoing puts back every value; the iteration order of files may differ (it carries no meaning,
like the order of a file's references).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from statestore.errors import (
    FileNotFoundInStateError,
    FileReferenceAssignedToJobError,
    FileReferenceNotFoundError,
    InvalidQueryError,
    PartitionNotFoundError,
)
from statestore.files import FileReference, TableFile
from statestore.partitions import Partition, PartitionTree
from statestore.schema import Schema

_ABSENT: Any = object()  # in an undo record: the key was not there before


class TableState:
    """Partitions + files + the number of the last transaction applied (0 = none).

    ``files_by_name`` and ``partitions_by_id`` are for reading; change them through the mutators, which
    keep the reference count and the undo journal. Assigning ``files_by_name`` whole is allowed (outside a
    journal): it recounts the references.
    """

    def __init__(
        self,
        schema: Schema,
        partitions_by_id: dict[str, Partition] | None = None,
        files_by_name: dict[str, TableFile] | None = None,
        transaction_number: int = 0,
    ) -> None:
        self.schema = schema
        self.partitions_by_id: dict[str, Partition] = {} if partitions_by_id is None else partitions_by_id
        self._files_by_name: dict[str, TableFile] = {}
        self._reference_count = 0
        # Undo records, newest last, while a journal is open (None: changes are not recorded).
        self._undo: list[tuple[Any, ...]] | None = None
        self.files_by_name = {} if files_by_name is None else files_by_name
        self.transaction_number = transaction_number

    @property
    def files_by_name(self) -> dict[str, TableFile]:
        return self._files_by_name

    @files_by_name.setter
    def files_by_name(self, files: dict[str, TableFile]) -> None:
        if self._undo is not None:
            raise RuntimeError("files_by_name cannot be replaced while an undo journal is open")
        self._files_by_name = files
        self._reference_count = sum(len(f.references) for f in files.values())

    # --- partitions -----------------------------------------------------------------------------

    @property
    def partition_tree(self) -> PartitionTree:
        return PartitionTree(self.partitions_by_id)

    def partitions(self) -> list[Partition]:
        return list(self.partitions_by_id.values())

    def leaf_partitions(self) -> list[Partition]:
        return [p for p in self.partitions_by_id.values() if p.leaf]

    def partition(self, partition_id: str) -> Partition:
        try:
            return self.partitions_by_id[partition_id]
        except KeyError:
            raise PartitionNotFoundError(partition_id) from None

    # --- files ----------------------------------------------------------------------------------

    def file(self, filename: str) -> TableFile:
        try:
            return self.files_by_name[filename]
        except KeyError:
            raise FileNotFoundInStateError(filename) from None

    def files(self) -> list[TableFile]:
        return list(self.files_by_name.values())

    def has_files(self) -> bool:
        return bool(self.files_by_name)

    def file_references(self) -> Iterator[FileReference]:
        for table_file in self.files_by_name.values():
            yield from table_file.references

    def reference_count(self) -> int:
        """How many file references the state holds (kept up to date by the mutators)."""
        return self._reference_count

    def references_with_no_job(self) -> list[FileReference]:
        return [r for r in self.file_references() if r.job_id is None]

    def claimed_references(self, before: int | None = None) -> dict[str, list[FileReference]]:
        """References assigned to a job, by job id; with ``before`` (epoch ms) only claims made before it
        (a claimed reference's ``last_update_time`` is when it was claimed)."""
        out: dict[str, list[FileReference]] = {}
        for ref in self.file_references():
            if ref.job_id is not None and (before is None or ref.last_update_time < before):
                out.setdefault(ref.job_id, []).append(ref)
        return out

    def is_assigned(self, job_id: str, partition_id: str, filenames: Iterable[str]) -> bool:
        """Whether compaction job ``job_id`` holds its claim: every file's reference in ``partition_id`` is
        assigned to it. False while a reference is assigned to no job (not claimed yet, or released).

        Raises FileNotFoundInStateError or FileReferenceNotFoundError naming a file with no reference in
        the partition (already replaced, or never there), FileReferenceAssignedToJobError naming a file
        another job holds, InvalidQueryError for no filenames.
        """
        names = list(filenames)
        if not names:
            raise InvalidQueryError(f"is_assigned of job {job_id!r} needs at least one filename")
        held = True
        for filename in names:
            ref = self.file(filename).reference_in(partition_id)
            if ref is None:
                raise FileReferenceNotFoundError(filename, partition_id)
            if ref.job_id is None:
                held = False
            elif ref.job_id != job_id:
                raise FileReferenceAssignedToJobError(filename, partition_id, ref.job_id)
        return held

    def references_by_partition(self) -> dict[str, list[FileReference]]:
        """Every partition that has references, mapped to them."""
        out: dict[str, list[FileReference]] = {}
        for ref in self.file_references():
            out.setdefault(ref.partition_id, []).append(ref)
        return out

    def references_in_partition(self, partition_id: str) -> list[FileReference]:
        return [r for r in self.file_references() if r.partition_id == partition_id]

    def files_ready_for_gc(self, before: int) -> list[str]:
        """Names of files with no references whose last update was before ``before`` (epoch ms)."""
        return [
            f.filename
            for f in self.files_by_name.values()
            if not f.references and f.last_update_time < before
        ]

    def unreferenced_files(self) -> list[TableFile]:
        return [f for f in self.files_by_name.values() if not f.references]

    # --- used by transactions, and by snapshot loading ------------------------------------------

    def put_file(self, table_file: TableFile) -> None:
        files = self._files_by_name
        old = files.get(table_file.filename, _ABSENT)
        if self._undo is not None:
            self._undo.append(("file", table_file.filename, old))
        files[table_file.filename] = table_file
        self._reference_count += len(table_file.references) - (0 if old is _ABSENT else len(old.references))

    def put_files(self, table_files: Iterable[TableFile]) -> None:
        """:meth:`put_file` of each, in order (one call for a big AddFiles)."""
        files, undo = self._files_by_name, self._undo
        added = 0
        try:
            for table_file in table_files:
                old = files.get(table_file.filename, _ABSENT)
                if undo is not None:
                    undo.append(("file", table_file.filename, old))
                files[table_file.filename] = table_file
                added += len(table_file.references) - (0 if old is _ABSENT else len(old.references))
        finally:
            self._reference_count += added

    def remove_file(self, filename: str) -> None:
        old = self._files_by_name.pop(filename)
        if self._undo is not None:
            self._undo.append(("file", filename, old))
        self._reference_count -= len(old.references)

    def clear_files(self) -> None:
        if self._undo is not None:
            self._undo.append(("files", self._files_by_name, self._reference_count))
        self._files_by_name, self._reference_count = {}, 0

    def put_partitions(self, partitions: Iterable[Partition]) -> None:
        by_id = self.partitions_by_id
        for p in partitions:
            if self._undo is not None:
                self._undo.append(("partition", p.id, by_id.get(p.id, _ABSENT)))
            by_id[p.id] = p

    def replace_partitions(self, partitions: Iterable[Partition]) -> None:
        if self._undo is not None:
            self._undo.append(("partitions", self.partitions_by_id))
        self.partitions_by_id = {p.id: p for p in partitions}

    # --- trying changes -------------------------------------------------------------------------

    def begin_changes(self) -> int:
        """Start recording changes so they can be undone; returns a mark for :meth:`undo_changes` and
        :meth:`keep_changes`. Journals nest: an inner mark is undone or kept inside the outer one."""
        if self._undo is None:
            self._undo = []
        return len(self._undo)

    def undo_changes(self, mark: int) -> None:
        """Put back everything changed since ``mark`` (newest first); closes the journal at the outer mark."""
        undo = self._undo
        if undo is None or mark > len(undo):
            raise RuntimeError(f"no open undo journal at mark {mark}")
        files, by_id = self._files_by_name, self.partitions_by_id
        while len(undo) > mark:
            record = undo.pop()
            kind = record[0]
            if kind == "file":
                _, filename, old = record
                now = files.pop(filename, _ABSENT)
                if now is not _ABSENT:
                    self._reference_count -= len(now.references)
                if old is not _ABSENT:
                    files[filename] = old
                    self._reference_count += len(old.references)
            elif kind == "partition":
                _, partition_id, old = record
                if old is _ABSENT:
                    del by_id[partition_id]
                else:
                    by_id[partition_id] = old
            elif kind == "files":  # rebinds ``files``: older records belong to the restored dict
                _, files, self._reference_count = record
                self._files_by_name = files
            else:
                _, by_id = record
                self.partitions_by_id = by_id
        if mark == 0:
            self._undo = None

    def keep_changes(self, mark: int) -> None:
        """Keep the changes made since ``mark``; at the outer mark this closes the journal (no undo)."""
        if self._undo is None or mark > len(self._undo):
            raise RuntimeError(f"no open undo journal at mark {mark}")
        if mark == 0:
            self._undo = None

    # --- whole-state ----------------------------------------------------------------------------

    def copy(self) -> TableState:
        """An independent copy (values are immutable, so copying the dictionaries is enough)."""
        return TableState(
            self.schema, dict(self.partitions_by_id), dict(self.files_by_name), self.transaction_number
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TableState):
            return NotImplemented
        return (
            self.transaction_number == other.transaction_number
            and self.schema == other.schema
            and self.partitions_by_id == other.partitions_by_id
            and _files_equal(self.files_by_name, other.files_by_name)
        )

    def __repr__(self) -> str:
        return (
            f"TableState(transaction_number={self.transaction_number}, "
            f"partitions={len(self.partitions_by_id)}, files={len(self.files_by_name)}, "
            f"references={self.reference_count()})"
        )


def _files_equal(a: dict[str, TableFile], b: dict[str, TableFile]) -> bool:
    # The order of a file's references carries no meaning.
    if a.keys() != b.keys():
        return False
    for name, fa in a.items():
        fb = b[name]
        if fa.last_update_time != fb.last_update_time or len(fa.references) != len(fb.references):
            return False
        if sorted(fa.references, key=_ref_key) != sorted(fb.references, key=_ref_key):
            return False
    return True


def _ref_key(ref: FileReference) -> str:
    return ref.partition_id
