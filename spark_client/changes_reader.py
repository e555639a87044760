"""Reading the rows added in a range of transactions through ``format("statestore-table")``::

    spark.read.format("statestore-table")
        .option("startingTransaction", 5).option("endingTransaction", 9)   # or startingTimestamp / ...
        .load("events")

Exactly the rows the ``AddFiles`` transactions of the range added (see
:func:`spark_client.changes.changes_between`), each with two more columns, as Delta's change data
feed has: ``_transaction_number`` (the transaction that added the row) and ``_commit_timestamp`` (its
time, UTC). Compactions and splits rewrite or move rows already in the table and add none: the result says
so in the metadata of its ``_transaction_number`` column, under ``statestore.range`` (the range's ends,
rows and files added, and per transaction type how many there were and the rows they added)::

    df.schema["_transaction_number"].metadata["statestore.range"]["note"]

The range is fixed when the read is planned (an open end is the latest transaction then): evaluating the
DataFrame again reads the same rows.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from pyspark.sql.types import LongType, StructField, StructType, TimestampType

from spark_client.arrow_reader import ArrowPartsReader, ReadTask
from spark_client.changes import AddedPart, Changes, changes_between, check_files_present, resolve_range
from spark_client.columns import spark_schema
from spark_client.pushdown import push
from spark_client.read_plan import ReadPart
from spark_client.source_options import SourceOptions
from statestore.engine.log_store import TableStateStore
from statestore.errors import TransactionNotRetainedError
from statestore.model.schema import Schema

TRANSACTION_COLUMN = "_transaction_number"
COMMIT_TIME_COLUMN = "_commit_timestamp"
RANGE_METADATA = "statestore.range"
_EXTRA = (
    pa.field(TRANSACTION_COLUMN, pa.int64(), nullable=False),
    pa.field(COMMIT_TIME_COLUMN, pa.timestamp("us", tz="UTC"), nullable=False),
)


def plan_changes(options: SourceOptions, store: TableStateStore) -> Changes:
    """The range the options name, planned from the table's log now."""
    start, end = resolve_range(
        store,
        options.starting_transaction,
        options.ending_transaction,
        options.starting_time,
        options.ending_time,
    )
    region = options.region_in(store.schema) if options.region is not None else None
    try:
        return changes_between(store, start, end, region)
    except TransactionNotRetainedError as e:
        raise TransactionNotRetainedError(
            f"{e}: the rows added from transaction {start} cannot all be found; start the range later, or "
            "read the whole table"
        ) from None


def changes_schema(schema: Schema, changes: Changes) -> StructType:
    """The table's columns, then ``_transaction_number`` (holding the range's summary) and
    ``_commit_timestamp``."""
    return StructType(
        [
            *spark_schema(schema).fields,
            StructField(TRANSACTION_COLUMN, LongType(), False, {RANGE_METADATA: changes.summary()}),
            StructField(COMMIT_TIME_COLUMN, TimestampType(), False),
        ]
    )


class ChangesReader(ArrowPartsReader):
    """Reads the parts of a planned range; each row gets the number and time of the transaction that added
    it. Predicates Spark pushes (4.1+) are evaluated on the table's columns while reading."""

    def __init__(
        self, options: SourceOptions, schema: Schema, requested: StructType, changes: Changes
    ) -> None:
        super().__init__(schema, options.data, requested, options.rows_per_task, _EXTRA)
        self.changes = changes

    def pushFilters(self, filters: list[Any]) -> list[Any]:  # noqa: N802 (Spark's name)
        self.predicates, rest = push(filters, self.table_schema)
        return rest

    def partitions(self) -> list[ReadTask]:
        check_files_present(
            self.data,
            self.changes.files,
            f"added by transactions {self.changes.start}..{self.changes.end}",
        )
        return self.tasks(list(self.changes.parts), None)

    def finish(self, batch: pa.RecordBatch, part: ReadPart) -> pa.RecordBatch:
        assert isinstance(part, AddedPart)
        rows = batch.num_rows
        extra = {
            TRANSACTION_COLUMN: pa.repeat(pa.scalar(part.transaction_number, _EXTRA[0].type), rows),
            COMMIT_TIME_COLUMN: pa.repeat(pa.scalar(part.commit_time * 1000, _EXTRA[1].type), rows),
        }
        columns = [
            extra[f.name] if f.name in extra else batch.column(f.name).cast(f.type) for f in self.output
        ]
        return pa.RecordBatch.from_arrays(columns, schema=self.output)
