"""The partitions of a loaded snapshot held as Arrow columns: a ``Partition`` is made only when asked for.

A table with 100,000 leaves has 200,000 partitions; as objects (``Partition``, ``Region``, ``Range``, ids,
bounds) they cost ~600 B each and most of a snapshot load's time. :class:`PartitionColumns` keeps the
snapshot's columns instead and finds an id through sorted 64-bit hashes, each hit checked against the
stored id (as :mod:`statestore.state.file_columns` does for filenames). It never changes:
:class:`statestore.state.table_state.TableState` keeps partitions changed since the load in a dictionary over
it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from statestore.errors import InvalidPartitionTreeError
from statestore.model.partitions import Partition, Range, Region
from statestore.state.hash_search import HashSearch
from statestore.state.name_hash import hash_string, hash_strings
from statestore.state.string_column import StringColumn, one_array

_RECENT_ROWS = 4096  # ids looked up lately, remembered (see PartitionColumns.row_of)
_ABSENT: Any = object()


class PartitionColumns:
    """Partitions as a table of ``id``, ``parent_id``, ``child_ids``, ``leaf``, ``dimension`` and
    ``region_min_<i>`` / ``region_max_<i>`` per row key field (the snapshot's columns)."""

    def __init__(self, table: pa.Table, dimensions: int) -> None:
        # One chunk per column (``combine_chunks`` copies even columns that already are).
        self._table = table if all(c.num_chunks == 1 for c in table.columns) else table.combine_chunks()
        self._dimensions = dimensions
        ids = self._table.column("id")
        # The stable hash, not Python's: a state pickled to a Spark task is unpickled in a process whose
        # ``hash`` of a str differs (PYTHONHASHSEED), and must find its partitions there too.
        hashes = hash_strings(one_array(ids))
        rows_by_hash = np.argsort(hashes).astype(np.int32)
        # Partitions made lately, by row: the commit path asks for the same few leaves again and again.
        self._made: dict[int, Partition] = {}
        self._rows_by_id: dict[str, int | None] = {}  # ids looked up lately (see row_of)
        id_strings = StringColumn(one_array(ids))
        self._scalars = _ScalarReaders(self._table, dimensions, id_strings)
        self._ids = PartitionIds(hashes[rows_by_hash], rows_by_hash, id_strings, self._scalars.leaf)

    def __len__(self) -> int:
        return self._table.num_rows

    def check_regions(self) -> None:
        """Raise InvalidPartitionTreeError if a range is empty (min not below a bounded max)."""
        for i in range(self._dimensions):
            lows, highs = self._table.column(f"region_min_{i}"), self._table.column(f"region_max_{i}")
            if lows.null_count:
                raise InvalidPartitionTreeError("a partition has no min on a row key field")
            empty = pc.fill_null(pc.greater_equal(lows, highs), False)
            if pc.any(empty).as_py():
                row = int(np.argmax(empty.to_numpy(zero_copy_only=False)))
                Range(lows[row].as_py(), highs[row].as_py())  # raises, naming the bounds
                raise InvalidPartitionTreeError(f"an empty range in partition row {row}")

    def row_of(self, partition_id: str) -> int | None:
        # The columns never change, so neither does an id's row: the commit path looks up the same
        # few partitions again and again (a leaf written to, its parent on a split). Kept small.
        rows = self._rows_by_id
        row = rows.get(partition_id, _ABSENT)
        if row is not _ABSENT:
            return row
        if len(rows) >= _RECENT_ROWS:
            rows.clear()
        row = rows[partition_id] = self._ids.row_of(partition_id)
        return row

    def ids_index(self) -> PartitionIds:
        """Which ids are partitions here and which are leaves, sharing these columns' index of their ids
        and their leaf flags: what a table's guard keeps of them (:mod:`statestore.state.file_guard`)."""
        return self._ids

    def leaf_rows(self) -> np.ndarray:
        """The rows of the leaf partitions (int64)."""
        return np.flatnonzero(self._scalars.leaf)

    def rows_without_parent(self) -> np.ndarray:
        """The rows of the partitions with no parent (int64): the root, in a valid tree."""
        no_parent = pc.is_null(self._table.column("parent_id"))
        return np.flatnonzero(no_parent.to_numpy(zero_copy_only=False))

    def ids(self, rows: np.ndarray | None = None) -> list[str]:
        ids = self._table.column("id")
        return list(ids.to_pylist() if rows is None else ids.take(pa.array(rows, pa.int64())).to_pylist())

    def partition(self, row: int) -> Partition:
        made = self._made.get(row)
        if made is None:
            if len(self._made) >= _RECENT_ROWS:  # kept small: a long-lived committer touches every leaf
                self._made.clear()
            made = self._made[row] = self._scalars.partition(row)
        return made

    def partitions(self, rows: np.ndarray | None = None) -> list[Partition]:
        table = self._table if rows is None else self._table.take(pa.array(rows, pa.int64()))
        return partitions_of(table, self._dimensions)


def partitions_of(table: pa.Table, dimensions: int) -> list[Partition]:
    """The ``Partition`` objects of a partitions table (raises InvalidPartitionTreeError for an empty
    range). A partition's bounds are its neighbours' too, and its parent and children are partitions:
    one object per distinct value is shared."""
    shared: dict[Any, Any] = {}
    ranges_by_dimension = []
    for i in range(dimensions):
        lows = [shared.setdefault(v, v) for v in table.column(f"region_min_{i}").to_pylist()]
        highs = [shared.setdefault(v, v) for v in table.column(f"region_max_{i}").to_pylist()]
        ranges_by_dimension.append(list(map(Range, lows, highs)))
    regions = map(Region, zip(*ranges_by_dimension, strict=True))
    ids = table.column("id").to_pylist()
    by_id: dict[str, str] = {i: i for i in ids}
    parent_ids = [by_id.get(p, p) for p in table.column("parent_id").to_pylist()]
    no_children: tuple[str, ...] = ()
    child_ids = [
        tuple([by_id.get(c, c) for c in children]) if children else no_children
        for children in table.column("child_ids").to_pylist()
    ]
    return list(
        map(
            Partition,
            ids,
            regions,
            parent_ids,
            child_ids,
            table.column("leaf").to_pylist(),
            table.column("dimension").to_pylist(),
        )
    )


class PartitionIds:
    """The partitions' ids, found through their sorted 64-bit hashes (each hit checked against the stored
    id), and which are leaves: a ``Collection`` of the ids, :attr:`leaves` one of the leaves' ids. Made
    once per :class:`PartitionColumns` and shared: nothing is copied, no object is made per partition
    (~55 B a partition, where two ``frozenset``s of the ids cost ~190 and 0.05 ms at 200 partitions)."""

    __slots__ = ("_sorted_hashes", "_rows_by_hash", "_id_strings", "_leaf", "_search")

    def __init__(
        self, sorted_hashes: np.ndarray, rows_by_hash: np.ndarray, id_strings: StringColumn, leaf: np.ndarray
    ) -> None:
        self._sorted_hashes = sorted_hashes
        self._rows_by_hash = rows_by_hash
        self._id_strings = id_strings
        self._leaf = leaf
        self._search: HashSearch | None = None  # made on the first search

    @property
    def nbytes(self) -> int:
        """The bytes of the arrays it keeps (the hashes, the rows, the ids' buffers, the leaf flags, and its
        search's index once made): what it costs its last holder, a table's guard."""
        arrays = (self._sorted_hashes, self._rows_by_hash, self._leaf)
        search = 0 if self._search is None else self._search.index_nbytes
        return sum(a.nbytes for a in arrays) + self._id_strings.nbytes + search

    @property
    def leaves(self) -> Collection[str]:
        """The leaves' ids. Made when asked: kept here, it would make a cycle, which a process that froze its
        loaded states (``freeze_loaded_states``) never collects."""
        return _LeafIds(self)

    def row_of(self, partition_id: str) -> int | None:
        """The row of the partition ``partition_id``, or None."""
        h = hash_string(partition_id)
        search = self._search
        if search is None:
            search = self._search = HashSearch(self._sorted_hashes)
        position, count = search.position(h), len(search)
        while position < count and search.at(position) == h:  # several rows only on a collision
            candidate: int = self._rows_by_hash.item(position)
            if self._id_strings.bytes_at(candidate) == partition_id.encode():
                return candidate
            position += 1
        return None

    def is_leaf(self, row: int) -> bool:
        return bool(self._leaf[row])

    def __contains__(self, partition_id: object) -> bool:
        return isinstance(partition_id, str) and self.row_of(partition_id) is not None

    def __len__(self) -> int:
        return len(self._sorted_hashes)

    def __iter__(self) -> Iterator[str]:
        return (self._id_strings.at(row) for row in range(len(self)))


class _LeafIds:
    """The leaves' ids among a :class:`PartitionIds` (a ``Collection``)."""

    __slots__ = ("_ids",)

    def __init__(self, ids: PartitionIds) -> None:
        self._ids = ids

    def __contains__(self, partition_id: object) -> bool:
        if not isinstance(partition_id, str):
            return False
        row = self._ids.row_of(partition_id)
        return row is not None and self._ids.is_leaf(row)

    def __len__(self) -> int:
        return int(np.count_nonzero(self._ids._leaf))

    def __iter__(self) -> Iterator[str]:
        ids = self._ids._id_strings
        return (ids.at(int(row)) for row in np.flatnonzero(self._ids._leaf))


class _ScalarReaders:
    """One partition read value by value straight from the columns' buffers (what a commit pays for a
    partition it has not asked for before): ~7 µs at 200,000 partitions (about half reading its strings,
    half making the Partition, Region and Range objects), where slicing the table and converting it costs
    ~150."""

    def __init__(self, table: pa.Table, dimensions: int, ids: StringColumn) -> None:
        self._ids = ids  # the table's id column, read as the partitions' index of it reads it
        self._parent_ids = _NullableColumn(one_array(table.column("parent_id")))
        children = one_array(table.column("child_ids"))
        self._child_offsets = children.offsets.to_numpy(zero_copy_only=False)
        self._child_ids = StringColumn(children.values)
        self.leaf = table.column("leaf").to_numpy(zero_copy_only=False)  # also what leaf_rows reads
        self._dimension = table.column("dimension").to_numpy(zero_copy_only=False)
        self._bounds = [
            (
                _NullableColumn(one_array(table.column(f"region_min_{i}"))),
                _NullableColumn(one_array(table.column(f"region_max_{i}"))),
            )
            for i in range(dimensions)
        ]

    def partition(self, row: int) -> Partition:
        child_ids = self._child_ids
        start, end = int(self._child_offsets[row]), int(self._child_offsets[row + 1])
        return Partition(
            self._ids.at(row),
            Region(tuple(Range(low.at(row), high.at(row)) for low, high in self._bounds)),
            self._parent_ids.at(row),
            tuple(child_ids.at(i) for i in range(start, end)),
            bool(self.leaf[row]),
            int(self._dimension[row]),
        )


class _NullableColumn:
    """Single values of a string, binary or integer Arrow column, None where it is null."""

    __slots__ = ("_nulls", "_at")

    def __init__(self, array: pa.Array) -> None:
        self._nulls = array.is_null().to_numpy(zero_copy_only=False) if array.null_count else None
        if pa.types.is_integer(array.type):
            # A bound method, not a lambda: the column pickles (a state travels to Spark tasks).
            self._at: Any = array.fill_null(0).to_numpy().item
        else:
            strings = StringColumn(array)
            binary = pa.types.is_binary(array.type) or pa.types.is_large_binary(array.type)
            self._at = strings.bytes_at if binary else strings.at

    def at(self, row: int) -> Any:
        if self._nulls is not None and self._nulls[row]:
            return None
        return self._at(row)
