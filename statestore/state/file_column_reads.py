"""What file columns give back as objects: files, references, names, the oldest references by partition,
and the claims of jobs.

:class:`FileColumnReads` is a mixin :class:`statestore.state.file_columns.FileColumns` inherits: it reads
the columns ``FileColumns`` holds (see its docstring) and makes an object for each row asked for only.
Building, combining and the name index are in ``file_columns.py``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import repeat
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from statestore.model.files import FileReference, TableFile
from statestore.state.string_column import StringColumn

_FEW_ROWS = 64  # up to this many rows, filenames are read one by one rather than converting every directory
_RECENT_ROWS = 4096  # rows of names looked up lately, remembered (see FileColumns.row_of)


class OldestReferences(NamedTuple):
    """What :meth:`FileColumns.oldest_by_partition` chose: the names and times of the references chosen,
    partition after partition, and for each partition code how many references it has and where its chosen
    ones are (``names[start:stop]``)."""

    names: list[str]
    times: np.ndarray  # int64
    groups: dict[int, tuple[int, int, int]]  # partition code -> (count, start, stop)


class FileColumnReads:
    """The reads of :class:`~statestore.state.file_columns.FileColumns`, over its columns."""

    directories: pa.Array
    directory_codes: np.ndarray
    base_names: pa.Array
    file_times: np.ndarray
    reference_starts: np.ndarray
    partition_ids: list[str]
    partition_codes: np.ndarray
    number_of_rows: np.ndarray
    count_approximate: np.ndarray
    whole_file: np.ndarray
    job_ids: list[str]
    job_codes: np.ndarray
    reference_times: np.ndarray
    _directory_strings: StringColumn
    _base_name_strings: StringColumn
    _recent_files: dict[int, TableFile]
    _job_codes_by_id: dict[str, list[int]] | None
    _claims_by_job: tuple[np.ndarray, np.ndarray] | None

    if TYPE_CHECKING:

        @property
        def file_count(self) -> int: ...

        def filename(self, row: int) -> str: ...

        def row_of(self, filename: str) -> int | None: ...

    def job_codes_of(self, job_ids: Iterable[str]) -> list[int]:
        """The codes in ``job_codes`` of those of ``job_ids`` these columns name (a release of claims asks
        for a few jobs among thousands; the dictionary of them is made on the first call)."""
        by_id = self._job_codes_by_id
        if by_id is None:
            by_id = self._job_codes_by_id = {}
            for code, job_id in enumerate(self.job_ids):
                by_id.setdefault(job_id, []).append(code)
        return [code for job_id in job_ids for code in by_id.get(job_id, ())]

    def reference_rows_claimed_by(self, job_codes: Sequence[int]) -> np.ndarray:
        """The rows of the references held by the jobs of ``job_codes`` (codes in ``job_ids``), ascending
        (int64). A release of claims frees a few jobs' among the table's: the claimed rows ordered by job
        are made on the first call (~8 bytes per claimed reference), so each call costs what it finds."""
        index = self._claims_by_job
        if index is None:
            claimed = np.flatnonzero(self.job_codes >= 0)
            by_job = claimed[np.argsort(self.job_codes[claimed], kind="stable")]
            starts = np.searchsorted(self.job_codes[by_job], np.arange(len(self.job_ids) + 1))
            index = self._claims_by_job = (by_job, starts)
        by_job, starts = index
        codes = np.unique(np.asarray(job_codes, np.int64))
        firsts = starts[codes]
        return np.sort(by_job[_ranges(firsts, starts[codes + 1] - firsts)])

    def reference_count_of(self, row: int) -> int:
        return int(self.reference_starts[row + 1] - self.reference_starts[row])

    def table_file(self, row: int) -> TableFile:
        """The file at ``row``, read scalar by scalar (a lookup on the commit path: no array is made).
        Files made lately are remembered: a transaction's apply reads what its validate just read."""
        made = self._recent_files
        table_file = made.get(row)
        if table_file is not None:
            return table_file
        if len(made) >= _RECENT_ROWS:
            made.clear()
        name = self.filename(row)
        start, end = int(self.reference_starts[row]), int(self.reference_starts[row + 1])
        table_file = made[row] = TableFile(
            name, tuple(self._reference(name, r) for r in range(start, end)), int(self.file_times[row])
        )
        return table_file

    def _reference(self, filename: str, row: int) -> FileReference:
        job_code = int(self.job_codes[row])
        return FileReference(
            filename,
            self.partition_ids[int(self.partition_codes[row])],
            int(self.number_of_rows[row]),
            bool(self.count_approximate[row]),
            bool(self.whole_file[row]),
            None if job_code < 0 else self.job_ids[job_code],
            int(self.reference_times[row]),
        )

    def filenames(self, rows: np.ndarray | None = None) -> list[str]:
        if rows is not None and len(rows) <= _FEW_ROWS:
            return [self.filename(row) for row in rows.tolist()]
        codes = self.directory_codes if rows is None else self.directory_codes[rows]
        bases = self.base_names if rows is None else self.base_names.take(pa.array(rows, pa.int64()))
        directories = self.directories.to_pylist()
        return list(map(str.__add__, map(directories.__getitem__, codes.tolist()), bases.to_pylist()))

    def table_files(self, rows: np.ndarray | None = None) -> list[TableFile]:
        """The files at ``rows`` (all, in row order, by default) as ``TableFile`` objects."""
        if rows is None:
            rows = np.arange(self.file_count, dtype=np.int64)
        names = self.filenames(rows)
        starts = self.reference_starts[rows]
        counts = self.reference_starts[rows + 1] - starts
        # The reference rows of these files, in order.
        reference_rows = _ranges(starts, counts)
        ref_names = list(_repeat_each(names, counts.tolist()))
        references = self._references(reference_rows, ref_names)
        times = self.file_times[rows].tolist()
        out: list[TableFile] = []
        i = 0
        for name, count, time in zip(names, counts.tolist(), times, strict=True):
            out.append(TableFile(name, tuple(references[i : i + count]), time))
            i += count
        return out

    def references_at(self, reference_rows: np.ndarray) -> list[FileReference]:
        """The references at ``reference_rows`` (reference row numbers), as ``FileReference`` objects."""
        file_rows = np.searchsorted(self.reference_starts, reference_rows, "right") - 1
        return self._references(reference_rows, self.filenames(file_rows))

    def oldest_by_partition(self, reference_rows: np.ndarray, at_most: int) -> OldestReferences:
        """The references at ``reference_rows`` by partition code: how many each code has, and the names and
        times of its oldest ``at_most``, oldest first and by name among equals (names compare as ``str`` do:
        UTF-8 bytes sort in code point order). Sorted in C, with a name made only for those chosen."""
        if not len(reference_rows):
            return OldestReferences([], np.zeros(0, np.int64), {})
        file_rows = self.file_rows_of_references(reference_rows)
        codes = self.partition_codes[reference_rows]
        times = self.reference_times[reference_rows]
        names = pc.binary_join_element_wise(
            self.directories.take(pa.array(self.directory_codes[file_rows])).cast(pa.large_string()),
            self.base_names.take(pa.array(file_rows)),
            pa.scalar("", pa.large_string()),
        )
        order = pc.sort_indices(
            pa.table({"code": codes, "time": times, "name": names}),
            [("code", "ascending"), ("time", "ascending"), ("name", "ascending")],
        ).to_numpy()
        sorted_codes = codes[order]
        starts = np.flatnonzero(np.concatenate([[True], sorted_codes[1:] != sorted_codes[:-1]]))
        counts = np.diff(np.append(starts, len(order)))
        chosen = order[np.arange(len(order)) - np.repeat(starts, counts) < at_most]
        taken = np.minimum(counts, at_most)
        stops = np.cumsum(taken)
        groups = dict(
            zip(
                sorted_codes[starts].tolist(),
                zip(counts.tolist(), (stops - taken).tolist(), stops.tolist(), strict=True),
                strict=True,
            )
        )
        return OldestReferences(names.take(pa.array(chosen)).to_pylist(), times[chosen], groups)

    def reference_rows_of(self, rows: np.ndarray) -> np.ndarray:
        """The reference rows of the files at ``rows``, file after file in that order."""
        starts = self.reference_starts[rows]
        return _ranges(starts, self.reference_starts[rows + 1] - starts)

    def file_rows_of_references(self, reference_rows: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.reference_starts, reference_rows, "right") - 1

    def _references(self, reference_rows: np.ndarray, filenames: Sequence[str]) -> list[FileReference]:
        partition_ids, job_ids = self.partition_ids, self.job_ids
        return list(
            map(
                FileReference,
                filenames,
                map(partition_ids.__getitem__, self.partition_codes[reference_rows].tolist()),
                self.number_of_rows[reference_rows].tolist(),
                self.count_approximate[reference_rows].tolist(),
                self.whole_file[reference_rows].tolist(),
                [None if code < 0 else job_ids[code] for code in self.job_codes[reference_rows].tolist()],
                self.reference_times[reference_rows].tolist(),
            )
        )


def _ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``concat(arange(s, s + c) for s, c in zip(starts, counts))``, vectorised."""
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    ends = np.cumsum(counts)
    out = np.arange(total, dtype=np.int64) - np.repeat(ends - counts, counts)
    return out + np.repeat(starts, counts)


def _repeat_each(values: Sequence[str], counts: Sequence[int]) -> Iterable[str]:
    for value, count in zip(values, counts, strict=True):
        yield from repeat(value, count)
