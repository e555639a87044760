"""Ingest: write a DataFrame's rows as sorted Parquet files, one per leaf partition per task, and commit them.

1. Check the DataFrame against the table schema (columns and types, then null row keys) — a mismatch is
   refused before any file is written.
2. Give each row its leaf partition with a JVM-side expression over the split points (no Python UDF).
3. Sort within each Spark partition by leaf, row keys and sort keys; each task streams its rows into one
   Parquet file per leaf with pyarrow, counting rows exactly.
4. Send ONE AddFiles commit with every file reference (the sender puts a big body in S3).

If the commit is rejected, or the job dies before it, the files written are not in the state at all: they
are orphans under the table's data prefix, found and deleted by :func:`spark_client.gc.delete_orphan_files`
once older than any job can run.
"""

from __future__ import annotations

import base64
import io
import time
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import cast

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson
from pyspark.rdd import RDD
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from spark_client.columns import arrow_schema, check_columns, check_no_null_keys, field_type, sort_columns
from spark_client.committer import CommitOutcome, Committer
from spark_client.data_store import DataStore
from spark_client.errors import CommitRejectedError
from spark_client.file_io import WRITE_BATCH_ROWS, DataFileWriter
from spark_client.leaves import leaf_index_column
from statestore.engine import TransactionLogStateStore
from statestore.files import FileReference
from statestore.schema import Schema
from statestore.transactions import AddFiles

LEAF_COLUMN = "__statestore_leaf"


@dataclass(frozen=True)
class IngestResult:
    """What an ingest wrote and how its commit went."""

    files: tuple[FileReference, ...]
    rows: int
    seconds: float
    outcome: CommitOutcome | None  # None when there was nothing to commit

    @property
    def rows_per_second(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0


def ingest(
    df: DataFrame,
    store: TransactionLogStateStore,
    data: DataStore,
    committer: Committer,
    *,
    wait: bool = True,
    tasks: int | None = None,
) -> IngestResult:
    """Write ``df``'s rows to the table of ``store`` and commit them as one AddFiles transaction.

    ``tasks`` repartitions the rows by leaf into that many Spark tasks first (fewer, larger files); by
    default the input's partitioning is kept and each task writes one file per leaf it holds rows for.
    With ``wait`` (default) a rejected commit raises :class:`CommitRejectedError`; without it a queue
    committer returns at once with a pending outcome.

    Raises :class:`~spark_client.errors.SchemaMismatchError` (before writing anything) if ``df`` does not
    match the table schema or has null row keys.
    """
    started = time.monotonic()
    schema = store.schema
    check_columns(df, schema)
    check_no_null_keys(df, schema)

    state = store.state()
    leaf_column, leaf_ids = leaf_index_column(schema, state.partition_tree)
    target = arrow_schema(schema)
    transport = _transport_schema(schema)
    rows = df.withColumn(LEAF_COLUMN, leaf_column)
    if tasks is not None:
        rows = rows.repartition(tasks, LEAF_COLUMN)
    rows = rows.sortWithinPartitions(LEAF_COLUMN, *sort_columns(schema))
    rows = rows.select(*_transport_columns(schema), LEAF_COLUMN)

    table_id = store.table_id

    def write(lines: Iterable[str]) -> Iterator[tuple[str, str, int]]:
        return _write_leaf_files(lines, table_id, data, leaf_ids, transport, target)

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*toJSON will be changed.*")
        # One JSON string per row. pyspark's stubs already type toJSON as returning a DataFrame (it is to,
        # in a later release); in this one it returns an RDD of strings.
        json_lines = cast("RDD[str]", rows.toJSON())
    written = json_lines.mapPartitions(write).collect()
    references = tuple(FileReference(filename, leaf_id, count) for filename, leaf_id, count in written)
    total = sum(r.number_of_rows for r in references)
    outcome = commit_added_files(committer, table_id, references, wait=wait)
    return IngestResult(references, total, time.monotonic() - started, outcome)


def commit_added_files(
    committer: Committer,
    table_id: str,
    references: tuple[FileReference, ...],
    *,
    wait: bool = True,
    what: str = "ingest",
) -> CommitOutcome | None:
    """Commit ``references`` as ONE AddFiles; None when there is nothing to commit.

    Shared by :func:`ingest` and the data source's append. Raises :class:`CommitRejectedError` if the
    commit is rejected.
    """
    if not references:
        return None
    outcome = committer.commit(table_id, AddFiles(references), wait=wait)
    if outcome.rejected:
        raise CommitRejectedError(
            f"{what} of {len(references)} file(s) into table {table_id!r}",
            outcome.reason or "no reason given",
        )
    return outcome


def _transport_columns(schema: Schema) -> list[Column]:
    """Columns as they cross from the JVM to the tasks, one JSON line per row.

    Without pandas (which PySpark's Arrow UDFs insist on) the fast way out of the JVM is text: Spark
    writes each row as JSON and pyarrow parses many lines at once in C++, about twice as fast as
    unpickling ``Row`` objects one by one. Doubles and floats travel as Spark's own string form (JSON has
    no NaN or infinities; the conversion is exact), binary as base64.
    """
    columns = []
    for field in schema.all_fields:
        column = F.col(field.name)
        columns.append(
            column.cast("string").alias(field.name) if field.type in ("double", "float") else column
        )
    return columns


def _transport_schema(schema: Schema) -> pa.Schema:
    text = {"double", "float", "bytes"}
    fields = [
        pa.field(f.name, pa.string() if f.type in text else field_type(f.type)) for f in schema.all_fields
    ]
    return pa.schema([*fields, pa.field(LEAF_COLUMN, pa.int32())])


def _parse_lines(lines: list[str], transport: pa.Schema, target: pa.Schema) -> tuple[pa.Table, pa.Array]:
    """JSON lines to ``(rows with the table's Arrow schema, leaf index per row)``."""
    parsed = pajson.read_json(
        io.BytesIO("\n".join(lines).encode("utf-8")),
        read_options=pajson.ReadOptions(block_size=1 << 24),
        parse_options=pajson.ParseOptions(explicit_schema=transport, unexpected_field_behavior="error"),
    )
    columns = []
    for field in target:
        column = parsed.column(field.name)
        if pa.types.is_binary(field.type):
            column = pa.array(
                [None if v is None else base64.b64decode(v) for v in column.to_pylist()], type=pa.binary()
            )
        elif column.type != field.type:
            column = pc.cast(column, field.type)
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=target), parsed.column(LEAF_COLUMN).combine_chunks()


def _chunks(lines: Iterable[str], size: int) -> Iterator[list[str]]:
    chunk: list[str] = []
    for line in lines:
        chunk.append(line)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _write_leaf_files(
    lines: Iterable[str],
    table_id: str,
    data: DataStore,
    leaf_ids: list[str],
    transport: pa.Schema,
    target: pa.Schema,
) -> Iterator[tuple[str, str, int]]:
    """In a task: JSON rows sorted by leaf then keys in, one ``(filename, leaf_id, rows)`` per file out."""
    leaf_id = ""
    writer: DataFileWriter | None = None
    try:
        for chunk in _chunks(lines, WRITE_BATCH_ROWS):
            rows, leaves = _parse_lines(chunk, transport, target)
            runs = pc.run_end_encode(leaves)
            start = 0
            for end, leaf in zip(runs.run_ends.to_pylist(), runs.values.to_pylist(), strict=True):
                if writer is None or leaf_ids[leaf] != leaf_id:
                    if writer is not None:
                        writer.close()
                        yield writer.filename, leaf_id, writer.rows
                    leaf_id = leaf_ids[leaf]
                    writer = DataFileWriter(data, data.new_data_file(table_id, leaf_id), target)
                writer.write_table(rows.slice(start, end - start))
                start = end
        if writer is not None:
            writer.close()
            yield writer.filename, leaf_id, writer.rows
            writer = None
    finally:
        if writer is not None:  # the task failed part-way: release the file, which stays an orphan
            writer.close()
