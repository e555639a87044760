"""TableState: the partitions and files of one table, as of one transaction number.

The state is changed only by :meth:`statestore.transactions.Transaction.apply`, always after the
transaction's ``validate`` passed, so a rejected transaction never leaves a trace. Every value held is
immutable, which makes :meth:`TableState.copy` cheap.

To try changes without copying the whole state (the committer's group commit, a batch's validation), open
an undo journal with :meth:`TableState.begin_changes`: every mutator then records what it replaced, and
:meth:`TableState.undo_changes` puts it back, so trying a batch costs in proportion to the batch, not to
the table. Undoing puts back every value; the iteration order of files may differ (it carries no meaning,
like the order of a file's references).

Files are held column-wise (:class:`statestore.state.file_columns.FileColumns`, ~110 B per reference instead
of one Python object each) as an immutable **base**, plus an **overlay** of the files changed since it
(filename -> ``TableFile``, or None for a base file removed). The mutators write the overlay; when it grows
past a fraction of the base, and no undo journal is open, it is folded into a new base.

This module holds that storage, its mutators, the undo journal and the whole-state operations; the queries
(what the state holds, read without changing it) are :class:`statestore.state.table_queries.TableQueries`,
which ``TableState`` inherits.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping
from typing import Any, cast

import numpy as np

from statestore.model.files import FileReference, TableFile
from statestore.model.partition_tree import PartitionTree
from statestore.model.partitions import Partition
from statestore.model.schema import Schema
from statestore.state.cycle_collector import collector_paused
from statestore.state.file_columns import FileColumns
from statestore.state.file_guard import FileGuard, GuardCannotTell
from statestore.state.partition_columns import PartitionColumns
from statestore.state.table_queries import ABSENT as _ABSENT
from statestore.state.table_queries import TableQueries, _FilesView, _PartitionsView

# The overlay is folded into the base when it holds more files than this, and more than a quarter of the
# base's: folding costs in proportion to the table, so it happens after changes of a similar size.
FOLD_MIN_FILES = 65_536
_CHUNK = 65_536  # base files made into TableFile objects at a time while iterating
# What clear_files and replace_partitions replace whole, saved as one undo record each.
_FILE_FIELDS = (
    "_base",
    "_shadowed",
    "_overlay",
    "_shadowing",
    "_overlay_claims",
    "_file_count",
    "_reference_count",
)
# What add_new_files replaces when it appends to the base (the overlay is left as it is).
_APPENDED_FIELDS = ("_base", "_shadowed", "_file_count", "_reference_count")
# A batch of new files is appended to the base when it holds at least 1/_APPEND_RATIO of the base's files.
# Appending to a base of 1M files costs ~80 ms (its columns copied), what ~9,000 files cost put into the
# overlay one object each: at 64 an append never costs more per file than the overlay would.
_APPEND_RATIO = 64
_PARTITION_FIELDS = ("_partition_base", "_partitions", "_partition_shadowed", "_partition_count")


class TableState(TableQueries):
    """Partitions + files + the number of the last transaction applied (0 = none).

    ``files_by_name`` and ``partitions_by_id`` are for reading; change them through the mutators, which
    keep the reference count and the undo journal. Assigning ``files_by_name`` whole is allowed (outside a
    journal): it recounts the references.
    """

    def __init__(
        self,
        schema: Schema,
        partitions_by_id: Mapping[str, Partition] | None = None,
        files_by_name: Mapping[str, TableFile] | None = None,
        transaction_number: int = 0,
        *,
        file_columns: FileColumns | None = None,
        partition_columns: PartitionColumns | None = None,
    ) -> None:
        self.schema = schema
        if isinstance(partitions_by_id, _PartitionsView):  # another state's: share its loaded columns
            partition_columns = partitions_by_id._state._partition_base
            partitions_by_id = dict(partitions_by_id._state._partitions)
        elif partitions_by_id is not None and not isinstance(partitions_by_id, dict):
            partitions_by_id = dict(partitions_by_id)
        self._set_partitions(partition_columns, {} if partitions_by_id is None else partitions_by_id)
        # Undo records, newest last, while a journal is open (None: changes are not recorded).
        self._undo: list[tuple[Any, ...]] | None = None
        self._set_base(FileColumns.empty() if file_columns is None else file_columns)
        if files_by_name:
            self.files_by_name = files_by_name
        self.transaction_number = transaction_number
        # The update time of the log entry at ``transaction_number`` (epoch ms; 0: not known, e.g. loaded
        # from a snapshot written before it was kept). The next entry's time is never before it.
        self.last_update_time = 0
        # The table's data prefix (statestore.model.layout.data_prefix), where a new data file's name must be
        # a key; None for a state that knows no table (built by hand: tests, tools).
        self.data_prefix: str | None = None

    def _set_partitions(self, base: PartitionColumns | None, changed: dict[str, Partition]) -> None:
        # Partitions are a snapshot's columns (if loaded from one) under a dictionary of those changed
        # since; a partition is never removed alone, so the dictionary needs no tombstones.
        self._partition_base = base
        self._partitions = changed
        self._partition_shadowed = np.zeros(0 if base is None else len(base), np.bool_)
        shadowed = 0
        if base is not None:
            for partition_id in changed:
                row = base.row_of(partition_id)
                if row is not None:
                    self._partition_shadowed[row] = True
                    shadowed += 1
        self._partition_count = (0 if base is None else len(base)) + len(changed) - shadowed

    @property
    def partitions_by_id(self) -> Mapping[str, Partition]:
        """Every partition by id: read-only (change them through the mutators)."""
        if self._partition_base is None:
            return self._partitions
        return _PartitionsView(self)

    def _set_base(self, base: FileColumns) -> None:
        self._base = base
        self._shadowed = np.zeros(base.file_count, np.bool_)  # base rows the overlay replaces or removes
        self._overlay: dict[str, TableFile | None] = {}
        self._shadowing: dict[str, int] = {}  # overlay filename -> the base row it shadows
        # Job id -> the overlay's files with a reference it holds: made on the first release of claims
        # (files_claimed_by), then kept as the overlay changes.
        self._overlay_claims: dict[str, set[str]] | None = None
        self._file_count = base.file_count
        self._reference_count = base.total_reference_count

    @property
    def files_by_name(self) -> Mapping[str, TableFile]:
        """Every file by name: a read-only view that makes a ``TableFile`` on each access."""
        return _FilesView(self)

    @files_by_name.setter
    def files_by_name(self, files: Mapping[str, TableFile]) -> None:
        if self._undo is not None:
            raise RuntimeError("files_by_name cannot be replaced while an undo journal is open")
        self._set_base(FileColumns.from_table_files(files.values()))

    def file_columns(self) -> FileColumns:
        """All files as one :class:`FileColumns` (what a snapshot writes); folds the overlay in when no
        undo journal is open."""
        if not self._overlay:
            return self._base
        folded = self._folded()
        if self._undo is None:
            self._set_base(folded)
        return folded

    def _folded(self) -> FileColumns:
        with collector_paused():
            kept = self._base.take_files(np.flatnonzero(~self._shadowed))
            changed = FileColumns.from_table_files(f for f in self._overlay.values() if f is not None)
            return kept.concat(changed)

    def _maybe_fold(self) -> None:
        if self._undo is None and len(self._overlay) > max(FOLD_MIN_FILES, self._base.file_count // 4):
            self._set_base(self._folded())

    def _get(self, filename: str) -> TableFile | None:
        entry = self._overlay.get(filename, _ABSENT)
        if entry is not _ABSENT:
            return entry
        if type(filename) is not str:  # held by no state, as a dict of names would say
            return None
        row = self._base.row_of(filename)
        return None if row is None else self._base.table_file(row)

    def _contains(self, filename: str) -> bool:
        entry = self._overlay.get(filename, _ABSENT)
        if entry is not _ABSENT:
            return entry is not None
        return type(filename) is str and self._base.row_of(filename) is not None

    def _iter_names(self) -> Iterator[str]:
        live = np.flatnonzero(~self._shadowed)
        for start in range(0, len(live), _CHUNK):
            yield from self._base.filenames(live[start : start + _CHUNK])
        yield from [name for name, f in self._overlay.items() if f is not None]

    def _iter_files(self) -> Iterator[TableFile]:
        live = np.flatnonzero(~self._shadowed)
        for start in range(0, len(live), _CHUNK):
            yield from self._base.table_files(live[start : start + _CHUNK])
        yield from [f for f in self._overlay.values() if f is not None]

    def _visible(self, entry: Any, row: int | None) -> tuple[int, int]:
        """(files, references) seen for one filename with overlay ``entry`` over base ``row``."""
        if entry is _ABSENT:
            return (0, 0) if row is None else (1, self._base.reference_count_of(row))
        return (0, 0) if entry is None else (1, len(entry.references))

    def _set_entry(self, filename: str, entry: Any, row: int | None) -> None:
        """Make the overlay entry of ``filename`` (over base ``row``) ``entry`` (_ABSENT: none)."""
        overlay = self._overlay
        before = overlay.get(filename, _ABSENT)
        files_before, refs_before = self._visible(before, row)
        files_after, refs_after = self._visible(entry, row)
        if self._overlay_claims is not None:
            self._index_claims(filename, before, entry)
        if entry is _ABSENT:
            overlay.pop(filename, None)
            if row is not None:
                del self._shadowing[filename]
                self._shadowed[row] = False
        else:
            overlay[filename] = entry
            if row is not None:
                self._shadowing[filename] = row
                self._shadowed[row] = True
        self._file_count += files_after - files_before
        self._reference_count += refs_after - refs_before

    def _index_claims(self, filename: str, before: Any, after: Any) -> None:
        """Keep ``_overlay_claims`` true as the overlay entry of ``filename`` goes from ``before`` to
        ``after`` (each a TableFile, None for removed, or _ABSENT for none)."""
        claims = cast(dict[str, set[str]], self._overlay_claims)
        for ref in getattr(before, "references", ()):
            names = claims.get(ref.job_id) if ref.job_id is not None else None
            if names is not None:
                names.discard(filename)
                if not names:
                    del claims[ref.job_id]
        for ref in getattr(after, "references", ()):
            if ref.job_id is not None:
                claims.setdefault(ref.job_id, set()).add(filename)

    def _base_row(self, filename: str) -> int | None:
        if filename in self._overlay:
            return self._shadowing.get(filename)
        return self._base.row_of(filename)

    # --- partitions -----------------------------------------------------------------------------

    @property
    def partition_tree(self) -> PartitionTree:
        return PartitionTree(self.partitions_by_id, self._root_partitions)

    def _root_partitions(self) -> list[Partition]:
        """The partitions with no parent (one, in a valid tree), found on the columns: a walk down the tree
        (a query's partitions, a key's leaf) must not make an object of every partition to start."""
        roots = [p for p in self._partitions.values() if p.parent_id is None]
        base = self._partition_base
        if base is None:
            return roots
        rows = self._unchanged_partition_rows(base.rows_without_parent())
        return [base.partition(row) for row in rows.tolist()] + roots

    # --- used by transactions, and by snapshot loading ------------------------------------------

    def put_file(self, table_file: TableFile) -> None:
        self.put_files((table_file,))

    def put_files(self, table_files: Iterable[TableFile]) -> None:
        """:meth:`put_file` of each, in order (one call for a big AddFiles)."""
        table_files = list(table_files)
        overlay, undo = self._overlay, self._undo
        names = [f.filename for f in table_files]
        # One vectorised search of the base for the names the overlay does not hold yet.
        unknown = [name for name in names if name not in overlay]
        base_rows = dict(zip(unknown, self._base.rows_of(unknown), strict=True))
        added_files = added_references = 0
        for name, table_file in zip(names, table_files, strict=True):
            row = base_rows.pop(name, None) if name in base_rows else self._shadowing.get(name)
            if row is None and name not in overlay:  # a new file (an AddFiles): no base row to shadow
                if undo is not None:
                    undo.append(("file", name, _ABSENT, None))
                if self._overlay_claims is not None:
                    self._index_claims(name, _ABSENT, table_file)
                overlay[name] = table_file
                added_files += 1
                added_references += len(table_file.references)
                continue
            if undo is not None:
                undo.append(("file", name, overlay.get(name, _ABSENT), row))
            self._set_entry(name, table_file, row)
        self._file_count += added_files
        self._reference_count += added_references
        self._maybe_fold()

    def add_new_files(self, added: FileColumns) -> None:
        """Add files the state does not hold (the caller validated that: a bulk AddFiles).

        A batch big against the base (at least 1/``_APPEND_RATIO`` of its files) is appended to it as
        columns, no object made per file: the base's columns are copied once, in C. A smaller one goes
        into the overlay like any change.
        """
        if added.file_count * _APPEND_RATIO < self._base.file_count:
            self.put_files(added.table_files())
            return
        if self._undo is not None:
            self._undo.append(("fields", _APPENDED_FIELDS, self._fields(_APPENDED_FIELDS)))
        # Base rows keep their numbers, so the overlay's entries still shadow the rows they did.
        self._base = self._base.append(added)
        self._shadowed = np.concatenate([self._shadowed, np.zeros(added.file_count, np.bool_)])
        self._file_count += added.file_count
        self._reference_count += added.total_reference_count

    def remove_file(self, filename: str) -> None:
        """Remove ``filename`` (KeyError if the state does not hold it)."""
        if not self._contains(filename):
            raise KeyError(filename)
        row = self._base_row(filename)
        if self._undo is not None:
            self._undo.append(("file", filename, self._overlay.get(filename, _ABSENT), row))
        self._set_entry(filename, _ABSENT if row is None else None, row)
        self._maybe_fold()

    def clear_files(self) -> None:
        if self._undo is not None:
            self._undo.append(("fields", _FILE_FIELDS, self._fields(_FILE_FIELDS)))
        self._set_base(FileColumns.empty())

    def put_partitions(self, partitions: Iterable[Partition]) -> None:
        for p in partitions:
            row = self._partition_row(p.id)
            if self._undo is not None:
                self._undo.append(("partition", p.id, self._partitions.get(p.id, _ABSENT), row))
            self._set_partition(p.id, p, row)

    def _set_partition(self, partition_id: str, entry: Any, row: int | None) -> None:
        """Make the changed partition ``partition_id`` (over base ``row``) ``entry`` (_ABSENT: unchanged)."""
        was_there = partition_id in self._partitions or row is not None
        if entry is _ABSENT:
            self._partitions.pop(partition_id, None)
        else:
            self._partitions[partition_id] = entry
        if row is not None:
            self._partition_shadowed[row] = entry is not _ABSENT
        self._partition_count += int(partition_id in self._partitions or row is not None) - int(was_there)

    def replace_partitions(self, partitions: Iterable[Partition]) -> None:
        if self._undo is not None:
            self._undo.append(("fields", _PARTITION_FIELDS, self._fields(_PARTITION_FIELDS)))
        self._set_partitions(None, {p.id: p for p in partitions})

    def _fields(self, names: tuple[str, ...]) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in names)

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
        while len(undo) > mark:
            record = undo.pop()
            kind = record[0]
            if kind == "file":
                _, filename, old, row = record
                self._set_entry(filename, old, row)
            elif kind == "partition":
                _, partition_id, old, row = record
                self._set_partition(partition_id, old, row)
            else:  # "fields": a whole set put back; older records belong to what it restores
                _, names, values = record
                for name, value in zip(names, values, strict=True):
                    setattr(self, name, value)
        if mark == 0:
            self._undo = None
            self._maybe_fold()

    def keep_changes(self, mark: int) -> None:
        """Keep the changes made since ``mark``; at the outer mark this closes the journal (no undo)."""
        if self._undo is None or mark > len(self._undo):
            raise RuntimeError(f"no open undo journal at mark {mark}")
        if mark == 0:
            self._undo = None
            self._maybe_fold()

    # --- whole-state ----------------------------------------------------------------------------

    def is_leaf(self, partition_id: str) -> bool:
        """Whether ``partition_id`` is a leaf partition of this state, without making the partition: a check
        each commit that adds files makes for the partitions it adds to (the log's list of leaves)."""
        changed = self._partitions.get(partition_id)
        if changed is not None:
            return changed.leaf
        base = self._partition_base
        row = None if base is None else base.row_of(partition_id)
        return row is not None and base is not None and base.ids_index().is_leaf(row)

    def file_guard(self, read_to_end_at: int) -> FileGuard | None:
        """What this state keeps when evicted, to take new files without it (:mod:`statestore.state.
        file_guard`): its name index's hashes (shared), the names changed since, its partitions' ids. None
        while an undo journal is open, or when a name it holds cannot be hashed (the state then is
        simply dropped)."""
        if self._undo is not None:
            return None
        added = [name for name, entry in self._overlay.items() if entry is not None]
        base = self._partition_base
        partition_ids: Collection[str]
        leaf_ids: Collection[str]
        if base is not None and not self._partitions and not self._partition_shadowed.any():
            partition_ids = base.ids_index()  # shared: the partitions are the snapshot's, unchanged
            leaf_ids = partition_ids.leaves
        else:
            partition_ids, leaf_ids = frozenset(self.partitions_by_id), frozenset(self.leaf_ids())
        try:
            return FileGuard(
                self._base.hash_search(),  # shared; removed names stay in: "maybe held" loads the state
                self._base._hash_mask,
                added,
                data_prefix=self.data_prefix,
                partition_ids=partition_ids,
                leaf_ids=leaf_ids,
                transaction_number=self.transaction_number,
                last_update_time=self.last_update_time,
                references=self._reference_count,
                read_to_end_at=read_to_end_at,
            )
        except GuardCannotTell:
            return None

    def copy(self) -> TableState:
        """An independent copy (the base is immutable and shared; the overlay is copied)."""
        copy = TableState(self.schema, None, None, self.transaction_number)
        copy.last_update_time = self.last_update_time
        copy.data_prefix = self.data_prefix
        copy._partition_base, copy._partitions = self._partition_base, dict(self._partitions)
        copy._partition_shadowed = self._partition_shadowed.copy()
        copy._partition_count = self._partition_count
        copy._base = self._base
        copy._shadowed = self._shadowed.copy()
        copy._overlay = dict(self._overlay)
        copy._shadowing = dict(self._shadowing)
        copy._overlay_claims = None  # made again on the copy's first use
        copy._file_count, copy._reference_count = self._file_count, self._reference_count
        return copy

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TableState):
            return NotImplemented
        return (
            self.transaction_number == other.transaction_number
            and self.schema == other.schema
            and self.partitions_by_id == other.partitions_by_id
            and self._file_count == other._file_count
            and _files_equal(
                dict(zip(self._iter_names(), self._iter_files(), strict=True)),
                dict(zip(other._iter_names(), other._iter_files(), strict=True)),
            )
        )

    def __repr__(self) -> str:
        return (
            f"TableState(transaction_number={self.transaction_number}, "
            f"partitions={self._partition_count}, files={self._file_count}, "
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
