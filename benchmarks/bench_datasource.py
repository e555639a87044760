"""Reads planned from the state against ``spark.read.parquet`` on the same files: ``read_table`` (Spark's own
Parquet reader), ``format("statestore-table")`` (the Python data source) and ``query()``.

Generated data as in ``bench_spark.py``: ``--rows`` rows (default 1,000,000) of ``key long`` (pseudo-random
over [0, 10^9)), ``ts long`` (sort key), ``value string``, ``amount double``, in a table cut into
``--leaves`` (default 16) leaf partitions. The table's state is in DynamoDB on a moto server started in
this process (the source's planning reads it from there, as it would from AWS); its data files are in a
local directory, so ``spark.read.parquet`` can read the very same files as the baseline (Spark has no
``s3a`` here). Spark ``local[2]``.

Figures, each the best of ``--repeat`` runs after one warm-up run:

- **ingest**: ``df.write.format("statestore-table").mode("append")`` (synchronous commit), and for
  reference the functional ``ingest()``, on the same input (cached in memory first);
- **full scan**: every row and column, materialised by Spark's ``noop`` sink, through
  ``spark_client.read_table`` (planned from the state on the driver, read by Spark's Parquet reader),
  through the data source, through ``query()``, and through ``spark.read.parquet`` over the table's files;
- **1/4 region**: ``key`` in [10^9/4, 10^9/2), about a quarter of the rows. ``read_table`` and the data
  source prune partitions (the data source with pushed filters on Spark 4.1+, the ``region`` option on
  4.0); parquet reads every file's footer and skips row groups by their statistics.

Target: ``read_table`` takes at most 1.2x the time of ``spark.read.parquet``, for both reads, in the same
run (PASS/FAIL). The data source's and ``query()``'s ratios are printed beside it: they stream the rows
through Python workers, which is what ``read_table`` avoids where Spark reaches the files.

Read times include planning; the data source's is reported alone too: Spark asks two Python workers for
the schema and the input partitions, and each connects to the emulator and loads what it needs.

    python benchmarks/bench_datasource.py [--rows 1000000] [--leaves 16] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
for name, value in {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "eu-west-2",
}.items():
    os.environ.setdefault(name, value)

import pyspark  # noqa: E402
from pyspark.sql import DataFrame, SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from spark_client import DataStore, SyncCommitter, ingest, local_session, query  # noqa: E402
from spark_client.datasource import FILTER_PUSHDOWN_AVAILABLE, FORMAT  # noqa: E402
from spark_client.table_read import read_table  # noqa: E402
from statestore.instance import ResourceNames  # noqa: E402
from statestore.local.moto_server import MotoServer  # noqa: E402
from statestore.model.schema import Schema  # noqa: E402
from statestore.services.client import StateStoreClient  # noqa: E402

SCHEMA = Schema.of({"key": "long"}, sort_keys={"ts": "long"}, values={"value": "string", "amount": "double"})
KEY_SPACE = 1_000_000_000
LOW, HIGH = KEY_SPACE // 4, KEY_SPACE // 2
TARGET = 1.2  # read_table's time over spark.read.parquet's, at most


def generated(spark: SparkSession, rows: int) -> DataFrame:
    ids = spark.range(rows, numPartitions=4)
    return ids.select(
        F.pmod(F.xxhash64("id"), F.lit(KEY_SPACE)).alias("key"),
        (F.col("id") % 1000).alias("ts"),
        F.concat(F.lit("value-"), F.col("id").cast("string")).alias("value"),
        (F.col("id") / 7.0).alias("amount"),
    ).cache()


def split_points(leaves: int) -> list[int]:
    return [KEY_SPACE * i // leaves for i in range(1, leaves)]


def best_of(repeat: int, run: Callable[[], object]) -> float:
    """Seconds of the fastest of ``repeat`` runs, after one untimed warm-up run."""
    run()
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)


def materialise(df: DataFrame) -> None:
    """Read every row and column of ``df`` into Spark, keeping nothing (Spark's ``noop`` sink)."""
    df.write.format("noop").mode("overwrite").save()


class Bench:
    def __init__(self, spark: SparkSession, rows: int, leaves: int, repeat: int, directory: Path) -> None:
        self.spark, self.rows, self.leaves, self.repeat, self.directory = (
            spark,
            rows,
            leaves,
            repeat,
            directory,
        )
        self.server = MotoServer.start()
        self.resources = ResourceNames.for_instance(f"bench{uuid.uuid4().hex[:10]}")
        self.client = StateStoreClient.for_aws(self.resources, self.server.endpoint_url, provision=True)

    def table(self, name: str) -> dict[str, str]:
        self.client.create_table(name, SCHEMA, split_points(self.leaves))
        return {
            "table": name,
            "resources": self.resources.to_json(),
            "endpoint": self.server.endpoint_url,
            "data": str(self.directory / name),
        }

    def ingest_figures(self, df: DataFrame) -> tuple[float, float, dict[str, str]]:
        """Seconds to append ``df`` through the data source and through ``ingest()``; the table written."""
        tables = iter(range(1_000))

        def append() -> dict[str, str]:
            options = self.table(f"ingest-{next(tables)}")
            df.write.format(FORMAT).options(**options, committer="sync").mode("append").save()
            return options

        source_seconds = best_of(self.repeat, append)
        data = DataStore.local(self.directory / "functional")

        def functional() -> None:
            table_id = self.client.create_table(
                f"functional-{next(tables)}", SCHEMA, split_points(self.leaves)
            )
            store = self.client.state_store(table_id.table_id)
            ingest(df, store, data, SyncCommitter(self.client.state_store))

        functional_seconds = best_of(self.repeat, functional)
        return source_seconds, functional_seconds, append()

    def read_figures(self, options: dict[str, str]) -> dict[str, tuple[float, int]]:
        """``{read: (best seconds, rows)}`` for the full scan and the 1/4 region, by every path."""
        spark = self.spark
        store = self.client.state_store(options["table"])
        state = store.state()
        paths = [str(Path(options["data"]) / f.filename) for f in state.files()]
        data = DataStore.local(options["data"])
        condition = (F.col("key") >= LOW) & (F.col("key") < HIGH)

        def source(region: bool) -> DataFrame:
            reader = spark.read.format(FORMAT).options(**options)
            if region and not FILTER_PUSHDOWN_AVAILABLE:
                reader = reader.option("region", json.dumps({"key": [LOW, HIGH]}))
            df = reader.load()
            return df.filter(condition) if region else df

        def parquet(region: bool) -> DataFrame:
            df = spark.read.parquet(*paths)
            return df.filter(condition) if region else df

        def functional(region: bool) -> DataFrame:
            return query(spark, store, data, {"key": (LOW, HIGH)} if region else None)

        connection = {k: v for k, v in options.items() if k != "table"}

        def planned(region: bool) -> DataFrame:
            df = read_table(
                spark, options["table"], region={"key": (LOW, HIGH)} if region else None, options=connection
            )
            return df.filter(condition) if region else df

        region_rows = source(True).count()
        if parquet(True).count() != region_rows or source(False).count() != self.rows:
            raise SystemExit("the data source and spark.read.parquet disagree on the rows")
        if planned(True).count() != region_rows or planned(False).count() != self.rows:
            raise SystemExit("read_table and spark.read.parquet disagree on the rows")

        def timed(make: Callable[[bool], DataFrame], region: bool) -> float:
            return best_of(self.repeat, lambda: materialise(make(region)))

        def plan() -> None:
            source(False).rdd.getNumPartitions()  # schema() and partitions(), each in a Python worker

        out = {"files": (0.0, len(paths)), "planning": (best_of(self.repeat, plan), 0)}
        paths_by_name = [
            ("read_table", planned),
            ("source", source),
            ("parquet", parquet),
            ("query()", functional),
        ]
        for name, make in paths_by_name:
            out[f"{name} full"] = (timed(make, False), self.rows)
            out[f"{name} region"] = (timed(make, True), region_rows)
        return out

    def close(self) -> None:
        self.server.stop()


def verdict(ratio: float) -> str:
    return "PASS" if ratio <= TARGET else "FAIL"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--leaves", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # the moto server's request log
    spark = local_session("bench-datasource", cores=2, shuffle_partitions=4)
    spark.sparkContext.setLogLevel("ERROR")
    with tempfile.TemporaryDirectory(prefix="bench-datasource-") as directory:
        bench = Bench(spark, args.rows, args.leaves, args.repeat, Path(directory))
        try:
            df = generated(spark, args.rows)
            df.count()  # generate once, outside the timings
            source_ingest, functional_ingest, options = bench.ingest_figures(df)
            reads = bench.read_figures(options)
        finally:
            bench.close()
            spark.stop()

    pushdown = (
        "pushed filters" if FILTER_PUSHDOWN_AVAILABLE else "the region option (no Python filter pushdown)"
    )
    print(
        f"\nPySpark {pyspark.__version__}, local[2], {args.rows:,} rows, {args.leaves} leaves, best of "
        f"{args.repeat}; state in DynamoDB on moto (this process), {reads['files'][1]} data files in a local "
        "directory"
    )
    print(f"region reads prune with {pushdown}")
    print(f"planning a read through the data source: {reads['planning'][0]:.2f} s (in every read below)\n")
    print(f"{'ingest':<44}{'rows/s':>12}")
    print(f"{'  df.write.format(' + repr(FORMAT) + ')':<44}{args.rows / source_ingest:>12,.0f}")
    print(f"{'  ingest() (functional API)':<44}{args.rows / functional_ingest:>12,.0f}")
    from results import Figure, record  # beside this script

    spark_cpu = "CPU: local[2] on the machine's cores"
    figures = [
        Figure(
            "planning a read through the data source",
            reads["planning"][0],
            "s",
            "Python workers importing the client and reading the state from the emulator",
        ),
        Figure(f"df.write.format({FORMAT!r})", args.rows / source_ingest, "rows/s", spark_cpu),
        Figure("ingest() (functional API)", args.rows / functional_ingest, "rows/s", spark_cpu),
    ]
    paths = ("parquet", "read_table", "source", "query()")
    print(
        f"\n{'read':<12}{'rows':>11}" + "".join(f"{p + ' s':>14}" for p in paths) + "  read_table / parquet"
    )
    for read in ("full", "region"):
        seconds = {p: reads[f"{p} {read}"][0] for p in paths}
        rows = reads[f"parquet {read}"][1]
        ratio = seconds["read_table"] / seconds["parquet"]
        label = "full scan" if read == "full" else "1/4 region"
        print(
            f"{label:<12}{rows:>11,}"
            + "".join(f"{seconds[p]:>14.2f}" for p in paths)
            + f"  {ratio:.2f}x <= {TARGET:g}x {verdict(ratio)}"
        )
        others = ", ".join(f"{p} {seconds[p] / seconds['parquet']:.2f}x" for p in ("source", "query()"))
        figures.append(
            Figure.judged(
                f"{label}: read_table time / spark.read.parquet time (PySpark {pyspark.__version__})",
                ratio,
                "x",
                bound_by=spark_cpu + "; Spark's per-file cost",
                at_most=TARGET,
            )
        )
        for p in ("source", "query()"):
            figures.append(
                Figure(f"{label}: {p} time / parquet time", seconds[p] / seconds["parquet"], "x", spark_cpu)
            )
        print(f"{'':<12}{'':>11}  (time / parquet's: {others})")
    print("(seconds, best of the runs; read_table reads with Spark's Parquet reader, the data source and")
    print(" query() through Python workers)")
    record(__file__, figures)


if __name__ == "__main__":
    main()
