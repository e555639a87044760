"""A streaming k-way merge of sorted record batch streams, in bounded memory, with pyarrow alone.

Compaction merges a partition's sorted data files into one. Loading them all and sorting needs memory for
the whole partition; this merge holds one batch per input at a time, so its memory is
O(inputs x batch rows) whatever the partition's size.

**Order.** Rows are ordered by the key columns, each ascending with nulls first (Spark's default for an
ascending sort, the order ingest writes), then by input (earlier inputs first), then by position within the
input: the merge is stable, and its output is exactly a stable sort of the inputs concatenated in order.

**How.** Each round takes a *watermark*: the smallest ``(last key of the current batch, input index)``
among the inputs. Everything at or below it is ready: from each input, the rows up to the watermark (found
by binary search; an input after the watermark's one stops before rows equal to its key, which must follow
that input's later rows). Those slices are concatenated, sorted with one vectorized stable sort and
emitted. The watermark's input always gives its whole batch, so every round consumes at least one batch.

**Unsorted inputs.** The merge is only right if each input is sorted. Every batch is checked as it is read
(one vectorized comparison of neighbouring rows, and the first row against the previous batch's last);
an input found out of order raises :class:`UnsortedInputError` naming the input and the row. A caller that
wants to merge it anyway sorts it first with :func:`sort_into_runs` (bounded memory, spilled to disk) and
merges again, as :func:`spark_client.file_io.merge_files` does.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

# Rows per batch read from each input. A merge holds one batch per input, a round's slices and their sorted
# copy (2 x inputs x this x the row width at most), plus what the inputs' readers and the output's writer
# buffer (see spark_client.file_io.merge_files).
MERGE_BATCH_ROWS = 16_384

# Rows sorted in memory at a time when an unsorted input must be sorted on disk, and how many sorted runs
# one merge pass reads at once.
RUN_ROWS = 262_144
MAX_RUNS_PER_MERGE = 32

# A row's key as Python compares it: one (0,) for a null (nulls sort first) or (1, value) per key column.
RowKey = tuple[tuple[Any, ...], ...]


class UnsortedInputError(ValueError):
    """Input ``input_index`` of a merge is not sorted by the merge's key columns.

    ``row`` is the row's position in that input (counting only the rows it delivered), whose key
    ``key`` is smaller than the key ``previous`` of the row before it.
    """

    def __init__(self, input_index: int, row: int, previous: RowKey, key: RowKey) -> None:
        super().__init__(
            f"input {input_index} is not sorted: its row {row} has key {_show(key)}, which sorts before "
            f"the previous row's key {_show(previous)}"
        )
        self.input_index = input_index
        self.row = row
        self.previous = previous
        self.key = key


def _show(key: RowKey) -> str:
    return "(" + ", ".join("null" if len(part) == 1 else repr(part[1]) for part in key) + ")"


class _Input:
    """One sorted input: its current batch, how far into it the merge has emitted, checked as it is read."""

    def __init__(self, index: int, batches: Iterable[pa.RecordBatch], keys: Sequence[str]) -> None:
        self.index = index
        self._batches = iter(batches)
        self._keys = keys
        self.batch: pa.RecordBatch | None = None
        self.position = 0  # rows of ``batch`` already emitted
        self._rows_before = 0  # rows of this input in the batches before ``batch``
        self.last: RowKey | None = None  # key of the last row of ``batch``
        self.advance()

    def advance(self) -> None:
        """Move to the next non-empty batch (``batch`` becomes None at the end), checking its order."""
        previous_last = self.last
        if self.batch is not None:
            self._rows_before += self.batch.num_rows
        self.batch, self.position, self.last = None, 0, None
        for batch in self._batches:
            if batch.num_rows == 0:
                continue
            descent = first_descent([batch.column(k) for k in self._keys])
            if descent is not None:
                raise UnsortedInputError(
                    self.index,
                    self._rows_before + descent + 1,
                    self.key_at(batch, descent),
                    self.key_at(batch, descent + 1),
                )
            first = self.key_at(batch, 0)
            if previous_last is not None and first < previous_last:
                raise UnsortedInputError(self.index, self._rows_before, previous_last, first)
            self.batch, self.last = batch, self.key_at(batch, batch.num_rows - 1)
            return

    def key_at(self, batch: pa.RecordBatch, row: int) -> RowKey:
        return tuple(_part(batch.column(k)[row].as_py()) for k in self._keys)

    def end_of(self, watermark: RowKey, inclusive: bool) -> int:
        """Where the rows of the current batch at (``inclusive``) or below ``watermark`` end."""
        assert self.batch is not None and self.last is not None
        batch = self.batch

        def below(key: RowKey) -> bool:
            return key < watermark or (inclusive and key == watermark)

        if below(self.last):  # the whole rest of the batch (common when the inputs' batches line up)
            return batch.num_rows
        columns = [batch.column(k) for k in self._keys]
        low, high = self.position, batch.num_rows - 1  # the last row is not below
        while low < high:  # the first row that is not below the watermark
            middle = (low + high) // 2
            if below(tuple(_part(column[middle].as_py()) for column in columns)):
                low = middle + 1
            else:
                high = middle
        return low


def _part(value: Any) -> tuple[Any, ...]:
    return (0,) if value is None else (1, value)


def merge_sorted(
    inputs: Sequence[Iterable[pa.RecordBatch]], keys: Sequence[str], schema: pa.Schema
) -> Iterator[pa.Table]:
    """Merge record batch streams, each sorted by ``keys`` (nulls first), into sorted tables.

    Every input's batches must have ``schema``. The tables yielded, concatenated, are a stable sort of the
    inputs concatenated in order; each holds at most the rows of one batch per input. Raises
    :class:`UnsortedInputError` as soon as an input is found out of order; the tables already yielded are
    then not a usable result (discard them).
    """
    if not keys:
        raise ValueError("a merge needs at least one key column")
    missing = [k for k in keys if k not in schema.names]
    if missing:
        raise ValueError(f"key column(s) {missing} are not in the schema {schema.names}")
    sort_keys = [(k, "ascending", "at_start") for k in keys]
    active = [i for i in (_Input(index, batches, keys) for index, batches in enumerate(inputs)) if i.batch]
    while active:
        mark = min(active, key=lambda i: (i.last, i.index))
        assert mark.last is not None
        slices = []
        for source in active:
            assert source.batch is not None
            if source is mark:
                end = source.batch.num_rows
            else:  # inputs before the watermark's one come first among equal keys
                end = source.end_of(mark.last, inclusive=source.index < mark.index)
            if end > source.position:
                slices.append(source.batch.slice(source.position, end - source.position))
            source.position = end
        if len(slices) == 1:
            yield pa.Table.from_batches(slices, schema=schema)
        else:
            table = pa.Table.from_batches(slices, schema=schema)
            yield table.take(pc.sort_indices(table, sort_keys=sort_keys))
        for source in active:
            assert source.batch is not None
            if source.position == source.batch.num_rows:
                source.advance()
        active = [i for i in active if i.batch is not None]


def first_descent(columns: Sequence[pa.Array]) -> int | None:
    """The first row ``i`` whose key (over ``columns``, nulls first) is above row ``i + 1``'s, or None.

    Vectorized: a few compute kernels over the whole batch per key column.
    """
    rows = len(columns[0])
    if rows < 2:
        return None
    above: pa.Array | None = None  # row i > row i + 1, over the columns seen so far (from the last)
    for column in reversed(columns):
        previous, following = column.slice(0, rows - 1), column.slice(1)
        greater = pc.greater(previous, following)
        equal = pc.equal(previous, following)
        if column.null_count:
            previous_null, following_null = pc.is_null(previous), pc.is_null(following)
            # nulls first: a non-null value is above a null, two nulls are equal
            greater = pc.or_(pc.fill_null(greater, False), pc.and_(pc.invert(previous_null), following_null))
            equal = pc.or_(pc.fill_null(equal, False), pc.and_(previous_null, following_null))
        above = greater if above is None else pc.or_(greater, pc.and_(equal, above))
    assert above is not None
    if not pc.any(above).as_py():
        return None
    return int(pc.index(above, True).as_py())


def sort_into_runs(
    batches: Iterable[pa.RecordBatch],
    keys: Sequence[str],
    schema: pa.Schema,
    directory: str,
    *,
    run_rows: int = RUN_ROWS,
    batch_rows: int = MERGE_BATCH_ROWS,
    max_runs: int = MAX_RUNS_PER_MERGE,
) -> list[str]:
    """Sort a stream of batches on local disk in bounded memory; returns the sorted runs' Parquet paths.

    Rows are sorted ``run_rows`` at a time (stably) into runs; while there are more than ``max_runs``
    runs, consecutive groups of them are merged into longer runs. Merging the runs returned, in order, gives
    a stable sort of the whole stream. Memory: ``run_rows`` rows while cutting runs, then
    ``max_runs x batch_rows``.
    """
    if run_rows < 1 or max_runs < 2:
        raise ValueError(f"need run_rows >= 1 and max_runs >= 2, got {run_rows} and {max_runs}")
    names = iter(range(1 << 62))

    def write_run(tables: Iterable[pa.Table]) -> str:
        path = os.path.join(directory, f"run-{next(names)}.parquet")
        with pq.ParquetWriter(path, schema, compression="lz4") as writer:
            for table in tables:
                writer.write_table(table)
        return path

    sort_keys = [(k, "ascending", "at_start") for k in keys]
    runs: list[str] = []
    pending: list[pa.RecordBatch] = []
    pending_rows = 0

    def cut() -> None:
        table = pa.Table.from_batches(pending, schema=schema)
        order = pc.sort_indices(table, sort_keys=sort_keys)
        runs.append(write_run([table.take(order)]))
        pending.clear()

    for batch in batches:
        while batch.num_rows:
            take = min(batch.num_rows, run_rows - pending_rows)
            pending.append(batch.slice(0, take))
            pending_rows += take
            batch = batch.slice(take)
            if pending_rows == run_rows:
                cut()
                pending_rows = 0
    if pending_rows:
        cut()
    while len(runs) > max_runs:
        groups = [runs[i : i + max_runs] for i in range(0, len(runs), max_runs)]
        merged = [write_run(merge_sorted(read_runs(group, batch_rows), keys, schema)) for group in groups]
        for path in runs:
            os.remove(path)
        runs = merged
    return runs


def read_runs(paths: Sequence[str], batch_rows: int = MERGE_BATCH_ROWS) -> list[Iterator[pa.RecordBatch]]:
    """Streams of the local Parquet files ``paths`` (runs from :func:`sort_into_runs`), one per file."""
    return [_stream(path, batch_rows) for path in paths]


def _stream(path: str, batch_rows: int) -> Iterator[pa.RecordBatch]:
    with pq.ParquetFile(path) as file:
        yield from file.iter_batches(batch_size=batch_rows)
