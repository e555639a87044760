"""Run the commit-path simulation over many seeds: ``python -m tests.simulation --seeds 0:1000 --steps 300``.

Prints how many seeds and steps ran, the faults injected and the invariant violations (the first broken
invariant of a seed stops it, with the command that replays it).
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time

from tests.simulation.world import run_for_summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.simulation", description=__doc__)
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--seed", type=int, help="replay one seed")
    which.add_argument("--seeds", default="0:200", help="a range of seeds, START:STOP (default 0:200)")
    parser.add_argument("--steps", type=int, default=300, help="steps per seed (default 300)")
    parser.add_argument("--committers", type=int, default=2, help="committer instances (default 2)")
    parser.add_argument("--jobs", type=int, default=1, help="processes running seeds at once (default 1)")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.committers < 1 or args.jobs < 1:
        parser.error("--steps, --committers and --jobs must be at least 1")
    if args.seed is not None:
        seeds = range(args.seed, args.seed + 1)
    else:
        start, _, stop = args.seeds.partition(":")
        try:
            seeds = range(int(start), int(stop))
        except ValueError:
            parser.error(f"--seeds must be START:STOP, got {args.seeds!r}")
    started = time.monotonic()
    steps = entries = violations = resent = redriven = deleted = leftovers = guarded = cold_guarded = 0
    faults: dict[str, int] = {}
    jobs = [(seed, args.steps, args.committers) for seed in seeds]
    with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
        for summary in pool.imap_unordered(run_for_summary, jobs, chunksize=4):
            if "violation" in summary:
                violations += 1
                print(f"seed {summary['seed']}: INVARIANT BROKEN: {summary['violation']}", file=sys.stderr)
                continue
            steps += summary["steps"]
            resent += summary["resends_after_redrive"]
            redriven += summary["redrives"]
            entries += summary["entries"]
            deleted += summary["deleted_tables"]
            leftovers += summary["leftover_objects_deleted"]
            guarded += summary["guarded_commits"]
            cold_guarded += summary["cold_guarded_commits"]
            for kind, count in summary["faults"].items():
                faults[kind] = faults.get(kind, 0) + count
    elapsed = time.monotonic() - started
    print(
        f"seeds: {len(seeds)}  steps: {steps:,}  log entries: {entries:,}  "
        f"violations: {violations}  ({elapsed:.1f}s, {steps / max(elapsed, 1e-9):,.0f} steps/s)"
    )
    print(
        f"requests resent after their message was dead-lettered: {resent:,}; "
        f"dead letters redriven: {redriven:,}; tables deleted (and others created): {deleted:,}; "
        f"objects late writers left under their prefixes, deleted: {leftovers:,}"
    )
    print(
        f"batches appended from a table's guard: {guarded:,}, of them from a guard read from the table's "
        f"snapshot: {cold_guarded:,}"
    )
    print("faults injected: " + ", ".join(f"{k} {v:,}" for k, v in sorted(faults.items())))
    verdict = "PASS" if steps >= 1_000_000 and not violations else "FAIL"
    print(f"soak goal (>= 1,000,000 steps, 0 violations): {verdict}")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
