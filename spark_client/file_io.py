"""Reading and writing data files with pyarrow: the code that runs inside Spark tasks.

Everything here is plain pyarrow over a :class:`DataStore`, so it runs the same in a task, on the driver
and in tests.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from spark_client.columns import arrow_schema, region_filter
from spark_client.data_store import DataStore
from spark_client.errors import DataFileMissingError
from statestore.partitions import Region
from statestore.schema import Schema

# Rows per Arrow batch while writing: big enough for good row groups, small enough to bound a task's memory.
WRITE_BATCH_ROWS = 131_072


class DataFileWriter:
    """Writes one sorted data file in batches and counts its rows exactly."""

    def __init__(self, data: DataStore, filename: str, schema: pa.Schema) -> None:
        self.filename = filename
        self.rows = 0
        data.ensure_parent(filename)
        self._schema = schema
        self._writer = pq.ParquetWriter(
            data.path(filename), schema, filesystem=data.filesystem(), compression="zstd"
        )

    def write_rows(self, rows: Sequence[Sequence[Any]]) -> None:
        """Append rows given as tuples in the schema's column order."""
        if not rows:
            return
        columns = list(zip(*rows, strict=False))
        arrays = [pa.array(columns[i], type=f.type) for i, f in enumerate(self._schema)]
        self.write_table(pa.Table.from_arrays(arrays, schema=self._schema))

    def write_table(self, table: pa.Table) -> None:
        if table.num_rows:
            self._writer.write_table(table, row_group_size=1_048_576)
            self.rows += table.num_rows

    def close(self) -> None:
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


def read_files(data: DataStore, schema: Schema, parts: Iterable[tuple[str, Region | None]]) -> pa.Table:
    """The rows of several ``(filename, region)`` parts, concatenated, with the table's Arrow schema."""
    target = arrow_schema(schema)
    tables = [read_file(data, filename, schema, region).cast(target) for filename, region in parts]
    return pa.concat_tables(tables) if tables else target.empty_table()


def table_rows(table: pa.Table) -> Iterator[tuple[Any, ...]]:
    """An Arrow table's rows as tuples, in its column order (what Spark's ``createDataFrame`` takes)."""
    for batch in table.to_batches(max_chunksize=65_536):
        yield from zip(*(column.to_pylist() for column in batch.columns), strict=True)
