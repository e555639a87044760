"""One local Spark session for the whole test session, tables on an in-memory store with local data, and
tables on a moto server's DynamoDB for ``format("statestore-table")`` (whose planning runs in Python
workers that find the table from its options only)."""

from __future__ import annotations

import contextlib
import io
import os
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
from spark_client.datasource import FORMAT
from spark_client.session import local_session
from statestore.engine.log_store import TableStateStore
from statestore.instance import ResourceNames
from statestore.model.schema import Key, Schema
from statestore.services.client import StateStoreClient
from statestore.state.table_state import TableState
from tests.fixtures.aws_servers import moto_server, unique_resources  # noqa: F401  (session fixture)

# The test session's JVM compiles with C1 only: its work is hundreds of small jobs, for which C2's
# compilations cost more CPU than they save (the two longest Spark test modules ran 10% faster), and on two
# cores that CPU is the other test process's. Only this session: the jobs, benchmarks and the subprocesses
# that run the README's and the guide's code as written keep Java's defaults.
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1"


KEY_SCHEMA = Schema.of({"key": "long"}, sort_keys={"ts": "long"}, values={"value": "string"})


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    # PySpark starts the driver's JVM with PYSPARK_SUBMIT_ARGS (what it holds already, after the options):
    # set while the session starts, then restored, so no process started later inherits it.
    submit_args = os.environ.get("PYSPARK_SUBMIT_ARGS") or "pyspark-shell"
    with pytest.MonkeyPatch.context() as env:
        env.setenv("PYSPARK_SUBMIT_ARGS", f"--driver-java-options '{TEST_JVM_OPTIONS}' {submit_args}")
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

    def store(self) -> TableStateStore:
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


def explained(df: DataFrame) -> str:
    """``df.explain("formatted")``'s text: the scan's pushed filters and read schema, and the plan."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        df.explain("formatted")
    return out.getvalue()


def as_tuples(df: DataFrame) -> list[tuple[Any, ...]]:
    """A DataFrame's rows as sorted tuples (bytes normalised), for multiset comparisons."""
    return sorted(tuple(bytes(v) if isinstance(v, bytearray) else v for v in row) for row in df.collect())


# --- tables for the data source -------------------------------------------------------------------


@dataclass(frozen=True)
class Instance:
    """An instance (tables and bucket, no queue) on the session's moto server."""

    resources: ResourceNames
    endpoint_url: str
    client: StateStoreClient


@pytest.fixture(scope="session")
def source_instance(moto_server: str) -> Instance:  # noqa: F811
    resources = unique_resources("ds")
    return Instance(resources, moto_server, StateStoreClient.for_aws(resources, moto_server, provision=True))


@dataclass
class SourceTable:
    """A table read and written through ``format("statestore-table")``: state on moto, data in a local
    directory, commits synchronous unless the options say otherwise."""

    client: StateStoreClient
    name: str
    table_id: str
    data_dir: Path
    options: dict[str, str]

    def read(self, spark: SparkSession, schema: str | None = None, **extra: str) -> DataFrame:
        reader = spark.read.format(FORMAT).options(**self.options, **extra)
        return (reader.schema(schema) if schema else reader).load()

    def append(self, df: DataFrame, **extra: str) -> None:
        df.write.format(FORMAT).options(**self.options, committer="sync", **extra).mode("append").save()

    def store(self) -> TableStateStore:
        return self.client.state_store(self.table_id)

    def state(self) -> TableState:
        return self.store().state()

    def log_length(self) -> int:
        return self.client.log.latest_number(self.table_id)

    def data_files(self) -> list[str]:
        """Every data file on disk, as a path."""
        return sorted(
            os.path.join(d, f)
            for d, _, files in os.walk(self.data_dir)
            for f in files
            if f.endswith(".parquet")
        )


MakeSourceTable = Callable[..., SourceTable]


@pytest.fixture
def make_source_table(source_instance: Instance, tmp_path: Path) -> MakeSourceTable:
    counter = iter(range(1_000_000))

    def make(schema: Schema = KEY_SCHEMA, split_points: Sequence[Key] = ()) -> SourceTable:
        name = f"{tmp_path.name}-{next(counter)}"
        info = source_instance.client.create_table(name, schema, list(split_points))
        data_dir = tmp_path / f"data-{name}"
        options = {
            "table": name,
            "resources": source_instance.resources.to_json(),
            "endpoint": source_instance.endpoint_url,
            "data": str(data_dir),
        }
        return SourceTable(source_instance.client, name, info.table_id, data_dir, options)

    return make
