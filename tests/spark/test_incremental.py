"""Incremental reads return each added row once, across ingests, compactions and committer batches."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from spark_client.compaction import compact
from spark_client.errors import DataFileMissingError
from spark_client.incremental import read_added_since
from spark_client.ingest import ingest
from statestore.errors import TransactionNotRetainedError
from statestore.model.files import FileReference
from statestore.transactions import AddFiles, BatchItem, TransactionBatch
from tests.spark.conftest import KEY_SCHEMA, MakeTable, as_tuples, dataframe, key_rows

pytestmark = pytest.mark.spark


def test_interleaved_ingests_and_compactions_are_read_once_each(
    spark: SparkSession, make_table: MakeTable
) -> None:
    table = make_table(KEY_SCHEMA, [5_000])
    store = table.store()
    watermark, consumed, ingested = 0, [], []
    for round_number in range(3):
        for seed in (100 + 2 * round_number, 101 + 2 * round_number):
            batch = key_rows(700, seed=seed)
            ingested.extend(batch)
            ingest(dataframe(spark, KEY_SCHEMA, batch), table.store(), table.data, table.committer)
        read = read_added_since(spark, store, table.data, watermark)
        consumed.extend(as_tuples(read.rows))
        watermark = read.to_watermark
        compact(spark, table.store(), table.data, table.committer)  # outputs are not new rows

    final = read_added_since(spark, store, table.data, watermark)

    assert final.files == () and final.rows.count() == 0
    assert sorted(consumed) == sorted(ingested)


def test_files_compacted_away_are_still_read_from_their_original_objects(
    spark: SparkSession, make_table: MakeTable
) -> None:
    table = make_table(KEY_SCHEMA, [5_000])
    rows = key_rows(1_000, seed=110)
    ingest(dataframe(spark, KEY_SCHEMA, rows), table.store(), table.data, table.committer)
    ingest(dataframe(spark, KEY_SCHEMA, rows[:10]), table.store(), table.data, table.committer)
    compact(spark, table.store(), table.data, table.committer)

    read = read_added_since(spark, table.store(), table.data, 1)

    assert as_tuples(read.rows) == sorted(rows + rows[:10])
    # Once garbage collection deleted an input, a consumer that far behind is told to start again.
    table.data.delete([read.files[0]])
    with pytest.raises(DataFileMissingError, match="further behind than the GC delay"):
        read_added_since(spark, table.store(), table.data, 1)


def test_files_added_inside_a_committer_batch_are_read(spark: SparkSession, make_table: MakeTable) -> None:
    table = make_table(KEY_SCHEMA)
    other = make_table(KEY_SCHEMA)
    rows = key_rows(300, seed=120)
    written = ingest(dataframe(spark, KEY_SCHEMA, rows), other.store(), other.data, other.committer).files
    root = table.store().state().leaf_partitions()[0].id
    refs = tuple(
        FileReference(f.filename.replace(other.table_id, table.table_id), root, f.number_of_rows)
        for f in written
    )
    for ref, original in zip(refs, written, strict=True):
        table.data.ensure_parent(ref.filename)
        table.data.filesystem().copy_file(other.data.path(original.filename), table.data.path(ref.filename))
    table.store().commit(
        TransactionBatch((BatchItem("r1", AddFiles(refs[:1])), BatchItem("r2", AddFiles(refs[1:]))))
    )

    read = read_added_since(spark, table.store(), table.data, 1)

    assert as_tuples(read.rows) == sorted(rows) and read.to_watermark == 2


def test_a_consumer_behind_the_logs_retention_is_told_to_restart(
    spark: SparkSession, make_table: MakeTable
) -> None:
    table = make_table(KEY_SCHEMA)
    for seed in (130, 131):
        ingest(
            dataframe(spark, KEY_SCHEMA, key_rows(50, seed=seed)), table.store(), table.data, table.committer
        )
    table.client.log.delete_up_to(table.table_id, 2)

    with pytest.raises(TransactionNotRetainedError, match="restart the consumer"):
        read_added_since(spark, table.store(), table.data, 1)
    assert read_added_since(spark, table.store(), table.data, 2).rows.count() == 50
