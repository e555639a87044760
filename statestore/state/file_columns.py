"""The files of a table held column-wise: no Python object per file or reference until one is asked for.

A big table's state is mostly file references, and one Python object per reference (a ``TableFile``, a
tuple, a ``FileReference``, a filename ``str``...) costs ~650 B. :class:`FileColumns` holds them as NumPy
and Arrow columns instead (~110 B per reference): one row per file (directory code, base name, update
time, where its references start) and one row per reference (partition code, rows, flags, job code,
update time). A filename is its **directory** (``tables/<t>/data/partition=<p>/``, one per partition,
dictionary-encoded) plus its **base name**.

Filenames are found through a sorted array of 64-bit hashes (``np.searchsorted``), every hit checked
against the stored name, so a collision costs a comparison, never a wrong answer. A name's hash combines
the :mod:`statestore.state.name_hash` of its directory and of its base name: a whole column of names is hashed
with NumPy passes over its Arrow buffers (a snapshot's load, a bulk AddFiles' lookups), one name in Python
(a lookup on the commit path), with the same result. No Python object is made per name to hash it.

A bulk AddFiles comes in as columns too (:meth:`FileColumns.of_new_files`), appended to the base
(:meth:`FileColumns.append`) with its index merged into the base's.

A ``FileColumns`` never changes once built: :class:`statestore.state.table_state.TableState` keeps its changes
in an overlay and folds them into a new ``FileColumns`` now and then.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import chain
from operator import attrgetter, methodcaller
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from statestore.model.files import FileReference, TableFile
from statestore.state.file_column_reads import _FEW_ROWS, _RECENT_ROWS, FileColumnReads, _ranges
from statestore.state.hash_search import HashSearch
from statestore.state.name_hash import hash_strings
from statestore.state.string_column import (
    _ALL_BITS,
    SplitNames,
    StringColumn,
    _combined_hashes,
    _hash_of,
    _split_filenames,
    split_filename,
)
from statestore.state.string_column import (
    ALL_HASH_BITS as ALL_HASH_BITS,  # the hash's bits, read with HASH_MASK
)

# Tests narrow this to force hash collisions; it is read when a FileColumns is built.
HASH_MASK = _ALL_BITS

_ABSENT: Any = object()
_FILENAME = attrgetter("filename")
_REFERENCES = attrgetter("references")
_LAST_UPDATE_TIME = attrgetter("last_update_time")
_SPLIT_AT_LAST_SLASH = methodcaller("rpartition", "/")  # (directory without its "/", "/" or "", base name)


# The names split last and their split: a bulk AddFiles splits the same names in validate and in apply.
_last_split: tuple[Sequence[str], SplitNames | None] = ((), None)


def split_filenames(filenames: Sequence[str]) -> SplitNames:
    """:func:`split_filename` of each name, as Arrow columns, with each name's hash."""
    global _last_split
    last_names, last = _last_split
    if last is not None and len(last_names) == len(filenames) and last_names == filenames:
        return last
    split = _split_filenames(filenames)
    _last_split = (list(filenames), split)  # a copy: the caller may change its list
    return split


def forget_split_filenames() -> None:
    """Drop the names split last (a bulk AddFiles' names, and a copy of the list of them) once used."""
    global _last_split
    _last_split = ((), None)


class FileColumns(FileColumnReads):
    """An immutable, column-wise set of files and their references (see the module docstring).

    Files: ``directories`` (Arrow strings) indexed by ``directory_codes``, ``base_names`` (Arrow large
    strings), ``file_times``, and ``reference_starts`` (file ``i``'s references are rows
    ``reference_starts[i]:reference_starts[i + 1]``). References: ``partition_codes`` into
    ``partition_ids``, ``number_of_rows``, ``count_approximate``, ``whole_file``
    (only_contains_data_for_this_partition), ``job_codes`` into ``job_ids`` (-1: no job) and
    ``reference_times``.
    """

    def __init__(
        self,
        directories: pa.Array,
        directory_codes: np.ndarray,
        base_names: pa.Array,
        file_times: np.ndarray,
        reference_starts: np.ndarray,
        partition_ids: list[str],
        partition_codes: np.ndarray,
        number_of_rows: np.ndarray,
        count_approximate: np.ndarray,
        whole_file: np.ndarray,
        job_ids: list[str],
        job_codes: np.ndarray,
        reference_times: np.ndarray,
        index: tuple[np.ndarray, np.ndarray, int] | None = None,
    ) -> None:
        self.directories = directories
        self.directory_codes = directory_codes
        self.base_names = base_names
        self.file_times = file_times
        self.reference_starts = reference_starts
        self.partition_ids = partition_ids
        self.partition_codes = partition_codes
        self.number_of_rows = number_of_rows
        self.count_approximate = count_approximate
        self.whole_file = whole_file
        self.job_ids = job_ids
        self.job_codes = job_codes
        self.reference_times = reference_times
        # The name index: every row's hash, sorted, and the row of each (and the hash mask). Given when
        # derived from the index of the columns these were made from (take_files, concat): no name is
        # hashed again.
        if index is None:
            self._hash_mask = HASH_MASK
            self._sorted_hashes, self._rows_by_hash = self._build_index()
        else:
            self._sorted_hashes, self._rows_by_hash, self._hash_mask = index
        self._directory_strings = StringColumn(directories)
        self._base_name_strings = StringColumn(base_names)
        self._hash_search: HashSearch | None = None  # made on the first lookup of one name (row_of)
        self._recent_rows: dict[str, Any] = {}  # filename -> row (None: not held), see row_of
        self._recent_files: dict[int, TableFile] = {}  # row -> the file made lately, see table_file
        self._job_codes_by_id: dict[str, list[int]] | None = None  # made on first use (job_codes_of)
        self._claims_by_job: tuple[np.ndarray, np.ndarray] | None = None  # made on first use (claimed_by)
        self._last_search: tuple[list[str], list[int | None]] = ([], [])  # see rows_of

    # --- building ---------------------------------------------------------------------------------

    @classmethod
    def empty(cls) -> FileColumns:
        return cls.from_table_files(())

    @classmethod
    def from_table_files(cls, files: Iterable[TableFile]) -> FileColumns:
        """Columns holding ``files`` (Python objects in, none kept). Every pass over the objects runs in C
        (attribute getters, ``zip``, Arrow's dictionary encoding): a fold turns 65,536 files at a time."""
        files = list(files)
        split_names = list(zip(*map(_SPLIT_AT_LAST_SLASH, map(_FILENAME, files)), strict=True))
        heads, slashes, base_names = split_names or [(), (), ()]
        directory = pc.dictionary_encode(pa.array(list(map(str.__add__, heads, slashes)), pa.string()))
        reference_lists = list(map(_REFERENCES, files))
        references = list(chain.from_iterable(reference_lists))
        # Transposed: one tuple per FileReference field.
        transposed = list(zip(*references, strict=True)) or [()] * len(FileReference._fields)
        _, partition_ids, rows, approximate, whole_file, job_ids, times = transposed
        partitions = pc.dictionary_encode(pa.array(partition_ids, pa.string()))
        jobs = pc.dictionary_encode(pa.array(job_ids, pa.string()))
        starts = np.zeros(len(files) + 1, np.int64)
        np.cumsum(np.fromiter(map(len, reference_lists), np.int64, len(files)), out=starts[1:])
        return cls(
            directory.dictionary,
            directory.indices.to_numpy(zero_copy_only=False).astype(np.int32),
            pa.array(base_names, pa.large_string()),
            np.fromiter(map(_LAST_UPDATE_TIME, files), np.int64, len(files)),
            starts,
            partitions.dictionary.to_pylist(),
            partitions.indices.to_numpy(zero_copy_only=False).astype(np.int32),
            np.array(rows, np.int64),
            np.array(approximate, np.bool_),
            np.array(whole_file, np.bool_),
            jobs.dictionary.to_pylist(),
            jobs.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int32),
            np.array(times, np.int64),
        )

    @classmethod
    def of_new_files(
        cls,
        filenames: Sequence[str],
        partition_ids: Sequence[str],
        number_of_rows: Sequence[int],
        count_approximate: Sequence[bool],
        whole_file: Sequence[bool],
        unreferenced_files: Sequence[str],
        update_time: int,
    ) -> FileColumns:
        """The files a bulk AddFiles adds, made with no object per file: file ``filenames[i]`` has one
        reference, in ``partition_ids[i]`` with ``number_of_rows[i]`` rows and so on, then each of
        ``unreferenced_files`` has none; all updated at ``update_time``, with no job. The names must be
        distinct (the caller checked them: a file of several references goes through ``TableFile``)."""
        referenced = len(filenames)
        count = referenced + len(unreferenced_files)
        names = split_filenames([*filenames, *unreferenced_files])
        partitions = pc.dictionary_encode(pa.array(partition_ids, pa.string()))
        sorted_hashes, order = names.sorted_hashes(HASH_MASK)
        return cls(
            names.directories,
            names.directory_codes,
            names.base_names,
            np.full(count, update_time, np.int64),
            np.minimum(np.arange(count + 1, dtype=np.int64), referenced),
            partitions.dictionary.to_pylist(),
            partitions.indices.to_numpy(zero_copy_only=False).astype(np.int32),
            np.array(number_of_rows, np.int64),
            np.array(count_approximate, np.bool_),
            np.array(whole_file, np.bool_),
            [],
            np.full(referenced, -1, np.int32),
            np.full(referenced, update_time, np.int64),
            (sorted_hashes, order.astype(np.int32), HASH_MASK),
        )

    def _name_hashes(self, mask: int) -> np.ndarray:
        """Every file's name hash under ``mask``, by row, computed from the names."""
        return _combined_hashes(
            hash_strings(self.directories)[self.directory_codes], hash_strings(self.base_names), mask
        )

    def _build_index(self) -> tuple[np.ndarray, np.ndarray]:
        hashes = self._name_hashes(self._hash_mask)
        rows = np.argsort(hashes).astype(np.int32)
        return hashes[rows], rows

    # --- reading ----------------------------------------------------------------------------------

    @property
    def file_count(self) -> int:
        return len(self.file_times)

    @property
    def total_reference_count(self) -> int:
        return len(self.partition_codes)

    def filename(self, row: int) -> str:
        directory = self._directory_strings.at(int(self.directory_codes[row]))
        return directory + self._base_name_strings.at(row)

    def row_of(self, filename: str) -> int | None:
        """The file row of ``filename``, or None if these columns do not hold it."""
        # The columns never change, so neither does a name's row: a transaction's apply finds the rows
        # its validate looked up here. Kept small: it only spares a search repeated soon after.
        recent = self._recent_rows
        row = recent.get(filename, _ABSENT)
        if row is not _ABSENT:
            return row
        if len(recent) >= _RECENT_ROWS:
            recent.clear()
        directory, base_name = split_filename(filename)
        try:
            base_bytes = base_name.encode()
            h = _hash_of(directory, base_bytes, self._hash_mask)
        except UnicodeEncodeError:  # a lone surrogate: not UTF-8, so no columns can hold the name
            row = recent[filename] = None
            return row
        row = recent[filename] = self._row_of_hash(h, directory, base_bytes)
        return row

    def hash_search(self) -> HashSearch:
        """The search over the name index's sorted hashes, made on first use and kept (a guard made from
        this state shares it)."""
        search = self._hash_search
        if search is None:
            search = self._hash_search = HashSearch(self._sorted_hashes)
        return search

    def _row_of_hash(self, h: int, directory: str, base_bytes: bytes) -> int | None:
        search = self.hash_search()
        position, count = search.position(h), len(search)
        if position == count or search.at(position) != h:
            return None
        rows = self._rows_by_hash
        directory_bytes = directory.encode()
        while position < count and search.at(position) == h:  # several rows only on a collision
            row = rows.item(position)
            if (
                self._base_name_strings.bytes_at(row) == base_bytes
                and self._directory_strings.bytes_at(int(self.directory_codes[row])) == directory_bytes
            ):
                return row
            position += 1
        return None

    def hash_order(self) -> tuple[np.ndarray, np.ndarray]:
        """Every file's name hash (unmasked), in ascending order, and the file row of each (int64): what a
        snapshot stores so that loading it need not hash its names."""
        if self._hash_mask == _ALL_BITS:
            return self._sorted_hashes, self._rows_by_hash.astype(np.int64)
        hashes = self._name_hashes(_ALL_BITS)
        rows = np.argsort(hashes, kind="stable")
        return hashes[rows], rows

    def misfiled_name(self, samples: int = 64) -> str | None:
        """A name the index holds under another hash than its own, among ``samples`` spread over the index,
        if any: how an index read from a snapshot is checked without hashing every name again."""
        count = len(self._sorted_hashes)
        for position in np.linspace(0, count - 1, min(samples, count)).astype(np.int64).tolist():
            name = self.filename(int(self._rows_by_hash[position]))
            directory, base_name = split_filename(name)
            if _hash_of(directory, base_name.encode(), self._hash_mask) != int(self._sorted_hashes[position]):
                return name
        return None

    def duplicate_filename(self) -> str | None:
        """A filename held by two rows, if any (a valid state has none)."""
        same = np.flatnonzero(self._sorted_hashes[1:] == self._sorted_hashes[:-1])
        if not len(same):
            return None
        positions = np.unique(np.concatenate([same, same + 1]))
        seen: set[str] = set()
        for name in self.filenames(self._rows_by_hash[positions].astype(np.int64)):
            if name in seen:
                return name
            seen.add(name)
        return None

    def rows_of(self, filenames: Sequence[str]) -> list[int | None]:
        """:meth:`row_of` of each name, with one vectorised search for all of them."""
        out: list[int | None] = [None] * len(filenames)
        if not self.file_count or not filenames:
            return out
        if len(filenames) <= _FEW_ROWS:  # a vectorised search costs more than a few scalar ones
            return [self.row_of(name) for name in filenames]
        # A big AddFiles searches for its names twice (validate, then apply): the columns never change,
        # so the answer for the same names is the same, and comparing them costs far less than hashing.
        last_names, last_rows = self._last_search
        if len(last_names) == len(filenames) and last_names == filenames:
            return list(last_rows)
        try:
            hashes, order = split_filenames(filenames).sorted_hashes(self._hash_mask)
        except UnicodeEncodeError:  # a name no columns can hold (see row_of): one by one
            return [self.row_of(name) for name in filenames]
        # Searched in ascending order: each search starts near where the last one ended, in the cache.
        positions = np.minimum(self._sorted_hashes.searchsorted(hashes), len(self._sorted_hashes) - 1)
        for i in order[np.flatnonzero(self._sorted_hashes[positions] == hashes)].tolist():
            out[i] = self.row_of(filenames[i])
        self._last_search = (list(filenames), out)
        return list(out)

    def take_files(self, rows: np.ndarray) -> FileColumns:
        """A new ``FileColumns`` of only the files at ``rows`` (with all their references)."""
        rows = rows.astype(np.int64)
        starts = self.reference_starts[rows]
        counts = self.reference_starts[rows + 1] - starts
        reference_rows = _ranges(starts, counts)
        new_starts = np.zeros(len(rows) + 1, np.int64)
        np.cumsum(counts, out=new_starts[1:])
        index = None
        if len(rows) and bool(np.all(rows[1:] > rows[:-1])):  # rows in order (a fold): keep the index
            renumbered = np.full(self.file_count, -1, np.int64)
            renumbered[rows] = np.arange(len(rows))
            new_rows = renumbered[self._rows_by_hash]
            kept = new_rows >= 0
            index = (self._sorted_hashes[kept], new_rows[kept].astype(np.int32), self._hash_mask)
        return FileColumns(
            self.directories,
            self.directory_codes[rows],
            self.base_names.take(pa.array(rows, pa.int64())),
            self.file_times[rows],
            new_starts,
            self.partition_ids,
            self.partition_codes[reference_rows],
            self.number_of_rows[reference_rows],
            self.count_approximate[reference_rows],
            self.whole_file[reference_rows],
            self.job_ids,
            self.job_codes[reference_rows],
            self.reference_times[reference_rows],
            index,
        )

    def concat(self, other: FileColumns) -> FileColumns:
        """These files followed by ``other``'s (the caller makes sure no filename is in both). The
        dictionaries (directories, partition ids, job ids) keep each value once, and only values in use."""
        directory_codes, directories = _recode(
            np.concatenate([self.directory_codes, other.directory_codes + len(self.directories)]),
            [*self.directories.to_pylist(), *other.directories.to_pylist()],
        )
        partition_codes, partition_ids = _recode(
            np.concatenate([self.partition_codes, other.partition_codes + len(self.partition_ids)]),
            [*self.partition_ids, *other.partition_ids],
        )
        other_jobs = np.where(other.job_codes < 0, -1, other.job_codes + len(self.job_ids))
        job_codes, job_ids = _recode(
            np.concatenate([self.job_codes, other_jobs]), [*self.job_ids, *other.job_ids]
        )
        return FileColumns(
            pa.array(directories, pa.string()),
            directory_codes,
            pa.concat_arrays([self.base_names, other.base_names]),
            np.concatenate([self.file_times, other.file_times]),
            np.concatenate([self.reference_starts[:-1], other.reference_starts + self.reference_starts[-1]]),
            partition_ids,
            partition_codes,
            np.concatenate([self.number_of_rows, other.number_of_rows]),
            np.concatenate([self.count_approximate, other.count_approximate]),
            np.concatenate([self.whole_file, other.whole_file]),
            job_ids,
            job_codes,
            np.concatenate([self.reference_times, other.reference_times]),
            self._merged_index(other),
        )

    def append(self, other: FileColumns) -> FileColumns:
        """These files followed by ``other``'s, like :meth:`concat`, in what ``other`` costs: these rows
        keep their codes and their dictionaries (with any value no longer in use, which a fold drops), and
        only ``other``'s codes are re-pointed. What is copied of these files is one pass over each column,
        in C. The caller makes sure no filename is in both."""
        directories = self.directories.to_pylist()
        other_directories = other.directories.to_pylist()
        directory_codes = _extend_dictionary(directories, other_directories, other.directory_codes)
        directory_array = self.directories
        if len(directories) > len(directory_array):
            directory_array = pa.array(directories, pa.string())
        partition_ids = list(self.partition_ids)
        partition_codes = _extend_dictionary(partition_ids, other.partition_ids, other.partition_codes)
        job_ids = list(self.job_ids)
        job_codes = _extend_dictionary(job_ids, other.job_ids, other.job_codes)
        return FileColumns(
            directory_array,
            np.concatenate([self.directory_codes, directory_codes]),
            pa.concat_arrays([self.base_names, other.base_names]),
            np.concatenate([self.file_times, other.file_times]),
            np.concatenate([self.reference_starts[:-1], other.reference_starts + self.reference_starts[-1]]),
            partition_ids,
            np.concatenate([self.partition_codes, partition_codes]),
            np.concatenate([self.number_of_rows, other.number_of_rows]),
            np.concatenate([self.count_approximate, other.count_approximate]),
            np.concatenate([self.whole_file, other.whole_file]),
            job_ids,
            np.concatenate([self.job_codes, job_codes]),
            np.concatenate([self.reference_times, other.reference_times]),
            self._merged_index(other),
        )

    def _merged_index(self, other: FileColumns) -> tuple[np.ndarray, np.ndarray, int] | None:
        """The name index of these rows followed by ``other``'s: the two sorted indexes merged."""
        if self._hash_mask != other._hash_mask:
            return None
        at = self._sorted_hashes.searchsorted(other._sorted_hashes)
        return (
            np.insert(self._sorted_hashes, at, other._sorted_hashes),
            np.insert(self._rows_by_hash, at, other._rows_by_hash + np.int32(self.file_count)),
            self._hash_mask,
        )


def _recode(codes: np.ndarray, values: list[Any]) -> tuple[np.ndarray, list[Any]]:
    """``codes`` into ``values`` (-1: none) re-pointed at a list of the values in use, each once."""
    first: dict[Any, int] = {}
    deduplicated = np.array([first.setdefault(v, len(first)) for v in values], np.int64)
    distinct = list(first)
    present = codes >= 0
    codes = np.where(present, deduplicated[np.where(present, codes, 0)] if len(values) else 0, -1)
    used = np.unique(codes[present])
    renumber = np.full(len(distinct) + 1, -1, np.int64)
    renumber[used] = np.arange(len(used))
    return renumber[codes].astype(np.int32), [distinct[i] for i in used.tolist()]


def _extend_dictionary(values: list[Any], other_values: list[Any], other_codes: np.ndarray) -> np.ndarray:
    """``other_codes`` (into ``other_values``, -1: none) re-pointed into ``values``, which gains the values
    it lacked, at its end."""
    position = {value: i for i, value in enumerate(values)}
    for value in other_values:
        if value not in position:
            position[value] = len(values)
            values.append(value)
    renumber = np.array([*map(position.__getitem__, other_values), -1], np.int32)
    return renumber[other_codes]  # -1 picks the last entry: still none
