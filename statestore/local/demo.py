"""The main job on the embedded default (``make demo``): a table's whole life on one machine.

DynamoDB Local holds the tables and a moto server the bucket and the queues; the local runtime plays the
committer Lambda's event source and the schedules. Spark ingests generated data in several batches through
the commit queue, then the table is snapshotted, compacted, split, queried and read incrementally. Each step
prints what happened and how long it took.

``python -m statestore.local.demo [--rows N] [--batches B]``
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from spark_client import (
    DataStore,
    QueueCommitter,
    compact,
    ingest,
    local_session,
    query,
    read_added_since,
    split_partitions,
)
from statestore.instance import ResourceNames
from statestore.local.runtime import LocalRuntime
from statestore.model.schema import Schema


@dataclass
class Step:
    name: str
    seconds: float
    detail: str


class Report:
    """Progress as it happens, and a summary table at the end."""

    def __init__(self) -> None:
        self.steps: list[Step] = []

    @contextmanager
    def step(self, name: str) -> Iterator[list[str]]:
        print(f"-> {name} ...", flush=True)
        detail: list[str] = []
        started = time.perf_counter()
        yield detail
        seconds = time.perf_counter() - started
        self.steps.append(Step(name, seconds, "; ".join(detail)))
        print(f"   done in {seconds:.2f}s: {'; '.join(detail)}", flush=True)

    def summary(self) -> None:
        width = max(len(s.name) for s in self.steps)
        print("\nsummary")
        for s in self.steps:
            print(f"  {s.name:<{width}}  {s.seconds:>7.2f}s  {s.detail}")
        print(f"  {'total':<{width}}  {sum(s.seconds for s in self.steps):>7.2f}s")


def run(rows_per_batch: int, batches: int) -> None:
    """Run the walk-through on a fresh embedded endpoint."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "demo",
        "AWS_SECRET_ACCESS_KEY": "demo",
        "AWS_DEFAULT_REGION": "eu-west-2",
        "SPARK_LOCAL_IP": "127.0.0.1",
    }.items():
        os.environ.setdefault(name, value)
    report = Report()
    schema = Schema.of(
        {"key": "long"}, sort_keys={"ts": "long"}, values={"amount": "double", "note": "string"}
    )

    with report.step("start the embedded endpoint and local runtime") as detail:
        runtime = LocalRuntime.start(
            ResourceNames.for_instance("demo"), port=0, snapshot_interval=None, cleanup_interval=None
        )
        detail.append(
            f"DynamoDB Local at {runtime.dynamodb_endpoint_url}, moto (S3, SQS) at {runtime.endpoint_url}, "
            "instance 'demo'"
        )
    with runtime:
        with report.step("start Spark") as detail:
            spark: SparkSession = local_session("statestore-demo", cores=2, shuffle_partitions=4)
            spark.sparkContext.setLogLevel("ERROR")
            detail.append(f"Spark {spark.version}, local[2]")
        try:
            _walk_through(spark, runtime, report, schema, rows_per_batch, batches)
        finally:
            spark.stop()
    report.summary()


def _walk_through(
    spark: SparkSession,
    runtime: LocalRuntime,
    report: Report,
    schema: Schema,
    rows_per_batch: int,
    batches: int,
) -> None:
    key_space = 1_000_000
    client = runtime.client()
    data = DataStore.s3(runtime.resources.bucket, endpoint_url=runtime.endpoint_url)
    committer = QueueCommitter(runtime.sender(), wait_timeout=120)

    with report.step("create a table with split points") as detail:
        table = client.create_table(f"events-{uuid.uuid4().hex[:6]}", schema, [250_000, 500_000, 750_000])
        store = client.state_store(table.table_id)
        detail.append(
            f"{table.table_name} ({table.table_id[:8]}), {len(store.state().leaf_partitions())} leaves"
        )

    def batch_frame(batch: int) -> DataFrame:
        return spark.range(rows_per_batch, numPartitions=2).selectExpr(
            f"pmod(xxhash64(id, {batch}), {key_space}) AS key",
            f"id + {batch * rows_per_batch} AS ts",
            "cast(pmod(xxhash64(id), 100000) AS double) / 100 AS amount",
            f"concat('batch-{batch}-', cast(id AS string)) AS note",
        )

    watermark = 0
    for batch in range(batches):
        with report.step(f"ingest batch {batch + 1}/{batches} through the commit queue") as detail:
            result = ingest(batch_frame(batch), store, data, committer)
            outcome = result.outcome
            if outcome is None or not outcome.committed:
                raise SystemExit(f"ingest batch {batch + 1} was not committed: {outcome}")
            detail.append(
                f"{result.rows:,} rows, {len(result.files)} files, committed at transaction "
                f"{outcome.transaction_number} ({result.rows_per_second:,.0f} rows/s)"
            )
        if batch == batches // 2 - 1:
            watermark = outcome.transaction_number or 0
    total_rows = rows_per_batch * batches

    with report.step("snapshot (the scheduled snapshot Lambda)") as detail:
        detail.append(_snapshot_summary(runtime.run_snapshots()))

    with report.step("compact every leaf partition") as detail:
        compacted = compact(spark, store, data, committer)
        state = store.state()
        detail.append(
            f"{len(compacted.committed)} jobs committed, {len(compacted.lost)} lost; now "
            f"{sum(1 for _ in state.file_references())} references, "
            f"{len(state.unreferenced_files())} files awaiting GC"
        )

    with report.step("split leaf partitions above 150,000 rows") as detail:
        decisions = split_partitions(spark, store, data, committer, max_rows=150_000)
        done = [d for d in decisions if d.outcome is not None and d.outcome.committed]
        detail.append(f"{len(done)} partitions split; now {len(store.state().leaf_partitions())} leaves")

    with report.step("compact again (pushes references down to the new leaves)") as detail:
        compacted = compact(spark, store, data, committer)
        detail.append(f"{compacted.references_split} references split, {len(compacted.committed)} jobs")

    with report.step("query a region and check it against a full scan") as detail:
        region = {"key": (100_000, 300_000)}
        answer = query(spark, store, data, region).count()
        everything = query(spark, store, data)
        expected = everything.where("key >= 100000 AND key < 300000").count()
        scanned = everything.count()
        if answer != expected or scanned != total_rows:
            raise SystemExit(f"query mismatch: {answer} vs {expected}, full scan {scanned} vs {total_rows}")
        detail.append(f"{answer:,} rows in key [100000, 300000), equal to the filtered full scan")

    with report.step(f"read incrementally after transaction {watermark}") as detail:
        added = read_added_since(spark, store, data, watermark)
        count = added.rows.count()
        expected_new = rows_per_batch * (batches - batches // 2)
        if count != expected_new:
            raise SystemExit(f"incremental read returned {count} rows, expected {expected_new}")
        detail.append(
            f"{count:,} rows from {len(added.files)} files added in transactions "
            f"{added.from_watermark + 1}..{added.to_watermark}; next watermark {added.to_watermark}"
        )

    with report.step("snapshot and cleanup (the scheduled Lambdas)") as detail:
        detail.append(_snapshot_summary(runtime.run_snapshots()))
        clean = runtime.run_cleanup()
        detail.append(
            f"cleanup: {clean['log_entries_deleted']} log entries, {clean['snapshots_deleted']} snapshots, "
            f"{clean['data_files_deleted']} data files deleted (compacted inputs wait out the GC delay)"
        )

    state = store.state()
    print(
        f"\ntable {table.table_name}: {len(state.leaf_partitions())} leaf partitions, "
        f"{len(state.files_by_name)} files, {sum(1 for _ in state.file_references())} references, "
        f"{state.transaction_number} transactions; {total_rows:,} rows"
    )


def _snapshot_summary(summary: dict[str, Any]) -> str:
    written = ", ".join(f"at transaction {n}" for n in summary["written"].values()) or "none"
    return f"snapshot written {written}, {summary['skipped']} table(s) skipped"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rows", type=int, default=250_000, help="rows per ingest batch (default 250,000)")
    parser.add_argument("--batches", type=int, default=4, help="ingest batches (default 4)")
    args = parser.parse_args(argv)
    if args.rows < 1 or args.batches < 2:
        parser.error("--rows must be >= 1 and --batches >= 2")
    run(args.rows, args.batches)
    return 0


if __name__ == "__main__":
    sys.exit(main())
