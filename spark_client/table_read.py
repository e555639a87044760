"""Reading a table at Parquet's speed: a read planned from the state, run by Spark's own Parquet reader
where Spark can reach the data files::

    df = spark_client.read_table(spark, "events", region={"key": (1_000, 2_000)})

The plan is the data source's (:func:`spark_client.read_plan.plan_read`: the references whose partitions
overlap the region, each restricted to its partition's region unless its file holds only that
partition's rows), made on the driver. Where Spark's file sources can open the files — a local directory,
or ``s3://`` on a cluster whose Hadoop has an S3 filesystem (EMR's EMRFS) and no emulator endpoint —
the rows are read by ``spark.read.parquet``: one scan per distinct region to read within (usually one:
every file whole), each with the region as a filter Spark pushes into the Parquet reader, unioned. The
rows never pass through a Python worker, which is what a Python data source costs (it streams Arrow
batches through one).

Elsewhere (``s3://`` through a local emulator, no S3 filesystem in Spark, Spark Connect) the same plan is
read by the data source's Python path (:func:`spark_client.datasource.read_planned`). The two give the same
rows. Differences a user may notice on the Parquet path: every column is nullable in the schema (Spark's
file sources make them so), and a file garbage-collected since the plan fails with Spark's own
``FileNotFoundException`` (run the read again).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from functools import reduce
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_client.columns import spark_schema
from spark_client.data_store import DataStore
from spark_client.datasource import can_read_planned, read_planned
from spark_client.errors import DataSourceOptionError
from spark_client.log_times import LogTimes, parse_timestamp
from spark_client.read_plan import ReadPart, plan_read, region_of
from spark_client.source_options import parse_connection, parse_data
from spark_client.view_plan import DEFAULT_VIEW_MAX_LEAVES, plan_latest, table_view
from statestore.model.partitions import Region
from statestore.model.schema import Key, Schema

READERS = ("auto", "spark", "python")
# Up to this many distinct regions to read within, one Parquet scan each; past it, the Python path (a plan
# of that shape is a table in the middle of many splits, which its next compaction straightens).
MAX_SCANS = 32


def read_table(
    spark: SparkSession,
    table: str,
    *,
    region: Region | Mapping[str, tuple[Key | None, Key | None]] | None = None,
    as_of: int | None = None,
    timestamp_as_of: str | int | datetime.datetime | None = None,
    reader: str = "auto",
    options: Mapping[str, str] | None = None,
    view_max_leaves: int = DEFAULT_VIEW_MAX_LEAVES,
) -> DataFrame:
    """The rows of ``table`` whose row keys lie in ``region`` (``{key: (min, max)}``, min inclusive, max
    exclusive, None unbounded; the whole table if None), as of transaction ``as_of`` or time
    ``timestamp_as_of`` (ISO 8601 with a zone, epoch ms, or an aware datetime) if given.

    ``reader``: ``"auto"`` (Spark's Parquet reader where it can reach the files, else the Python path),
    ``"spark"`` (raise :class:`DataSourceOptionError` if it cannot) or ``"python"``. ``options`` are the
    data source's connection options and ``data`` (by default the environment's, as ``statestore local``
    prints them). The file list is fixed now: evaluate the DataFrame within the GC delay.

    A read of the latest state is planned through the table's queryable view when ``region`` overlaps at
    most ``view_max_leaves`` leaves (0: never), else from a full load (:mod:`spark_client.view_plan`);
    the rows are the same either way.
    """
    if reader not in READERS:
        raise DataSourceOptionError(f"reader is one of {list(READERS)}, got {reader!r}")
    if as_of is not None and timestamp_as_of is not None:
        raise DataSourceOptionError("give as_of or timestamp_as_of, not both")
    given = dict(options or {})
    connection = parse_connection(given)
    data = parse_data(given, connection)
    if view_max_leaves < 0:
        raise DataSourceOptionError(f"view_max_leaves is a number of leaves >= 0, got {view_max_leaves}")
    client = connection.client()
    info = client.get_table(table)
    store = client.state_store(info.table_id)
    schema = store.schema
    if timestamp_as_of is not None:
        as_of = LogTimes(store.log, store.table_id).latest_at(_moment(timestamp_as_of), "timestamp_as_of")
    if region is None:
        region = Region.whole(schema)
    elif not isinstance(region, Region):
        region = region_of(schema, region)
    if as_of is None:
        view = table_view(info, client.log, connection.view_store())
        planned = plan_latest(store, view, [region], view_max_leaves)
        parts, planned_at = planned.parts, planned.transaction_number
    else:
        state = store.load(as_of)
        parts, planned_at = plan_read(state, [region]), state.transaction_number
    regions = {part.region for part in parts}
    use_spark = reader == "spark" or (
        reader == "auto" and len(regions) <= MAX_SCANS and spark_reaches(spark, data)
    )
    if reader == "spark" and not spark_reaches(spark, data):
        raise DataSourceOptionError(
            f"Spark's Parquet reader cannot reach {data.uri('')}: use reader='auto' or 'python'"
        )
    if use_spark:
        return read_parquet_parts(spark, schema, data, parts)
    if not can_read_planned(data):  # never from options: credentials come from the environment there
        raise DataSourceOptionError("read_table reads data stores without explicit credentials only")
    return read_planned(spark, schema, data, parts, planned_at=planned_at)


def spark_reaches(spark: SparkSession, data: DataStore) -> bool:
    """Whether Spark's file sources can open ``data``'s files: a local directory, or a bucket on AWS itself
    (no emulator endpoint) when Hadoop has an ``s3`` filesystem (EMR's EMRFS)."""
    if data.kind == "local":
        return True
    if data.endpoint_override is not None:
        return False
    try:
        jvm: Any = spark._jvm  # absent on Spark Connect
        hadoop = spark._jsc.hadoopConfiguration()
        jvm.org.apache.hadoop.fs.FileSystem.getFileSystemClass("s3", hadoop)
    except Exception:  # no such filesystem (UnsupportedFileSystemException), or no JVM to ask
        return False
    return True


def read_parquet_parts(
    spark: SparkSession, schema: Schema, data: DataStore, parts: list[ReadPart]
) -> DataFrame:
    """The rows of ``parts`` read by ``spark.read.parquet``: one scan per distinct region, unioned."""
    struct = spark_schema(schema)
    by_region: dict[Region | None, dict[str, None]] = {}
    for part in parts:
        by_region.setdefault(part.region, {})[file_uri(data, part.filename)] = None
    if not by_region:
        return spark.createDataFrame([], struct)
    scans = []
    for region, files in by_region.items():
        scan = spark.read.schema(struct).parquet(*files)
        scans.append(scan if region is None else scan.where(region_condition(schema, region)))
    return reduce(DataFrame.unionByName, scans)


def file_uri(data: DataStore, filename: str) -> str:
    """Where Spark's file sources find ``filename``."""
    return f"s3://{data.path(filename)}" if data.kind == "s3" else f"file://{data.path(filename)}"


def region_condition(schema: Schema, region: Region) -> Column:
    """A Spark condition holding for the rows whose row keys lie in ``region``."""
    conditions = []
    for field, key_range in zip(schema.row_keys, region.ranges, strict=True):
        column = F.col(field.name)
        if key_range.min != field.key_type.minimum:
            conditions.append(column >= F.lit(key_range.min))
        if key_range.max is not None:
            conditions.append(column < F.lit(key_range.max))
    return reduce(lambda a, b: a & b, conditions, F.lit(True))


def _moment(value: Any) -> int:
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            raise DataSourceOptionError(f"timestamp_as_of {value!r} has no time zone: give an aware datetime")
        return parse_timestamp(value.isoformat(), "timestamp_as_of")
    if isinstance(value, int):
        return value
    try:
        return parse_timestamp(str(value), "timestamp_as_of")
    except ValueError as e:
        raise DataSourceOptionError(str(e)) from None
