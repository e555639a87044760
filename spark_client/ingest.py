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

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, Row

from spark_client.columns import arrow_schema, check_columns, check_no_null_keys, sort_columns
from spark_client.committer import CommitOutcome, Committer
from spark_client.data_store import DataStore
from spark_client.errors import CommitRejectedError
from spark_client.file_io import WRITE_BATCH_ROWS, DataFileWriter
from spark_client.leaves import leaf_index_column
from statestore.engine import TransactionLogStateStore
from statestore.files import FileReference
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
    rows = df.select(*target.names).withColumn(LEAF_COLUMN, leaf_column)
    if tasks is not None:
        rows = rows.repartition(tasks, LEAF_COLUMN)
    rows = rows.sortWithinPartitions(LEAF_COLUMN, *sort_columns(schema))

    table_id = store.table_id

    def write(partition: Iterable[Row]) -> Iterator[tuple[str, str, int]]:
        return _write_leaf_files(partition, table_id, data, leaf_ids, target)

    written = rows.rdd.mapPartitions(write).collect()
    references = tuple(FileReference(filename, leaf_id, count) for filename, leaf_id, count in written)
    total = sum(r.number_of_rows for r in references)
    outcome = None
    if references:
        outcome = committer.commit(table_id, AddFiles(references), wait=wait)
        if outcome.rejected:
            raise CommitRejectedError(
                f"ingest of {len(references)} file(s) into table {table_id!r}",
                outcome.reason or "no reason given",
            )
    return IngestResult(references, total, time.monotonic() - started, outcome)


def _write_leaf_files(
    rows: Iterable[Row], table_id: str, data: DataStore, leaf_ids: list[str], schema: pa.Schema
) -> Iterator[tuple[str, str, int]]:
    """In a task: rows sorted by leaf then keys in, one ``(filename, leaf_id, rows)`` per file written out."""
    width = len(schema)
    leaf_id = ""
    writer: DataFileWriter | None = None
    batch: list[tuple[Any, ...]] = []
    try:
        for row in rows:
            row_leaf_id = leaf_ids[row[width]]
            if writer is None or row_leaf_id != leaf_id:
                if writer is not None:
                    writer.write_rows(batch)
                    writer.close()
                    yield writer.filename, leaf_id, writer.rows
                batch = []
                leaf_id = row_leaf_id
                writer = DataFileWriter(data, data.new_data_file(table_id, leaf_id), schema)
            batch.append(row[:width])
            if len(batch) >= WRITE_BATCH_ROWS:
                writer.write_rows(batch)
                batch = []
        if writer is not None:
            writer.write_rows(batch)
            writer.close()
            yield writer.filename, leaf_id, writer.rows
            writer = None
    finally:
        if writer is not None:  # the task failed part-way: release the file, which stays an orphan
            writer.close()
