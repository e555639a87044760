"""Ingest and compaction write the same order (row keys, then sort keys, nulls first), so compaction's
streaming merge takes ingested files as they are."""

from __future__ import annotations

from collections import Counter

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from spark_client.compaction import compact
from spark_client.ingest import ingest
from spark_client.merge import first_descent
from spark_client.query import query
from tests.spark.conftest import KEY_SCHEMA, MakeTable, SparkTable, dataframe


def in_merge_order(table: SparkTable, filename: str) -> bool:
    content = pq.read_table(table.data.path(filename), columns=["key", "ts"]).combine_chunks()
    return first_descent([content.column("key").chunk(0), content.column("ts").chunk(0)]) is None


pytestmark = pytest.mark.spark


def test_files_with_null_sort_keys_are_written_nulls_first_by_ingest_and_by_compaction(
    spark: SparkSession, make_table: MakeTable
) -> None:
    table = make_table(KEY_SCHEMA)
    batches = [
        [(k, None if (k + seed) % 3 == 0 else (k * seed) % 7, f"v{seed}-{k}") for k in range(300)]
        for seed in (1, 2)
    ]
    for rows in batches:
        ingest(dataframe(spark, KEY_SCHEMA, rows), table.store(), table.data, table.committer)
    ingested = [r.filename for r in table.store().state().file_references()]
    assert len(ingested) >= 2 and all(in_merge_order(table, f) for f in ingested)

    result = compact(spark, table.store(), table.data, table.committer)

    (output,) = [r.filename for r in table.store().state().file_references()]
    assert len(result.committed) == 1 and in_merge_order(table, output)
    key_1 = [r["ts"] for r in pq.read_table(table.data.path(output)).to_pylist() if r["key"] == 1]
    assert key_1 == [None, 1]  # seed 2 gave key 1 a null ts, seed 1 gave it 1
    assert Counter(tuple(r) for r in query(spark, table.store(), table.data).collect()) == Counter(
        row for rows in batches for row in rows
    )
