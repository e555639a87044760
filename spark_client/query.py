"""Query: the rows of a region, read only from the files whose references overlap it (the functional API;
the data source, ``spark.read.format("statestore-table")``, is the other way in).

The planning is :mod:`spark_client.read_plan`'s; the rows are read by the data source's Arrow path
(:func:`spark_client.datasource.read_planned`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from spark_client.columns import spark_schema
from spark_client.data_store import DataStore
from spark_client.datasource import can_read_planned, read_planned
from spark_client.file_io import read_file, table_rows
from spark_client.read_plan import MAX_READ_TASKS, ReadPlan, plan_query, plan_read, region_of
from statestore.engine.log_store import TableStateStore
from statestore.model.partitions import Region
from statestore.model.schema import Key, Schema

__all__ = ["ReadPlan", "plan_query", "query", "read_parts", "region_of"]


def read_parts(
    spark: SparkSession,
    schema: Schema,
    data: DataStore,
    parts: list[tuple[str, Region | None]],
    *,
    planned_at: int | None = None,
) -> DataFrame:
    """A DataFrame of the rows of ``(filename, region)`` parts, read with pyarrow in Spark tasks.

    Rows cross into the JVM as Python tuples: slower than :func:`read_planned`, which needs row counts
    and a data store without explicit credentials. The parts are read when the DataFrame is evaluated,
    however much later; a file garbage-collected since fails the read with a :class:`DataFileMissingError`
    whose message names ``planned_at`` (the transaction the parts come from), says why and what to do.
    """
    struct = spark_schema(schema)
    if not parts:
        return spark.createDataFrame([], struct)

    def read(items: Iterable[tuple[str, Region | None]]) -> Iterator[tuple[Any, ...]]:
        for filename, region in items:
            yield from table_rows(read_file(data, filename, schema, region, planned_at=planned_at))

    rdd = spark.sparkContext.parallelize(parts, min(len(parts), MAX_READ_TASKS)).mapPartitions(read)
    return spark.createDataFrame(rdd, struct, verifySchema=False)


def query(
    spark: SparkSession,
    store: TableStateStore,
    data: DataStore,
    region: Region | Mapping[str, tuple[Key | None, Key | None]] | None = None,
    *,
    as_of: int | None = None,
) -> DataFrame:
    """The rows of the table whose row key lies in ``region`` (the whole table if None).

    ``region`` is a :class:`Region` or ``{row_key: (min, max)}``. ``as_of`` queries the table as it was
    at that transaction (time travel; its files must not have been garbage-collected yet).

    The DataFrame keeps the file list of the state it was planned on. Evaluated later than the GC delay
    (the instance's ``gc_delay_minutes``, 12 hours by default) after one of its files was compacted away,
    it fails with :class:`DataFileMissingError`: run the query again.
    """
    schema = store.schema
    if region is None:
        region = Region.whole(schema)
    elif not isinstance(region, Region):
        region = region_of(schema, region)
    state = store.state() if as_of is None else store.load(as_of)
    parts = plan_read(state, [region])
    planned_at = state.transaction_number
    if not can_read_planned(data):
        return read_parts(
            spark, schema, data, [(part.filename, part.region) for part in parts], planned_at=planned_at
        )
    return read_planned(spark, schema, data, parts, planned_at=planned_at)
