"""Compaction through Spark of a leaf holding more data than a Python worker may use.

``spark.executor.pyspark.memory`` is fixed when a session starts, so this runs its own session in a child
process (``tests/spark/compact_under_limit.py``) rather than the shared one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.spark.compact_under_limit import FILES, ROWS_PER_FILE
from tests.unit.merge_under_limit import LIMITED_ENV

pytestmark = pytest.mark.spark

REPOSITORY = Path(__file__).resolve().parents[2]
LIMIT_MIB = 640  # the worker takes about 300 MiB of address space for Python, PySpark and pyarrow


def test_a_leaf_larger_than_the_python_worker_memory_limit_is_compacted(tmp_path: Path) -> None:
    env = {**os.environ, **LIMITED_ENV, "PYTHONPATH": str(REPOSITORY)}
    result = subprocess.run(
        [sys.executable, "-m", "tests.spark.compact_under_limit", str(tmp_path), str(LIMIT_MIB)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )

    assert result.returncode == 0, result.stderr[-5_000:]
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome["worker_limit_bytes"] == LIMIT_MIB * 2**20  # the limit applied in local mode
    assert outcome["partition_bytes"] > 1.2 * outcome["worker_limit_bytes"]
    rows = FILES * ROWS_PER_FILE
    assert outcome["committed"] == [["root", rows]] and outcome["lost"] == []
    assert [count for _, count in outcome["outputs"]] == [rows]  # one file holds the leaf now
    # The old load-everything merge fails in a worker under the same limit: the limit bites.
    assert outcome["old_merge_memory_error"]
