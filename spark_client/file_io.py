"""Reading and writing data files with pyarrow: the code that runs inside Spark tasks.

Everything here is plain pyarrow over a :class:`DataStore`, so it runs the same in a task, on the driver
and in tests.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from spark_client.columns import arrow_schema, region_filter
from spark_client.data_store import DataStore
from spark_client.errors import DataFileMissingError
from statestore.partitions import Region
from statestore.schema import Schema

# Rows per Arrow batch while writing: big enough for good row groups, small enough to bound a task's memory.
WRITE_BATCH_ROWS = 131_072
# Rows per Arrow batch handed to Spark by the data source's reader.
READ_BATCH_ROWS = 65_536


class DataFileWriter:
    """Writes one sorted data file, buffering slices into row groups of ``WRITE_BATCH_ROWS``, and counts its
    rows exactly."""

    def __init__(self, data: DataStore, filename: str, schema: pa.Schema) -> None:
        self.filename = filename
        self.rows = 0
        data.ensure_parent(filename)
        self._schema = schema
        self._buffer: list[pa.Table] = []
        self._buffered = 0
        self._writer = pq.ParquetWriter(
            data.path(filename), schema, filesystem=data.filesystem(), compression="zstd"
        )

    def write_table(self, table: pa.Table) -> None:
        """Append rows (already in sort order) with the file's schema."""
        if table.num_rows:
            self._buffer.append(table)
            self._buffered += table.num_rows
            self.rows += table.num_rows
            if self._buffered >= WRITE_BATCH_ROWS:
                self._flush()

    def _flush(self) -> None:
        if self._buffer:
            self._writer.write_table(pa.concat_tables(self._buffer), row_group_size=WRITE_BATCH_ROWS * 8)
            self._buffer, self._buffered = [], 0

    def close(self) -> None:
        try:
            self._flush()
        finally:
            self._writer.close()


def read_file(
    data: DataStore, filename: str, schema: Schema, region: Region | None, columns: list[str] | None = None
) -> pa.Table:
    """The rows of ``filename`` whose row key lies in ``region`` (all rows if None).

    Raises :class:`DataFileMissingError` when the object is gone.
    """
    try:
        return pq.read_table(
            data.path(filename),
            filesystem=data.filesystem(),
            columns=columns,
            filters=region_filter(schema, region) if region is not None else None,
        )
    except FileNotFoundError as e:
        raise DataFileMissingError(f"data file {data.uri(filename)} is missing: {e}") from e


def read_batches(
    data: DataStore,
    filename: str,
    columns: list[str],
    row_filter: pc.Expression | None,
    batch_rows: int = READ_BATCH_ROWS,
) -> Iterator[pa.RecordBatch]:
    """Stream the ``columns`` of the rows of ``filename`` that pass ``row_filter``, in non-empty batches.

    Row groups whose statistics rule the filter out are not decoded. Raises
    :class:`DataFileMissingError` when the object is gone.
    """
    try:
        dataset = pads.dataset(data.path(filename), format="parquet", filesystem=data.filesystem())
        batches = dataset.to_batches(columns=columns, filter=row_filter, batch_size=batch_rows)
        for batch in batches:
            if batch.num_rows:
                yield batch
    except FileNotFoundError as e:
        raise DataFileMissingError(f"data file {data.uri(filename)} is missing: {e}") from e


def read_files(data: DataStore, schema: Schema, parts: Iterable[tuple[str, Region | None]]) -> pa.Table:
    """The rows of several ``(filename, region)`` parts, concatenated, with the table's Arrow schema."""
    target = arrow_schema(schema)
    tables = [read_file(data, filename, schema, region).cast(target) for filename, region in parts]
    return pa.concat_tables(tables) if tables else target.empty_table()


def table_rows(table: pa.Table) -> Iterator[tuple[Any, ...]]:
    """An Arrow table's rows as tuples, in its column order (what Spark's ``createDataFrame`` takes)."""
    for batch in table.to_batches(max_chunksize=65_536):
        yield from zip(*(column.to_pylist() for column in batch.columns), strict=True)
