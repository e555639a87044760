"""What the Spark jobs' planners cost on a table of 1,000,000 file references over 100,000 leaves.

The table is ``bench_model.big_state`` (20% of its references claimed), loaded from its snapshot, so its
files are columns. Timed in this process, one after another (CPU seconds are printed beside wall clock):

- ``plan_compaction_jobs``: a job for every leaf with 2 or more unassigned references (its oldest 32);
- the same plan made the way the planner used to make it, as the baseline of the same run: every
  unassigned reference of the leaves as a ``FileReference`` (``references_in_partitions``), each leaf's
  sorted in Python by time and name;
- ``plan_reference_splits`` (no reference sits above the leaves here) and ``rows_per_leaf``.

Not judged: no issue sets a target. What bounds them is CPU: Arrow's sort of the chosen references, and
Python objects for what a plan returns (a job, its region, two UUIDs per leaf).

    python benchmarks/bench_planners.py [--references 1000000] [--leaves 100000]
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from operator import attrgetter
from typing import Any

from spark_client.compaction import CompactionJob, plan_compaction_jobs, plan_reference_splits
from spark_client.data_store import DataStore
from spark_client.splitting import rows_per_leaf
from statestore.codec.parquet import state_from_parquet, state_to_parquet
from statestore.state.table_state import TableState

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from bench_model import SCHEMA, big_state  # noqa: E402
from results import Figure, record  # noqa: E402

FIGURES: list[Figure] = []

_OLDEST_FIRST = attrgetter("last_update_time", "filename")


def plan_by_objects(
    state: TableState, data: DataStore, table_id: str, min_files: int = 2, max_files: int = 32
) -> list[CompactionJob]:
    """``plan_compaction_jobs`` as it used to be: an object per unassigned reference."""
    by_leaf = state.references_in_partitions(state.leaf_ids(), unassigned=True)
    jobs = []
    for partition_id, refs in sorted(by_leaf.items()):
        if len(refs) < min_files:
            continue
        chosen = sorted(refs, key=_OLDEST_FIRST)[:max_files]
        jobs.append(
            CompactionJob(
                job_id=str(uuid.uuid4()),
                partition_id=partition_id,
                region=state.partition(partition_id).region,
                input_files=tuple(r.filename for r in chosen),
                output_file=data.new_data_file(table_id, partition_id),
            )
        )
    return jobs


def timed(label: str, run: Callable[[], Any], describe: Callable[[Any], str]) -> tuple[float, Any]:
    gc.collect()
    start, cpu_start = time.perf_counter(), time.process_time()
    result = run()
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    print(f"  {label:<44} {wall:>6.2f} s  (CPU {cpu:>5.2f} s)  {describe(result)}")
    FIGURES.append(
        Figure(f"{label} ({describe(result)}), CPU", cpu, "s", "CPU: Arrow's selection and sort, Python")
    )
    return wall, result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--references", type=int, default=1_000_000)
    parser.add_argument("--leaves", type=int, default=100_000)
    args = parser.parse_args(argv)

    print(
        f"Planners on {args.references:,} references over {args.leaves:,} leaves, "
        f"Python {sys.version.split()[0]}"
    )
    start = time.perf_counter()
    built = big_state(5, args.leaves, args.references)
    snapshot = state_to_parquet(built)
    transaction_number = built.transaction_number
    del built
    gc.collect()
    state = state_from_parquet(SCHEMA, *snapshot, transaction_number)
    print(f"  built, wrote and loaded the table in {time.perf_counter() - start:.1f} s (not judged)")
    data = DataStore.local(tempfile.mkdtemp(prefix="bench-planners-"))

    columns_wall, jobs = timed(
        "plan_compaction_jobs",
        lambda: plan_compaction_jobs(state, data, "t"),
        lambda jobs: f"{len(jobs):,} jobs",
    )
    objects_wall, baseline = timed(
        "the same plan by objects (the old planner)",
        lambda: plan_by_objects(state, data, "t"),
        lambda jobs: f"{len(jobs):,} jobs",
    )
    same = [(j.partition_id, j.input_files) for j in jobs] == [
        (j.partition_id, j.input_files) for j in baseline
    ]
    print(
        f"  both plans choose the same inputs for the same leaves: {same}; "
        f"speed-up {objects_wall / columns_wall:.1f}x"
    )
    del jobs, baseline
    timed("plan_reference_splits", lambda: plan_reference_splits(state), lambda r: f"{len(r):,} requests")
    timed("rows_per_leaf", lambda: rows_per_leaf(state), lambda rows: f"{len(rows):,} leaves")
    FIGURES.append(
        Figure.judged(
            "plan_compaction_jobs chooses the same inputs as the plan by objects (1 = yes)",
            int(same),
            "",
            bound_by="correctness, not speed",
            at_least=1,
        )
    )
    record(__file__, FIGURES)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
