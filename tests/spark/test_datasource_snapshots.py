"""``format("statestore-table")`` on a table that has snapshots, as every table of the embedded default soon
has (``statestore local`` takes one a minute): appends, reads, compactions and splits keep every row, with
snapshots taken before, between and after the writes.

An append ships the table's partition tree to its tasks; a tree loaded from a snapshot reads its columns
through ``memoryview``s, which PySpark's cloudpickle used to turn into ``bytes``, failing every append
after the first snapshot.
"""

from __future__ import annotations

import json

import pytest
from pyspark import cloudpickle
from pyspark.sql import SparkSession

from spark_client.columns import spark_schema
from spark_client.committer import SyncCommitter
from spark_client.compaction import compact
from spark_client.data_store import DataStore
from spark_client.datasource import StatestoreDataSource
from spark_client.splitting import split_partitions
from statestore.model.files import FileReference
from statestore.transactions import AddFiles
from tests.spark.conftest import KEY_SCHEMA, MakeSourceTable, SourceTable, as_tuples, dataframe, key_rows

pytestmark = [pytest.mark.spark, pytest.mark.e2e]

SPLITS = [2_500, 5_000, 7_500]


def snapshot(table: SourceTable) -> int:
    """Take a snapshot of the table now; its transaction number."""
    info = table.client.create_snapshot(table.table_id)
    assert info is not None
    return info.transaction_number


def compact_table(spark: SparkSession, table: SourceTable) -> int:
    """One compaction run; how many jobs it committed."""
    committer = SyncCommitter(table.client.state_store)
    result = compact(spark, table.store(), DataStore.local(table.data_dir), committer)
    assert result.lost == ()
    return len(result.committed)


def test_an_append_after_a_snapshot_adds_its_rows_and_reads_compactions_see_them(
    spark: SparkSession, make_source_table: MakeSourceTable
) -> None:
    table = make_source_table(KEY_SCHEMA, SPLITS)
    first, second = key_rows(1_500, seed=300), key_rows(1_500, seed=301)
    table.append(dataframe(spark, KEY_SCHEMA, first))
    assert snapshot(table) == 2

    table.append(dataframe(spark, KEY_SCHEMA, second))

    assert table.log_length() == 3
    assert as_tuples(table.read(spark)) == sorted(first + second)
    assert compact_table(spark, table) == 4  # each leaf's two files into one
    snapshot(table)
    assert as_tuples(table.read(spark)) == sorted(first + second)
    region = table.read(spark, region=json.dumps({"key": [2_000, 6_000]}))
    assert as_tuples(region) == sorted(r for r in first + second if 2_000 <= r[0] < 6_000)


def test_writes_with_snapshots_between_them_through_a_split_and_compactions_keep_every_row(
    spark: SparkSession, make_source_table: MakeSourceTable
) -> None:
    table = make_source_table(KEY_SCHEMA)  # one leaf, split below once it holds rows
    batches = [key_rows(1_000, seed=310 + i) for i in range(4)]
    committer = SyncCommitter(table.client.state_store)
    data = DataStore.local(table.data_dir)
    snapshot(table)  # of the table with no rows yet
    table.append(dataframe(spark, KEY_SCHEMA, batches[0]))
    snapshot(table)
    table.append(dataframe(spark, KEY_SCHEMA, batches[1]))
    after_two = table.log_length()
    snapshot(table)

    decisions = split_partitions(spark, table.store(), data, committer, max_rows=1_500)
    assert [d.outcome is not None and d.outcome.committed for d in decisions] == [True]
    snapshot(table)  # the split leaves the files on the parent: a read restricts them to each leaf
    table.append(dataframe(spark, KEY_SCHEMA, batches[2]))  # into the two new leaves
    assert as_tuples(table.read(spark)) == sorted(batches[0] + batches[1] + batches[2])
    assert compact_table(spark, table) == 2
    snapshot(table)
    table.append(dataframe(spark, KEY_SCHEMA, batches[3]))

    everything = batches[0] + batches[1] + batches[2] + batches[3]
    assert as_tuples(table.read(spark)) == sorted(everything)
    assert len(table.state().leaf_partitions()) == 2
    assert as_tuples(table.read(spark, asOf=str(after_two))) == sorted(batches[0] + batches[1])
    low = table.read(spark, region=json.dumps({"key": [None, 5_000]}))
    assert as_tuples(low) == sorted(r for r in everything if r[0] < 5_000)


def test_an_append_ships_its_tasks_the_partitions_and_not_the_tables_file_references(
    make_source_table: MakeSourceTable,
) -> None:
    def shipped_bytes(table: SourceTable) -> int:
        writer = StatestoreDataSource({**table.options, "committer": "sync"}).writer(
            spark_schema(KEY_SCHEMA), False
        )
        return len(cloudpickle.dumps(writer))

    empty, full = make_source_table(KEY_SCHEMA, SPLITS), make_source_table(KEY_SCHEMA, SPLITS)
    leaves = full.state().leaf_partitions()
    full.client.commit(
        full.table_id,
        AddFiles(
            tuple(
                FileReference(
                    f"tables/{full.table_id}/data/{leaves[i % 4].id}/{i:06d}.parquet", leaves[i % 4].id, 10
                )
                for i in range(20_000)
            )
        ),
    )
    snapshot(full)

    assert shipped_bytes(full) < shipped_bytes(empty) + 10_000  # not ~20,000 file names and their counts
