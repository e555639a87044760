"""A query returns exactly the rows of a full scan filtered by the same region."""

from __future__ import annotations

import random
from dataclasses import replace

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from spark_client.compaction import compact
from spark_client.ingest import ingest
from spark_client.query import plan_query, query, region_of
from statestore.model.clock import now_millis
from statestore.model.schema import Schema
from statestore.services.cleanup import cleanup_table
from tests.spark.conftest import KEY_SCHEMA, MakeTable, as_tuples, dataframe, explained, key_rows

pytestmark = pytest.mark.spark


def full_scan(table_files: list[str], data_path: object) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for filename in table_files:
        rows.extend(pq.read_table(data_path(filename)).to_pylist())  # type: ignore[operator]
    return rows


def test_queries_of_random_regions_equal_a_filtered_full_scan(
    spark: SparkSession, make_table: MakeTable
) -> None:
    table = make_table(KEY_SCHEMA, [1_000, 2_500, 5_000, 7_500])
    store = table.store()
    for seed in (10, 11):
        ingest(dataframe(spark, KEY_SCHEMA, key_rows(3_000, seed=seed)), store, table.data, table.committer)
    state = table.store().state()
    everything = full_scan([f.filename for f in state.files()], table.data.path)

    rng = random.Random(42)
    for _ in range(5):
        low = rng.choice([None, rng.randrange(-100, 10_000)])
        high = rng.choice([None, rng.randrange(0, 11_000)])
        if low is not None and high is not None and low >= high:
            low, high = high - 1, low + 1
        expected = sorted(
            (r["key"], r["ts"], r["value"])
            for r in everything
            if (low is None or r["key"] >= low) and (high is None or r["key"] < high)  # type: ignore[operator]
        )

        assert as_tuples(query(spark, store, table.data, {"key": (low, high)})) == expected, (low, high)


def test_a_query_reads_only_files_whose_partitions_overlap_it(
    spark: SparkSession, make_table: MakeTable
) -> None:
    table = make_table(KEY_SCHEMA, [1_000, 2_500, 5_000, 7_500])
    store = table.store()
    ingest(
        dataframe(spark, KEY_SCHEMA, key_rows(2_000, seed=12), partitions=1),
        store,
        table.data,
        table.committer,
    )
    state = store.state()

    plan = plan_query(state, region_of(KEY_SCHEMA, {"key": (1_200, 2_000)}))

    leaf = state.partition_tree.leaf_for_key([1_500])
    assert plan.files == {ref.filename for ref in state.references_in_partition(leaf.id)}


def test_two_key_regions_on_a_table_split_on_both_dimensions(
    spark: SparkSession, make_table: MakeTable
) -> None:
    from spark_client.splitting import split_partition_at

    schema = Schema.of({"name": "string", "n": "long"}, values={"payload": "bytes"})
    table = make_table(schema, ["m"])
    store = table.store()
    for leaf in store.state().leaf_partitions():
        split_partition_at(store, table.committer, leaf.id, dimension=1, split_point=500)
    rng = random.Random(7)
    rows = [
        (rng.choice("abcdefghijklmnopqrstuvwxyz") * 2, rng.randrange(1_000), bytes([i % 256]))
        for i in range(3_000)
    ]
    ingest(dataframe(spark, schema, rows), store, table.data, table.committer)

    for name_range, n_range in [
        (("b", "q"), (100, 700)),
        ((None, "m"), (500, None)),
        (("zz", None), (None, None)),
    ]:
        region = {"name": name_range, "n": n_range}
        expected = sorted(
            r
            for r in rows
            if (name_range[0] is None or r[0] >= name_range[0])
            and (name_range[1] is None or r[0] < name_range[1])
            and (n_range[0] is None or r[1] >= n_range[0])
            and (n_range[1] is None or r[1] < n_range[1])
        )
        assert as_tuples(query(spark, store, table.data, region)) == expected


def test_an_unknown_row_key_in_a_region_is_refused(make_table: MakeTable) -> None:
    with pytest.raises(ValueError, match="not row keys of the table: \\['nope'\\]"):
        region_of(KEY_SCHEMA, {"nope": (1, 2)})


def test_a_query_outliving_the_gc_delay_fails_saying_what_happened_and_what_to_do(
    spark: SparkSession, make_table: MakeTable
) -> None:
    table = make_table(KEY_SCHEMA, [5_000])
    rows = key_rows(400, seed=60) + key_rows(400, seed=61)
    for batch in (rows[:400], rows[400:]):
        ingest(dataframe(spark, KEY_SCHEMA, batch), table.store(), table.data, table.committer)
    planned_on = table.store().state()
    planned = planned_on.transaction_number
    long_query = query(spark, table.store(), table.data)  # its file list is fixed now
    compact(spark, table.store(), table.data, table.committer)
    info = table.client.get_table(table.table_id)
    hour = 60 * 60_000

    def cleanup_after(hours: int) -> int:
        now = now_millis() + hours * hour
        report = cleanup_table(table.store(), info, table.client.snapshots, table.client.blobs, now=now)
        return report.data_files_deleted

    assert cleanup_after(11) == 0  # the default delay outlasts a query of hours
    assert as_tuples(long_query) == sorted(rows)
    assert cleanup_after(13) == len(planned_on.files_by_name)  # every file the query planned to read
    # Cleanup deleted their objects from the store's blob store; these live in a local directory.
    table.data.delete(list(planned_on.files_by_name))
    with pytest.raises(Exception) as failed:
        long_query.collect()

    message = str(failed.value)
    assert "is missing (not found). A query reads the file list of the state it was planned on" in message
    assert f"(as of transaction {planned})" in message
    assert "garbage collection deletes a file the GC delay after it left the state" in message
    assert "Run the query again" in message and "raise the instance's gc_delay_minutes" in message
    assert as_tuples(query(spark, table.store(), table.data)) == sorted(rows)


def test_a_query_hands_spark_arrow_batches_unless_credentials_would_travel(
    spark: SparkSession, make_table: MakeTable
) -> None:
    table = make_table(KEY_SCHEMA, [5_000])
    rows = key_rows(1_000, seed=13)
    ingest(dataframe(spark, KEY_SCHEMA, rows), table.store(), table.data, table.committer)
    expected = sorted(r for r in rows if 1_000 <= r[0] < 6_000)

    arrow = query(spark, table.store(), table.data, {"key": (1_000, 6_000)})
    with_credentials = replace(table.data, access_key="key", secret_key="secret")
    tuples = query(spark, table.store(), with_credentials, {"key": (1_000, 6_000)})

    assert "BatchScan statestore-table-parts" in explained(arrow)
    assert "Scan ExistingRDD" in explained(tuples)
    assert as_tuples(arrow) == as_tuples(tuples) == expected
