"""Benchmark of the pure model: applying AddFiles, Parquet snapshots of a big state, JSON body sizes.

Run ``.venv/bin/python benchmarks/bench_model.py`` (``--quick`` for a small run that checks the code paths
but not the targets). Every figure is printed next to its target with PASS or FAIL.

Peak memory is the process's resident-set high-water mark (``resource.getrusage(RUSAGE_SELF).ru_maxrss``):
it covers everything the process did up to that point, including building the state it then writes.
Seconds are wall clock (the targets) and, beside them, this process's CPU time, which is the steadier
figure when other work shares the machine. The AddFiles figure is the median of three fresh processes, each
timing its 100,000 references from the first call on (Arrow's first kernel calls included): one run swings
widely on shared cores, the median much less.

Retained memory is measured in a fresh child process that loads the snapshot and nothing else: its current
RSS (``/proc/self/statm``) after the load, with the snapshot bytes dropped, minus its RSS before reading
them (a warm-up load of an empty snapshot comes first, and Arrow's allocator and the C heap, glibc's
``malloc_trim``, are asked to give back what they freed; the figure before the trim is printed too). That
covers Python objects and Arrow buffers alike. What the partitions and the files each hold is the RSS given
back when each is dropped in turn (a lower bound: the allocator may keep some pages).
``--five-million`` loads a 5,000,000-reference snapshot in such a child, against a 2 GB budget.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import multiprocessing
import os
import random
import resource
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass

import pyarrow as pa

from spark_client.read_plan import plan_read
from statestore.codec.parquet import state_from_parquet, state_to_parquet
from statestore.codec.transaction_json import decode_transaction, encode_transaction
from statestore.model.files import FileReference, TableFile
from statestore.model.partition_tree import partitions_from_split_points
from statestore.model.schema import Schema
from statestore.state.table_state import TableState
from statestore.transactions import AddFiles, InitialisePartitions, ReleaseClaims

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from results import Figure, record  # noqa: E402

SCHEMA = Schema.of({"key": "string"}, sort_keys={"timestamp": "long"}, values={"value": "bytes"})
BASE_TIME = 1_767_225_600_000  # 2026-01-01 in epoch ms


@dataclass(frozen=True)
class Scale:
    add_files_references: int
    add_files_partitions: int
    snapshot_references: int
    snapshot_leaves: int
    json_references: int


FULL = Scale(100_000, 1_000, 1_000_000, 100_000, 10_000)
QUICK = Scale(10_000, 100, 20_000, 2_000, 10_000)


class Report:
    """Prints each figure beside its target, remembers whether all targets were met, and keeps the figures
    given a ``bound_by`` (what bounds them) for the benchmarks page (:func:`results.record`)."""

    def __init__(self, check_targets: bool) -> None:
        self.check_targets = check_targets
        self.failed = False
        self.recorded: list[Figure] = []

    def figure(
        self, name: str, value: float, unit: str, target: float | None = None, bound_by: str | None = None
    ) -> None:
        line = f"  {name:<52} {value:>12,.3f} {unit:<6}"
        if target is not None:
            ok = value <= target
            verdict = ("PASS" if ok else "FAIL") if self.check_targets else "(quick run: not judged)"
            line += f" target <= {target:,} {unit}  {verdict}"
            self.failed |= self.check_targets and not ok
        print(line, flush=True)
        if bound_by is not None:
            if target is None:
                self.recorded.append(Figure(name, value, unit, bound_by))
            else:
                self.recorded.append(
                    Figure.judged(
                        name, value, unit, bound_by=bound_by, at_most=target, judge=self.check_targets
                    )
                )


def peak_rss_mb() -> float:
    # ru_maxrss is in kilobytes on Linux (bytes on macOS).
    scale = 1 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / 1e6


def current_rss_mb() -> float:
    """This process's resident set now (not its high-water mark), from /proc (Linux)."""
    with open("/proc/self/statm") as f:
        resident_pages = int(f.read().split()[1])
    return resident_pages * os.sysconf("SC_PAGE_SIZE") / 1e6


def peak_rss_of_this_program_mb() -> float:
    """The resident-set high-water mark since this program started (``VmHWM``, Linux). Unlike ``ru_maxrss``,
    which a spawned child inherits from the process it was forked from, it restarts at ``exec``."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024 / 1e6
    raise RuntimeError("no VmHWM in /proc/self/status")


def release_freed_heap() -> None:
    """Give the C heap's free pages back to the system (glibc's ``malloc_trim``; nothing elsewhere).

    Memory freed during a load (NumPy temporaries, strings made only to hash them) stays in the process
    until the allocator trims it; like Arrow's ``release_unused``, this keeps it out of what the state holds.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    libc.malloc_trim(0)


def _load_in_child(paths: tuple[str, str], transaction_number: int, out: multiprocessing.Queue) -> None:
    """Child process body: load the snapshot in ``paths`` and put its figures on ``out`` (MB and seconds).

    A one-partition snapshot is loaded first, so the libraries the load brings in (Parquet reader, compute
    kernels, the Arrow memory pool) are counted before, not as memory the state holds.
    """
    empty = TableState(SCHEMA, {p.id: p for p in partitions_from_split_points(SCHEMA, [])})
    state_from_parquet(SCHEMA, *state_to_parquet(empty), 0)
    del empty
    gc.collect()
    pa.default_memory_pool().release_unused()
    before = current_rss_mb()
    with open(paths[0], "rb") as f:
        partitions_bytes = f.read()
    with open(paths[1], "rb") as f:
        files_bytes = f.read()
    start, cpu_start = time.perf_counter(), time.process_time()
    state = state_from_parquet(SCHEMA, partitions_bytes, files_bytes, transaction_number)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    references = state.reference_count()
    del partitions_bytes, files_bytes
    gc.collect()
    pa.default_memory_pool().release_unused()  # Arrow buffers freed during the load, kept by its allocator
    retained_untrimmed = current_rss_mb() - before
    release_freed_heap()  # likewise the C heap's (NumPy temporaries, Python's freed arenas)
    retained = current_rss_mb() - before
    state.replace_partitions(())
    gc.collect()
    pa.default_memory_pool().release_unused()
    release_freed_heap()
    after_partitions = current_rss_mb()
    state.clear_files()
    gc.collect()
    pa.default_memory_pool().release_unused()
    release_freed_heap()
    after_files = current_rss_mb()
    out.put(
        {
            "references": references,
            "wall": wall,
            "cpu": cpu,
            "retained_mb": retained,
            "retained_untrimmed_mb": retained_untrimmed,
            "partitions_mb": before + retained - after_partitions,
            "files_mb": after_partitions - after_files,
            "peak_mb": peak_rss_of_this_program_mb(),
            "before_mb": before,
        }
    )


def load_in_fresh_process(
    partitions_bytes: bytes, files_bytes: bytes, transaction_number: int
) -> dict[str, float]:
    """Load a snapshot in a new process (spawned: it inherits nothing of this one) and return its figures."""
    with tempfile.TemporaryDirectory() as tmp:
        paths = (os.path.join(tmp, "partitions.parquet"), os.path.join(tmp, "files.parquet"))
        for path, data in zip(paths, (partitions_bytes, files_bytes), strict=True):
            with open(path, "wb") as f:
                f.write(data)
        context = multiprocessing.get_context("spawn")
        out = context.Queue()
        child = context.Process(target=_load_in_child, args=(paths, transaction_number, out))
        child.start()
        figures: dict[str, float] = out.get()
        child.join()
    return figures


def random_uuid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def split_points(leaves: int) -> list[str]:
    return [f"{i:08d}" for i in range(1, leaves)]


def data_filename(rng: random.Random, table_id: str, partition_id: str) -> str:
    return f"tables/{table_id}/data/partition={partition_id}/{random_uuid(rng)}.parquet"


def add_files_transactions(
    rng: random.Random, table_id: str, leaf_ids: list[str], references: int, per_transaction: int
) -> list[AddFiles]:
    """Ingest-shaped AddFiles: each writes ``per_transaction`` files into leaves chosen at random."""
    transactions = []
    for _ in range(0, references, per_transaction):
        refs = []
        for _ in range(per_transaction):
            leaf = rng.choice(leaf_ids)
            refs.append(FileReference(data_filename(rng, table_id, leaf), leaf, rng.randrange(1, 10_000_000)))
        transactions.append(AddFiles(tuple(refs)))
    return transactions


def big_state(seed: int, leaves: int, references: int) -> TableState:
    """A state of ``references`` file references over ``leaves`` leaf partitions, shaped like a real table.

    95% of files have one reference, 2.5% span two neighbouring leaves (two references each, as after a
    split), and 1% more have none (awaiting garbage collection); some references belong to compaction jobs,
    some counts are approximate, and update times are shared per 10,000 files, as transactions stamp them.
    """
    rng = random.Random(seed)
    table_id = random_uuid(rng)
    # Reproducible ids of a UUID's length, so the state can be rebuilt identically for the check.
    id_prefix = f"{random_uuid(rng)[:29]}-"
    partitions = partitions_from_split_points(SCHEMA, split_points(leaves), id_prefix=id_prefix)
    state = TableState(SCHEMA, {p.id: p for p in partitions}, {}, transaction_number=1)
    leaf_ids = [p.id for p in sorted(state.leaf_partitions(), key=lambda p: p.region.ranges[0].min)]
    two_reference_files = references // 40
    files: dict[str, TableFile] = {}
    update_time = BASE_TIME
    made = 0
    while made < references:
        if len(files) % 10_000 == 0:
            update_time = BASE_TIME + len(files)  # one int object shared by the files of a "transaction"
        i = rng.randrange(len(leaf_ids) - 1)
        spans_two = len(files) < two_reference_files and made + 2 <= references
        in_partitions = leaf_ids[i : i + 2] if spans_two else leaf_ids[i : i + 1]
        name = data_filename(rng, table_id, in_partitions[0])
        refs = tuple(
            FileReference(
                name,
                partition_id,
                rng.randrange(1, 10_000_000),
                count_approximate=made % 7 == 0,
                only_contains_data_for_this_partition=not spans_two,
                job_id=f"job-{made // 10}" if made % 50 < 10 else None,
                last_update_time=update_time,
            )
            for partition_id in in_partitions
        )
        files[name] = TableFile(name, refs, update_time)
        made += len(refs)
    for _ in range(references // 100):
        name = data_filename(rng, table_id, rng.choice(leaf_ids))
        files[name] = TableFile(name, (), update_time)
    state.files_by_name = files
    # The time of the entry the state is at, as a state read from the log has it and its snapshot keeps
    # (without it, whoever appends next reads that entry to learn it: a round trip a real table never costs).
    state.last_update_time = update_time
    return state


ADD_FILES_RUNS = 3  # fresh processes; the median is judged (one run swings by ±50% on 2 shared cores)


def _add_files_in_child(scale: Scale, out: multiprocessing.Queue) -> None:
    """Child process body: validate and apply the AddFiles of ``scale`` to a fresh table, as the engine
    does, and put the wall and CPU seconds on ``out``. First calls (Arrow kernels, caches) are counted."""
    rng = random.Random(1)
    table_id = random_uuid(rng)
    partitions = partitions_from_split_points(SCHEMA, split_points(scale.add_files_partitions))
    state = TableState(SCHEMA)
    init = InitialisePartitions(tuple(partitions))
    init.validate(state)
    init.apply(state, BASE_TIME)
    leaf_ids = [p.id for p in state.leaf_partitions()]
    transactions = add_files_transactions(rng, table_id, leaf_ids, scale.add_files_references, 10_000)
    gc.collect()  # what building the transactions left for the collector is not counted
    start, cpu_start = time.perf_counter(), time.process_time()
    for n, txn in enumerate(transactions, 1):
        txn.validate(state)
        txn.apply(state, BASE_TIME + n)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    assert state.reference_count() == scale.add_files_references, "the AddFiles did not all apply"
    out.put((seconds, cpu_seconds))


def bench_add_files(report: Report, scale: Scale) -> None:
    print(
        f"(a) AddFiles: {scale.add_files_references:,} references in {scale.add_files_references // 10_000} "
        f"transactions of 10,000 over {scale.add_files_partitions:,} leaf partitions (validate + apply, as "
        f"the engine does), in {ADD_FILES_RUNS} fresh processes"
    )
    context = multiprocessing.get_context("spawn")
    runs = []
    for _ in range(ADD_FILES_RUNS):
        out = context.Queue()
        child = context.Process(target=_add_files_in_child, args=(scale, out))
        child.start()
        runs.append(out.get())
        child.join()
    print(f"  each run, wall / CPU seconds: {', '.join(f'{wall:.3f} / {cpu:.3f}' for wall, cpu in runs)}")
    seconds, cpu_seconds = statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs)
    report.figure(
        "validate + apply, median (wall clock)",
        seconds,
        "s",
        0.2,
        bound_by="CPU: Python passes over the references",
    )
    report.figure("validate + apply, median (CPU of the process)", cpu_seconds, "s")
    report.figure("references per second, median (wall clock)", scale.add_files_references / seconds, "ref/s")


def bench_json(report: Report, scale: Scale) -> None:
    rng = random.Random(2)
    table_id = random_uuid(rng)
    n = scale.json_references
    print(f"(c) JSON body of one AddFiles of {n:,} references (stored bytes, after compression)")
    for partitions, judged in ((n // 100, True), (n, False)):
        leaf_ids = [random_uuid(rng) for _ in range(partitions)]
        (txn,) = add_files_transactions(rng, table_id, leaf_ids, n, n)
        start = time.perf_counter()
        body, compressed = encode_transaction(txn)
        encode_seconds = time.perf_counter() - start
        start = time.perf_counter()
        decoded = decode_transaction(body, compressed)
        decode_seconds = time.perf_counter() - start
        assert decoded == txn and compressed, "the AddFiles body did not round-trip compressed"
        label = f"over {partitions:,} partitions"
        report.figure(
            f"bytes per reference, {label}",
            len(body) / n,
            "B",
            64 if judged else None,
            bound_by="the JSON encoding and zlib",
        )
        report.figure(f"encode / decode seconds, {label}", encode_seconds, "s")
        report.figure("", decode_seconds, "s")


def bench_snapshot(report: Report, scale: Scale) -> None:
    refs, leaves = scale.snapshot_references, scale.snapshot_leaves
    print(f"(b) Parquet snapshot of {refs:,} file references over {leaves:,} leaf partitions")
    start = time.perf_counter()
    state = big_state(3, leaves, refs)
    print(f"  built {state!r} in {time.perf_counter() - start:.1f} s (not judged)")
    gc.collect()

    start, cpu_start = time.perf_counter(), time.process_time()
    partitions_bytes, files_bytes = state_to_parquet(state)
    report.figure(
        "write seconds (wall clock)", time.perf_counter() - start, "s", 3, bound_by="CPU: Parquet encoding"
    )
    report.figure("write seconds (CPU of this process)", time.process_time() - cpu_start, "s")
    report.figure("Parquet bytes, partitions", len(partitions_bytes) / 1e6, "MB")
    report.figure("Parquet bytes, files", len(files_bytes) / 1e6, "MB")
    report.figure(
        "peak RSS after building and writing",
        peak_rss_mb(),
        "MB",
        1500,
        bound_by="the benchmark's own table of Python objects, built first",
    )

    # A snapshot is loaded by another process than the one that wrote it: a fresh one, for the figures.
    transaction_number = state.transaction_number
    del state
    gc.collect()
    report_fresh_load(report, partitions_bytes, files_bytes, transaction_number, budget_mb=None)

    # Loaded here too, and compared with the state rebuilt (same seed), only for the check.
    start, cpu_start = time.perf_counter(), time.process_time()
    loaded = state_from_parquet(SCHEMA, partitions_bytes, files_bytes, transaction_number)
    report.figure("load seconds in this process (wall clock, not judged)", time.perf_counter() - start, "s")
    report.figure("load seconds in this process (CPU)", time.process_time() - cpu_start, "s")

    expected = big_state(3, leaves, refs)
    equal = loaded == expected
    print(f"  loaded state equals the written one: {equal}")
    report.failed |= not equal
    del expected
    bench_few_partitions(report, loaded)


def bench_few_partitions(report: Report, state: TableState) -> None:
    """Work on a few partitions or jobs of the loaded table: each must cost what it reads, not the table."""
    print("  on the loaded table, work that reads a few files (not judged; each once made an object per file")
    print("  or partition of the table, and so cost in proportion to the table):")
    release = ReleaseClaims(("job-0",))  # big_state's first job: the first 10 references it made
    claimed = state.files_claimed_by(release.job_ids)
    leaf = state.partition(claimed[0].references[0].partition_id)  # a leaf with references
    start = time.perf_counter()
    parts = plan_read(state, [leaf.region])
    report.figure(
        f"plan a read of one leaf ({len(parts)} references), ms",
        (time.perf_counter() - start) * 1000,
        "ms",
        bound_by="CPU: a pass over the partition codes",
    )
    start = time.perf_counter()
    release.validate(state)
    release.apply(state, BASE_TIME)
    report.figure(
        f"release one job's claims ({len(claimed)} files), ms",
        (time.perf_counter() - start) * 1000,
        "ms",
        bound_by="CPU: the claimed rows, ordered by job",
    )
    assert not state.files_claimed_by(release.job_ids)


def report_fresh_load(
    report: Report,
    partitions_bytes: bytes,
    files_bytes: bytes,
    transaction_number: int,
    budget_mb: float | None,
) -> None:
    """Load the snapshot in a fresh process and print its time and memory beside the targets."""
    figures = load_in_fresh_process(partitions_bytes, files_bytes, transaction_number)
    references = figures["references"]
    print(f"  in a fresh process loading only the snapshot ({int(references):,} references):")
    # The 1 s and 300 MB targets are the 1M table's; a bigger one is judged by its budget (and per reference).
    one_million = budget_mb is None
    report.figure(
        "load seconds (wall clock)",
        figures["wall"],
        "s",
        1 if one_million else None,
        bound_by="CPU: Parquet decoding",
    )
    report.figure("load seconds (CPU of that process)", figures["cpu"], "s")
    report.figure(
        "retained memory (RSS after load - RSS before)",
        figures["retained_mb"],
        "MB",
        300 if one_million else None,
        bound_by="the column-wise state's layout",
    )
    report.figure(
        "retained memory per reference",
        figures["retained_mb"] * 1e6 / references,
        "B",
        250,
        bound_by="the column-wise state's layout",
    )
    report.figure("retained memory before the C heap is trimmed", figures["retained_untrimmed_mb"], "MB")
    report.figure("of which partitions (RSS freed on dropping them)", figures["partitions_mb"], "MB")
    report.figure("of which files and references (RSS freed likewise)", figures["files_mb"], "MB")
    report.figure(
        "peak RSS of that process",
        figures["peak_mb"],
        "MB",
        budget_mb,
        bound_by="the Parquet bytes and the load's temporaries",
    )
    # A load's own peak in a fresh process (statestore.sizing's docstring says why the rule makes more room).
    report.figure(
        "peak of the load over the RSS before it, per reference",
        (figures["peak_mb"] - figures["before_mb"]) * 1e6 / references,
        "B",
        bound_by="the Parquet bytes and the load's temporaries",
    )


def bench_five_million(report: Report, references: int) -> None:
    leaves = references // 10
    print(
        f"(d) load of {references:,} file references over {leaves:,} leaves in a fresh process, 2 GB budget"
    )
    start = time.perf_counter()
    state = big_state(4, leaves, references)
    partitions_bytes, files_bytes = state_to_parquet(state)
    transaction_number = state.transaction_number
    print(f"  built and wrote {state!r} in {time.perf_counter() - start:.1f} s (not judged)")
    del state
    gc.collect()
    report_fresh_load(report, partitions_bytes, files_bytes, transaction_number, budget_mb=2000)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small run: checks the code paths, not targets")
    parser.add_argument(
        "--five-million",
        action="store_true",
        help="only load a 5,000,000-reference snapshot in a fresh process (with --quick: 50,000)",
    )
    args = parser.parse_args(argv)
    scale = QUICK if args.quick else FULL
    report = Report(check_targets=not args.quick)
    print(f"statestore model benchmark{' (quick)' if args.quick else ''}, Python {sys.version.split()[0]}")
    if args.five_million:
        bench_five_million(report, 50_000 if args.quick else 5_000_000)
        print("ALL TARGETS MET" if not report.failed else "SOME TARGETS MISSED")
        record(__file__, report.recorded, variant="five-million")
        return 1 if report.failed else 0
    bench_add_files(report, scale)
    bench_json(report, scale)
    bench_snapshot(report, scale)
    print("ALL TARGETS MET" if not report.failed else "SOME TARGETS MISSED")
    record(__file__, report.recorded)
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
