"""One local Spark session for the whole test session, and tables on an in-memory store with local data."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from spark_client.columns import spark_schema
from spark_client.committer import SyncCommitter
from spark_client.data_store import DataStore
from spark_client.session import local_session
from statestore.client import StateStoreClient
from statestore.engine import TransactionLogStateStore
from statestore.schema import Key, Schema

KEY_SCHEMA = Schema.of({"key": "long"}, sort_keys={"ts": "long"}, values={"value": "string"})


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = local_session("statestore-tests", cores=2, shuffle_partitions=4)
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@dataclass
class SparkTable:
    """A table on an in-memory state store whose data files go to a local directory."""

    client: StateStoreClient
    table_id: str
    data: DataStore
    committer: SyncCommitter

    @property
    def schema(self) -> Schema:
        return self.store().schema

    def store(self) -> TransactionLogStateStore:
        """A fresh state store for this table (one per thread)."""
        return self.client.state_store(self.table_id)

    def log_length(self) -> int:
        return self.client.log.latest_number(self.table_id)


MakeTable = Callable[..., SparkTable]


@pytest.fixture
def make_table(tmp_path: Path) -> MakeTable:
    client = StateStoreClient.in_memory()
    counter = iter(range(1_000_000))

    def make(schema: Schema = KEY_SCHEMA, split_points: Sequence[Key] = ()) -> SparkTable:
        info = client.create_table(f"table-{next(counter)}", schema, list(split_points))
        data = DataStore.local(tmp_path / "data")
        return SparkTable(client, info.table_id, data, SyncCommitter(client.state_store))

    return make


def key_rows(count: int, seed: int, key_range: int = 10_000) -> list[tuple[Any, ...]]:
    """Rows of KEY_SCHEMA with duplicate keys and timestamps, reproducible from ``seed``."""
    rng = random.Random(seed)
    return [(rng.randrange(key_range), rng.randrange(1_000), f"v{seed}-{i}") for i in range(count)]


def dataframe(
    spark: SparkSession, schema: Schema, rows: list[tuple[Any, ...]], partitions: int = 2
) -> DataFrame:
    return spark.createDataFrame(rows, spark_schema(schema)).repartition(partitions)


def as_tuples(df: DataFrame) -> list[tuple[Any, ...]]:
    """A DataFrame's rows as sorted tuples (bytes normalised), for multiset comparisons."""
    return sorted(tuple(bytes(v) if isinstance(v, bytearray) else v for v in row) for row in df.collect())
