"""statestore side by side with Delta Lake (delta-rs) and Apache Iceberg (pyiceberg), same work, one run.

Needs the optional ``bench`` extra (``make bench-peers`` builds ``.venv-bench`` with it). Three kinds of work,
each measured case in a fresh child process (so memory is the case's own and no case warms another):

- **commits/s** with 1 and 8 concurrent writers (20 commits by the one, 5 by each of the 8), each commit
  adding 3 files to a table that starts with 10,000 (``--initial-files``: delta-rs's CPU per commit grows
  with the table's file count). statestore: synchronous commits
  through the client facade (``state_store(table).commit``), one client per writer. Delta: metadata-only
  commits of add actions (``DeltaTable.create_write_transaction``), one ``DeltaTable`` per writer.
  Iceberg: pyiceberg's SQL catalog on sqlite, a fast append of ``DataFile``s built directly (no data file
  is read or written), one catalog per writer. Each system retries a lost race on its own (statestore and
  Iceberg: up to 12 attempts with backoff from 5 ms capped at 1 s; delta-rs: 12 attempts, its own policy).
  After the run every table is read back and its file count checked.
- **one bulk commit** of 10,000 and 100,000 references, onto a table with 10,000 (same three paths).
- **load of a 1,000,000-reference table** (local disk): statestore ``state_from_parquet`` of a snapshot of
  1M references over 100,000 leaves (``bench_model.big_state``), read from disk; Delta ``DeltaTable(path)``
  + ``get_add_actions()`` of a checkpointed table of 1M add actions in 100,000 partition values; Iceberg
  ``load_table`` + ``scan().plan_files()`` of a table of 1M data files in 100,000 identity partitions.
  Time and peak memory (the child's RSS high-water mark; also above its footprint after imports).

Storage, where the figures come from:

- ``local``: Delta and Iceberg write files into a local directory (Iceberg's catalog is a sqlite file).
  statestore has no file-only mode; it runs on its embedded default with a data directory: the log on
  DynamoDB Local keeping its tables on the same disk (``-dbPath``), bodies over 400 KB on S3 on a moto
  server. So every statestore commit is an HTTP round trip to a local emulator (a JVM), where the peers
  make file-system calls.
- ``s3``: the peers on S3 on one moto server in its own process. Delta: conditional puts
  (``If-None-Match``, which moto honours). Iceberg: catalog on sqlite, metadata and manifests on moto's S3.
  statestore: its embedded default without a data directory, the log on DynamoDB Local (in memory) and
  bodies on the same moto S3. Not moto's DynamoDB: its conditional writes are not atomic under concurrent
  requests, and with 8 writers a statestore commit vanished there (the count check caught it).

Figures are wall-clock seconds with this child's CPU seconds beside them (every thread, delta-rs's Rust
threads included), and the emulators' CPU seconds (from /proc) while the case was timed. Commits and bulk
commits: best of ``--repeat`` runs (default 2), loads best of ``--load-repeat`` (default 3; Iceberg's
``--iceberg-load-repeat``, default 1, as each takes minutes), interleaved across systems. DynamoDB Local is
warmed up (its JIT) by an untimed statestore run before the measured ones.

    python benchmarks/bench_peers.py [--quick] [--repeat 2] [--only commits bulk load] [--storage local s3]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import Figure, record  # noqa: E402

REGION = "eu-west-2"
SYSTEMS = ("statestore", "delta", "iceberg")
PEER_BUCKET = "statestore-bench-peers"
FILES_PER_COMMIT = 3
RETRIES = 12  # attempts per commit, as statestore's default RetryPolicy
FILE_SIZE = 100_000_000  # every added file claims 100 MB; no file exists
BASE_TIME = 1_767_225_600_000
LOAD_TARGET_SECONDS = 1.0
LOAD_TARGET_RATIO = 1 / 3  # statestore's load time / delta-rs's, same machine, same run


@dataclass(frozen=True)
class Scale:
    initial_files: int
    commits_single: int  # commits by the one writer
    commits_each: int  # commits by each of the 8 writers
    bulk: tuple[int, ...]
    load_references: int
    load_leaves: int


FULL = Scale(10_000, 20, 5, (10_000, 100_000), 1_000_000, 100_000)
QUICK = Scale(1_000, 6, 3, (1_000, 5_000), 20_000, 2_000)


# --- measuring, in the child ---------------------------------------------------------------------------


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux


def cpu_seconds_of(pids: Sequence[int]) -> float:
    """User + system CPU of other processes (the emulators), from /proc."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15 of stat)
        except OSError:
            pass
    return total / ticks


class Timer:
    """Wall clock, this process's CPU (every thread, delta-rs's Rust threads included) and the emulators'."""

    def __init__(self, emulator_pids: Sequence[int]) -> None:
        self.emulator_pids = emulator_pids

    def __enter__(self) -> Timer:
        self.emulator_start = cpu_seconds_of(self.emulator_pids)
        self.cpu_start = time.process_time()
        self.start = time.perf_counter()
        return self

    def __exit__(self, *_: object) -> None:
        self.seconds = time.perf_counter() - self.start
        self.cpu = time.process_time() - self.cpu_start
        self.emulator_cpu = cpu_seconds_of(self.emulator_pids) - self.emulator_start

    def figures(self) -> dict[str, float]:
        return {"seconds": self.seconds, "cpu": self.cpu, "emulator_cpu": self.emulator_cpu}


def file_name(writer: str, i: int, j: int) -> str:
    return f"data/partition_id=root/{writer}-{i}-{j}-{uuid.uuid4().hex}.parquet"


def batch_names(prefix: str, n: int) -> list[str]:
    return [f"data/partition_id=root/{prefix}-{i:07d}-{uuid.uuid4().hex}.parquet" for i in range(n)]


# --- statestore --------------------------------------------------------------------------------------


class Statestore:
    def __init__(self, case: dict[str, Any]) -> None:
        from statestore.instance import ResourceNames

        self.case = case
        self.resources = ResourceNames.for_instance(case["instance"])

    def client(self) -> Any:
        from statestore.adapters.aws.backend import AwsBackend
        from statestore.engine.log_store import RetryPolicy
        from statestore.services.client import StateStoreClient

        backend = AwsBackend.connect(
            self.resources,
            self.case["s3_endpoint"],
            region=REGION,
            dynamodb_endpoint_url=self.case["dynamodb_endpoint"],
        )
        return StateStoreClient(
            backend.table_index, backend.log, backend.snapshot_metadata, backend.blobs, retry=RetryPolicy()
        )

    @staticmethod
    def add_files(table_id: str, names: Sequence[str]) -> Any:
        from statestore.model import layout
        from statestore.model.files import FileReference
        from statestore.transactions import AddFiles

        # The peers' names are relative to their table's root ("data/..."); a statestore data file's name is
        # its key, under its table's prefix: the same name lands under the table's data prefix.
        prefix = layout.table_prefix(table_id)
        return AddFiles(tuple(FileReference(f"{prefix}{name}", "root", 1000) for name in names))

    def create(self, initial: int) -> str:
        from statestore.model.schema import Schema

        client = self.client()
        schema = Schema.of({"key": "long"}, values={"value": "string"})
        table = client.create_table(f"peers-{uuid.uuid4().hex[:8]}", schema)
        client.commit(table.table_id, self.add_files(table.table_id, batch_names("initial", initial)))
        return str(table.table_id)

    def open_writer(self, table: str) -> tuple[Callable[[list[str]], None], Callable[[], int]]:
        store = self.client().state_store(table)
        store.state()  # loaded before the clock starts, as each peer's writer opens its table
        return lambda names: store.commit(self.add_files(table, names)), lambda: int(store.retries)

    def count(self, table: str) -> int:
        return int(self.client().state(table).reference_count())


# --- Delta (delta-rs) ---------------------------------------------------------------------------------


class Delta:
    def __init__(self, case: dict[str, Any]) -> None:
        import pyarrow as pa

        self.case = case
        self.schema = pa.schema([("key", pa.int64()), ("value", pa.string()), ("partition_id", pa.string())])
        if case["storage"] == "s3":
            self.root = f"s3://{PEER_BUCKET}/delta"
            self.options: dict[str, str] | None = {
                "AWS_ENDPOINT_URL": case["s3_endpoint"],
                "AWS_ALLOW_HTTP": "true",
                "AWS_REGION": REGION,
                "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing",
            }
        else:
            self.root = f"{case['directory']}/delta"
            self.options = None

    @staticmethod
    def actions(
        names: Sequence[str], partition: str = "root", rows: Sequence[int] | None = None
    ) -> list[Any]:
        from deltalake.transaction import AddAction

        return [
            AddAction(
                name,
                FILE_SIZE,
                {"partition_id": partition},
                BASE_TIME,
                True,
                json.dumps({"numRecords": rows[i] if rows else 1000}),
            )
            for i, name in enumerate(names)
        ]

    def create(self, initial: int) -> str:
        from deltalake import Schema as DeltaSchema
        from deltalake.transaction import create_table_with_add_actions

        uri = f"{self.root}/{uuid.uuid4().hex[:8]}"
        create_table_with_add_actions(
            uri,
            DeltaSchema.from_arrow(self.schema),
            self.actions(batch_names("initial", initial)),
            partition_by=["partition_id"],
            storage_options=self.options,
        )
        return uri

    def open_writer(self, table: str) -> tuple[Callable[[list[str]], None], Callable[[], int]]:
        from deltalake import DeltaTable
        from deltalake.transaction import CommitProperties

        delta_table = DeltaTable(table, storage_options=self.options)
        properties = CommitProperties(max_commit_retries=RETRIES)

        def commit(names: list[str]) -> None:
            delta_table.create_write_transaction(
                self.actions(names),
                "append",
                self.schema,
                partition_by=["partition_id"],
                commit_properties=properties,
            )

        return commit, lambda: -1  # delta-rs does not say how often it retried

    def count(self, table: str) -> int:
        from deltalake import DeltaTable

        return int(DeltaTable(table, storage_options=self.options).get_add_actions().num_rows)


# --- Iceberg (pyiceberg) ------------------------------------------------------------------------------


class RetryCounter(logging.Handler):
    """pyiceberg logs each retried commit ("Commit failed due to a concurrent update, retrying")."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.retries = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "retrying" in record.getMessage():
            self.retries += 1


class Iceberg:
    def __init__(self, case: dict[str, Any]) -> None:
        self.case = case
        directory = case["directory"]
        self.catalog_uri = f"sqlite:///{directory}/iceberg-catalog.db"
        if case["storage"] == "s3":
            self.warehouse = f"s3://{PEER_BUCKET}/iceberg"
            self.properties = {
                "s3.endpoint": case["s3_endpoint"],
                "s3.access-key-id": "testing",
                "s3.secret-access-key": "testing",
                "s3.region": REGION,
            }
        else:
            self.warehouse = f"file://{directory}/iceberg"
            self.properties = {}
        self.retry_counter = RetryCounter()
        logging.getLogger("pyiceberg").addHandler(self.retry_counter)

    def catalog(self) -> Any:
        from pyiceberg.catalog.sql import SqlCatalog

        return SqlCatalog("bench", uri=self.catalog_uri, warehouse=self.warehouse, **self.properties)

    @staticmethod
    def data_files(
        table: Any, names: Sequence[str], partition: str = "root", rows: Sequence[int] | None = None
    ) -> list[Any]:
        from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
        from pyiceberg.typedef import Record

        location = table.location()
        return [
            DataFile.from_args(
                _table_format_version=table.format_version,
                content=DataFileContent.DATA,
                file_path=f"{location}/{name}",
                file_format=FileFormat.PARQUET,
                partition=Record(partition),
                record_count=rows[i] if rows else 1000,
                file_size_in_bytes=FILE_SIZE,
            )
            for i, name in enumerate(names)
        ]

    @staticmethod
    def fast_append(table: Any, data_files: Sequence[Any]) -> None:
        with table.transaction() as transaction, transaction.update_snapshot().fast_append() as append:
            for data_file in data_files:
                append.append_data_file(data_file)

    def create(self, initial: int) -> str:
        from pyiceberg.partitioning import PartitionField, PartitionSpec
        from pyiceberg.schema import Schema
        from pyiceberg.transforms import IdentityTransform
        from pyiceberg.types import LongType, NestedField, StringType

        catalog = self.catalog()
        catalog.create_namespace_if_not_exists("bench")
        schema = Schema(
            NestedField(1, "key", LongType(), required=False),
            NestedField(2, "value", StringType(), required=False),
            NestedField(3, "partition_id", StringType(), required=False),
        )
        spec = PartitionSpec(
            PartitionField(source_id=3, field_id=1000, transform=IdentityTransform(), name="partition_id")
        )
        name = f"bench.t{uuid.uuid4().hex[:8]}"
        table = catalog.create_table(
            name,
            schema,
            partition_spec=spec,
            properties={
                # The same retry policy as statestore's: 12 attempts, 5 ms doubling, capped at 1 s.
                "commit.retry.num-retries": str(RETRIES - 1),
                "commit.retry.min-wait-ms": "5",
                "commit.retry.max-wait-ms": "1000",
            },
        )
        if initial:
            self.fast_append(table, self.data_files(table, batch_names("initial", initial)))
        return name

    def open_writer(self, table: str) -> tuple[Callable[[list[str]], None], Callable[[], int]]:
        # One catalog and table per writer; a commit updates the table in place, and a retried one
        # refreshes it first (pyiceberg's commit retry).
        iceberg_table = self.catalog().load_table(table)

        def commit(names: list[str]) -> None:
            self.fast_append(iceberg_table, self.data_files(iceberg_table, names))

        return commit, lambda: self.retry_counter.retries  # counts every writer of this process

    def count(self, table: str) -> int:
        return int(self.catalog().load_table(table).inspect.files().num_rows)


SYSTEM_CLASSES: dict[str, Callable[[dict[str, Any]], Any]] = {
    "statestore": Statestore,
    "delta": Delta,
    "iceberg": Iceberg,
}


# --- the cases, each run in a child process -----------------------------------------------------------


def case_commits(case: dict[str, Any]) -> dict[str, Any]:
    system = SYSTEM_CLASSES[case["system"]](case)
    writers, commits, initial = case["writers"], case["commits"], case["initial"]
    table = system.create(initial)
    opened = [system.open_writer(table) for _ in range(writers)]

    def total_retries() -> int:
        if case["system"] == "iceberg":  # one counter for the process
            return int(opened[0][1]())
        return sum(retries() for _, retries in opened)

    retries_before = total_retries()
    barrier = threading.Barrier(writers + 1)
    errors: list[str] = []

    def run(w: int) -> None:
        commit, _ = opened[w]
        barrier.wait()
        for i in range(commits):
            try:
                commit([file_name(f"w{w}", i, j) for j in range(FILES_PER_COMMIT)])
            except Exception as e:  # a commit that gave up: counted, and the writer goes on
                errors.append(f"{type(e).__name__}: {e}"[:200])
        barrier.wait()

    threads = [threading.Thread(target=run, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    barrier.wait()
    with Timer(case["emulator_pids"]) as timer:
        barrier.wait()
    for t in threads:
        t.join()
    retries = total_retries() - retries_before
    expected = initial + (writers * commits - len(errors)) * FILES_PER_COMMIT
    counted = system.count(table)
    return {
        **timer.figures(),
        "commits": writers * commits - len(errors),
        "failed": len(errors),
        "first_error": errors[0] if errors else None,
        "retries": retries if retries >= 0 else None,
        "files_expected": expected,
        "files_counted": counted,
    }


def case_bulk(case: dict[str, Any]) -> dict[str, Any]:
    system = SYSTEM_CLASSES[case["system"]](case)
    table = system.create(case["initial"])
    commit, _ = system.open_writer(table)
    names = batch_names("bulk", case["references"])
    if case["system"] == "iceberg":
        # The DataFile objects are built before the clock starts, as statestore's AddFiles and Delta's
        # add actions are built inside their commit (cheap next to Iceberg's, which read the table).
        catalog = system.catalog()
        iceberg_table = catalog.load_table(table)
        data_files = system.data_files(iceberg_table, names)
        with Timer(case["emulator_pids"]) as timer:
            system.fast_append(iceberg_table, data_files)
    else:
        with Timer(case["emulator_pids"]) as timer:
            commit(names)
    counted = system.count(table)
    return {**timer.figures(), "files_expected": case["initial"] + len(names), "files_counted": counted}


def peer_table_shape(references: int, leaves: int) -> tuple[list[str], list[str], list[int]]:
    """The peers' 1M-reference table: one data file per reference, in ``leaves`` partition values."""
    rng = random.Random(7)
    partitions = [f"{rng.getrandbits(128):032x}" for _ in range(leaves)]
    chosen = [partitions[rng.randrange(leaves)] for _ in range(references)]
    names = [f"data/partition_id={p}/{rng.getrandbits(128):032x}.parquet" for p in chosen]
    rows = [rng.randrange(1, 10_000_000) for _ in range(references)]
    return names, chosen, rows


def case_prepare_load(case: dict[str, Any]) -> dict[str, Any]:
    """Write the 1M-reference table of one system to the local disk (not timed as a figure)."""
    directory, references, leaves = Path(case["directory"]), case["references"], case["leaves"]
    start = time.perf_counter()
    if case["system"] == "statestore":
        from bench_model import big_state

        from statestore.codec.parquet import state_to_parquet

        state = big_state(3, leaves, references)
        partitions_bytes, files_bytes = state_to_parquet(state)
        (directory / "statestore-partitions.parquet").write_bytes(partitions_bytes)
        (directory / "statestore-files.parquet").write_bytes(files_bytes)
        (directory / "statestore-transaction").write_text(str(state.transaction_number))
        count = state.reference_count()
        size = len(partitions_bytes) + len(files_bytes)
    else:
        names, chosen, rows = peer_table_shape(references, leaves)
        by_partition: dict[str, list[int]] = {}
        for i, p in enumerate(chosen):
            by_partition.setdefault(p, []).append(i)
        if case["system"] == "delta":
            from deltalake import DeltaTable
            from deltalake import Schema as DeltaSchema
            from deltalake.transaction import AddAction, create_table_with_add_actions

            delta = Delta(case)
            uri = str(directory / "delta-load")
            actions = [
                AddAction(name, FILE_SIZE, {"partition_id": p}, BASE_TIME, True, f'{{"numRecords":{r}}}')
                for name, p, r in zip(names, chosen, rows, strict=True)
            ]
            create_table_with_add_actions(
                uri, DeltaSchema.from_arrow(delta.schema), actions, partition_by=["partition_id"]
            )
            DeltaTable(
                uri
            ).create_checkpoint()  # a reader starts from the checkpoint, as ours from a snapshot
            count = len(actions)
            size = sum(f.stat().st_size for f in (Path(uri) / "_delta_log").iterdir() if f.is_file())
        else:
            from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
            from pyiceberg.typedef import Record

            iceberg = Iceberg(case)
            name = iceberg.create(0)
            shutil.move(str(directory / "iceberg-catalog.db"), str(directory / "iceberg-load.db"))
            table = Iceberg({**case, "directory": str(directory)})
            table.catalog_uri = f"sqlite:///{directory}/iceberg-load.db"
            iceberg_table = table.catalog().load_table(name)
            location = iceberg_table.location()
            data_files = [
                DataFile.from_args(
                    _table_format_version=iceberg_table.format_version,
                    content=DataFileContent.DATA,
                    file_path=f"{location}/{n}",
                    file_format=FileFormat.PARQUET,
                    partition=Record(p),
                    record_count=r,
                    file_size_in_bytes=FILE_SIZE,
                )
                for n, p, r in zip(names, chosen, rows, strict=True)
            ]
            Iceberg.fast_append(iceberg_table, data_files)
            (directory / "iceberg-load-table").write_text(name)
            count = len(data_files)
            size = sum(
                f.stat().st_size for f in Path(location.removeprefix("file://")).rglob("*") if f.is_file()
            )
    return {"seconds": time.perf_counter() - start, "references": count, "bytes": size}


def case_load(case: dict[str, Any]) -> dict[str, Any]:
    directory = Path(case["directory"])
    if case["system"] == "statestore":
        from bench_model import SCHEMA

        from statestore.codec.parquet import state_from_parquet

        baseline = rss_mb()
        with Timer(()) as timer:
            state = state_from_parquet(
                SCHEMA,
                (directory / "statestore-partitions.parquet").read_bytes(),
                (directory / "statestore-files.parquet").read_bytes(),
                int((directory / "statestore-transaction").read_text()),
            )
        count = state.reference_count()
    elif case["system"] == "delta":
        from deltalake import DeltaTable

        baseline = rss_mb()
        with Timer(()) as timer:
            add_actions = DeltaTable(str(directory / "delta-load")).get_add_actions(flatten=True)
        count = add_actions.num_rows
    else:
        from pyiceberg.catalog.sql import SqlCatalog

        name = (directory / "iceberg-load-table").read_text()
        baseline = rss_mb()
        with Timer(()) as timer:
            catalog = SqlCatalog(
                "bench", uri=f"sqlite:///{directory}/iceberg-load.db", warehouse=f"file://{directory}/iceberg"
            )
            tasks = list(catalog.load_table(name).scan().plan_files())
        count = len(tasks)
    peak = peak_rss_mb()
    return {**timer.figures(), "references": count, "peak_rss_mb": peak, "above_imports_mb": peak - baseline}


CASES: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "commits": case_commits,
    "bulk": case_bulk,
    "prepare_load": case_prepare_load,
    "load": case_load,
}


def child_main(case_json: str) -> None:
    logging.getLogger("botocore").setLevel(logging.ERROR)
    case = json.loads(case_json)
    result = CASES[case["work"]](case)
    print("RESULT " + json.dumps(result), flush=True)


# --- the parent: emulators, the order of runs, the tables ---------------------------------------------


def run_child(case: dict[str, Any], timeout: float = 1200) -> dict[str, Any]:
    completed = subprocess.run(
        [sys.executable, __file__, "--child", json.dumps(case)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    for line in reversed(completed.stdout.splitlines()):
        if line.startswith("RESULT "):
            result: dict[str, Any] = json.loads(line.removeprefix("RESULT "))
            return result
    raise RuntimeError(
        f"case {case['work']}/{case['system']} failed (exit {completed.returncode}):\n"
        + completed.stderr[-3000:]
    )


@dataclass
class Best:
    """The best (fastest) of repeated runs of one case, and how many runs there were."""

    result: dict[str, Any] | None = None
    runs: int = 0

    def add(self, result: dict[str, Any]) -> None:
        self.runs += 1
        if self.result is None or result["seconds"] < self.result["seconds"]:
            self.result = result


def describe(work: str, system: str, storage: str, detail: str, r: dict[str, Any]) -> None:
    extra = ""
    if "commits" in r:
        extra = (
            f"  {r['commits'] / r['seconds']:8.1f} commits/s  retries {r['retries']}  failed {r['failed']}"
            f"  files {r['files_counted']:,}/{r['files_expected']:,}"
        )
        if r.get("first_error"):
            extra += f"  first error: {r['first_error']}"
    elif "files_counted" in r:
        extra = f"  files {r['files_counted']:,}/{r['files_expected']:,}"
    elif "peak_rss_mb" in r:
        extra = f"  peak RSS {r['peak_rss_mb']:,.0f} MB ({r['above_imports_mb']:,.0f} above imports)"
    print(
        f"  {work:<8} {storage:<5} {detail:<12} {system:<10} {r['seconds']:8.2f} s wall  "
        f"{r['cpu']:7.2f} s CPU  {r['emulator_cpu']:6.2f} s emulator CPU{extra}",
        flush=True,
    )


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b else "n/a"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small sizes: checks the code paths only")
    parser.add_argument("--repeat", type=int, default=2, help="runs per commit case, best kept (default 2)")
    parser.add_argument("--load-repeat", type=int, default=3, help="runs per load, best kept (default 3)")
    parser.add_argument(
        "--iceberg-load-repeat",
        type=int,
        default=1,
        help="runs of Iceberg's 1M load (default 1: each takes minutes in pyiceberg)",
    )
    parser.add_argument("--initial-files", type=int, help="files in each table before the commits")
    parser.add_argument("--only", nargs="+", choices=["commits", "bulk", "load"], default=None)
    parser.add_argument("--storage", nargs="+", choices=["local", "s3"], default=["local", "s3"])
    parser.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        os.environ[name] = "testing"  # local endpoints only: nothing can reach a real account
    os.environ.pop("AWS_PROFILE", None)
    os.environ.setdefault("AWS_DEFAULT_REGION", REGION)
    if args.child:
        child_main(args.child)
        return 0

    scale = QUICK if args.quick else FULL
    if args.initial_files is not None:
        scale = replace(scale, initial_files=args.initial_files)
    works = args.only or ["commits", "bulk", "load"]
    systems: list[str] = args.systems
    started = time.perf_counter()
    print(
        f"statestore vs Delta Lake (deltalake {version('deltalake')}) vs Iceberg (pyiceberg "
        f"{version('pyiceberg')}), {'quick' if args.quick else 'full'} run, {os.cpu_count()} CPU(s), "
        f"load average {os.getloadavg()[0]:.1f}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        flush=True,
    )
    directory = Path(tempfile.mkdtemp(prefix="bench-peers-"))
    from bench_committer import start_moto_server  # the same launcher as the other benchmarks

    from statestore.adapters.aws.backend import AwsBackend
    from statestore.adapters.aws.clients import make_client
    from statestore.instance import ResourceNames
    from statestore.local.dynamodb_local import DynamoDBLocal

    moto, moto_endpoint = start_moto_server()
    dynamodb_on_disk = DynamoDBLocal.start(db_path=directory / "dynamodb-local")
    dynamodb_in_memory = DynamoDBLocal.start()
    dynamodb = {"local": dynamodb_on_disk, "s3": dynamodb_in_memory}
    try:
        for storage, server in dynamodb.items():
            AwsBackend.connect(
                ResourceNames.for_instance(f"peers-{storage}"),
                moto_endpoint,
                region=REGION,
                dynamodb_endpoint_url=server.endpoint_url,
            ).provision()
        make_client("s3", endpoint_url=moto_endpoint, region=REGION).create_bucket(
            Bucket=PEER_BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION}
        )

        def base_case(work: str, system: str, storage: str) -> dict[str, Any]:
            case_dir = directory / f"{storage}-{system}-{uuid.uuid4().hex[:6]}"
            case_dir.mkdir()
            return {
                "work": work,
                "system": system,
                "storage": storage,
                "directory": str(case_dir),
                "instance": f"peers-{storage}",
                "s3_endpoint": moto_endpoint,
                "dynamodb_endpoint": dynamodb[storage].endpoint_url,
                "emulator_pids": [moto.pid, dynamodb[storage].process.pid],
            }

        commits: dict[tuple[str, int, str], Best] = {}
        bulk: dict[tuple[str, int, str], Best] = {}
        loads: dict[str, Best] = {}
        if "statestore" in systems and works != ["load"]:
            for storage in args.storage:  # DynamoDB Local's JIT: warm it up, untimed
                warm_up = base_case("commits", "statestore", storage) | {
                    "writers": 8,
                    "commits": 10,
                    "initial": scale.initial_files,
                }
                run_child(warm_up)
        if "commits" in works:
            print("\ncommits (best of runs, interleaved):", flush=True)
            for _ in range(args.repeat):
                for storage in args.storage:
                    for writers, per_writer in ((1, scale.commits_single), (8, scale.commits_each)):
                        for system in systems:
                            case = base_case("commits", system, storage) | {
                                "writers": writers,
                                "commits": per_writer,
                                "initial": scale.initial_files,
                            }
                            r = run_child(case)
                            describe("commits", system, storage, f"{writers} writer(s)", r)
                            commits.setdefault((storage, writers, system), Best()).add(r)
        if "bulk" in works:
            print("\nbulk commits (best of runs, interleaved):", flush=True)
            for _ in range(args.repeat):
                for storage in args.storage:
                    for references in scale.bulk:
                        for system in systems:
                            case = base_case("bulk", system, storage) | {
                                "references": references,
                                "initial": scale.initial_files,
                            }
                            r = run_child(case)
                            describe("bulk", system, storage, f"{references:,} refs", r)
                            bulk.setdefault((storage, references, system), Best()).add(r)
        if "load" in works:
            load_dir = directory / "load"
            load_dir.mkdir()
            print(
                f"\nload of {scale.load_references:,} references over {scale.load_leaves:,} leaves "
                f"(local disk; writing each table first, not judged):",
                flush=True,
            )
            for system in systems:
                case = base_case("prepare_load", system, "local") | {
                    "directory": str(load_dir),
                    "references": scale.load_references,
                    "leaves": scale.load_leaves,
                }
                r = run_child(case, timeout=3600)
                print(
                    f"  wrote {system:<10} {r['references']:,} references, {r['bytes'] / 1e6:,.1f} MB, "
                    f"in {r['seconds']:.1f} s",
                    flush=True,
                )
            for rep in range(args.load_repeat):
                for system in systems:
                    if system == "iceberg" and rep >= args.iceberg_load_repeat:
                        continue
                    case = base_case("load", system, "local") | {"directory": str(load_dir)}
                    r = run_child(case, timeout=3600)
                    describe("load", system, "local", f"{r['references']:,}", r)
                    loads.setdefault(system, Best()).add(r)
    finally:
        dynamodb_on_disk.stop()
        dynamodb_in_memory.stop()
        moto.terminate()
        moto.wait(timeout=10)
        shutil.rmtree(directory, ignore_errors=True)

    figures: list[Figure] = []
    ok = summarise(args, scale, systems, commits, bulk, loads, figures)
    print(f"\ntotal {time.perf_counter() - started:.0f} s")
    if figures:
        record(__file__, figures)
    return 0 if ok else 1


def version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed(package)
    except PackageNotFoundError:
        return "not installed"


def summarise(
    args: argparse.Namespace,
    scale: Scale,
    systems: list[str],
    commits: dict[tuple[str, int, str], Best],
    bulk: dict[tuple[str, int, str], Best],
    loads: dict[str, Best],
    figures: list[Figure],
) -> bool:
    """Print each system's figures and statestore's ratios to its peers, judge the load, and add the figures
    to ``figures`` for the benchmarks page."""
    peers = [s for s in systems if s != "statestore"]
    ok = True
    print("\n=== summary: statestore ÷ peer, from the same run ===")
    if commits:
        print("\ncommits/s (higher is better; ratio > 1: statestore commits faster)")
        header = f"  {'storage':<7} {'writers':>7} " + "".join(f"{s:>12}" for s in systems)
        header += "".join(f"  {'÷ ' + p:>10}" for p in peers)
        print(header)
        for storage in args.storage:
            for writers in (1, 8):
                rates = {}
                for s in systems:
                    best = commits.get((storage, writers, s))
                    if best and best.result:
                        rates[s] = best.result["commits"] / best.result["seconds"]
                line = f"  {storage:<7} {writers:>7} " + "".join(f"{rates.get(s, 0):>12.1f}" for s in systems)
                if "statestore" in rates:
                    line += "".join(f"  {ratio(rates['statestore'], rates.get(p, 0)):>10}" for p in peers)
                print(line)
                figures += [
                    Figure(f"{where(storage)}, {writers} writer(s): {s}", rate, "commits/s", COMMIT_BOUNDS[s])
                    for s, rate in rates.items()
                ]
        lost = [
            f"{k}: {b.result['files_counted']}/{b.result['files_expected']}"
            for k, b in commits.items()
            if b.result and b.result["files_counted"] != b.result["files_expected"]
        ]
        print("  every table holds every committed file" if not lost else f"  COUNT MISMATCH: {lost}")
        ok &= not lost
    if bulk:
        print("\none bulk commit, seconds (lower is better; ratio < 1: statestore commits faster)")
        header = f"  {'storage':<7} {'refs':>9} " + "".join(f"{s:>12}" for s in systems)
        header += "".join(f"  {'÷ ' + p:>10}" for p in peers)
        print(header)
        for storage in args.storage:
            for references in scale.bulk:
                times = {}
                for s in systems:
                    best = bulk.get((storage, references, s))
                    if best and best.result:
                        times[s] = best.result["seconds"]
                line = f"  {storage:<7} {references:>9,} " + "".join(
                    f"{times.get(s, 0):>12.3f}" for s in systems
                )
                if "statestore" in times:
                    line += "".join(f"  {ratio(times['statestore'], times.get(p, 0)):>10}" for p in peers)
                print(line)
                figures += [
                    Figure(
                        f"{where(storage)}, one bulk commit of {references:,} references: {s}",
                        seconds,
                        "s",
                        "CPU: encoding and writing the body",
                    )
                    for s, seconds in times.items()
                ]
    if loads:
        print(
            f"\nload of {scale.load_references:,} references, local disk (lower is better; best of "
            f"{args.load_repeat}, Iceberg {args.iceberg_load_repeat})"
        )
        for s in systems:
            best = loads.get(s)
            if best and best.result:
                r = best.result
                print(
                    f"  {s:<10} {r['seconds']:8.2f} s wall  {r['cpu']:7.2f} s CPU  peak RSS "
                    f"{r['peak_rss_mb']:7,.0f} MB ({r['above_imports_mb']:,.0f} MB above imports)  "
                    f"runs {best.runs}"
                )
                if s != "statestore":
                    figures.append(
                        Figure(
                            f"load of {scale.load_references:,} references: {s}",
                            r["seconds"],
                            "s",
                            "CPU: reading the log, checkpoint or manifest",
                        )
                    )
        ours = loads.get("statestore")
        if ours and ours.result:
            judged = not args.quick
            for p in peers:
                theirs = loads.get(p)
                if theirs and theirs.result:
                    t = ours.result["seconds"] / theirs.result["seconds"]
                    m = ours.result["peak_rss_mb"] / theirs.result["peak_rss_mb"]
                    line = f"  statestore ÷ {p:<8} time {t:5.2f}  peak memory {m:5.2f}"
                    if p == "delta":
                        passed = t <= LOAD_TARGET_RATIO
                        line += f"   target time ratio <= {LOAD_TARGET_RATIO:.2f}: " + (
                            ("PASS" if passed else "FAIL") if judged else "(quick run: not judged)"
                        )
                        ok &= passed or not judged
                        figures.append(
                            Figure.judged(
                                "load time: statestore / delta-rs",
                                t,
                                "",
                                bound_by="CPU: Parquet decoding against delta-rs's checkpoint reading",
                                at_most=LOAD_TARGET_RATIO,
                                judge=judged,
                            )
                        )
                    print(line)
            seconds = ours.result["seconds"]
            passed = seconds <= LOAD_TARGET_SECONDS
            print(
                f"  statestore load {seconds:.2f} s   target <= {LOAD_TARGET_SECONDS:.0f} s: "
                + (("PASS" if passed else "FAIL") if judged else "(quick run: not judged)")
            )
            ok &= passed or not judged
            figures.append(
                Figure.judged(
                    f"load of {scale.load_references:,} references: statestore",
                    seconds,
                    "s",
                    bound_by="CPU: Parquet decoding",
                    at_most=LOAD_TARGET_SECONDS,
                    judge=judged,
                )
            )
    return ok


COMMIT_BOUNDS = {
    "statestore": "round trips to DynamoDB Local (a JVM on the same cores)",
    "delta": "delta-rs's CPU per commit, growing with the table",
    "iceberg": "pyiceberg's Python CPU and its catalog and metadata objects",
}


def where(storage: str) -> str:
    return "local disk" if storage == "local" else "S3 emulator"


if __name__ == "__main__":
    sys.exit(main())
