"""Reading and writing data files with pyarrow: the code that runs inside Spark tasks.

Everything here is plain pyarrow over a :class:`DataStore`, so it runs the same in a task, on the driver
and in tests.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from spark_client.columns import arrow_schema, region_filter, sort_columns
from spark_client.data_store import DataStore
from spark_client.errors import DataFileMissingError, InvalidDataFileError, missing_file_message
from spark_client.merge import MERGE_BATCH_ROWS, UnsortedInputError, merge_sorted, read_runs, sort_into_runs
from statestore.model.partitions import Range, Region
from statestore.model.schema import Schema

_log = logging.getLogger(__name__)

# Rows per Arrow batch while writing: big enough for good row groups, small enough to bound a task's memory.
WRITE_BATCH_ROWS = 131_072
# ...or fewer when the rows are wide: a writer buffers at most about this many bytes.
WRITE_BATCH_BYTES = 32 * 1024 * 1024

# A column chunk stops dictionary encoding once its dictionary passes this size. Parquet's default (1 MB)
# let every row group of a high-cardinality column (keys, timestamps, unique strings) hash and store about
# a megabyte of dictionary before giving up: writing took twice as long and files were a third bigger than
# plain encoding. Columns with a few thousand distinct values per row group still get a dictionary.
DICTIONARY_PAGE_BYTES = 64 * 1024
# Rows per Arrow batch handed to Spark by the data source's reader.
READ_BATCH_ROWS = 65_536


class DataFileWriter:
    """Writes one sorted data file, buffering slices into row groups of ``WRITE_BATCH_ROWS`` (fewer if they
    would pass ``WRITE_BATCH_BYTES``), and counts its rows exactly. :meth:`close` reads the written file's
    footer back: a file that is not a readable Parquet file of the schema and row count raises
    :class:`InvalidDataFileError` before anyone can commit it."""

    def __init__(self, data: DataStore, filename: str, schema: pa.Schema) -> None:
        self.filename = filename
        self.rows = 0
        self._data = data
        data.ensure_parent(filename)
        self._schema = schema
        self._buffer: list[pa.Table] = []
        self._buffered = 0
        self._buffered_bytes = 0
        self._writer = pq.ParquetWriter(
            data.path(filename),
            schema,
            filesystem=data.filesystem(),
            compression="zstd",
            dictionary_pagesize_limit=DICTIONARY_PAGE_BYTES,
        )

    def write_table(self, table: pa.Table) -> None:
        """Append rows (already in sort order) with the file's schema."""
        if table.num_rows:
            self._buffer.append(table)
            self._buffered += table.num_rows
            self._buffered_bytes += table.nbytes
            self.rows += table.num_rows
            if self._buffered >= WRITE_BATCH_ROWS or self._buffered_bytes >= WRITE_BATCH_BYTES:
                self._flush()

    def _flush(self) -> None:
        if self._buffer:
            self._writer.write_table(pa.concat_tables(self._buffer), row_group_size=WRITE_BATCH_ROWS * 8)
            self._buffer, self._buffered, self._buffered_bytes = [], 0, 0

    def close(self) -> None:
        try:
            self._flush()
        finally:
            self._writer.close()
        check_data_file(self._data, self.filename, self._schema, self.rows)

    def abort(self) -> None:
        """Stop writing after a failure: drop the buffered rows and release the file (the caller deletes
        it). Never raises, so the failure that led here is the one reported."""
        self._buffer, self._buffered, self._buffered_bytes = [], 0, 0
        try:
            self._writer.close()
        except Exception:  # the writer may be what failed; the file is deleted anyway
            pass


def check_data_file(data: DataStore, filename: str, schema: pa.Schema, rows: int) -> None:
    """Raise :class:`InvalidDataFileError` unless ``filename`` is Parquet of ``schema`` with ``rows`` rows."""
    try:
        metadata = pq.read_metadata(data.path(filename), filesystem=data.filesystem())
        written = metadata.schema.to_arrow_schema()
    except (OSError, pa.ArrowException) as e:
        raise InvalidDataFileError(
            f"data file {data.uri(filename)} is not a readable Parquet file: {e}"
        ) from e
    if not written.equals(schema, check_metadata=False):
        raise InvalidDataFileError(
            f"data file {data.uri(filename)} has schema {written}, not the table's {schema}"
        )
    if metadata.num_rows != rows:
        raise InvalidDataFileError(
            f"data file {data.uri(filename)} holds {metadata.num_rows} rows, but {rows} were written"
        )


def read_file(
    data: DataStore,
    filename: str,
    schema: Schema,
    region: Region | None,
    columns: list[str] | None = None,
    *,
    planned_at: int | None = None,
) -> pa.Table:
    """The rows of ``filename`` whose row key lies in ``region`` (all rows if None).

    Raises :class:`DataFileMissingError` when the object is gone, saying why that most likely is (naming
    ``planned_at``, the transaction the read was planned from, if given).
    """
    try:
        return pq.read_table(
            data.path(filename),
            filesystem=data.filesystem(),
            columns=columns,
            filters=region_filter(schema, region) if region is not None else None,
        )
    except FileNotFoundError as e:
        raise DataFileMissingError(missing_file_message(data.uri(filename), "not found", planned_at)) from e


def scan_batches(
    data: DataStore,
    filename: str,
    columns: list[str],
    row_filter: pc.Expression | None,
    batch_rows: int = READ_BATCH_ROWS,
    *,
    planned_at: int | None = None,
) -> Iterator[pa.RecordBatch]:
    """Stream the ``columns`` of the rows of ``filename`` that pass ``row_filter``, in non-empty batches.

    Row groups whose statistics rule the filter out are not decoded. Raises
    :class:`DataFileMissingError` when the object is gone, naming ``planned_at`` (the transaction the
    read was planned from) if given.
    """
    try:
        dataset = pads.dataset(data.path(filename), format="parquet", filesystem=data.filesystem())
        batches = dataset.to_batches(columns=columns, filter=row_filter, batch_size=batch_rows)
        for batch in batches:
            if batch.num_rows:
                yield batch
    except FileNotFoundError as e:
        raise DataFileMissingError(missing_file_message(data.uri(filename), "not found", planned_at)) from e


def read_files(data: DataStore, schema: Schema, parts: Iterable[tuple[str, Region | None]]) -> pa.Table:
    """The rows of several ``(filename, region)`` parts, concatenated, with the table's Arrow schema."""
    target = arrow_schema(schema)
    tables = [read_file(data, filename, schema, region).cast(target) for filename, region in parts]
    return pa.concat_tables(tables) if tables else target.empty_table()


def read_batches(
    data: DataStore,
    filename: str,
    schema: Schema,
    region: Region | None,
    batch_rows: int = MERGE_BATCH_ROWS,
    columns: list[str] | None = None,
) -> Iterator[pa.RecordBatch]:
    """The rows of ``filename`` within ``region`` (all if None) as a stream of batches, in file order.

    Holds one row group's column chunks and one batch of ``batch_rows`` decoded rows at a time (a few MB
    for a row group of 131,072 rows of a few small columns), whatever the file's size.
    Row groups whose row key statistics lie outside the region are not read. Batches have the table's
    Arrow schema (only ``columns``, if given). Raises :class:`DataFileMissingError` when the object is gone.
    """
    target = arrow_schema(schema)
    if columns is not None:
        target = pa.schema([target.field(name) for name in columns])
    try:
        file = pq.ParquetFile(data.path(filename), filesystem=data.filesystem())
    except FileNotFoundError as e:
        raise DataFileMissingError(f"data file {data.uri(filename)} is missing: {e}") from e
    with file:
        groups = list(range(file.metadata.num_row_groups))
        expression = None
        if region is not None:
            groups = [g for g in groups if _row_group_may_overlap(file.metadata.row_group(g), schema, region)]
            expression = region_filter(schema, region)
            if expression.equals(pc.scalar(True)):
                expression = None
        # One row group at a time: the reader pre-buffers (fetches in a few coalesced ranges) all the row
        # groups it is given, which for the whole file would hold the file's compressed bytes.
        for group in groups:
            for batch in file.iter_batches(batch_size=batch_rows, row_groups=[group], columns=target.names):
                if expression is not None:
                    batch = batch.filter(expression)
                if batch.num_rows:
                    yield batch.cast(target)


def _row_group_may_overlap(group: pq.RowGroupMetaData, schema: Schema, region: Region) -> bool:
    """False only if a row key column's min/max statistics put the whole row group outside ``region``."""
    columns = {group.column(i).path_in_schema: group.column(i) for i in range(group.num_columns)}
    for field, key_range in zip(schema.row_keys, region.ranges, strict=True):
        column = columns.get(field.name)
        statistics = column.statistics if column is not None else None
        if statistics is None or not statistics.has_min_max:
            continue
        if not _may_overlap(statistics.min, statistics.max, key_range):
            return False
    return True


def _may_overlap(low: Any, high: Any, key_range: Range) -> bool:
    try:
        return not (high < key_range.min or (key_range.max is not None and low >= key_range.max))
    except TypeError:  # statistics of another type than the key (a foreign file): read the row group
        return True


def merge_files(
    data: DataStore,
    schema: Schema,
    parts: Sequence[tuple[str, Region | None]],
    output: str,
    *,
    batch_rows: int = MERGE_BATCH_ROWS,
) -> int:
    """Merge sorted data files, each restricted to its region, into the sorted file ``output``; its rows.

    A streaming k-way merge (:mod:`spark_client.merge`). Its memory does not depend on the files' sizes:
    per input, a batch of ``batch_rows`` rows and the row group being decoded (:func:`read_batches`), and
    the writer's buffer (at most ``WRITE_BATCH_ROWS`` rows or ``WRITE_BATCH_BYTES``). Measured peak of
    Arrow memory on rows of about 45 bytes: 21 MiB with 4 inputs, 142 MiB with 32 (a compaction job's
    ``max_files`` by default), the same for 0.5M and 8M rows (``benchmarks/bench_compaction_memory.py``).
    Rows of equal keys keep the order of ``parts``.

    A file found not sorted by row keys then sort keys (nulls first) — one written by another tool, or by
    compaction before it sorted nulls first — is not trusted: a warning names it, it is sorted on local
    disk (in bounded memory, see :func:`spark_client.merge.sort_into_runs`) and the merge starts again,
    rewriting ``output``. That costs a second pass but never an unsorted output, and one such file does
    not stop the table's compaction.
    """
    target = arrow_schema(schema)
    keys = sort_columns(schema)
    unsorted: set[int] = set()  # indexes in ``parts`` of the files to sort before merging
    while True:
        with tempfile.TemporaryDirectory(prefix="statestore-merge-") as spill:
            inputs: list[Iterable[pa.RecordBatch]] = []
            part_of_input: list[int] = []
            for index, (filename, region) in enumerate(parts):
                batches = read_batches(data, filename, schema, region, batch_rows)
                if index in unsorted:
                    runs = read_runs(sort_into_runs(batches, keys, target, spill, batch_rows=batch_rows))
                    inputs.extend(runs)
                    part_of_input.extend([index] * len(runs))
                else:
                    inputs.append(batches)
                    part_of_input.append(index)
            writer = DataFileWriter(data, output, target)
            try:
                for table in merge_sorted(inputs, keys, target):
                    writer.write_table(table)
                writer.close()
            except UnsortedInputError as e:
                writer.abort()
                index = part_of_input[e.input_index]
                if index in unsorted:  # a run we sorted ourselves is out of order: a defect, not the data
                    data.delete([output])
                    raise
                _log.warning(
                    "data file %s is not sorted by %s (nulls first): %s; sorting it on local disk and "
                    "merging again",
                    data.uri(parts[index][0]),
                    keys,
                    e,
                )
                unsorted.add(index)
                continue
            except BaseException:
                writer.abort()
                data.delete([output])  # leave nothing half-written behind
                raise
            return writer.rows


def table_rows(table: pa.Table) -> Iterator[tuple[Any, ...]]:
    """An Arrow table's rows as tuples, in its column order (what Spark's ``createDataFrame`` takes)."""
    for batch in table.to_batches(max_chunksize=65_536):
        yield from zip(*(column.to_pylist() for column in batch.columns), strict=True)
