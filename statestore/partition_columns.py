"""The partitions of a loaded snapshot held as Arrow columns: a ``Partition`` is made only when asked for.

A table with 100,000 leaves has 200,000 partitions; as objects (``Partition``, ``Region``, ``Range``, ids,
bounds) they cost ~600 B each and most of a snapshot load's time. :class:`PartitionColumns` keeps the
snapshot's columns instead and finds an id through sorted 64-bit hashes, each hit checked against the
stored id (as :mod:`statestore.file_columns` does for filenames). It never changes:
:class:`statestore.state.TableState` keeps partitions changed since the load in a dictionary over it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from statestore.errors import InvalidPartitionTreeError
from statestore.file_columns import StringColumn
from statestore.partitions import Partition, Range, Region

_ALL_BITS = (1 << 64) - 1


class PartitionColumns:
    """Partitions as a table of ``id``, ``parent_id``, ``child_ids``, ``leaf``, ``dimension`` and
    ``region_min_<i>`` / ``region_max_<i>`` per row key field (the snapshot's columns)."""

    def __init__(self, table: pa.Table, dimensions: int) -> None:
        self._table = table.combine_chunks()
        self._dimensions = dimensions
        ids = self._table.column("id")
        hashes = np.fromiter(map(hash, ids.to_pylist()), np.int64, len(ids)).view(np.uint64)
        self._rows_by_hash = np.argsort(hashes).astype(np.int32)
        self._sorted_hashes = hashes[self._rows_by_hash]
        self._id_strings = StringColumn(ids.combine_chunks())
        # Partitions made so far, by row: the commit path asks for the same few leaves again and again.
        self._made: dict[int, Partition] = {}

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
        h = hash(partition_id) & _ALL_BITS
        hashes = self._sorted_hashes
        position = int(hashes.searchsorted(np.uint64(h)))
        wanted = partition_id.encode()
        while position < len(hashes) and int(hashes[position]) == h:  # several rows only on a collision
            row = int(self._rows_by_hash[position])
            if self._id_strings.bytes_at(row) == wanted:
                return row
            position += 1
        return None

    def ids(self, rows: np.ndarray | None = None) -> list[str]:
        ids = self._table.column("id")
        return list(ids.to_pylist() if rows is None else ids.take(pa.array(rows, pa.int64())).to_pylist())

    def partition(self, row: int) -> Partition:
        made = self._made.get(row)
        if made is None:
            made = self._made[row] = partitions_of(self._table.slice(row, 1), self._dimensions)[0]
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
