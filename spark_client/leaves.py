"""Assigning rows to leaf partitions: in the JVM for the ingest job, with pyarrow for the data source.

For ingest the partition tree becomes one nested ``CASE WHEN key < split THEN ... ELSE ... END`` column
expression: the split points travel with the query plan (the same effect as a broadcast of the leaf
boundaries) and Spark evaluates it in the JVM with code generation, so no row crosses into Python to find
its leaf. The data source's writer gets Arrow batches in its tasks instead, and walks the same tree with
vectorised comparisons (:func:`rows_by_leaf`).
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column
from pyspark.sql import functions as F

from spark_client.columns import field_type
from statestore.model.partition_tree import PartitionTree
from statestore.model.partitions import Partition
from statestore.model.schema import Key, Schema


def leaf_index_column(schema: Schema, tree: PartitionTree) -> tuple[Column, list[str]]:
    """``(column, leaf_ids)``: the column holds, for each row, the index in ``leaf_ids`` of its leaf."""
    leaf_ids: list[str] = []

    def build(node: Partition) -> Column:
        if node.leaf:
            leaf_ids.append(node.id)
            return F.lit(len(leaf_ids) - 1)
        left, right = (tree.get(child_id) for child_id in node.child_ids)
        split_point = left.region.ranges[node.dimension].max
        assert split_point is not None  # a left child always ends at the split point
        key = F.col(schema.row_keys[node.dimension].name)
        below = build(left)
        above = build(right)
        return F.when(key < _literal(split_point), below).otherwise(above)

    return build(tree.root), leaf_ids


def _literal(value: Key) -> Column:
    # bytes must reach Spark as a bytearray to become a binary literal.
    return F.lit(bytearray(value)) if isinstance(value, bytes) else F.lit(value)


def depth(tree: PartitionTree, partition_id: str) -> int:
    """How many splits lie between the root and ``partition_id``."""
    return sum(1 for _ in tree.ancestors(partition_id))


def rows_by_leaf(rows: pa.Table, schema: Schema, tree: PartitionTree) -> Iterator[tuple[str, pa.Table]]:
    """``rows`` split by leaf partition: ``(leaf id, its rows)`` for each leaf that has any, left to right.

    Each split compares only the rows that reached its node, so the work is rows x depth. Row keys must
    not be null (the caller checks).
    """

    def descend(node: Partition, indices: pa.Array | None) -> Iterator[tuple[str, pa.Table]]:
        # ``indices`` None stands for every row (the root), saving a take of the whole table.
        if indices is not None and len(indices) == 0:
            return
        if node.leaf:
            yield node.id, rows if indices is None else rows.take(indices)
            return
        left, right = (tree.get(child_id) for child_id in node.child_ids)
        split_point = left.region.ranges[node.dimension].max
        field = schema.row_keys[node.dimension]
        keys = rows.column(field.name)
        if indices is not None:
            keys = keys.take(indices)
        below = pc.less(keys, pa.scalar(split_point, type=field_type(field.type)))
        below_at, above_at = pc.indices_nonzero(below), pc.indices_nonzero(pc.invert(below))
        if indices is not None:
            below_at, above_at = indices.take(below_at), indices.take(above_at)
        yield from descend(left, below_at)
        yield from descend(right, above_at)

    yield from descend(tree.root, None)
