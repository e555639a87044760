"""A table made from a DataFrame's schema (by the helper, or by the first append naming its keys) and used
from SQL through a temporary view; what Spark does not allow (``CREATE TABLE ... USING`` a Python data
source) fails with an error saying what to do instead. Results are compared with plain Spark."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyspark
import pytest
from pyspark.sql import DataFrame, SparkSession

from spark_client.datasource import FORMAT
from spark_client.tables import create_table, create_temp_view
from statestore.model.schema import Schema
from tests.spark.conftest import Instance, key_rows

pytestmark = [pytest.mark.spark, pytest.mark.e2e]

# Spark 4.0 plans a temporary view's read at each query; 4.1 and later plan it once, at its first query.
PLANS_A_VIEW_ONCE = tuple(int(p) for p in pyspark.__version__.split(".")[:2]) >= (4, 1)
COLUMNS = "key bigint, ts bigint, value string, amount double, flag boolean, raw binary"


def rows(count: int, seed: int) -> list[tuple[Any, ...]]:
    return [
        (key, ts, value, key / 7, key % 2 == 0, value.encode())
        for key, ts, value in key_rows(count, seed=seed)
    ]


def connection(instance: Instance, data: Path) -> dict[str, str]:
    return {"resources": instance.resources.to_json(), "endpoint": instance.endpoint_url, "data": str(data)}


def same_rows(actual: DataFrame, expected: DataFrame) -> None:
    """Plain Spark's comparison: equal counts, and no row of one missing from the other."""
    actual = actual.select(*expected.columns)
    assert actual.count() == expected.count()
    assert actual.exceptAll(expected).count() == 0 and expected.exceptAll(actual).count() == 0


def test_a_table_created_from_a_dataframes_schema_takes_its_rows_and_gives_them_back(
    spark: SparkSession, source_instance: Instance, tmp_path: Path
) -> None:
    df = spark.createDataFrame(rows(1_000, seed=600), COLUMNS)
    options = connection(source_instance, tmp_path)

    info = create_table(
        df, "from-df-" + tmp_path.name, ["key"], ["ts"], split_points=[5_000], options=options
    )
    df.write.format(FORMAT).options(**options, committer="sync").mode("append").save(info.table_name)

    assert info.schema == Schema.of(
        {"key": "long"},
        sort_keys={"ts": "long"},
        values={"value": "string", "amount": "double", "flag": "boolean", "raw": "bytes"},
    )
    back = spark.read.format(FORMAT).options(**options).load(info.table_name)
    same_rows(back, df)


def test_the_first_append_naming_row_keys_creates_the_table_and_later_ones_must_name_the_same(
    spark: SparkSession, source_instance: Instance, tmp_path: Path
) -> None:
    first, second = (spark.createDataFrame(rows(500, seed=s), COLUMNS) for s in (601, 602))
    options = {
        **connection(source_instance, tmp_path),
        "table": "created-" + tmp_path.name,
        "committer": "sync",
    }
    with pytest.raises(Exception, match="does not exist: create it first .* or give the option rowKeys"):
        first.write.format(FORMAT).options(**options).mode("append").save()

    first.write.format(FORMAT).options(**options, rowKeys="key", sortKeys="ts").mode("append").save()
    second.write.format(FORMAT).options(**options, rowKeys="key", sortKeys="ts").mode("append").save()
    with pytest.raises(
        Exception, match=r"exists with row keys \['key'\] and sort keys \['ts'\], not the rowKeys"
    ):
        second.write.format(FORMAT).options(**options, rowKeys="ts").mode("append").save()

    info = source_instance.client.get_table(options["table"])
    assert [f.name for f in info.schema.row_keys] == ["key"] and [f.name for f in info.schema.sort_keys] == [
        "ts"
    ]
    back = spark.read.format(FORMAT).options(**{k: v for k, v in options.items() if k != "committer"}).load()
    same_rows(back, first.unionByName(second))


def test_a_column_a_table_cannot_hold_or_a_key_that_cannot_be_one_is_refused_before_anything_is_created(
    spark: SparkSession, source_instance: Instance, tmp_path: Path
) -> None:
    df = spark.createDataFrame([(1, 2.5)], "id bigint, score double").selectExpr(
        "id", "score", "current_timestamp() AS at"
    )
    options = connection(source_instance, tmp_path)
    with pytest.raises(ValueError) as refused:
        create_table(df, "refused-" + tmp_path.name, ["score"], ["missing"], options=options)
    message = str(refused.value)
    assert "column 'at' is timestamp, which a table cannot hold: cast it to long" in message
    assert "row key 'score' is double: keys are int, bigint (long), string or binary (bytes)" in message
    assert "sort key 'missing' is not a column of the DataFrame" in message
    assert not [t for t in source_instance.client.list_tables() if t.table_name == "refused-" + tmp_path.name]


def test_a_temporary_view_reads_the_current_table_in_sql_and_insert_into_appends(
    spark: SparkSession, source_instance: Instance, tmp_path: Path
) -> None:
    first, second = (spark.createDataFrame(rows(700, seed=s), COLUMNS) for s in (603, 604))
    options = connection(source_instance, tmp_path)
    name = "sql-" + tmp_path.name
    create_table(first, name, ["key"], ["ts"], split_points=[2_500, 7_500], options=options)
    first.write.format(FORMAT).options(**options, committer="sync").mode("append").save(name)

    create_temp_view(spark, "events_view", name, committer="sync", **options)
    same_rows(spark.sql("SELECT * FROM events_view"), first)
    second.createOrReplaceTempView("incoming")
    spark.sql("INSERT INTO events_view SELECT * FROM incoming")

    assert source_instance.client.log.latest_number(source_instance.client.get_table(name).table_id) == 3
    if PLANS_A_VIEW_ONCE:  # Spark 4.1+ keeps the view's first plan: the view shows the table as it was then
        same_rows(spark.sql("SELECT * FROM events_view"), first)
        create_temp_view(spark, "events_view", name, committer="sync", **options)  # planned again
    same_rows(spark.sql("SELECT * FROM events_view"), first.unionByName(second))  # both appends
    expected = first.unionByName(second).where("key >= 1000 AND key < 4000").groupBy("flag").count()
    same_rows(
        spark.sql(
            "SELECT flag, count(*) AS count FROM events_view WHERE key >= 1000 AND key < 4000 GROUP BY flag"
        ),
        expected,
    )


def test_create_table_using_the_source_is_refused_saying_to_use_a_temporary_view(spark: SparkSession) -> None:
    # Spark would keep the catalog table but give a Python data source none of its OPTIONS on a read or a
    # write: refused when Spark asks for the schema, at CREATE TABLE.
    with pytest.raises(
        Exception, match="CREATE TABLE ... USING `statestore-table` cannot work.*TEMPORARY VIEW"
    ):
        spark.sql(f"CREATE TABLE catalog_events USING `{FORMAT}` OPTIONS (table 'events')")
    assert not spark.catalog.tableExists("catalog_events")
    # Given its columns, Spark creates it without asking: its reads then say the same.
    spark.sql(f"CREATE TABLE catalog_columns (key bigint) USING `{FORMAT}` OPTIONS (table 'events')")
    try:
        with pytest.raises(Exception, match="In SQL, use CREATE TEMPORARY VIEW v USING `statestore-table`"):
            spark.sql("SELECT * FROM catalog_columns").collect()
    finally:
        spark.sql("DROP TABLE IF EXISTS catalog_columns")
