"""``read_table``: a read planned from the state runs on Spark's own Parquet reader where Spark reaches the
files, and gives the rows the data source's Python path gives, for every shape of plan: whole files,
regions cutting leaves, a file referenced from two partitions after a split, key types, time travel."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from spark_client.committer import SyncCommitter
from spark_client.compaction import split_references_down
from spark_client.data_store import DataStore
from spark_client.errors import DataSourceOptionError
from spark_client.log_times import format_time
from spark_client.splitting import split_partition_at
from spark_client.table_read import read_table, spark_reaches
from statestore.model.schema import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, Schema
from tests.spark.conftest import KEY_SCHEMA, MakeSourceTable, SourceTable, dataframe, explained, key_rows

pytestmark = [pytest.mark.spark, pytest.mark.e2e]

KEYS_SCHEMA = Schema.of(
    {"name": "string", "n": "int", "raw": "bytes"}, sort_keys={"seq": "long"}, values={"v": "double"}
)
KEYS_ROWS: list[tuple[Any, ...]] = [
    (name, n, raw, seq, float(i))
    for i, (name, n, raw, seq) in enumerate(
        (name, n, raw, seq)
        for name in ("", "a", "m", "zz", "ü")
        for n in (INT32_MIN, -1, 0, 5, INT32_MAX)
        for raw, seq in ((b"", INT64_MIN), (b"\x00", 0), (b"\xff\xff", INT64_MAX), (b"k", None))
    )
]


def both(spark: SparkSession, table: SourceTable, **read: Any) -> tuple[DataFrame, DataFrame]:
    """The same read by Spark's Parquet reader and by the Python path, each checked to be what ran."""
    options = {k: v for k, v in table.options.items() if k != "table"}
    parquet = read_table(spark, table.name, reader="spark", options=options, **read)
    python = read_table(spark, table.name, reader="python", options=options, **read)
    assert "Scan parquet" in explained(parquet) or parquet.rdd.isEmpty()
    assert "BatchScan statestore-table-parts" in explained(python)
    return parquet, python


def rows_of(df: DataFrame) -> list[tuple[Any, ...]]:
    return sorted(
        (tuple(bytes(v) if isinstance(v, bytearray) else v for v in row) for row in df.collect()), key=repr
    )


def test_parquets_reader_gives_the_python_paths_rows_whole_and_by_region_across_a_split(
    spark: SparkSession, make_source_table: MakeSourceTable
) -> None:
    table = make_source_table(KEY_SCHEMA, [5_000])
    first, second = key_rows(2_000, seed=700), key_rows(2_000, seed=701)
    table.append(dataframe(spark, KEY_SCHEMA, first))
    committer = SyncCommitter(table.client.state_store)
    low = table.state().partition_tree.leaf_for_key([0])
    split_partition_at(table.store(), committer, low.id, dimension=0, split_point=2_000)
    split_references_down(table.store(), committer)  # the low leaf's file now has two references
    table.append(dataframe(spark, KEY_SCHEMA, second))
    everything = first + second

    for region, expected in [
        (None, everything),
        ({"key": (1_000, 3_000)}, [r for r in everything if 1_000 <= r[0] < 3_000]),  # across the split
        ({"key": (None, 2_000)}, [r for r in everything if r[0] < 2_000]),  # exactly one new leaf
        ({"key": (4_321, None)}, [r for r in everything if r[0] >= 4_321]),
        ({"key": (20_000, None)}, []),
    ]:
        parquet, python = both(spark, table, region=region)
        assert rows_of(parquet) == rows_of(python) == sorted(expected, key=repr), region


def test_every_key_type_reads_the_same_by_both_paths_within_regions_on_each_key(
    spark: SparkSession, make_source_table: MakeSourceTable
) -> None:
    table = make_source_table(KEYS_SCHEMA, ["b", "n"])
    table.append(dataframe(spark, KEYS_SCHEMA, KEYS_ROWS))

    for region in [
        None,
        {"name": ("a", "zz")},
        {"n": (-1, 6)},
        {"raw": (b"\x00", b"\xff\xff")},
        {"name": ("", "m"), "n": (INT32_MIN, 0), "raw": (b"\x00", None)},
    ]:
        parquet, python = both(spark, table, region=region)
        assert rows_of(parquet) == rows_of(python), region
        if region is None:
            assert len(rows_of(parquet)) == len(KEYS_ROWS)


def test_time_travel_reads_the_same_by_both_paths(
    spark: SparkSession, make_source_table: MakeSourceTable
) -> None:
    table = make_source_table(KEY_SCHEMA, [5_000])
    first, second = key_rows(500, seed=702), key_rows(500, seed=703)
    table.append(dataframe(spark, KEY_SCHEMA, first))
    time_of_first = next(iter(table.client.log.read(table.table_id, 2, 2))).update_time
    table.append(dataframe(spark, KEY_SCHEMA, second))

    for read in (
        {"as_of": 2},
        {"timestamp_as_of": format_time(time_of_first)},
        {"timestamp_as_of": time_of_first},
    ):
        parquet, python = both(spark, table, **read)
        assert rows_of(parquet) == rows_of(python) == sorted(first, key=repr), read
    assert rows_of(both(spark, table)[0]) == sorted(first + second, key=repr)
    assert rows_of(table.read(spark, region=json.dumps({"key": [0, None]}))) == rows_of(
        read_table(spark, table.name, options={k: v for k, v in table.options.items() if k != "table"})
    )


def test_spark_reaches_local_files_but_not_a_bucket_behind_an_emulator_or_without_an_s3_filesystem(
    spark: SparkSession, make_source_table: MakeSourceTable
) -> None:
    assert spark_reaches(spark, DataStore.local("/tmp"))
    assert not spark_reaches(spark, DataStore.s3("bucket", endpoint_url="http://127.0.0.1:4566"))
    assert not spark_reaches(spark, DataStore.s3("bucket"))  # open-source Spark has no s3:// filesystem
    table = make_source_table(KEY_SCHEMA)
    options = {k: v for k, v in table.options.items() if k not in ("table", "data")}  # the bucket, on moto
    with pytest.raises(DataSourceOptionError, match="Spark's Parquet reader cannot reach s3://"):
        read_table(spark, table.name, reader="spark", options=options)
    assert read_table(spark, table.name, options=options).count() == 0  # auto: the Python path
