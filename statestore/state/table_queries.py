"""The queries of a :class:`statestore.state.table_state.TableState`: what a state holds, read without
changing it.

:class:`TableQueries` is a mixin ``TableState`` inherits, so ``state.files_ready_for_gc(...)`` and the like
are methods of the state. It reads the storage ``TableState`` keeps (a base of columns under an overlay of
changed files, partition columns under a dictionary of changed partitions) and writes none of it: the
storage, its mutators and the undo journal are in ``table_state.py``. Most queries select on the columns,
making an object for each thing they return only, never for every reference of the table.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import numpy as np

from statestore.errors import (
    FileNotFoundInStateError,
    FileReferenceAssignedToJobError,
    FileReferenceNotFoundError,
    InvalidQueryError,
    PartitionNotFoundError,
)
from statestore.model.files import FileReference, TableFile
from statestore.model.partitions import Partition
from statestore.state.cycle_collector import collector_paused
from statestore.state.file_columns import FileColumns
from statestore.state.partition_columns import PartitionColumns

ABSENT: Any = object()  # an overlay entry, or an undo record's old value: the key is not there


class PartitionTotals(NamedTuple):
    """A partition's references in figures (see :meth:`TableState.reference_totals`)."""

    references: int
    assigned_to_jobs: int
    rows: int
    rows_approximate: bool  # whether any of their row counts is approximate


class TableQueries:
    """The read-only queries of :class:`~statestore.state.table_state.TableState`, over its storage."""

    # The storage TableState keeps (see table_state.py): files as a base of columns, ``_shadowed`` marking
    # the base rows the overlay replaces or removes, and the overlay of changed files (None: removed);
    # partitions as columns under a dictionary of changed ones.
    _base: FileColumns
    _shadowed: np.ndarray
    _overlay: dict[str, TableFile | None]
    _overlay_claims: dict[str, set[str]] | None
    _file_count: int
    _reference_count: int
    _partition_base: PartitionColumns | None
    _partitions: dict[str, Partition]
    _partition_shadowed: np.ndarray
    _partition_count: int

    if TYPE_CHECKING:

        @property
        def partitions_by_id(self) -> Mapping[str, Partition]: ...

        def _get(self, filename: str) -> TableFile | None: ...

        def _contains(self, filename: str) -> bool: ...

        def _iter_names(self) -> Iterator[str]: ...

        def _iter_files(self) -> Iterator[TableFile]: ...

        def _index_claims(self, filename: str, before: Any, after: Any) -> None: ...

    # --- partitions -----------------------------------------------------------------------------

    def has_partition(self, partition_id: str) -> bool:
        """``partition_id in self.partitions_by_id``, without making the view: a check every new reference
        makes on the commit path."""
        if partition_id in self._partitions:
            return True
        base = self._partition_base
        return base is not None and base.row_of(partition_id) is not None

    def partitions(self) -> list[Partition]:
        return list(self.partitions_by_id.values())

    def leaf_partitions(self) -> list[Partition]:
        changed = [p for p in self._partitions.values() if p.leaf]
        base = self._partition_base
        if base is None:
            return changed
        return base.partitions(self._unchanged_partition_rows(base.leaf_rows())) + changed

    def leaf_ids(self) -> list[str]:
        """The ids of the leaf partitions, in the order of :meth:`leaf_partitions`, without making them."""
        changed = [p.id for p in self._partitions.values() if p.leaf]
        base = self._partition_base
        if base is None:
            return changed
        return base.ids(self._unchanged_partition_rows(base.leaf_rows())) + changed

    def _unchanged_partition_rows(self, rows: np.ndarray) -> np.ndarray:
        """Those of ``rows`` of the partition columns whose partition was not changed since (the changed ones
        are in the dictionary over them)."""
        return rows[~self._partition_shadowed[rows]]

    def partition(self, partition_id: str) -> Partition:
        try:
            return self.partitions_by_id[partition_id]
        except KeyError:
            raise PartitionNotFoundError(partition_id) from None

    def _partition_row(self, partition_id: str) -> int | None:
        return None if self._partition_base is None else self._partition_base.row_of(partition_id)

    # --- files ----------------------------------------------------------------------------------

    def file(self, filename: str) -> TableFile:
        table_file = self._get(filename)
        if table_file is None:
            raise FileNotFoundInStateError(filename)
        return table_file

    def files(self) -> list[TableFile]:
        return list(self._iter_files())

    def has_files(self) -> bool:
        return self._file_count > 0

    def files_present(self, filenames: Sequence[object]) -> list[bool]:
        """Whether the state holds a file of each name (one vectorised search of the base for them all;
        a name that is not a string is held by no state)."""
        overlay = self._overlay
        if len(filenames) == 1:  # the commit path's usual case, without the batch's bookkeeping
            name = filenames[0]
            if type(name) is not str:
                return [False]
            entry = overlay.get(name, ABSENT)
            return [self._base.row_of(name) is not None if entry is ABSENT else entry is not None]
        if not overlay and set(map(type, filenames)) == {str}:  # no changes since the base: search it whole
            return [row is not None for row in self._base.rows_of(cast(Sequence[str], filenames))]
        out = [False] * len(filenames)
        searched: list[str] = []
        positions: list[int] = []
        for i, name in enumerate(filenames):
            if type(name) is not str:
                continue
            entry = overlay.get(name, ABSENT)
            if entry is ABSENT:
                searched.append(name)
                positions.append(i)
            else:
                out[i] = entry is not None
        for i, row in zip(positions, self._base.rows_of(searched), strict=True):
            out[i] = row is not None
        return out

    def file_references(self) -> Iterator[FileReference]:
        for table_file in self._iter_files():
            yield from table_file.references

    def reference_count(self) -> int:
        """How many file references the state holds (kept up to date by the mutators)."""
        return self._reference_count

    def references_with_no_job(self) -> list[FileReference]:
        base = self._base
        return self._base_references_where(base.job_codes < 0) + [
            r for f in self._changed_files() for r in f.references if r.job_id is None
        ]

    def _changed_files(self) -> list[TableFile]:
        return [f for f in self._overlay.values() if f is not None]

    def _base_references_where(self, selected: np.ndarray) -> list[FileReference]:
        """The base's references where ``selected`` (one bool per base reference) holds, but not those of
        files the overlay replaced or removed."""
        rows = np.flatnonzero(selected)
        rows = rows[~self._shadowed[self._base.file_rows_of_references(rows)]]
        return self._base.references_at(rows)

    def _base_files_where(self, selected: np.ndarray) -> np.ndarray:
        return np.flatnonzero(selected & ~self._shadowed)

    def claimed_references(self, before: int | None = None) -> dict[str, list[FileReference]]:
        """References assigned to a job, by job id; with ``before`` (epoch ms) only claims made before it
        (a claimed reference's ``last_update_time`` is when it was claimed). An object is made for each
        claimed reference only, not for every reference of the table."""
        base = self._base
        selected = base.job_codes >= 0
        if before is not None:
            selected &= base.reference_times < before
        out: dict[str, list[FileReference]] = {}
        for ref in self._base_references_where(selected):
            out.setdefault(cast(str, ref.job_id), []).append(ref)
        for table_file in self._changed_files():
            for ref in table_file.references:
                if ref.job_id is not None and (before is None or ref.last_update_time < before):
                    out.setdefault(ref.job_id, []).append(ref)
        return out

    def files_claimed_by(self, job_ids: Iterable[str], before: int | None = None) -> list[TableFile]:
        """The files with a reference claimed by one of ``job_ids`` (with ``before``, claimed before that
        time): what a ``ReleaseClaims`` rewrites. Found through the columns' claimed rows by job and the
        index of the overlay's claims, so it costs what it finds; an object is made for each such file
        only."""
        jobs = set(job_ids)
        base = self._base
        codes = base.job_codes_of(jobs)
        files: list[TableFile] = []
        if codes:
            claimed = base.reference_rows_claimed_by(codes)
            if before is not None:
                claimed = claimed[base.reference_times[claimed] < before]
            rows = np.unique(base.file_rows_of_references(claimed))
            files = base.table_files(rows[~self._shadowed[rows]])

        # The changed files holding a claim of one of the jobs, then, if a time is given, those with such a
        # claim made before it.
        claims = self._overlay_claims
        if claims is None:
            claims = self._overlay_claims = {}
            for name, table_file in self._overlay.items():
                self._index_claims(name, ABSENT, table_file)
        names = set().union(*(claims.get(job, ()) for job in jobs))
        changed = [cast(TableFile, self._overlay[name]) for name in sorted(names)]
        if before is not None:
            changed = [
                f
                for f in changed
                if any(r.job_id in jobs and r.last_update_time < before for r in f.references)
            ]
        return files + changed

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
        return self._references_by_partition(
            np.ones(self._base.total_reference_count, np.bool_), lambda ref: True
        )

    def _references_by_partition(
        self, selected: np.ndarray | None, keep: Callable[[FileReference], bool]
    ) -> dict[str, list[FileReference]]:
        """The base's references where ``selected`` holds (None: none of them) and the changed files' that
        ``keep`` keeps, by partition id."""
        out: dict[str, list[FileReference]] = {}
        if selected is not None:
            with collector_paused():  # possibly an object per reference of the table, none of them garbage
                for ref in self._base_references_where(selected):
                    out.setdefault(ref.partition_id, []).append(ref)
        for table_file in self._changed_files():
            for ref in table_file.references:
                if keep(ref):
                    out.setdefault(ref.partition_id, []).append(ref)
        return out

    def reference_totals(self) -> dict[str, PartitionTotals]:
        """For each partition with references: how many, how many a job holds, their rows, and whether any
        row count is approximate. Summed on the columns, with no object made per reference."""
        base = self._base
        width = len(base.partition_ids)
        live = np.repeat(~self._shadowed, np.diff(base.reference_starts))  # references of unchanged files
        codes = base.partition_codes[live]
        rows = base.number_of_rows[live]
        references = np.bincount(codes, minlength=width)
        assigned = np.bincount(codes[base.job_codes[live] >= 0], minlength=width)
        approximate = np.bincount(codes[base.count_approximate[live]], minlength=width) > 0
        if len(rows) and int(rows.max()) < (1 << 63) // len(rows):  # no int64 sum can overflow
            row_sums = np.zeros(width, np.int64)
            np.add.at(row_sums, codes, rows)
            sums: list[int] = row_sums.tolist()
        else:  # exact in Python (counts near the int64 limit, which a codec accepts one by one)
            sums = [0] * width
            for code, count in zip(codes.tolist(), rows.tolist(), strict=True):
                sums[code] += count
        totals: dict[str, list[Any]] = {}
        for code in np.flatnonzero(references).tolist():
            entry = totals.setdefault(base.partition_ids[code], [0, 0, 0, False])
            entry[0] += int(references[code])
            entry[1] += int(assigned[code])
            entry[2] += sums[code]
            entry[3] = entry[3] or bool(approximate[code])
        for table_file in self._changed_files():
            for ref in table_file.references:
                entry = totals.setdefault(ref.partition_id, [0, 0, 0, False])
                entry[0] += 1
                entry[1] += ref.job_id is not None
                entry[2] += ref.number_of_rows
                entry[3] = entry[3] or ref.count_approximate
        return {partition_id: PartitionTotals(*entry) for partition_id, entry in totals.items()}

    def references_in_partitions(
        self, partition_ids: Iterable[str], *, unassigned: bool = False, claimed_before: int | None = None
    ) -> dict[str, list[FileReference]]:
        """The references on each of ``partition_ids`` that has any: what a query of a few partitions reads,
        selected on the columns, with an object made for each of those references only.

        With ``unassigned``, only references assigned to no job, and with ``claimed_before`` (epoch ms) also
        those claimed before that time (whose job a take-over presumes dead).
        """
        if claimed_before is not None and not unassigned:
            raise ValueError("claimed_before selects among unassigned references: pass unassigned=True")
        wanted = set(partition_ids)
        base = self._base
        codes = [code for code, partition_id in enumerate(base.partition_ids) if partition_id in wanted]
        selected = None
        if codes:
            selected = np.isin(base.partition_codes, codes)
            if unassigned:
                free = base.job_codes < 0
                if claimed_before is not None:
                    free |= base.reference_times < claimed_before
                selected &= free
        return self._references_by_partition(
            selected,
            lambda ref: (
                ref.partition_id in wanted
                and (
                    not unassigned
                    or ref.job_id is None
                    or (claimed_before is not None and ref.last_update_time < claimed_before)
                )
            ),
        )

    def oldest_unassigned_files(
        self,
        partition_ids: Iterable[str],
        *,
        at_least: int,
        at_most: int,
        claimed_before: int | None = None,
    ) -> dict[str, list[str]]:
        """For each of ``partition_ids`` with at least ``at_least`` references assigned to no job, the files
        of its oldest ``at_most`` such references: oldest first (``last_update_time``), by name among equals.
        What a compaction job takes in. With ``claimed_before`` (epoch ms) references claimed before that
        time count as unassigned (their job is presumed dead).

        Selected and sorted on the columns, with no object made per reference: at 1M references over
        100,000 leaves, every leaf's are chosen in ~1.3 s (``benchmarks/bench_planners.py``).
        """
        if at_least < 1 or at_most < 1:
            raise ValueError(f"need at_least >= 1 and at_most >= 1, got {at_least} and {at_most}")
        wanted = set(partition_ids)

        def free(job_id: str | None, claimed_at: int) -> bool:
            return job_id is None or (claimed_before is not None and claimed_at < claimed_before)

        changed: dict[str, list[tuple[int, str]]] = {}
        for table_file in self._changed_files():
            for ref in table_file.references:
                if ref.partition_id in wanted and free(ref.job_id, ref.last_update_time):
                    changed.setdefault(ref.partition_id, []).append((ref.last_update_time, ref.filename))
        base = self._base
        codes = [code for code, partition_id in enumerate(base.partition_ids) if partition_id in wanted]
        out: dict[str, list[str]] = {}
        with collector_paused():  # a name per reference chosen, none of them garbage
            if codes:
                selected = np.isin(base.partition_codes, codes)
                unassigned = base.job_codes < 0
                if claimed_before is not None:
                    unassigned |= base.reference_times < claimed_before
                rows = np.flatnonzero(selected & unassigned)
                rows = rows[~self._shadowed[base.file_rows_of_references(rows)]]  # changed files: above
                oldest = base.oldest_by_partition(rows, at_most)
                for code, (count, start, stop) in oldest.groups.items():
                    partition_id = base.partition_ids[code]
                    more = changed.pop(partition_id, None)
                    if more is None:
                        if count >= at_least:
                            out[partition_id] = oldest.names[start:stop]
                    elif count + len(more) >= at_least:  # the oldest of the columns' and the changed together
                        times = oldest.times[start:stop].tolist()
                        chosen = list(zip(times, oldest.names[start:stop], strict=True))
                        out[partition_id] = _names_of_oldest(chosen + more, at_most)
            for partition_id, more in changed.items():  # partitions only the changed files reference
                if len(more) >= at_least:
                    out[partition_id] = _names_of_oldest(more, at_most)
        return out

    def references_in_partition(self, partition_id: str) -> list[FileReference]:
        return self.references_in_partitions((partition_id,)).get(partition_id, [])

    def files_ready_for_gc(self, before: int) -> list[str]:
        """Names of files with no references whose last update was before ``before`` (epoch ms)."""
        base = self._base
        no_references = np.diff(base.reference_starts) == 0
        rows = self._base_files_where(no_references & (base.file_times < before))
        return base.filenames(rows) + [
            f.filename for f in self._changed_files() if not f.references and f.last_update_time < before
        ]

    def unreferenced_files(self) -> list[TableFile]:
        base = self._base
        rows = self._base_files_where(np.diff(base.reference_starts) == 0)
        return base.table_files(rows) + [f for f in self._changed_files() if not f.references]


def _names_of_oldest(references: list[tuple[int, str]], at_most: int) -> list[str]:
    """The names of the oldest ``at_most`` of ``(last_update_time, filename)`` pairs, by name among equals."""
    return [filename for _, filename in sorted(references)[:at_most]]


class _FilesView(Mapping[str, TableFile]):
    """``TableState.files_by_name``: a read-only mapping over the base and overlay of one state."""

    __slots__ = ("_state",)

    def __init__(self, state: TableQueries) -> None:
        self._state = state

    def __getitem__(self, filename: str) -> TableFile:
        table_file = self._state._get(filename)
        if table_file is None:
            raise KeyError(filename)
        return table_file

    def __contains__(self, filename: object) -> bool:
        return isinstance(filename, str) and self._state._contains(filename)

    def __iter__(self) -> Iterator[str]:
        return self._state._iter_names()

    def __len__(self) -> int:
        return self._state._file_count

    def values(self) -> Any:
        return list(self._state._iter_files())

    def items(self) -> Any:
        return [(f.filename, f) for f in self._state._iter_files()]


class _PartitionsView(Mapping[str, Partition]):
    """``TableState.partitions_by_id`` over a loaded snapshot's partition columns and the changes since."""

    __slots__ = ("_state",)

    def __init__(self, state: TableQueries) -> None:
        self._state = state

    def __getitem__(self, partition_id: str) -> Partition:
        state = self._state
        changed = state._partitions.get(partition_id)
        if changed is not None:
            return changed
        row = state._partition_row(partition_id)
        if row is None or state._partition_base is None:
            raise KeyError(partition_id)
        return state._partition_base.partition(row)

    def __contains__(self, partition_id: object) -> bool:
        state = self._state
        if not isinstance(partition_id, str):
            return False
        return partition_id in state._partitions or state._partition_row(partition_id) is not None

    def _unchanged_rows(self) -> np.ndarray:
        return np.flatnonzero(~self._state._partition_shadowed)

    def __iter__(self) -> Iterator[str]:
        state = self._state
        base_ids = [] if state._partition_base is None else state._partition_base.ids(self._unchanged_rows())
        return iter([*base_ids, *state._partitions])

    def __len__(self) -> int:
        return self._state._partition_count

    def values(self) -> Any:
        state = self._state
        base = (
            [] if state._partition_base is None else state._partition_base.partitions(self._unchanged_rows())
        )
        return [*base, *state._partitions.values()]

    def items(self) -> Any:
        return [(p.id, p) for p in self.values()]
