"""Partition splitting: leaves holding more rows than a threshold are split at the median of their data.

For each leaf over the threshold one Spark task reads only the row key column(s) of the leaf's files
(references on the leaf and on its ancestors, restricted to the leaf's region), chooses the dimension and
the split point, and the driver commits one SplitPartition per leaf. Files stay where they are: references
on the split partition are pushed down to the new leaves by the next compaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession

from spark_client.committer import CommitOutcome, Committer
from spark_client.data_store import DataStore
from spark_client.file_io import read_file
from spark_client.leaves import depth
from statestore.engine import TransactionLogStateStore
from statestore.partitions import Partition, Region, new_partition_id
from statestore.schema import Key, Schema
from statestore.state import TableState
from statestore.transactions import SplitPartition

ROTATE = "rotate"  # split on dimension depth % number of row keys
MOST_DISTINCT = "most_distinct"  # split on the row key with the most distinct values in the partition


@dataclass(frozen=True)
class SplitDecision:
    """A leaf to split at ``split_point`` on ``dimension``; ``split_point=None`` when it cannot be split."""

    partition_id: str
    rows: int
    dimension: int
    split_point: Key | None
    outcome: CommitOutcome | None = None


def rows_per_leaf(state: TableState) -> dict[str, int]:
    """Rows referenced on each leaf (as counted by its references; exact after ingest or compaction)."""
    counts = {p.id: 0 for p in state.leaf_partitions()}
    for ref in state.file_references():
        if ref.partition_id in counts:
            counts[ref.partition_id] += ref.number_of_rows
    return counts


def leaves_to_split(state: TableState, max_rows: int) -> list[tuple[str, int]]:
    """``(leaf id, rows)`` of the leaves holding more than ``max_rows`` rows."""
    return sorted((pid, rows) for pid, rows in rows_per_leaf(state).items() if rows > max_rows)


def _files_covering(state: TableState, partition: Partition) -> list[str]:
    """Files with rows in ``partition``: references on it and on its ancestors."""
    ids = {partition.id, *(p.id for p in state.partition_tree.ancestors(partition.id))}
    return sorted({ref.filename for ref in state.file_references() if ref.partition_id in ids})


def choose_split_point(values: pa.Array, region_min: Key) -> Key | None:
    """The median of ``values`` as a split point, nudged up so both sides get rows; None if impossible.

    The left child is ``[min, split)``, the right ``[split, max)``; a split point equal to the smallest
    value would leave the left side empty, so the next distinct value is taken instead.
    """
    if len(values) < 2:
        return None
    ordered = pc.sort_indices(values)
    median = values[ordered[len(values) // 2].as_py()].as_py()
    smallest = values[ordered[0].as_py()].as_py()
    if median == smallest:
        above = pc.filter(values, pc.greater(values, pa.scalar(smallest, type=values.type)))
        if len(above) == 0:
            return None
        median = pc.min(above).as_py()
    if median is None or not region_min < median:
        return None
    return bytes(median) if isinstance(median, bytearray) else median


def _decide(
    schema: Schema,
    data: DataStore,
    partition_id: str,
    region: Region,
    files: list[str],
    rows: int,
    dimension_hint: int,
    strategy: str,
) -> SplitDecision:
    """In a task: read the row key columns of ``files`` within ``region`` and choose how to split."""
    names = [f.name for f in schema.row_keys]
    parts = [read_file(data, filename, schema, region, columns=names) for filename in files]
    keys = pa.concat_tables(parts) if parts else None
    if keys is None or keys.num_rows < 2:
        return SplitDecision(partition_id, rows, dimension_hint, None)
    if strategy == MOST_DISTINCT:
        distinct = [pc.count_distinct(keys.column(name)).as_py() for name in names]
        order = sorted(range(len(names)), key=lambda d: -distinct[d])
    else:
        order = [(dimension_hint + i) % len(names) for i in range(len(names))]
    for dimension in order:  # the preferred dimension first; another if all its values are equal
        column = keys.column(names[dimension]).combine_chunks()
        point = choose_split_point(column, region.ranges[dimension].min)
        if point is not None:
            return SplitDecision(partition_id, rows, dimension, point)
    return SplitDecision(partition_id, rows, order[0], None)


def split_partitions(
    spark: SparkSession,
    store: TransactionLogStateStore,
    data: DataStore,
    committer: Committer,
    max_rows: int,
    *,
    strategy: str = ROTATE,
) -> list[SplitDecision]:
    """Split every leaf holding more than ``max_rows`` rows at the median of its data; commit each split.

    ``strategy`` picks the dimension: ``"rotate"`` (depth modulo the number of row keys) or
    ``"most_distinct"``. Leaves whose keys are all equal cannot be split and are returned with
    ``split_point=None``. Each split is its own commit, so one rejected split (say, another job split that
    leaf first) does not stop the others; its outcome is on the decision.
    """
    if strategy not in (ROTATE, MOST_DISTINCT):
        raise ValueError(f"strategy must be {ROTATE!r} or {MOST_DISTINCT!r}, got {strategy!r}")
    schema = store.schema
    state = store.state()
    tree = state.partition_tree
    tasks = []
    for partition_id, rows in leaves_to_split(state, max_rows):
        partition = state.partition(partition_id)
        hint = depth(tree, partition_id) % len(schema.row_keys)
        tasks.append((partition_id, partition.region, _files_covering(state, partition), rows, hint))
    if not tasks:
        return []

    def decide(items: Iterable[tuple[str, Region, list[str], int, int]]) -> Iterator[SplitDecision]:
        for partition_id, region, files, rows, hint in items:
            yield _decide(schema, data, partition_id, region, files, rows, hint, strategy)

    decisions = spark.sparkContext.parallelize(tasks, len(tasks)).mapPartitions(decide).collect()
    done = []
    for decision in decisions:
        if decision.split_point is None:
            done.append(decision)
            continue
        outcome = split_partition_at(
            store, committer, decision.partition_id, decision.dimension, decision.split_point
        )
        done.append(
            SplitDecision(
                decision.partition_id, decision.rows, decision.dimension, decision.split_point, outcome
            )
        )
    return done


def split_partition_at(
    store: TransactionLogStateStore,
    committer: Committer,
    partition_id: str,
    dimension: int,
    split_point: Key,
    *,
    wait: bool = True,
) -> CommitOutcome:
    """Commit a split of leaf ``partition_id`` at ``split_point`` on ``dimension`` (new UUID children).

    Raises InvalidPartitionSplitError before sending anything if the point is not strictly inside the
    partition's range; a rejection by the store (e.g. no longer a leaf) is the returned outcome.
    """
    partition = store.state().partition(partition_id)
    parent, left, right = partition.split(dimension, split_point, new_partition_id(), new_partition_id())
    return committer.commit(store.table_id, SplitPartition(parent, (left, right)), wait=wait)
