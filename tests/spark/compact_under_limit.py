"""Compact one leaf whose files hold more data than a Spark Python worker may use; print the outcome.

    python -m tests.spark.compact_under_limit DATA_DIR LIMIT_MIB

A local Spark session of its own (the limit is fixed when a session starts) with
``spark.executor.pyspark.memory=LIMIT_MIB``: PySpark sets each Python worker's address-space limit
(``RLIMIT_AS``) to it, in local mode too. The leaf's files are written on the driver, which has no limit.
Then, in a worker under the same limit, what compaction did before (load every input, sort, write) is
tried on the same files. Run with :data:`tests.unit.merge_under_limit.LIMITED_ENV` (see there why).
Prints one JSON object.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession

from spark_client.columns import arrow_schema
from spark_client.committer import SyncCommitter
from spark_client.compaction import compact
from spark_client.data_store import DataStore
from spark_client.file_io import DataFileWriter
from statestore.model.files import FileReference
from statestore.services.client import StateStoreClient
from statestore.transactions import AddFiles
from tests.unit.merge_under_limit import SCHEMA, load_all

FILES = 4
ROWS_PER_FILE = 750_000
PAD = "x" * 250  # about 280 bytes a row in Arrow: 3M rows are about 830 MB


def write_leaf_files(data: DataStore, table_id: str, leaf_id: str) -> tuple[list[FileReference], int]:
    """Sorted files with interleaving keys; their references and the data's size in Arrow (bytes)."""
    target = arrow_schema(SCHEMA)
    references, size = [], 0
    for i in range(FILES):
        writer = DataFileWriter(data, data.new_data_file(table_id, leaf_id), target)
        for start in range(0, ROWS_PER_FILE, 100_000):
            n = min(100_000, ROWS_PER_FILE - start)
            keys = pc.add(pc.multiply(pa.array(range(start, start + n), pa.int64()), FILES), i)
            values = pc.binary_join_element_wise(pa.array([PAD] * n), pc.cast(keys, pa.string()), "")
            table = pa.table({"key": keys, "ts": keys, "value": values}, schema=target)
            size += table.nbytes
            writer.write_table(table)
        writer.close()
        references.append(FileReference(writer.filename, leaf_id, writer.rows))
    return references, size


def main(directory: str, limit_mib: int) -> dict[str, Any]:
    spark = (
        SparkSession.builder.master("local[1]")
        .appName("compact-under-limit")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.executor.pyspark.memory", f"{limit_mib}m")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        client = StateStoreClient.in_memory()
        table_id = client.create_table("big-leaf", SCHEMA, []).table_id
        store = client.state_store(table_id)
        committer = SyncCommitter(client.state_store)
        data = DataStore.local(directory)
        (leaf,) = store.state().leaf_partitions()
        references, size = write_leaf_files(data, table_id, leaf.id)
        assert committer.commit(table_id, AddFiles(tuple(references)), wait=True).committed

        def worker_limit(_: Any) -> Iterator[int]:
            import resource

            yield resource.getrlimit(resource.RLIMIT_AS)[0]

        (limit,) = spark.sparkContext.parallelize([0], 1).mapPartitions(worker_limit).collect()
        result = compact(spark, store, data, committer)
        outputs = list(client.state_store(table_id).state().file_references())

        inputs = [(r.filename, None) for r in references]

        def old_merge(_: Any) -> Iterator[int]:
            yield load_all(data, inputs, f"tables/{table_id}/data/old-merge.parquet")

        try:
            spark.sparkContext.parallelize([0], 1).mapPartitions(old_merge).collect()
            old_error = None
        except Exception as e:  # the task's MemoryError arrives wrapped in Py4J's error
            old_error = str(e)
        return {
            "partition_bytes": size,
            "worker_limit_bytes": limit,
            "committed": [(f.job.partition_id, f.rows) for f in result.committed],
            "lost": [why for _, why in result.lost],
            "outputs": [(r.filename, r.number_of_rows) for r in outputs],
            "old_merge_memory_error": old_error is not None and "MemoryError" in old_error,
        }
    finally:
        spark.stop()


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], int(sys.argv[2]))))
