"""``format("statestore-table")``: rows written come back unchanged, an append commits ONE AddFiles, bad
writes leave nothing behind, and reads plan from the state (regions, time travel, columns).

The tables' state is on a moto server (the source's planning runs in Python workers that find the table
from the options only) and their data files in a local directory.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections import Counter
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from spark_client.columns import spark_schema
from spark_client.committer import SyncCommitter
from spark_client.compaction import split_references_down
from spark_client.datasource import FORMAT, StatestoreDataSource, WrittenFiles
from spark_client.errors import CommitRejectedError
from spark_client.splitting import split_partition_at
from statestore.codec.transaction_json import decode_entry
from statestore.model.schema import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, Schema
from statestore.transactions import AddFiles
from tests.spark.conftest import (
    KEY_SCHEMA,
    MakeSourceTable,
    SourceTable,
    as_tuples,
    dataframe,
    explained,
    key_rows,
)

pytestmark = [pytest.mark.spark, pytest.mark.e2e]

SPLITS = [2_500, 5_000, 7_500]

VALUES_SCHEMA = Schema.of(
    {"id": "long"},
    sort_keys={"tag": "bytes"},
    values={
        "i": "int",
        "l": "long",
        "s": "string",
        "b": "bytes",
        "d": "double",
        "f": "float",
        "flag": "boolean",
    },
)
VALUES_ROWS: list[tuple[Any, ...]] = [
    (1, b"", INT32_MIN, INT64_MIN, "", b"", -0.0, -1.5, False),
    (2, b"\x00\xff", INT32_MAX, INT64_MAX, "héllo ✓ 𝄞", bytes(range(256)), float("inf"), 3.25, True),
    (3, b"a", 0, 0, "x" * 1_000, b"\x00", float("-inf"), float("inf"), None),
    (4, b"b", None, None, None, None, float("nan"), float("nan"), True),
    (5, None, 7, -7, "tab\tnewline\n", b"bin", 1e308, 0.125, False),
    (-6, b"z", -1, 2**40, "last", b"\x7f", 5e-324, None, None),
]
KEYS_SCHEMA = Schema.of(
    {"name": "string", "n": "int", "raw": "bytes"}, sort_keys={"seq": "long"}, values={"v": "double"}
)
KEYS_ROWS: list[tuple[Any, ...]] = [
    ("", INT32_MIN, b"", INT64_MIN, 0.5),
    ("a", -1, b"\x00", 0, None),
    ("m", 0, b"\xff\xff", INT64_MAX, 2.0),
    ("zz", INT32_MAX, b"k", None, -3.0),
    ("ü", 5, b"\x01", 1, 4.0),
]


def comparable(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Rows with NaN made equal to itself and bytes normalised, sorted."""

    def value(v: Any) -> Any:
        if isinstance(v, float) and math.isnan(v):
            return "NaN"
        return bytes(v) if isinstance(v, bytearray) else v

    return sorted((tuple(value(v) for v in row) for row in rows), key=repr)


@pytest.mark.parametrize(
    ("schema", "rows", "splits"),
    [(VALUES_SCHEMA, VALUES_ROWS, [0, 3]), (KEYS_SCHEMA, KEYS_ROWS, ["b", "n"])],
    ids=["every-value-type", "every-key-type"],
)
def test_every_value_type_round_trips_through_an_append_and_a_read(
    spark: SparkSession,
    make_source_table: MakeSourceTable,
    schema: Schema,
    rows: list[tuple[Any, ...]],
    splits: list[Any],
) -> None:
    table = make_source_table(schema, splits)

    table.append(dataframe(spark, schema, rows))
    back = table.read(spark)

    assert back.schema == spark_schema(schema)
    assert comparable([tuple(r) for r in back.collect()]) == comparable(rows)


def test_an_append_commits_one_add_files_of_sorted_files_one_per_leaf_per_task(
    spark: SparkSession, make_source_table: MakeSourceTable
) -> None:
    table = make_source_table(KEY_SCHEMA, SPLITS)
    rows = key_rows(4_000, seed=50)

    table.append(dataframe(spark, KEY_SCHEMA, rows, partitions=3))

    assert table.log_length() == 2  # the partitions, then ONE AddFiles
    entry = next(iter(table.client.log.read(table.table_id, 2, 2)))
    added = decode_entry(entry)
    assert isinstance(added, AddFiles)
    on_disk = {os.path.relpath(path, table.data_dir) for path in table.data_files()}
    assert {ref.filename for ref in added.references} == on_disk
    state = table.state()
    expected = Counter(state.partition_tree.leaf_for_key([key]).id for key, _, _ in rows)
    actual: Counter[str] = Counter()
    for ref in added.references:
        content = pq.read_table(table.data_dir / ref.filename)
        assert content.num_rows == ref.number_of_rows and not ref.count_approximate
        keys = list(zip(content.column("key").to_pylist(), content.column("ts").to_pylist(), strict=True))
        assert keys == sorted(keys)
        region = state.partition(ref.partition_id).region
        assert all(region.contains([key]) for key, _ in keys)
        actual[ref.partition_id] += ref.number_of_rows
    assert actual == expected
    assert max(Counter(ref.partition_id for ref in added.references).values()) <= 3  # three tasks
    assert as_tuples(table.read(spark)) == sorted(rows)


def test_appends_add_to_the_rows_already_there(
    spark: SparkSession, make_source_table: MakeSourceTable
) -> None:
    table = make_source_table(KEY_SCHEMA, SPLITS)
    first, second = key_rows(1_000, seed=51), key_rows(1_000, seed=52)

    table.append(dataframe(spark, KEY_SCHEMA, first))
    table.append(dataframe(spark, KEY_SCHEMA, second).select("value", "key", "ts"))  # any column order

    assert table.log_length() == 3
    assert as_tuples(table.read(spark)) == sorted(first + second)


def test_an_empty_append_commits_nothing(spark: SparkSession, make_source_table: MakeSourceTable) -> None:
    table = make_source_table(KEY_SCHEMA, SPLITS)

    table.append(spark.createDataFrame([], spark_schema(KEY_SCHEMA)).repartition(2))

    assert table.data_files() == [] and table.log_length() == 1


def test_overwrite_is_refused_before_anything_is_written(
    spark: SparkSession, make_source_table: MakeSourceTable
) -> None:
    table = make_source_table(KEY_SCHEMA, SPLITS)
    df = dataframe(spark, KEY_SCHEMA, key_rows(100, seed=53))

    with pytest.raises(Exception, match="only appends: use mode\\('append'\\)"):
        df.write.format(FORMAT).options(**table.options).mode("overwrite").save()

    assert table.data_files() == [] and table.log_length() == 1


def test_a_dataframe_not_matching_the_schema_is_refused_before_any_file_is_written(
    spark: SparkSession, make_source_table: MakeSourceTable
) -> None:
    table = make_source_table(KEY_SCHEMA, SPLITS)
    df = spark.createDataFrame([(1, 2, 3)], "key long, ts long, value int")

    with pytest.raises(Exception, match="column 'value' is int but the schema says string"):
        table.append(df)

    assert table.data_files() == [] and table.log_length() == 1


def test_a_null_row_key_fails_the_append_leaving_no_file_and_no_commit(
    spark: SparkSession, make_source_table: MakeSourceTable
) -> None:
    table = make_source_table(KEY_SCHEMA, SPLITS)
    df = spark.createDataFrame([(1, 1, "a"), (None, 2, "b")], "key long, ts long, value string").coalesce(1)

    with pytest.raises(Exception, match="row keys must not be null: 1 row\\(s\\) with a null 'key'"):
        table.append(df)

    assert table.data_files() == [] and table.log_length() == 1


def test_an_unknown_option_is_named(spark: SparkSession, make_source_table: MakeSourceTable) -> None:
    table = make_source_table()

    with pytest.raises(Exception, match="unknown option\\(s\\) \\['tabel'\\]"):
        table.read(spark, tabel="x").count()
    with pytest.raises(Exception, match="option\\(s\\) \\['region'\\] do not apply to writes"):
        table.append(dataframe(spark, KEY_SCHEMA, key_rows(10, seed=54)), region="{}")


# --- commit and abort, called as Spark calls them -------------------------------------------------


def written_by_one_task(table: SourceTable, rows: list[tuple[Any, ...]]) -> tuple[Any, WrittenFiles]:
    """A writer planned for ``table`` and what one task of it wrote (run here, as Spark runs it)."""
    writer = StatestoreDataSource({**table.options, "committer": "sync"}).writer(
        spark_schema(KEY_SCHEMA), False
    )
    batch = pa.RecordBatch.from_pylist(
        [dict(zip(("key", "ts", "value"), row, strict=True)) for row in rows],
        schema=pa.schema([("key", pa.int64()), ("ts", pa.int64()), ("value", pa.string())]),
    )
    return writer, writer.write(iter([batch]))


def test_abort_after_a_failed_task_deletes_the_files_of_the_tasks_that_finished(
    make_source_table: MakeSourceTable,
) -> None:
    table = make_source_table(KEY_SCHEMA, SPLITS)
    writer, finished = written_by_one_task(table, key_rows(500, seed=55))
    assert len(table.data_files()) == 4

    writer.abort([finished, None])  # None: the task that failed

    assert table.data_files() == [] and table.log_length() == 1


def test_abort_after_a_failed_commit_keeps_the_files_as_the_commit_may_still_land(
    make_source_table: MakeSourceTable,
) -> None:
    table = make_source_table(KEY_SCHEMA, SPLITS)
    writer, finished = written_by_one_task(table, key_rows(500, seed=56))

    writer.abort([finished])  # every task finished, so commit() is what failed

    assert len(table.data_files()) == 4


def test_a_rejected_commit_deletes_the_files_it_named(make_source_table: MakeSourceTable) -> None:
    table = make_source_table(KEY_SCHEMA, SPLITS)
    writer, finished = written_by_one_task(table, key_rows(500, seed=57))
    filename = finished.files[0][0]
    stray = WrittenFiles(((filename.replace(".parquet", "-x.parquet"), "no-such-partition", 1),))

    with pytest.raises(CommitRejectedError, match="append of 5 file\\(s\\).*no-such-partition"):
        writer.commit([finished, stray])

    assert table.data_files() == [] and table.log_length() == 1


# --- reads ----------------------------------------------------------------------------------------


def keep_only_partitions_overlapping(table: SourceTable, low: int, high: int) -> None:
    """Delete the data files of every leaf outside ``[low, high)``: a read that opens one of them fails."""
    state = table.state()
    for ref in state.file_references():
        key_range = state.partition(ref.partition_id).region.ranges[0]
        if not key_range.overlaps(type(key_range)(low, high)):
            os.remove(table.data_dir / ref.filename)


def test_the_region_option_reads_only_the_files_of_overlapping_partitions(
    spark: SparkSession, make_source_table: MakeSourceTable
) -> None:
    table = make_source_table(KEY_SCHEMA, SPLITS)
    rows = key_rows(3_000, seed=58)
    table.append(dataframe(spark, KEY_SCHEMA, rows))
    keep_only_partitions_overlapping(table, 3_000, 4_000)

    region = table.read(spark, region=json.dumps({"key": [3_000, 4_000]}))

    assert as_tuples(region) == sorted(r for r in rows if 3_000 <= r[0] < 4_000)
    with pytest.raises(Exception, match="is missing"):
        table.read(spark).count()


def test_a_bad_region_option_is_explained(spark: SparkSession, make_source_table: MakeSourceTable) -> None:
    table = make_source_table()

    with pytest.raises(Exception, match="the AWS region is option 'awsRegion'"):
        table.read(spark, region="eu-west-2").count()
    with pytest.raises(Exception, match="not row keys of the table: \\['nope'\\]"):
        table.read(spark, region=json.dumps({"nope": [1, 2]})).count()
    with pytest.raises(Exception, match="field 'key' \\(long\\) needs an integer"):
        table.read(spark, region=json.dumps({"key": ["a", None]})).count()


def test_a_file_referenced_from_two_partitions_yields_its_rows_once(
    spark: SparkSession, make_source_table: MakeSourceTable
) -> None:
    table = make_source_table(KEY_SCHEMA)
    rows = key_rows(2_000, seed=59)
    table.append(dataframe(spark, KEY_SCHEMA, rows, partitions=1))
    committer = SyncCommitter(table.client.state_store)
    root = table.state().leaf_partitions()[0]
    split_partition_at(table.store(), committer, root.id, dimension=0, split_point=5_000)
    assert split_references_down(table.store(), committer) == 1
    assert len({ref.filename for ref in table.state().file_references()}) == 1  # one file, two references

    assert as_tuples(table.read(spark)) == sorted(rows)
    region = table.read(spark, region=json.dumps({"key": [4_000, 6_000]}))
    assert as_tuples(region) == sorted(r for r in rows if 4_000 <= r[0] < 6_000)


def test_a_read_as_of_an_earlier_transaction_sees_the_table_as_it_was(
    spark: SparkSession, make_source_table: MakeSourceTable
) -> None:
    table = make_source_table(KEY_SCHEMA, SPLITS)
    first, second = key_rows(500, seed=60), key_rows(500, seed=61)
    table.append(dataframe(spark, KEY_SCHEMA, first))
    table.append(dataframe(spark, KEY_SCHEMA, second))

    assert as_tuples(table.read(spark, asOf="2")) == sorted(first)
    assert as_tuples(table.read(spark)) == sorted(first + second)


def test_a_schema_given_to_the_reader_reads_only_those_columns(
    spark: SparkSession, make_source_table: MakeSourceTable
) -> None:
    table = make_source_table(KEY_SCHEMA, SPLITS)
    rows = key_rows(1_000, seed=62)
    table.append(dataframe(spark, KEY_SCHEMA, rows))

    df = table.read(spark, schema="value string, key long")

    # The scan itself yields the two columns (Spark 4.1+ also prints them as its ReadSchema).
    assert re.search(
        r"\(1\) BatchScan statestore-table\nOutput \[2\]: \[value#\d+, key#\d+L\]", explained(df)
    )
    assert sorted(tuple(r) for r in df.collect()) == sorted((value, key) for key, _, value in rows)
    with pytest.raises(Exception, match="column\\(s\\) not in the table \\['nope'\\]"):
        table.read(spark, schema="key long, nope string").count()
    with pytest.raises(Exception, match="column 'key' is int but the schema says long"):
        table.read(spark, schema="key int").count()


def test_reads_are_split_into_tasks_by_row_count(
    spark: SparkSession, make_source_table: MakeSourceTable
) -> None:
    table = make_source_table(KEY_SCHEMA, SPLITS)
    table.append(dataframe(spark, KEY_SCHEMA, key_rows(4_000, seed=63), partitions=2))  # 8 files

    assert table.read(spark, rowsPerTask="1000").rdd.getNumPartitions() == 4
    assert table.read(spark, rowsPerTask="1000000").rdd.getNumPartitions() == 1
    assert table.read(spark, region=json.dumps({"key": [0, 2_000]})).rdd.getNumPartitions() == 1
