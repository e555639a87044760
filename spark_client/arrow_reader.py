"""The data source's read path in the tasks: planned parts of data files streamed with pyarrow and handed to
Spark as Arrow batches. Shared by the table reader, the reader of parts planned on the driver and the
reader of the rows added in a range of transactions."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from spark_client.columns import arrow_schema, check_read_schema, region_filter
from spark_client.data_store import DataStore
from spark_client.file_io import scan_batches
from spark_client.pushdown import Predicate, and_expressions, predicates_expression
from spark_client.read_plan import ReadPart, group_parts
from statestore.model.schema import Schema


@dataclass(frozen=True)
class ReadTask(InputPartition):
    """The parts one Spark task reads, and the transaction they were planned from (named if a file is
    missing: it was most likely garbage-collected after a compaction since)."""

    parts: tuple[ReadPart, ...]
    planned_at: int | None = None


class ArrowPartsReader(DataSourceReader):
    """Reads planned parts with pyarrow in the tasks and hands Spark Arrow batches: only the columns asked
    for, each part restricted to its region, the pushed predicates applied. Pickled to the tasks.

    ``extra`` names columns of the requested schema that are not the table's (a subclass fills them in
    :meth:`finish`)."""

    def __init__(
        self,
        schema: Schema,
        data: DataStore,
        requested: StructType,
        rows_per_task: int,
        extra: tuple[pa.Field, ...] = (),
    ) -> None:
        self.table_schema = schema
        self.data = data
        self.rows_per_task = rows_per_task
        extra_names = {f.name for f in extra}
        table_part = StructType([f for f in requested.fields if f.name not in extra_names])
        self.columns = check_read_schema(table_part, schema)
        # Spark checks the batches against the schema it asked for, nullability included.
        types = {f.name: f.type for f in arrow_schema(schema)} | {f.name: f.type for f in extra}
        self.output = pa.schema(
            [pa.field(f.name, types[f.name], nullable=f.nullable) for f in requested.fields]
        )
        self.predicates: tuple[Predicate, ...] = ()

    def tasks(self, parts: list[ReadPart], planned_at: int | None) -> list[ReadTask]:
        return [ReadTask(tuple(group), planned_at) for group in group_parts(parts, self.rows_per_task)]

    def read(self, partition: InputPartition | None) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, ReadTask):
            return  # Spark reads a lone None partition when the plan has no parts
        pushed = predicates_expression(self.predicates, self.table_schema)
        for part in partition.parts:
            in_region = region_filter(self.table_schema, part.region) if part.region is not None else None
            for batch in scan_batches(
                self.data,
                part.filename,
                self.columns,
                and_expressions(in_region, pushed),
                planned_at=partition.planned_at,
            ):
                yield self.finish(batch, part)

    def finish(self, batch: pa.RecordBatch, part: ReadPart) -> pa.RecordBatch:
        """A batch of the table's columns read from ``part`` as Spark asked for it."""
        return batch.cast(self.output)
