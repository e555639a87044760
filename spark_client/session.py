"""A small local Spark session for tests, benchmarks and the demo."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

from spark_client.datasource import FILTER_PUSHDOWN_CONF, register


def local_session(app_name: str = "statestore", cores: int = 2, shuffle_partitions: int = 4) -> SparkSession:
    """A ``local[cores]`` session with the UI off and few shuffle partitions (this is a small machine), and
    ``format("statestore-table")`` registered, with Python filter pushdown on (Spark 4.1+; 4.0 ignores it).

    Python workers run this interpreter unless ``PYSPARK_PYTHON`` says otherwise.
    """
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.default.parallelism", str(cores))
        .config("spark.driver.memory", "2g")
        .config("spark.python.worker.reuse", "true")
        .config(FILTER_PUSHDOWN_CONF, "true")
        .getOrCreate()
    )
    register(spark)
    return spark
