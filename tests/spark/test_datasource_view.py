"""Reads of a small region planned through the table's queryable view (issue 34): the data source and
``read_table`` return the same rows through the view as through a full load of the state, with the view
current, with commits after its number, and after a split, and a read the view cannot plan falls back.

The state is on a moto server and the data files in a local directory (``make_source_table``); the data
source plans in a Python worker, so which way a read was planned is checked by planning the same options
in this process (``StatestoreReader.partitions``), and the rows by reading them through Spark both ways.
"""

from __future__ import annotations

import importlib
import json
import logging
from collections.abc import Sequence
from typing import Any

import pytest
from pyspark.sql import SparkSession

from spark_client.columns import spark_schema
from spark_client.committer import SyncCommitter
from spark_client.compaction import split_references_down
from spark_client.datasource import FILTER_PUSHDOWN_AVAILABLE, StatestoreDataSource, StatestoreReader
from spark_client.source_options import SourceOptions
from spark_client.splitting import split_partition_at
from spark_client.table_read import read_table
from statestore.engine.queryable_view import QueryableView
from tests.spark.conftest import KEY_SCHEMA, MakeSourceTable, SourceTable, as_tuples, dataframe, key_rows

pytestmark = [pytest.mark.spark, pytest.mark.e2e]

SPLITS = [1_000 * i for i in range(1, 10)]  # ten leaves over the keys 0..9,999
LOGGER = "spark_client.view_plan"
REGION = (3_200, 3_700)  # inside the leaf [3000, 4000)


def view_of(table: SourceTable) -> QueryableView:
    store = SourceOptions.parse(table.options).connection.view_store()
    return QueryableView(table.table_id, KEY_SCHEMA, table.client.log, store)


def planned_through_view(
    table: SourceTable, caplog: pytest.LogCaptureFixture, pushed: Sequence[Any] = (), **options: str
) -> bool:
    """Whether the data source plans a read with ``options`` (and Spark's ``pushed`` filters) through the
    view (planned in this process)."""
    source = StatestoreDataSource({**table.options, **options})
    reader = source.reader(spark_schema(KEY_SCHEMA))
    assert isinstance(reader, StatestoreReader)
    if pushed:
        assert reader.pushFilters(list(pushed)) == []
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        reader.partitions()
    return "planned through the queryable view" in caplog.text


def region_option(low: int, high: int) -> dict[str, str]:
    return {"region": json.dumps({"key": [low, high]})}


def read_both_ways(spark: SparkSession, table: SourceTable, **options: str) -> list[tuple[Any, ...]]:
    """The rows of a read through the view; checked equal to the same read through a full load."""
    through_view = as_tuples(table.read(spark, **options))
    full_load = as_tuples(table.read(spark, **{**options, "viewMaxLeaves": "0"}))
    assert through_view == full_load
    return through_view


def in_region(rows: list[tuple[Any, ...]], low: int, high: int) -> list[tuple[Any, ...]]:
    return sorted(r for r in rows if low <= r[0] < high)


@pytest.fixture
def table(
    spark: SparkSession, make_source_table: MakeSourceTable
) -> tuple[SourceTable, list[tuple[Any, ...]]]:
    """A table of ten leaves written by two appends (a file per leaf per task), with its view built."""
    table = make_source_table(KEY_SCHEMA, SPLITS)
    rows = key_rows(4_000, seed=340) + key_rows(4_000, seed=341)
    table.append(dataframe(spark, KEY_SCHEMA, rows[:4_000]))
    table.append(dataframe(spark, KEY_SCHEMA, rows[4_000:]))
    view_of(table).update(table.store().state)
    return table, rows


def test_a_region_read_through_the_view_returns_the_full_loads_rows(
    spark: SparkSession, table: tuple[SourceTable, list[tuple[Any, ...]]], caplog: pytest.LogCaptureFixture
) -> None:
    source, rows = table

    assert planned_through_view(source, caplog, **region_option(*REGION))
    assert not planned_through_view(source, caplog, viewMaxLeaves="0", **region_option(*REGION))
    assert read_both_ways(spark, source, **region_option(*REGION)) == in_region(rows, *REGION)
    # Three leaves, and the whole table: more leaves than the limit given, so a full load.
    assert planned_through_view(source, caplog, viewMaxLeaves="3", **region_option(2_500, 4_500))
    assert not planned_through_view(source, caplog, viewMaxLeaves="2", **region_option(2_500, 4_500))
    assert not planned_through_view(source, caplog, viewMaxLeaves="9")
    assert read_both_ways(spark, source, viewMaxLeaves="3", **region_option(2_500, 4_500)) == in_region(
        rows, 2_500, 4_500
    )


@pytest.mark.skipif(not FILTER_PUSHDOWN_AVAILABLE, reason="PySpark < 4.1 pushes no filters to Python sources")
def test_a_region_from_pushed_filters_is_read_through_the_view(
    spark: SparkSession, table: tuple[SourceTable, list[tuple[Any, ...]]], caplog: pytest.LogCaptureFixture
) -> None:
    ds: Any = importlib.import_module("pyspark.sql.datasource")  # its filters exist on Spark 4.1+ only
    source, rows = table
    condition = f"key >= {REGION[0]} AND key < {REGION[1]}"
    pushed = [ds.GreaterThanOrEqual(("key",), REGION[0]), ds.LessThan(("key",), REGION[1])]

    assert planned_through_view(source, caplog, pushed, viewMaxLeaves="3")
    assert not planned_through_view(source, caplog, viewMaxLeaves="3")  # no filter: every leaf

    through_view = as_tuples(source.read(spark).where(condition))
    full_load = as_tuples(source.read(spark, viewMaxLeaves="0").where(condition))

    assert through_view == full_load == in_region(rows, *REGION)


def test_commits_after_the_views_number_are_read_through_it(
    spark: SparkSession, table: tuple[SourceTable, list[tuple[Any, ...]]], caplog: pytest.LogCaptureFixture
) -> None:
    source, rows = table
    more = key_rows(2_000, seed=342)
    source.append(dataframe(spark, KEY_SCHEMA, more))
    meta = view_of(source).store.meta(source.table_id)
    assert meta is not None and meta.transaction_number < source.log_length()

    assert planned_through_view(source, caplog, **region_option(*REGION))
    assert read_both_ways(spark, source, **region_option(*REGION)) == in_region(rows + more, *REGION)


def test_a_split_is_read_through_the_view_once_its_upkeep_applied_it(
    spark: SparkSession, table: tuple[SourceTable, list[tuple[Any, ...]]], caplog: pytest.LogCaptureFixture
) -> None:
    source, rows = table
    committer = SyncCommitter(source.client.state_store)
    leaf = source.state().partition_tree.leaf_for_key([3_500])
    split_partition_at(source.store(), committer, leaf.id, dimension=0, split_point=3_500)
    split_references_down(source.store(), committer)  # the leaf's files now referenced from both halves

    # Behind the view, the split sends the read to a full load, and says so.
    assert not planned_through_view(source, caplog, **region_option(*REGION))
    assert "changes the partitions" in caplog.text
    assert read_both_ways(spark, source, **region_option(*REGION)) == in_region(rows, *REGION)

    view_of(source).update(source.store().state)

    assert planned_through_view(source, caplog, **region_option(*REGION))
    assert read_both_ways(spark, source, **region_option(*REGION)) == in_region(rows, *REGION)


def test_read_table_plans_through_the_view_and_returns_the_full_loads_rows(
    spark: SparkSession, table: tuple[SourceTable, list[tuple[Any, ...]]], caplog: pytest.LogCaptureFixture
) -> None:
    source, rows = table
    region = {"key": REGION}

    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        through_view = as_tuples(read_table(spark, source.name, region=region, options=source.options))
    assert "planned through the queryable view" in caplog.text
    full_load = as_tuples(
        read_table(spark, source.name, region=region, options=source.options, view_max_leaves=0)
    )

    assert through_view == full_load == in_region(rows, *REGION)
