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
import uuid
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
from spark_client.committer import CommitReport, JobCommitter
from spark_client.data_store import DataStore
from spark_client.errors import CommitPendingError, CommitRejectedError
from spark_client.file_io import WRITE_BATCH_ROWS, DataFileWriter
from spark_client.leaves import leaf_index_column
from spark_client.progress import context_of, report, spark_stage
from statestore.engine.log_store import TableStateStore
from statestore.model.files import FileReference
from statestore.model.schema import Schema
from statestore.transactions import AddFiles

LEAF_COLUMN = "__statestore_leaf"


# Request ids of idempotent ingests are name-based UUIDs in this namespace (fixed: ids must not change).
_INGEST_NAMESPACE = uuid.UUID("6f0c5cf4-5b8e-4c39-9b0e-3f2f8d1e7a10")


@dataclass(frozen=True)
class IngestResult:
    """What an ingest wrote and how its commit went.

    ``committed`` is the one thing to check: with ``wait`` an ingest either returns committed or raises, but
    without it the outcome may be pending (``outcome.pending``, with its request id). ``already_committed``:
    an earlier run with the same idempotency key was committed, so this run wrote nothing (``files`` is
    empty, ``outcome`` is that run's).
    """

    files: tuple[FileReference, ...]
    rows: int
    seconds: float
    outcome: CommitReport | None  # None when there was nothing to commit
    already_committed: bool = False

    @property
    def committed(self) -> bool:
        return self.outcome is not None and self.outcome.committed

    @property
    def rows_per_second(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0


def ingest_request_id(table_id: str, job_name: str, batch_id: str) -> str:
    """The request id of batch ``batch_id`` of job ``job_name`` into ``table_id``: the same every run."""
    for what, value in (("job name", job_name), ("batch id", batch_id)):
        if not isinstance(value, str) or not value or len(value) > 256:
            raise ValueError(
                f"an idempotency key's {what} must be a string of 1-256 characters, got {value!r}"
            )
    return f"ingest-{uuid.uuid5(_INGEST_NAMESPACE, chr(0).join((table_id, job_name, batch_id)))}"


def ingest(
    df: DataFrame,
    store: TableStateStore,
    data: DataStore,
    committer: JobCommitter,
    *,
    wait: bool = True,
    tasks: int | None = None,
    idempotency_key: tuple[str, str] | None = None,
) -> IngestResult:
    """Write ``df``'s rows to the table of ``store`` and commit them as one AddFiles transaction.

    ``tasks`` repartitions the rows by leaf into that many Spark tasks first (fewer, larger files); by
    default the input's partitioning is kept and each task writes one file per leaf it holds rows for.
    With ``wait`` (default) the ingest returns only once committed: a rejected commit raises
    :class:`CommitRejectedError` and one whose outcome is not known in time raises
    :class:`CommitPendingError` (with the request id to look up). Without ``wait`` a queue committer
    returns at once with a pending outcome (``result.committed`` is False).

    ``idempotency_key=(job_name, batch_id)`` makes a rerun safe (like Delta's txnAppId/txnVersion): the
    request id is derived from it, so a retried driver's commit is recognised as the same request and not
    applied twice, and a rerun after the first one committed writes nothing at all. The outcome is recorded
    by request id with the commit (queued or synchronous), for as long as the status table keeps it.
    Every file is checked to be a readable Parquet file of the table's schema and row count before the
    commit (:class:`InvalidDataFileError`).

    Raises :class:`~spark_client.errors.SchemaMismatchError` (before writing anything) if ``df`` does not
    match the table schema or has null row keys.
    """
    started = time.monotonic()
    schema = store.schema
    table_id = store.table_id
    request_id = None
    if idempotency_key is not None:
        request_id = ingest_request_id(table_id, *idempotency_key)
        previous = committer.previous_outcome(table_id, request_id)
        if previous is not None and previous.committed:
            return IngestResult((), 0, time.monotonic() - started, previous, already_committed=True)
        if previous is not None:
            raise CommitRejectedError(
                f"an earlier ingest with idempotency key {idempotency_key!r} into table {table_id!r}",
                f"{previous.reason}; a rerun with this key cannot change that: use a new batch id",
            )
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

    def write(lines: Iterable[str]) -> Iterator[tuple[str, str, int]]:
        return _write_leaf_files(lines, table_id, data, leaf_ids, transport, target)

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*toJSON will be changed.*")
        # One JSON string per row. pyspark's stubs already type toJSON as returning a DataFrame (it is to,
        # in a later release); in this one it returns an RDD of strings.
        json_lines = cast("RDD[str]", rows.toJSON())
    what = f"ingest into table {table_id!r}"
    report(what, "writing files")
    with spark_stage(what, context_of(df.sparkSession)):
        written = json_lines.mapPartitions(write).collect()
    references = tuple(FileReference(filename, leaf_id, count) for filename, leaf_id, count in written)
    total = sum(r.number_of_rows for r in references)
    report(
        what, "wrote %d file(s), %s rows in %.1f s", len(references), f"{total:,}", time.monotonic() - started
    )
    outcome = None
    if references:
        committing = time.monotonic()
        outcome = commit_files(committer, table_id, references, wait=wait, request_id=request_id)
        report(what, "%s in %.1f s", _outcome_text(outcome), time.monotonic() - committing)
    return IngestResult(references, total, time.monotonic() - started, outcome)


def _outcome_text(outcome: CommitReport) -> str:
    if outcome.committed:
        return f"committed at transaction {outcome.transaction_number}"
    return f"sent as request {outcome.request_id}, no outcome yet" if outcome.pending else "rejected"


def commit_files(
    committer: JobCommitter,
    table_id: str,
    references: tuple[FileReference, ...],
    *,
    wait: bool = True,
    request_id: str | None = None,
    what: str = "ingest",
) -> CommitReport:
    """Commit ``references`` as ONE AddFiles; raise unless committed (or pending because not ``wait``).

    Shared by :func:`ingest` and the data source's append. A rejection raises :class:`CommitRejectedError`
    (nothing was committed); with ``wait``, no outcome in time raises :class:`CommitPendingError` (the
    commit may still land, so the files must stay).
    """
    what = f"{what} of {len(references)} file(s) into table {table_id!r}"
    outcome = committer.commit(table_id, AddFiles(references), wait=wait, request_id=request_id)
    if outcome.rejected:
        raise CommitRejectedError(what, outcome.reason or "no reason given")
    if wait and outcome.pending:
        raise CommitPendingError(what, outcome.request_id or "?", outcome.reason or "no answer in time")
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
