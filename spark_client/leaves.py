"""Assigning rows to leaf partitions inside Spark, without a Python UDF.

The partition tree becomes one nested ``CASE WHEN key < split THEN ... ELSE ... END`` column expression:
the split points travel with the query plan (the same effect as a broadcast of the leaf boundaries) and
Spark evaluates it in the JVM with code generation, so no row crosses into Python to find its leaf.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

from statestore.partitions import Partition, PartitionTree
from statestore.schema import Key, Schema


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
