"""Committer batches per second on a big table against a small one: does a batch cost what it changes?

Runs the committer (``BatchCommitter.process``) on in-memory stores, so the figures are the committer's own
CPU, with no network: batches of 10 commit requests (what the SQS event source hands the Lambda), each an
``AddFiles`` of 2 new files, on a table of 1,000 references over 100 leaves, on a table of 1,000,000 file
references over 100,000 leaf partitions (``bench_model.big_state``, loaded from a snapshot), and on an empty
table (one root partition, no files). The goal is the big table within 20% of the small one: a batch must
not cost in proportion to the table. Both search an index for each new file and partition; the empty table
has none to search (its files sit in the state's overlay), so big / empty, printed beside it and not judged,
also counts what having an index costs at all, not what the table's size adds.

On shared cores one measurement of 300 batches swings widely, so each table is measured in ``--rounds``
rounds, interleaved (empty, small, big, then again; a new empty and small table each round), and the
median of the rounds' ratios is judged.

Beside it, ``state.copy()`` of the big state is timed: what each group commit paid before a batch was tried
on the live state with an undo journal. Batches of ``ReleaseClaims`` on the big table are timed too (not
judged): a release must read the files holding the claims it frees, not every file of the table.
``--profile`` prints where the big table's batches spend their time.

    python benchmarks/bench_batch_scale.py [--batches 300] [--rounds 5] [--references 1000000] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import random
import statistics
import sys
import time
from collections.abc import Callable

from lambdas._runtime import Runtime
from statestore.engine.log_store import TransactionLogStateStore
from statestore.engine.requests import CommitRequest, encode_request
from statestore.engine.snapshots import SnapshotStore
from statestore.model.files import FileReference
from statestore.model.partitions import root_partition
from statestore.services.committer import BatchCommitter, MessageOutcome, ReceivedMessage
from statestore.store.memory import (
    InMemoryBlobStore,
    InMemoryCommitQueue,
    InMemorySnapshotMetadataStore,
    InMemoryTableIndex,
    InMemoryTransactionLog,
)
from statestore.store.tables import TableInfo
from statestore.transactions import AddFiles, InitialisePartitions, ReleaseClaims, Transaction

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from bench_model import SCHEMA, big_state  # noqa: E402
from results import Figure, record  # noqa: E402

CPU_BOUND = "CPU: the committer's Python on in-memory stores (no I/O)"

BATCH = 10
FILES_PER_REQUEST = 2
TARGET_RATIO = 0.8  # big table's batches/s over the small table's
SMALL_REFERENCES, SMALL_LEAVES = 1_000, 100
RELEASE_BATCHES = 30


def in_memory_runtime() -> Runtime:
    blobs = InMemoryBlobStore()
    return Runtime(
        tables=InMemoryTableIndex(),
        log=InMemoryTransactionLog(blobs),
        snapshots=SnapshotStore(InMemorySnapshotMetadataStore(), blobs),
        blobs=blobs,
        dead_letters=InMemoryCommitQueue(),
    )


def empty_table(rt: Runtime, name: str = "empty") -> tuple[str, list[str]]:
    info = TableInfo.new(name, SCHEMA)
    rt.tables.create(info)
    root = root_partition(SCHEMA)
    TransactionLogStateStore(info.table_id, SCHEMA, rt.log, rt.snapshots).commit(
        InitialisePartitions((root,))
    )
    return info.table_id, [root.id]


def big_table(rt: Runtime, references: int, leaves: int, name: str = "big") -> tuple[str, list[str]]:
    """A table whose log holds its partition tree (entry 1) and whose snapshot at 1 holds the files."""
    info = TableInfo.new(name, SCHEMA)
    rt.tables.create(info)
    state = big_state(5, leaves, references)
    store = TransactionLogStateStore(info.table_id, SCHEMA, rt.log, rt.snapshots)
    store.commit(InitialisePartitions(tuple(state.partitions())))
    assert state.transaction_number == 1
    rt.snapshots.write(info.table_id, state, int(time.time() * 1000))
    return info.table_id, [p.id for p in state.leaf_partitions()]


def batches_of(table_id: str, leaf_ids: list[str], count: int, tag: str) -> list[list[ReceivedMessage]]:
    rng = random.Random(7)

    def add_files(b: int, i: int) -> Transaction:
        return AddFiles(
            tuple(
                FileReference(f"tables/{table_id}/data/{tag}-{b}-{i}-{f}.parquet", rng.choice(leaf_ids), 1000)
                for f in range(FILES_PER_REQUEST)
            )
        )

    return messages(table_id, count, tag, add_files)


def release_batches_of(table_id: str, job_ids: list[str], count: int) -> list[list[ReceivedMessage]]:
    """Batches of requests that each release one job's claims (``job_ids[i]``, in turn)."""
    return messages(table_id, count, "release", lambda b, i: ReleaseClaims((job_ids[b * BATCH + i],)))


def messages(
    table_id: str, count: int, tag: str, transaction: Callable[[int, int], Transaction]
) -> list[list[ReceivedMessage]]:
    """``count`` batches of ``BATCH`` commit requests, request ``i`` of batch ``b`` committing
    ``transaction(b, i)``."""
    now = time.time_ns() // 1_000_000
    out = []
    for b in range(count):
        batch = []
        for i in range(BATCH):
            request = CommitRequest.new(table_id, transaction(b, i))
            batch.append(ReceivedMessage(f"{tag}-{b}-{i}", encode_request(request), table_id, 1, now))
        out.append(batch)
    return out


def drive(committer: BatchCommitter, batches: list[list[ReceivedMessage]]) -> None:
    for batch in batches:
        results = committer.process(batch)
        bad = [r for r in results if r.outcome is not MessageOutcome.COMMITTED]
        if bad:
            raise RuntimeError(f"benchmark request not committed: {bad[0]}")


def measure(
    rt: Runtime, table_id: str, leaf_ids: list[str], batches: int, profile: bool, tag: str = "m"
) -> tuple[float, float]:
    """Batches per second (wall clock, CPU of this process), after one warm-up batch that loads the state.
    ``tag`` makes the files' names new on a table measured before."""
    return timed(
        rt,
        batches_of(table_id, leaf_ids, 1, f"warm-{tag}"),
        batches_of(table_id, leaf_ids, batches, tag),
        profile,
    )


def timed(
    rt: Runtime,
    warm_up: list[list[ReceivedMessage]],
    plan: list[list[ReceivedMessage]],
    profile: bool = False,
) -> tuple[float, float]:
    """Batches of ``plan`` per second (wall clock, CPU of this process) through a new committer, after the
    batches of ``warm_up`` (which load the state).

    The committer always loads: what is measured is a batch on the loaded state. (The stack's committer
    would read the big table's guard from its snapshot instead, as these batches only add files, and
    append from that guard; ``bench_many_tables.py`` measures that path.)"""
    committer = BatchCommitter(
        rt.tables, rt.log, rt.snapshots, rt.blobs, rt.dead_letters, guard_first_references=1 << 62
    )
    drive(committer, warm_up)
    gc.collect()
    profiler = cProfile.Profile() if profile else None
    start, cpu_start = time.perf_counter(), time.process_time()
    if profiler is not None:
        profiler.enable()
    drive(committer, plan)
    if profiler is not None:
        profiler.disable()
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    if profiler is not None:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(15)
    return len(plan) / wall, len(plan) / cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--batches", type=int, default=300, help="batches per table and round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of the three tables (median judged)")
    parser.add_argument("--references", type=int, default=1_000_000)
    parser.add_argument("--leaves", type=int, default=100_000)
    parser.add_argument("--profile", action="store_true", help="profile the big table's last round")
    args = parser.parse_args(argv)

    print(
        f"Committer batches of {BATCH} AddFiles requests ({FILES_PER_REQUEST} files each), in-memory stores, "
        f"{args.batches} batches per table, Python {sys.version.split()[0]}"
    )
    rt = in_memory_runtime()
    start = time.perf_counter()
    big_id, big_leaves = big_table(rt, args.references, args.leaves)
    print(f"  built the big table in {time.perf_counter() - start:.1f} s (not judged)")
    # Rounds of the three tables in turn: what a busy moment costs falls on one round, not on one table.
    # The empty table has no index to search; the small one (1,000 references over 100 leaves) searches
    # one for each new file and partition, as the big table's batches do.
    rates: dict[str, list[tuple[float, float]]] = {"empty": [], "small": [], "big": []}
    for round_number in range(args.rounds):
        empty_id, empty_leaves = empty_table(rt, f"empty-{round_number}")
        small_id, small_leaves = big_table(rt, SMALL_REFERENCES, SMALL_LEAVES, f"small-{round_number}")
        profile = args.profile and round_number == args.rounds - 1
        for label, table_id, leaf_ids in (
            ("empty", empty_id, empty_leaves),
            ("small", small_id, small_leaves),
            ("big", big_id, big_leaves),
        ):
            rates[label].append(
                measure(rt, table_id, leaf_ids, args.batches, profile and label == "big", f"m{round_number}")
            )
        empty_cpu, small_cpu, big_cpu = (rates[label][-1][1] for label in ("empty", "small", "big"))
        print(
            f"  round {round_number + 1}: batches/s (CPU) empty {empty_cpu:>7.1f}, "
            f"{SMALL_REFERENCES:,} references {small_cpu:>7.1f}, "
            f"{args.references:,} references {big_cpu:>7.1f}; "
            f"big / empty {big_cpu / empty_cpu:.2f}, big / small {big_cpu / small_cpu:.2f}"
        )
    figures: list[Figure] = []
    for label, what in (
        ("empty", "empty table"),
        ("small", f"{SMALL_REFERENCES:,} references / {SMALL_LEAVES:,} leaves"),
        ("big", f"{args.references:,} references / {args.leaves:,} leaves"),
    ):
        wall = statistics.median(w for w, _ in rates[label])
        cpu = statistics.median(c for _, c in rates[label])
        print(f"  {what:<36} {wall:>9.1f} batches/s  (CPU: {cpu:>9.1f} /s), median of {args.rounds} rounds")
        figures.append(
            Figure(f"{what}: batches per CPU second, median of rounds", cpu, "batches/s", CPU_BOUND)
        )

    state = TransactionLogStateStore(big_id, SCHEMA, rt.log, rt.snapshots).state()
    # Batches that release claims: each request frees one job's references (a failed compaction's), so a
    # batch rewrites ~100 files of the big table. It must not read the other million.
    claims = state.claimed_references()
    job_ids = sorted(claims, key=lambda job: int(job.rsplit("-", 1)[1]))[: RELEASE_BATCHES * BATCH]
    released = sum(len(claims[job]) for job in job_ids)
    del claims
    release_wall, release_cpu = timed(
        rt,
        batches_of(big_id, big_leaves, 1, "warm-release"),
        release_batches_of(big_id, job_ids, RELEASE_BATCHES),
    )
    print(
        f"  release batches ({BATCH} ReleaseClaims of one job each, "
        f"{released / len(job_ids):.0f} references per job) on the big table: {release_wall:.1f} batches/s "
        f"(CPU: {release_cpu:.1f} /s; not judged)"
    )
    figures.append(
        Figure(
            "batches of 10 ReleaseClaims on the big table, per CPU second",
            release_cpu,
            "batches/s",
            CPU_BOUND,
        )
    )
    gc.collect()
    start, cpu_start = time.perf_counter(), time.process_time()
    state.copy()
    copy_wall, copy_cpu = time.perf_counter() - start, time.process_time() - cpu_start
    print(
        f"  state.copy() of the big table (each group commit's cost before the undo journal): "
        f"{copy_wall * 1000:.1f} ms (CPU {copy_cpu * 1000:.1f} ms), a ceiling of {1 / copy_cpu:.0f} batches/s"
    )
    figures.append(
        Figure(
            "state.copy() of the big table (the cost before the undo journal), CPU",
            copy_cpu * 1000,
            "ms",
            CPU_BOUND,
        )
    )

    if args.profile:
        print("(profiled: the big table's figures include the profiler's cost, so nothing is judged)")
        return 0
    failed = False
    for label, ratios in (
        ("wall clock", [b[0] / s[0] for b, s in zip(rates["big"], rates["small"], strict=True)]),
        ("CPU", [b[1] / s[1] for b, s in zip(rates["big"], rates["small"], strict=True)]),
    ):
        ratio = statistics.median(ratios)
        ok = ratio >= TARGET_RATIO
        failed |= label == "CPU" and not ok
        print(
            f"  big / small batches/s ({label:<10})  {ratio:>6.2f}   target >= {TARGET_RATIO}  "
            f"{'PASS' if ok else 'FAIL'}{'  (judged)' if label == 'CPU' else ''}"
            f"   median of {', '.join(f'{r:.2f}' for r in sorted(ratios))}"
        )
        figures.append(
            Figure.judged(
                f"big / small batches/s ({label}), median of rounds",
                ratio,
                "",
                bound_by="CPU: the same ~40 index lookups per batch on both; wall clock also other load",
                at_least=TARGET_RATIO,
                judge=label == "CPU",
            )
        )
    empty_ratios = [b[1] / e[1] for b, e in zip(rates["big"], rates["empty"], strict=True)]
    print(
        f"  big / empty batches/s (CPU       )  {statistics.median(empty_ratios):>6.2f}   "
        "(not judged: the empty table has no index to search)"
    )
    figures.append(
        Figure(
            "big / empty batches/s (CPU), median of rounds", statistics.median(empty_ratios), "", CPU_BOUND
        )
    )
    record(__file__, figures)
    print("ALL TARGETS MET" if not failed else "SOME TARGETS MISSED")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
