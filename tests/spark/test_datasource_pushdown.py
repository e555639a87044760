"""Filters on a ``format("statestore-table")`` read: always the right rows; on Spark 4.1+ row-key filters are
pushed into the scan (visible in ``explain``) and prune the files read, on Spark 4.0 Spark filters after the
scan.

Pruning is shown by deleting the data files of the partitions a query must not touch: a read that opened
one would fail. The tests that need pushdown run on PySpark 4.1+ (``make test-spark-latest`` runs 4.3)
and fail there if a filter is not pushed.
"""

from __future__ import annotations

import os
import random
import re
from collections.abc import Callable
from typing import Any

import pyspark
import pytest
from pyspark.sql import SparkSession

from spark_client.datasource import FILTER_PUSHDOWN_AVAILABLE
from statestore.model.schema import Schema
from tests.spark.conftest import MakeSourceTable, SourceTable, as_tuples, dataframe, explained

pytestmark = [pytest.mark.spark, pytest.mark.e2e]

SPARK_VERSION = tuple(int(p) for p in pyspark.__version__.split(".")[:2])
needs_filter_pushdown = pytest.mark.skipif(
    SPARK_VERSION < (4, 1),
    reason=f"PySpark {pyspark.__version__} has no Python data source filter pushdown (added in Spark 4.1; "
    "EMR 8.0.0 runs 4.0): `make test-spark-latest` runs this on PySpark 4.3",
)
only_without_filter_pushdown = pytest.mark.skipif(
    SPARK_VERSION >= (4, 1), reason="checks Spark 4.0, which has no Python data source filter pushdown"
)

SCHEMA = Schema.of({"key": "long"}, sort_keys={"ts": "long"}, values={"value": "string", "amount": "double"})
SPLITS = [2_500, 5_000, 7_500]
NAMES = Schema.of({"name": "string"}, values={"n": "long"})


def rows_of(count: int, seed: int) -> list[tuple[Any, ...]]:
    rng = random.Random(seed)
    return [
        (rng.randrange(10_000), rng.randrange(100), f"v{rng.randrange(50)}", rng.choice([0.25, 1.5, None]))
        for _ in range(count)
    ]


def delete_files_of_partitions(table: SourceTable, keep: Callable[[Any], bool]) -> int:
    """Delete the data files of the partitions whose region ``keep`` rejects; returns how many."""
    state = table.state()
    deleted = 0
    for ref in state.file_references():
        if not keep(state.partition(ref.partition_id).region):
            os.remove(table.data_dir / ref.filename)
            deleted += 1
    return deleted


def spark_filters(text: str) -> str:
    """The conditions Spark itself evaluates after the scan (its Filter nodes), from a formatted plan."""
    return " ".join(re.findall(r"Condition : (.*)", text))


FILTERS: list[tuple[str, Callable[[tuple[Any, ...]], bool]]] = [
    ("key >= 3000 AND key < 4000", lambda r: 3_000 <= r[0] < 4_000),
    ("key = 4242 OR key = 17", lambda r: r[0] in (4_242, 17)),
    ("key IN (1, 9999, 5000)", lambda r: r[0] in (1, 9_999, 5_000)),
    ("key BETWEEN 2490 AND 2510 AND value = 'v7'", lambda r: 2_490 <= r[0] <= 2_510 and r[2] == "v7"),
    ("key > 7400 AND NOT (ts < 50)", lambda r: r[0] > 7_400 and not r[1] < 50),
    ("amount IS NULL AND key <= 100", lambda r: r[3] is None and r[0] <= 100),
    ("amount > 1.0 AND key < 1000", lambda r: r[3] is not None and r[3] > 1.0 and r[0] < 1_000),
    ("key < -5", lambda r: r[0] < -5),
]


def test_filtered_reads_return_exactly_the_rows_that_pass(
    spark: SparkSession, make_source_table: MakeSourceTable
) -> None:
    table = make_source_table(SCHEMA, SPLITS)
    rows = rows_of(4_000, seed=70)
    table.append(dataframe(spark, SCHEMA, rows))

    for condition, passes in FILTERS:
        assert as_tuples(table.read(spark).filter(condition)) == sorted(r for r in rows if passes(r)), (
            condition
        )


@needs_filter_pushdown
def test_row_key_filters_are_pushed_into_the_scan_and_prune_files(
    spark: SparkSession, make_source_table: MakeSourceTable
) -> None:
    assert FILTER_PUSHDOWN_AVAILABLE, (
        f"PySpark {pyspark.__version__} should offer DataSourceReader.pushFilters"
    )
    table = make_source_table(SCHEMA, SPLITS)
    rows = rows_of(4_000, seed=71)
    table.append(dataframe(spark, SCHEMA, rows))
    assert delete_files_of_partitions(table, lambda region: region.ranges[0].contains(3_000)) > 0

    df = table.read(spark).filter("key >= 3000 AND key < 4000")
    plan = explained(df)

    assert "PushedFilters: [GreaterThanOrEqual(key,3000), LessThan(key,4000)]" in plan
    assert spark_filters(plan) == ""  # Spark does not filter again: the scan applied them
    assert as_tuples(df) == sorted(r for r in rows if 3_000 <= r[0] < 4_000)


@needs_filter_pushdown
def test_in_lists_equality_and_prefixes_read_only_the_partitions_they_name(
    spark: SparkSession, make_source_table: MakeSourceTable
) -> None:
    table = make_source_table(NAMES, ["g", "p"])
    names = ["apple", "banana", "cherry", "grape", "kiwi", "mango", "peach", "quince", "zucchini"]
    rows = [(name * (i % 3 + 1), i) for i, name in enumerate(names * 20)]
    table.append(dataframe(spark, NAMES, rows))
    assert delete_files_of_partitions(table, lambda region: region.ranges[0].min != "g") > 0  # the middle

    for condition, passes in [
        ("name IN ('banana', 'quincequince')", lambda r: r[0] in ("banana", "quincequince")),
        ("name = 'zucchinizucchini'", lambda r: r[0] == "zucchinizucchini"),
        ("name LIKE 'qu%'", lambda r: r[0].startswith("qu")),
        ("name < 'b' AND n >= 0", lambda r: r[0] < "b"),
    ]:
        df = table.read(spark).filter(condition)
        assert "PushedFilters: [" in explained(df) and spark_filters(explained(df)) == "", condition
        assert as_tuples(df) == sorted(r for r in rows if passes(r)), condition


@needs_filter_pushdown
def test_filters_on_values_are_applied_by_the_scan_but_doubles_stay_with_spark(
    spark: SparkSession, make_source_table: MakeSourceTable
) -> None:
    table = make_source_table(SCHEMA, SPLITS)
    rows = rows_of(2_000, seed=72)
    table.append(dataframe(spark, SCHEMA, rows))

    df = table.read(spark).filter("value = 'v3' AND amount > 1.0")
    plan = explained(df)

    assert "EqualTo(value,v3)" in plan
    assert "amount" in spark_filters(plan) and "value" not in spark_filters(plan)
    assert as_tuples(df) == sorted(r for r in rows if r[2] == "v3" and r[3] is not None and r[3] > 1.0)


@only_without_filter_pushdown
def test_on_spark_4_0_spark_filters_after_the_scan_and_the_region_option_prunes(
    spark: SparkSession, make_source_table: MakeSourceTable
) -> None:
    table = make_source_table(SCHEMA, SPLITS)
    rows = rows_of(2_000, seed=73)
    table.append(dataframe(spark, SCHEMA, rows))

    df = table.read(spark).filter("key >= 3000 AND key < 4000")

    assert not FILTER_PUSHDOWN_AVAILABLE
    assert "key" in spark_filters(explained(df))
    assert as_tuples(df) == sorted(r for r in rows if 3_000 <= r[0] < 4_000)
    delete_files_of_partitions(table, lambda region: region.ranges[0].contains(3_000))
    pruned = table.read(spark, region='{"key": [3000, 4000]}')
    assert as_tuples(pruned) == sorted(r for r in rows if 3_000 <= r[0] < 4_000)
