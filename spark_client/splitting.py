"""Partition splitting: leaves holding more rows than a threshold are split at the median of their data.

For each leaf over the threshold one Spark task streams only the row key column(s) of the leaf's files
(references on the leaf and on its ancestors, restricted to the leaf's region) through a bounded uniform
sample (:class:`KeySample`), chooses the dimension and an approximate median as the split point from it,
and the driver commits one SplitPartition per leaf. A task's memory is the sample's, not the leaf's. Files
stay where they are: references on the split partition are pushed down to the new leaves by the next
compaction.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession

from spark_client.committer import CommitReport, JobCommitter
from spark_client.data_store import DataStore
from spark_client.file_io import read_batches
from spark_client.leaves import depth
from spark_client.progress import context_of, report, spark_stage
from statestore.engine.log_store import TableStateStore
from statestore.model.partitions import Partition, Region, new_partition_id
from statestore.model.schema import Key, Schema
from statestore.state.table_state import TableState
from statestore.transactions import SplitPartition

ROTATE = "rotate"  # split on dimension depth % number of row keys
MOST_DISTINCT = "most_distinct"  # split on the row key with the most distinct values in the sample

# Rows of row keys a split task keeps in its sample: the median it picks is within 1% of rows of the true
# median except with probability 4e-9 (see KeySample).
SAMPLE_ROWS = 100_000
_PRIORITY = "__statestore_priority"


@dataclass(frozen=True)
class SplitDecision:
    """A leaf to split at ``split_point`` on ``dimension``; ``split_point=None`` when it cannot be split."""

    partition_id: str
    rows: int
    dimension: int
    split_point: Key | None
    outcome: CommitReport | None = None


def rows_per_leaf(state: TableState) -> dict[str, int]:
    """Rows referenced on each leaf (as counted by its references; exact after ingest or compaction)."""
    totals = state.reference_totals()
    return {leaf: totals[leaf].rows if leaf in totals else 0 for leaf in state.leaf_ids()}


def leaves_to_split(state: TableState, max_rows: int) -> list[tuple[str, int]]:
    """``(leaf id, rows)`` of the leaves holding more than ``max_rows`` rows."""
    return sorted((pid, rows) for pid, rows in rows_per_leaf(state).items() if rows > max_rows)


def _files_covering(state: TableState, partition: Partition) -> list[str]:
    """Files with rows in ``partition``: references on it and on its ancestors."""
    ids = [partition.id, *(p.id for p in state.partition_tree.ancestors(partition.id))]
    found = state.references_in_partitions(ids)
    return sorted({ref.filename for refs in found.values() for ref in refs})


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


class KeySample:
    """A uniform random sample of up to ``capacity`` rows' row keys from a stream of batches, in bounded
    memory, with each key column's exact two smallest distinct values.

    Each row gets a random priority and the sample is the ``capacity`` rows of lowest priority (a bottom-k
    sketch, i.e. a uniform sample without replacement); the task holds at most ``2 x capacity`` sampled
    rows and one batch. While the stream has at most ``capacity`` rows the sample is all of it, and the
    median is exact.

    **Accuracy.** Above that, the sample's empirical distribution is within ``e`` of the leaf's at every
    key, except with probability at most ``2 exp(-2 capacity e^2)`` (the Dvoretzky-Kiefer-Wolfowitz bound;
    sampling without replacement only tightens it). So the fraction of the leaf's rows below the sample's
    median is ``1/2 +- e``: with the default 100,000 rows, within 1% except with probability 4e-9, within
    0.5% except with probability 0.014. (Many rows sharing one key value move any median, exact or not, to
    a boundary of that value.)

    The priorities come from ``seed``, so the same files give the same sample.
    """

    def __init__(self, names: Sequence[str], capacity: int = SAMPLE_ROWS, seed: int = 0) -> None:
        if capacity < 2:
            raise ValueError(f"a key sample needs a capacity of at least 2 rows, got {capacity}")
        self.names = list(names)
        self.capacity = capacity
        self.rows = 0  # rows seen
        self._seed = seed
        self._batches = 0
        self._pool: list[pa.Table] = []
        self._pooled = 0
        self._threshold: float | None = None  # rows with a priority at or above it cannot enter
        self._lowest: list[tuple[Key | None, Key | None]] = [(None, None) for _ in self.names]

    def add(self, batch: pa.RecordBatch) -> None:
        """Add a batch holding (at least) the key columns."""
        if batch.num_rows == 0:
            return
        self.rows += batch.num_rows
        for dimension, name in enumerate(self.names):
            self._lowest[dimension] = _two_smallest(self._lowest[dimension], batch.column(name))
        priorities = pc.random(batch.num_rows, initializer=self._seed * 1_000_003 + self._batches)
        self._batches += 1
        table = pa.Table.from_batches([batch.select(self.names)]).append_column(_PRIORITY, priorities)
        if self._threshold is not None:
            table = table.filter(pc.less(table.column(_PRIORITY), self._threshold))
        self._pool.append(table)
        self._pooled += table.num_rows
        if self._pooled > 2 * self.capacity:
            self._shrink()

    def _shrink(self) -> None:
        if not self._pool:
            return
        pool = pa.concat_tables(self._pool)
        if pool.num_rows > self.capacity:
            # A sort of the priorities alone: three times quicker here than select_k_unstable's heap.
            lowest = pc.sort_indices(pool.column(_PRIORITY)).slice(0, self.capacity)
            pool = pool.take(lowest)
            self._threshold = pc.max(pool.column(_PRIORITY)).as_py()
        self._pool, self._pooled = [pool], pool.num_rows

    @property
    def held_rows(self) -> int:
        """Rows the sample holds now: at most ``2 x capacity``."""
        return self._pooled

    def column(self, dimension: int) -> pa.Array:
        """The sampled values of key column ``dimension`` (at most ``capacity``), in no particular order."""
        self._shrink()
        return self._pool[0].column(self.names[dimension]).combine_chunks() if self._pool else pa.array([])

    def second_smallest(self, dimension: int) -> Key | None:
        """The smallest value of column ``dimension`` above its smallest in the whole stream (exact)."""
        return self._lowest[dimension][1]


def _two_smallest(current: tuple[Key | None, Key | None], column: pa.Array) -> tuple[Key | None, Key | None]:
    """The two smallest distinct values of ``current``'s and ``column``'s values together."""
    low = pc.min(column).as_py()
    second = pc.min(pc.filter(column, pc.greater(column, pa.scalar(low, type=column.type)))).as_py()
    values = sorted({v for v in (*current, low, second) if v is not None})
    return (values[0] if values else None, values[1] if len(values) > 1 else None)


def decide_split(
    schema: Schema,
    data: DataStore,
    partition_id: str,
    region: Region,
    files: list[str],
    rows: int,
    dimension_hint: int,
    strategy: str,
    *,
    sample_rows: int = SAMPLE_ROWS,
) -> SplitDecision:
    """In a task: stream the row key columns of ``files`` within ``region`` into a :class:`KeySample` and
    choose how to split from it.

    The split point is the sample's median on the chosen dimension, nudged up to the next sampled value
    when it is the smallest (see :func:`choose_split_point`). If every sampled value of that dimension is
    equal but the leaf holds another, the exact second smallest value is taken, so a leaf with two distinct
    keys on a dimension always gets a split point with rows on both sides.
    """
    names = [f.name for f in schema.row_keys]
    sample = KeySample(names, sample_rows, seed=zlib.crc32(partition_id.encode()))
    for filename in files:
        for batch in read_batches(data, filename, schema, region, columns=names):
            sample.add(batch)
    if sample.rows < 2:
        return SplitDecision(partition_id, rows, dimension_hint, None)
    if strategy == MOST_DISTINCT:
        distinct = [pc.count_distinct(sample.column(d)).as_py() for d in range(len(names))]
        order = sorted(range(len(names)), key=lambda d: -distinct[d])
    else:
        order = [(dimension_hint + i) % len(names) for i in range(len(names))]
    for dimension in order:  # the preferred dimension first; another if all its values are equal
        point = choose_split_point(sample.column(dimension), region.ranges[dimension].min)
        if point is None:
            point = sample.second_smallest(dimension)
        if point is not None:
            return SplitDecision(partition_id, rows, dimension, point)
    return SplitDecision(partition_id, rows, order[0], None)


def split_partitions(
    spark: SparkSession,
    store: TableStateStore,
    data: DataStore,
    committer: JobCommitter,
    max_rows: int,
    *,
    strategy: str = ROTATE,
) -> list[SplitDecision]:
    """Split every leaf holding more than ``max_rows`` rows at the (sampled) median of its data; commit each.

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
    started = time.monotonic()
    what = f"splitting of table {store.table_id!r}"
    report(
        what,
        "sampling the keys of %d leaf/leaves over %s rows (%s rows in all)",
        len(tasks),
        f"{max_rows:,}",
        f"{sum(t[3] for t in tasks):,}",
    )

    def decide(items: Iterable[tuple[str, Region, list[str], int, int]]) -> Iterator[SplitDecision]:
        for partition_id, region, files, rows, hint in items:
            yield decide_split(schema, data, partition_id, region, files, rows, hint, strategy)

    with spark_stage(what, context_of(spark)):
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
    split = sum(1 for d in done if d.outcome is not None and d.outcome.committed)
    report(what, "split %d of %d leaf/leaves in %.1f s", split, len(done), time.monotonic() - started)
    return done


def split_partition_at(
    store: TableStateStore,
    committer: JobCommitter,
    partition_id: str,
    dimension: int,
    split_point: Key,
    *,
    wait: bool = True,
) -> CommitReport:
    """Commit a split of leaf ``partition_id`` at ``split_point`` on ``dimension`` (new UUID children).

    Raises InvalidPartitionSplitError before sending anything if the point is not strictly inside the
    partition's range; a rejection by the store (e.g. no longer a leaf) is the returned outcome.
    """
    partition = store.state().partition(partition_id)
    parent, left, right = partition.split(dimension, split_point, new_partition_id(), new_partition_id())
    return committer.commit(store.table_id, SplitPartition(parent, (left, right)), wait=wait)
