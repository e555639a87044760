"""Peak memory of one compaction merge against the partition's size, and its speed against loading it all.

For each size (``--base-rows`` rows times each of ``--multipliers``, default 500,000 x 1, 4, 16) the
benchmark writes ``--files`` sorted data files whose keys interleave (so every round of the merge takes
rows from every input and sorts them), ``key long``, ``ts long`` (random), ``value string`` (about 20
bytes): about 45 bytes a row in Arrow. Then, each in a fresh child process, it merges them into one file:

- ``stream``: compaction's merge (:func:`spark_client.file_io.merge_files`, a streaming k-way merge);
- ``load-all``: what compaction did before, on the same inputs: read them all, sort, write.

Figures per run: wall seconds and rows/s, the Arrow memory pool's peak (``max_memory()``: every Arrow
buffer, which is where the rows live) and the process's resident-set high-water mark above what it held
after its imports (``VmHWM``: everything, including the Parquet reader's and writer's own buffers).

**Verdict**: the streaming merge's memory is *flat* if, at the biggest size, its pool peak is within 1.25x
of the smallest size's and under 16 MiB + 6 MiB per input (PASS/FAIL). That needs every input to hold
a full row group (131,072 rows) at the smallest size: smaller row groups make its figure smaller. Speeds
are ratios within the same run. The merges are bound by CPU (decoding, sorting, zstd): on the project's 2
shared cores other work moves the seconds by a third or more; the memory figures do not move.

    python benchmarks/bench_compaction_memory.py [--base-rows 500000] [--multipliers 1,4,16] [--files 4]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from spark_client.columns import arrow_schema, sort_columns
from spark_client.data_store import DataStore
from spark_client.file_io import DataFileWriter, merge_files, read_files
from statestore.model.schema import Schema

SCHEMA = Schema.of({"key": "long"}, sort_keys={"ts": "long"}, values={"value": "string"})
FLAT_RATIO = 1.25
# What a merge may hold: the writer's buffer and a round's sort, plus per input one row group's column
# chunks being decoded and one batch (measured: about 20 MiB for 4 inputs, 140 MiB for 32).
BOUND_MIB, BOUND_PER_INPUT_MIB = 16, 6
MIB = 2**20


def input_names(files: int) -> list[str]:
    return [f"in/{i}.parquet" for i in range(files)]


def write_partition(directory: str, rows: int, files: int) -> int:
    """Write the inputs; returns the partition's size in Arrow (bytes)."""
    data, target = DataStore.local(directory), arrow_schema(SCHEMA)
    per_file, size = rows // files, 0
    for i, name in enumerate(input_names(files)):
        writer = DataFileWriter(data, name, target)
        for start in range(0, per_file, 131_072):
            n = min(131_072, per_file - start)
            keys = pc.add(pc.multiply(pa.array(range(start, start + n), pa.int64()), files), i)
            ts = pc.cast(pc.floor(pc.multiply(pc.random(n, initializer=i * 7_919 + start), 1e9)), pa.int64())
            value = pc.binary_join_element_wise(pa.array(["value-"] * n), pc.cast(ts, pa.string()), "")
            table = pa.table({"key": keys, "ts": ts, "value": value}, schema=target)
            size += table.nbytes
            writer.write_table(table)
        writer.close()
    return size


def resident_high_water_mark() -> int:
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024


def child(mode: str, directory: str, files: int) -> None:
    """In the child process: one merge; prints its figures as JSON."""
    data = DataStore.local(directory)
    parts: list[tuple[str, None]] = [(name, None) for name in input_names(files)]
    resident_before = resident_high_water_mark()
    started = time.monotonic()
    if mode == "stream":
        rows = merge_files(data, SCHEMA, parts, "out.parquet")
    else:
        table = read_files(data, SCHEMA, parts)
        table = table.take(pc.sort_indices(table, sort_keys=[(k, "ascending") for k in sort_columns(SCHEMA)]))
        writer = DataFileWriter(data, "out.parquet", arrow_schema(SCHEMA))
        writer.write_table(table)
        writer.close()
        rows = writer.rows
    seconds = time.monotonic() - started
    print(
        json.dumps(
            {
                "rows": rows,
                "seconds": seconds,
                "pool_peak": pa.default_memory_pool().max_memory(),
                "resident_peak": resident_high_water_mark() - resident_before,
            }
        )
    )


@dataclass(frozen=True)
class Run:
    mode: str
    rows: int
    seconds: float
    pool_peak: int
    resident_peak: int

    @property
    def rows_per_second(self) -> float:
        return self.rows / self.seconds

    def columns(self) -> str:
        return (
            f"{self.seconds:>7.2f}s {self.rows_per_second:>9,.0f} {self.pool_peak / MIB:>8,.1f} "
            f"{self.resident_peak / MIB:>7,.0f}"
        )


def run_child(mode: str, directory: str, files: int) -> Run:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run(
        [sys.executable, __file__, "--child", mode, directory, str(files)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    return Run(mode, figures["rows"], figures["seconds"], figures["pool_peak"], figures["resident_peak"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-rows", type=int, default=500_000)
    parser.add_argument("--multipliers", default="1,4,16")
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--child", nargs=3, metavar=("MODE", "DIR", "FILES"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], args.child[1], int(args.child[2]))
        return 0

    from results import Figure, record  # beside this script; the child processes need none of it

    multipliers = [int(m) for m in args.multipliers.split(",")]
    figures: list[Figure] = []
    print(f"{args.files} sorted inputs with interleaved keys; one merge per child process\n")
    print(
        f"{'rows':>11} {'Arrow MiB':>9} | {'merge':>8} {'rows/s':>9} {'pool MiB':>8} {'RSS MiB':>7} | "
        f"{'load-all':>8} {'rows/s':>9} {'pool MiB':>8} {'RSS MiB':>7} | {'speed':>5}"
    )
    streams = []
    for multiplier in multipliers:
        rows = args.base_rows * multiplier
        with tempfile.TemporaryDirectory(prefix="bench-compaction-") as directory:
            size = write_partition(directory, rows, args.files)
            stream = run_child("stream", directory, args.files)
            load_all = run_child("load-all", directory, args.files)
        assert stream.rows == load_all.rows == rows, (stream.rows, load_all.rows, rows)
        streams.append(stream)
        speed = stream.rows_per_second / load_all.rows_per_second
        print(f"{rows:>11,} {size / MIB:>9,.0f} | {stream.columns()} | {load_all.columns()} | {speed:>4.2f}x")
        what = f"{rows:,} rows, {args.files} inputs"
        figures += [
            Figure(
                f"{what}: streaming merge, Arrow pool peak",
                stream.pool_peak / MIB,
                "MiB",
                "one batch per input",
            ),
            Figure(
                f"{what}: streaming merge", stream.rows_per_second, "rows/s", "CPU: Parquet decoding, zstd"
            ),
            Figure(
                f"{what}: load-all merge, Arrow pool peak", load_all.pool_peak / MIB, "MiB", "the partition"
            ),
        ]
    smallest, biggest = streams[0].pool_peak, streams[-1].pool_peak
    bound = BOUND_MIB + BOUND_PER_INPUT_MIB * args.files
    flat = biggest <= FLAT_RATIO * smallest and biggest <= bound * MIB
    print(
        f"\nstreaming merge memory vs partition size: pool peak {smallest / MIB:.1f} MiB at "
        f"{multipliers[0]}x, {biggest / MIB:.1f} MiB at {multipliers[-1]}x "
        f"(flat: within {FLAT_RATIO}x and under {bound} MiB) -> {'PASS' if flat else 'FAIL'}"
    )
    figures += [
        Figure.judged(
            f"streaming pool peak at {multipliers[-1]}x / at {multipliers[0]}x the rows",
            biggest / smallest,
            "x",
            bound_by="a row group being decoded and a batch per input",
            at_most=FLAT_RATIO,
        ),
        Figure.judged(
            f"streaming pool peak at {multipliers[-1]}x the rows",
            biggest / MIB,
            "MiB",
            bound_by="a row group being decoded and a batch per input",
            at_most=bound,
        ),
    ]
    record(__file__, figures)
    return 0 if flat else 1


if __name__ == "__main__":
    sys.exit(main())
