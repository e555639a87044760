"""The Spark jobs on a table whose files are rows in PostgreSQL (a real server): ingest, split, compaction and
queries work as on a log table, with the same code."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from spark_client.committer import SyncCommitter
from spark_client.compaction import compact
from spark_client.data_store import DataStore
from spark_client.ingest import ingest
from spark_client.query import query
from spark_client.splitting import split_partitions
from statestore.services.client import StateStoreClient
from tests.spark.conftest import KEY_SCHEMA, as_tuples, dataframe, key_rows

pytestmark = pytest.mark.spark


@pytest.fixture
def client(fresh_postgres_conninfo: str) -> Iterator[StateStoreClient]:
    from statestore.adapters.postgres import PostgresFileReferenceStore

    with PostgresFileReferenceStore.connect(fresh_postgres_conninfo) as rows:
        yield StateStoreClient.in_memory(file_store=rows)


def test_ingest_split_and_compaction_of_a_postgres_table_keep_every_row(
    spark: SparkSession, client: StateStoreClient, tmp_path: Path
) -> None:
    table = client.create_table("rows", KEY_SCHEMA, [5_000], file_store="postgres").table_id
    data = DataStore.local(tmp_path / "data")
    committer = SyncCommitter(client.state_store)
    expected = []
    for seed in (1, 2, 3):
        batch = key_rows(1_000, seed=seed)
        expected.extend(batch)
        ingest(dataframe(spark, KEY_SCHEMA, batch), client.state_store(table), data, committer)
    assert client.file_store is not None
    assert len(client.file_store.files(table)) == len(client.state(table).files()) >= 3

    split_partitions(spark, client.state_store(table), data, committer, 1_000)
    result = compact(spark, client.state_store(table), data, committer)

    state = client.state(table)
    leaves = {p.id for p in state.leaf_partitions()}
    assert len(leaves) > 2  # the split added leaves
    assert {f.job.partition_id for f in result.committed} == leaves and result.lost == ()
    assert all(len(refs) == 1 for refs in state.references_by_partition().values())
    assert as_tuples(query(spark, client.state_store(table), data)) == sorted(expected)
