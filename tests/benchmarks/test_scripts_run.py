"""The benchmark scripts still run against the code as it is: each one's small run, recorded elsewhere
(``STATESTORE_BENCHMARK_RESULTS``), so the recorded figures are not replaced. A change to the protocol that
a script's synthetic setup no longer follows shows here, not only when someone runs the script whole.
What the figures are is not judged: a small run's are not the targets'."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("benchmark_results", ROOT / "benchmarks" / "results.py")
assert _spec is not None and _spec.loader is not None
results = sys.modules["benchmark_results"] = importlib.util.module_from_spec(_spec)  # its dataclasses ask
_spec.loader.exec_module(results)

# Scripts that run on the in-memory stores, with arguments that make their run small.
SMALL_RUNS = {
    "bench_many_tables": ("--scale", "0.02", "--commits", "2000"),
    "bench_model": ("--quick",),
    "bench_batch_scale": ("--batches", "10", "--rounds", "1", "--references", "100000", "--leaves", "1000"),
    "bench_commit_path": ("--transactions", "20", "--references", "10000"),
    "bench_planners": ("--references", "10000", "--leaves", "100"),
    "bench_orphan_sweep": ("--quick",),
}


@pytest.mark.parametrize(("script", "arguments"), SMALL_RUNS.items(), ids=list(SMALL_RUNS))
def test_a_benchmark_script_runs_and_records_its_figures_where_it_is_told(
    script: str, arguments: tuple[str, ...], tmp_path: Path
) -> None:
    run_small(script, arguments, tmp_path)


@pytest.mark.dynamodb_local
def test_the_file_stores_script_runs_its_garbage_collection_case_on_both_stores(tmp_path: Path) -> None:
    """Its GC case on DynamoDB Local and on PostgreSQL (the other cases' quick runs take minutes: they are
    left to ``make bench-file-stores``). A failed case is reported in the output, not by a crash."""
    run_small("bench_file_stores", ("--quick", "--only", "gc"), tmp_path)


def run_small(script: str, arguments: tuple[str, ...], tmp_path: Path) -> None:
    recorded = ROOT / "benchmarks" / "results" / f"{script}.json"
    before = recorded.read_bytes() if recorded.exists() else None
    environment = {**os.environ, results.RESULTS_DIR_ENV: str(tmp_path)}

    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / f"{script}.py"), *arguments],
        cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=600,
    )  # fmt: skip

    # 1 is a target missed, which a small run may; a crash exits 1 too, but records nothing.
    assert done.returncode in (0, 1), done.stderr[-3000:]
    for output in (done.stdout, done.stderr):  # a script running its cases in children prints theirs
        assert "Traceback" not in output, output[-3000:]
    run = results.read(tmp_path / f"{script}.json")
    assert run.script == script and run.arguments == arguments and run.figures
    assert (recorded.read_bytes() if recorded.exists() else None) == before
