"""Compaction's merge of a partition bigger than the memory it is allowed: it fits, loading it would not.

Each merge runs in a child process (``tests/unit/merge_under_limit.py``) whose address space is limited
to a fixed amount above what it holds after its imports.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from spark_client.columns import arrow_schema
from spark_client.data_store import DataStore
from spark_client.file_io import DataFileWriter
from spark_client.merge import first_descent
from tests.unit.merge_under_limit import LIMITED_ENV, SCHEMA, input_names

REPOSITORY = Path(__file__).resolve().parents[2]
FILES = 4
ROWS_PER_FILE = 750_000
ROWS = FILES * ROWS_PER_FILE
LIMIT_MIB = 256  # the streaming merge needs about 130 MiB of address space on top of its imports
PAD = "x" * 100  # about 130 bytes a row in Arrow: the partition is about 380 MB


def write_partition(data: DataStore) -> int:
    """Sorted input files whose keys interleave (every round of the merge takes from every input); returns
    the partition's size in Arrow (bytes), counted one piece at a time."""
    target = arrow_schema(SCHEMA)
    size = 0
    for i, name in enumerate(input_names(FILES)):
        writer = DataFileWriter(data, name, target)
        for start in range(0, ROWS_PER_FILE, 100_000):
            n = min(100_000, ROWS_PER_FILE - start)
            keys = pc.add(pc.multiply(pa.array(range(start, start + n), pa.int64()), FILES), i)
            values = pc.binary_join_element_wise(pa.array([PAD] * n), pc.cast(keys, pa.string()), "")
            table = pa.table({"key": keys, "ts": pc.negate(keys), "value": values}, schema=target)
            size += table.nbytes
            writer.write_table(table)
        writer.close()
    return size


@pytest.fixture(scope="module")
def partition(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    directory = tmp_path_factory.mktemp("partition")
    return directory, write_partition(DataStore.local(directory))


def merge_in_child(mode: str, directory: Path) -> dict[str, Any]:
    env = {**os.environ, **LIMITED_ENV, "PYTHONPATH": str(REPOSITORY)}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.unit.merge_under_limit",
            mode,
            str(directory),
            str(FILES),
            str(LIMIT_MIB),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3_000:]
    outcome: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return outcome


def test_a_partition_larger_than_the_memory_limit_is_merged_whole_and_sorted(
    partition: tuple[Path, int],
) -> None:
    directory, partition_bytes = partition
    assert partition_bytes > 1.4 * LIMIT_MIB * 2**20  # the partition does not fit in the limit

    outcome = merge_in_child("stream", directory)

    assert outcome["ok"], outcome["error"]
    assert outcome["rows"] == ROWS
    assert outcome["pool_peak_bytes"] < partition_bytes / 5
    expected_key = 0
    with pq.ParquetFile(directory / "out.parquet") as output:
        assert output.metadata.num_rows == ROWS
        for batch in output.iter_batches(batch_size=100_000, columns=["key", "ts"]):
            assert first_descent([batch.column("key"), batch.column("ts")]) is None
            keys = batch.column("key")
            assert keys.equals(pa.array(range(expected_key, expected_key + len(keys)), pa.int64()))
            expected_key += len(keys)
    assert expected_key == ROWS


def test_loading_the_same_partition_into_memory_fails_under_the_same_limit(
    partition: tuple[Path, int],
) -> None:
    """What compaction did before: the failure the streaming merge removes (and proof the limit bites)."""
    directory, _ = partition

    outcome = merge_in_child("load-all", directory)

    assert not outcome["ok"] and "MemoryError" in outcome["error"]
