"""Rows per second for Spark ingest and query, and the time from an ingest's end to its commit being applied.

Generated data: ``--rows`` rows (default 1,000,000) of ``key long`` (pseudo-random over [0, 10^9)),
``ts long`` (sort key), ``value string``, ``amount double``, in a table cut into ``--leaves`` (default 16)
leaf partitions. A ``local[2]`` Spark session; data files are written and read with pyarrow in the tasks.

Two setups, each measured on its own fresh table:

- ``local``: data in a temporary directory, state in memory, commits synchronous;
- ``moto``: the embedded default — data in S3 through pyarrow's S3FileSystem, state in DynamoDB, the
  commit sent to the SQS FIFO queue and applied by the committer Lambda (run by the local runtime), all on
  a moto server. There "ingest end → commit applied" is the time from the ingest job returning (request
  sent, not waited for) to its outcome being readable by request id (polled every 20 ms).

A small ingest and query run first to start Python workers. Ingest rows/s counts the whole job: the
schema and null-key check (a pass over the input), assigning leaves, sorting, writing, and the commit.
Query rows/s counts reading every matching row into Spark (``count()`` of the query's DataFrame, which
moves each row from pyarrow through Python into the JVM).

    python benchmarks/bench_spark.py [--rows 1000000] [--leaves 16] [--setups local,moto]
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
for name, value in {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "eu-west-2",
}.items():
    os.environ.setdefault(name, value)

from pyspark.sql import DataFrame, SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from spark_client import DataStore, QueueCommitter, SyncCommitter, ingest, local_session, query  # noqa: E402
from spark_client.committer import JobCommitter  # noqa: E402
from statestore.engine.log_store import TableStateStore  # noqa: E402
from statestore.model.schema import Schema  # noqa: E402
from statestore.services.client import StateStoreClient  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from results import Figure, record  # noqa: E402

SCHEMA = Schema.of({"key": "long"}, sort_keys={"ts": "long"}, values={"value": "string", "amount": "double"})
KEY_SPACE = 1_000_000_000


@dataclass
class Figures:
    setup: str
    rows: int
    files: int
    ingest_seconds: float
    full_query_seconds: float
    region_rows: int
    region_query_seconds: float
    commit_latency_seconds: float | None
    commit_path: str

    def figures(self) -> list[Figure]:
        """The figures printed by :meth:`report`, for the benchmarks page (none is judged)."""
        where = f"{self.setup} ({self.commit_path})"
        cpu = "CPU: Spark local[2] and pyarrow in the tasks" + (
            ", the emulator" if self.setup == "moto" else ""
        )
        out = [
            Figure(f"{where}: ingest", self.rows / self.ingest_seconds, "rows/s", cpu),
            Figure(f"{where}: query, all rows", self.rows / self.full_query_seconds, "rows/s", cpu),
            Figure(
                f"{where}: query, 1/4 of keys", self.region_rows / self.region_query_seconds, "rows/s", cpu
            ),
        ]
        if self.commit_latency_seconds is not None:
            out.append(
                Figure(
                    f"{where}: ingest end to commit applied",
                    self.commit_latency_seconds * 1000,
                    "ms",
                    "the queue's poll and the committer's round trips to the emulator",
                )
            )
        return out

    def report(self) -> None:
        print(f"\n== {self.setup} ({self.commit_path}) ==")
        print(
            f"ingest        {self.rows:>10,} rows in {self.ingest_seconds:7.2f} s  "
            f"= {self.rows / self.ingest_seconds:>10,.0f} rows/s   ({self.files} files)"
        )
        print(
            f"query (all)   {self.rows:>10,} rows in {self.full_query_seconds:7.2f} s  "
            f"= {self.rows / self.full_query_seconds:>10,.0f} rows/s"
        )
        print(
            f"query (1/4)   {self.region_rows:>10,} rows in {self.region_query_seconds:7.2f} s  "
            f"= {self.region_rows / self.region_query_seconds:>10,.0f} rows/s"
        )
        if self.commit_latency_seconds is None:
            print("ingest end -> commit applied: n/a (synchronous commit: applied before ingest returns)")
        else:
            millis = self.commit_latency_seconds * 1000
            print(f"ingest end -> commit applied: {millis:,.0f} ms (through the queue)")


def generated(spark: SparkSession, rows: int) -> DataFrame:
    ids = spark.range(rows, numPartitions=4)
    return ids.select(
        F.pmod(F.xxhash64("id"), F.lit(KEY_SPACE)).alias("key"),
        (F.col("id") % 1000).alias("ts"),
        F.concat(F.lit("value-"), F.col("id").cast("string")).alias("value"),
        (F.col("id") / 7.0).alias("amount"),
    ).cache()


def warm_up(spark: SparkSession) -> None:
    """One small ingest and query first, so Python workers and the JIT are up before the timings."""
    client = StateStoreClient.in_memory()
    table_id = client.create_table("warm-up", SCHEMA, split_points(4)).table_id
    with tempfile.TemporaryDirectory(prefix="bench-spark-") as directory:
        data = DataStore.local(directory)
        store = client.state_store(table_id)
        ingest(generated(spark, 20_000), store, data, SyncCommitter(client.state_store))
        query(spark, store, data).count()


def split_points(leaves: int) -> list[int]:
    return [KEY_SPACE * i // leaves for i in range(1, leaves)]


def measure(
    setup: str,
    spark: SparkSession,
    df: DataFrame,
    rows: int,
    store: TableStateStore,
    data: DataStore,
    committer: JobCommitter,
    outcome_of: Callable[[str], object] | None,
) -> Figures:
    started = time.perf_counter()
    result = ingest(df, store, data, committer, wait=outcome_of is None)
    ingest_end = time.perf_counter()
    latency = None
    if outcome_of is not None:
        assert result.outcome is not None and result.outcome.request_id is not None
        outcome = outcome_of(result.outcome.request_id)
        latency = time.perf_counter() - ingest_end
        if not getattr(outcome, "committed", False):
            raise SystemExit(f"the ingest commit did not go through: {outcome}")
    ingest_seconds = ingest_end - started

    started = time.perf_counter()
    counted = query(spark, store, data).count()
    full_seconds = time.perf_counter() - started
    if counted != rows:
        raise SystemExit(f"query returned {counted} rows, expected {rows}")

    started = time.perf_counter()
    region_rows = query(spark, store, data, {"key": (KEY_SPACE // 4, KEY_SPACE // 2)}).count()
    region_seconds = time.perf_counter() - started
    path = (
        "sync commit, in-memory state" if outcome_of is None else "SQS FIFO queue + committer, DynamoDB state"
    )
    return Figures(
        setup,
        rows,
        len(result.files),
        ingest_seconds,
        full_seconds,
        region_rows,
        region_seconds,
        latency,
        path,
    )


def run_local(spark: SparkSession, df: DataFrame, rows: int, leaves: int) -> Figures:
    client = StateStoreClient.in_memory()
    table_id = client.create_table("bench", SCHEMA, split_points(leaves)).table_id
    store = client.state_store(table_id)
    with tempfile.TemporaryDirectory(prefix="bench-spark-") as directory:
        data = DataStore.local(directory)
        return measure("local", spark, df, rows, store, data, SyncCommitter(client.state_store), None)


def run_moto(spark: SparkSession, df: DataFrame, rows: int, leaves: int) -> Figures:
    from statestore.local.runtime import LocalRuntime

    instance = f"bench{uuid.uuid4().hex[:10]}"
    with LocalRuntime.start(instance, port=0, snapshot_interval=None, cleanup_interval=None) as runtime:
        client = runtime.client()
        table_id = client.create_table("bench", SCHEMA, split_points(leaves)).table_id
        data = DataStore.s3(runtime.resources.bucket, endpoint_url=runtime.endpoint_url)
        committer = QueueCommitter(runtime.sender(), wait_timeout=120, poll_interval=0.02)
        return measure(
            "moto",
            spark,
            df,
            rows,
            client.state_store(table_id),
            data,
            committer,
            lambda request_id: committer.outcome(table_id, request_id),
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--leaves", type=int, default=16)
    parser.add_argument("--setups", default="local,moto", help="comma-separated: local, moto")
    args = parser.parse_args()
    setups = [s.strip() for s in args.setups.split(",") if s.strip()]
    unknown = set(setups) - {"local", "moto"}
    if unknown:
        parser.error(f"unknown setup(s) {sorted(unknown)}; choose from local, moto")

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # the moto server's request log
    spark = local_session("bench-spark", cores=2, shuffle_partitions=4)
    spark.sparkContext.setLogLevel("ERROR")
    try:
        df = generated(spark, args.rows)
        df.count()  # generate once, outside the timings
        warm_up(spark)
        print(f"{args.rows:,} rows, {args.leaves} leaf partitions, Spark local[2], pyarrow I/O in the tasks")
        runners = {"local": run_local, "moto": run_moto}
        figures: list[Figure] = []
        for setup in setups:
            measured = runners[setup](spark, df, args.rows, args.leaves)
            measured.report()
            figures += measured.figures()
    finally:
        spark.stop()
    record(__file__, figures)


if __name__ == "__main__":
    main()
