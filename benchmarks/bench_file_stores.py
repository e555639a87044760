"""File references on the transaction log against file references in PostgreSQL: the same work, one run.

Two systems, both with their partitions on the log (DynamoDB Local in memory, bodies and snapshots on S3 on
a moto server, as ``bench_peers.py``'s ``s3`` storage), so the difference is where the files live:

- ``log``: a table as today, its files and references on the same log.
- ``postgres``: a table created with ``file_store="postgres"``, its files and references as rows in a
  throwaway PostgreSQL 15 cluster this script starts (data directory on tmpfs, like DynamoDB Local in
  memory; Unix socket only), through ``PostgresFileReferenceStore`` (design record 002, option 3).

The work, each case in a fresh child process (its memory its own, no case warming another):

- **commits/s** with 1, 8 and 32 writer threads, each its own client and state store (loaded before the
  clock starts), the same total of commits per case, each an ``AddFiles`` of 1 file with 1 reference on a
  table of 16 leaves. Commits that lost a race and were redone (``retries``) and commits that gave up are
  counted; the file count is checked after.
- **contention** (the record's case): 1,024 leaves; 11 ingests, each ``AddFiles`` of one file referenced on
  every leaf (timed: ``ingest``); one ``AssignJobIds`` of 1,024 jobs, one per leaf, each claiming its 11
  references; then 1,024 ``ReplaceFileReferences`` (11 inputs -> 1 output, one per job) committed at once
  from 32 threads behind a barrier. Afterwards every leaf must hold exactly its output and the 11 inputs no
  reference. The same 1,024 commits also go **through the committer** (``BatchCommitter.process`` in this
  process on the same stores, fed batches of 10 messages as SQS hands them to the Lambda; a message it
  leaves on the queue is fed again, as SQS redelivers it).
- **GC of 100,000 files** that lost their references (10 compactions of 10,000 files each); the cleanup's
  state work is timed: ``cleanup_table`` with a GC delay of 0 on a fresh store (log: load the state from its
  snapshot, find the files, commit ``DeleteFiles`` in chunks of 1,000; PostgreSQL: mark the files with no
  reference, find those marked, commit the same chunks). No data object exists, so the S3 deletes are left
  out for both (a blob store that skips them).
- **load** of a table of 100,000 references over 10,000 leaves (``--references`` for another size): a fresh
  store's ``state()``. Log: the snapshot written after the references, then the log after it. PostgreSQL:
  the partitions from the log (and its snapshot), the files from ``files()``. Time and the child's peak RSS.

Figures are wall-clock seconds with this child's CPU seconds (every thread), the emulators' CPU (DynamoDB
Local's JVM and moto, from /proc) and PostgreSQL's (the postmaster and its backends, live and exited, from
/proc) while the case was timed. DynamoDB Local is warmed up (its JIT) by an untimed run of each system
first. A lost race is retried with each store's own policy: the log's default ``RetryPolicy`` (12
attempts, 5 ms doubling, capped at 1 s; the committer's 8), the PostgreSQL store's redo (10 attempts, 10 ms
doubling, capped at 1 s). The cluster runs PostgreSQL's default settings (``max_connections`` raised) on
tmpfs; it is started here with ``initdb``/``pg_ctl`` (as the ``postgres`` user when root), as the tests'
fixture does, which is a pytest fixture and so not reused.

    python benchmarks/bench_file_stores.py [--quick] [--only commits contention gc load] [--references N]
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import logging
import math
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_peers import Best, peak_rss_mb, rss_mb  # noqa: E402
from bench_peers import Timer as EmulatorTimer  # noqa: E402
from results import Figure, record  # noqa: E402

from statestore.instance import POSTGRES_SERVER_SETTINGS  # noqa: E402
from statestore.store.ports import BlobStore  # noqa: E402

REGION = "eu-west-2"
SYSTEMS = ("log", "postgres")
INSTANCE = "bench-file-stores"
BATCH = 10  # messages per committer call, as the SQS event source hands them to the Lambda
PG_BIN = "/usr/lib/postgresql/15/bin"  # Debian's PostgreSQL 15, when its tools are not on the PATH
CHUNK = 10_000  # references per AddFiles when a big table is built (and files per compaction in the GC case)


@dataclass(frozen=True)
class Scale:
    writers: tuple[int, ...]
    commits: int  # per commits case, shared among its writers
    commit_leaves: int
    contention_leaves: int
    contention_files: int
    contention_threads: int
    gc_files: int
    load_references: int


FULL = Scale((1, 8, 32), 96, 16, 1024, 11, 32, 100_000, 100_000)
QUICK = Scale((1, 8, 32), 32, 16, 64, 11, 32, 2_000, 5_000)


# --- measuring, in the child ---------------------------------------------------------------------------


def postgres_cpu_seconds(postmaster: int | None) -> float:
    """User + system CPU of a PostgreSQL cluster: the postmaster, its exited backends (reaped into its
    children's times) and its live ones."""
    if postmaster is None:
        return 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    try:
        with open(f"/proc/{postmaster}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += sum(int(v) for v in fields[11:15])  # utime, stime, cutime, cstime
    except OSError:
        return 0.0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == postmaster:  # ppid
            total += int(fields[11]) + int(fields[12])
    return total / ticks


class Timer(EmulatorTimer):
    """``bench_peers``' timer (wall, this process's CPU, the emulators'), with PostgreSQL's CPU beside."""

    def __init__(self, case: Mapping[str, Any]) -> None:
        super().__init__(case["emulator_pids"])
        self.postmaster: int | None = case.get("postmaster_pid")

    def __enter__(self) -> Timer:
        self.db_start = postgres_cpu_seconds(self.postmaster)
        super().__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        self.db_cpu = postgres_cpu_seconds(self.postmaster) - self.db_start

    def figures(self) -> dict[str, float]:
        return super().figures() | {"db_cpu": self.db_cpu}


# --- the two systems --------------------------------------------------------------------------------------


class System:
    """A client of one system in a child: the same AWS adapters for both, plus the PostgreSQL file store."""

    def __init__(self, case: Mapping[str, Any]) -> None:
        from statestore.instance import ResourceNames
        from statestore.model.schema import Schema

        self.case = case
        self.name: str = case["system"]
        self.resources = ResourceNames.for_instance(case["instance"])
        self.schema = Schema.of({"key": "long"}, values={"value": "string"})

    @property
    def on_postgres(self) -> bool:
        return self.name == "postgres"

    def backend(self) -> Any:
        from statestore.adapters.aws.backend import AwsBackend

        return AwsBackend.connect(
            self.resources,
            self.case["s3_endpoint"],
            region=REGION,
            dynamodb_endpoint_url=self.case["dynamodb_endpoint"],
        )

    def file_store(self) -> Any:
        """A PostgreSQL file store of its own (its own connection), or None for the log system.

        Imported by name: the adapter needs the optional ``postgres`` extra (psycopg)."""
        if not self.on_postgres:
            return None
        postgres = importlib.import_module("statestore.adapters.postgres")
        return postgres.PostgresFileReferenceStore.connect(self.case["postgres_dsn"], ensure_schema=False)

    def client(self) -> Any:
        """A client of its own (its own AWS clients and, on PostgreSQL, its own file store)."""
        from statestore.engine.log_store import RetryPolicy
        from statestore.services.client import StateStoreClient

        backend = self.backend()
        extra = {"file_store": self.file_store()} if self.on_postgres else {}
        return StateStoreClient(
            backend.table_index,
            backend.log,
            backend.snapshot_metadata,
            backend.blobs,
            retry=RetryPolicy(),
            **extra,
        )

    def create_table(self, client: Any, purpose: str, leaves: int) -> Any:
        """A table of ``leaves`` leaf partitions cut on the row key, its files where the system keeps them."""
        extra = {"file_store": "postgres"} if self.on_postgres else {}
        split_points = [1000 * i for i in range(1, leaves)]
        name = f"{purpose}-{self.name}-{uuid.uuid4().hex[:8]}"
        return client.create_table(name, self.schema, split_points, **extra)

    @staticmethod
    def retries(store: Any) -> int:
        """Races a store lost and redid: collisions on the log's next number, and on PostgreSQL the commits
        it redid (a unique key taken, a deadlock, a serialisation failure)."""
        file_store = getattr(store, "file_store", None)
        return int(store.retries) + (int(file_store.redo_count) if file_store is not None else 0)


def data_file(table_id: str, tag: str) -> str:
    from statestore.model import layout

    return f"{layout.data_prefix(table_id)}{tag}-{uuid.uuid4().hex}.parquet"


def warm_up(blobs: Any, snapshot_metadata: Any, table_id: str) -> None:
    """botocore loads a service's model on a client's first call (a second or so): make that call on the
    S3 and DynamoDB clients before the clock starts, as a warm Lambda container would have."""
    from statestore.model import layout

    blobs.list(layout.snapshot_prefix(table_id))
    snapshot_metadata.latest(table_id)


def leaf_ids(client: Any, table_id: str) -> list[str]:
    return sorted(p.id for p in client.leaf_partitions(table_id))


def first_error(errors: Sequence[str]) -> str | None:
    return errors[0] if errors else None


def commit_at_once(
    case: Mapping[str, Any], stores: Sequence[Any], work: Sequence[Sequence[Any]]
) -> tuple[dict[str, float], list[str]]:
    """Commit ``work[i]`` (transactions, in order) from thread ``i`` on ``stores[i]``, every thread released
    at once by a barrier; returns the timer's figures and the errors of commits that gave up."""
    barrier = threading.Barrier(len(stores) + 1)
    errors: list[str] = []

    def run(store: Any, transactions: Sequence[Any]) -> None:
        barrier.wait()
        for transaction in transactions:
            try:
                store.commit(transaction)
            except Exception as e:  # a commit that gave up: counted, and the writer goes on
                errors.append(f"{type(e).__name__}: {e}"[:200])
        barrier.wait()

    threads = [threading.Thread(target=run, args=pair) for pair in zip(stores, work, strict=True)]
    for t in threads:
        t.start()
    with Timer(case) as timer:
        barrier.wait()
        barrier.wait()
    for t in threads:
        t.join()
    return timer.figures(), errors


# --- the cases, each run in a child process -----------------------------------------------------------


def case_commits(case: Mapping[str, Any]) -> dict[str, Any]:
    from statestore.model.files import FileReference
    from statestore.transactions import AddFiles

    system = System(case)
    client = system.client()
    table_id = system.create_table(client, "commits", case["leaves"]).table_id
    leaves = leaf_ids(client, table_id)
    writers, total = case["writers"], case["commits"]
    stores = [system.client().state_store(table_id) for _ in range(writers)]
    for store in stores:
        store.state()  # loaded before the clock starts

    def one_file(w: int, i: int) -> AddFiles:  # the writers' files spread over every leaf
        leaf = leaves[(w + i * writers) % len(leaves)]
        return AddFiles((FileReference(data_file(table_id, f"w{w}-{i}"), leaf, 1000),))

    work = [[one_file(w, i) for i in range(total // writers)] for w in range(writers)]
    figures, errors = commit_at_once(case, stores, work)
    committed = sum(len(w) for w in work) - len(errors)
    return {
        **figures,
        "commits": committed,
        "failed": len(errors),
        "first_error": first_error(errors),
        "retries": sum(System.retries(s) for s in stores),
        "files_expected": committed,
        "files_counted": int(system.client().state(table_id).reference_count()),
    }


def case_contention(case: Mapping[str, Any]) -> dict[str, Any]:
    from statestore.model.files import FileReference
    from statestore.transactions import (
        AddFiles,
        AssignJobIdRequest,
        AssignJobIds,
        ReplaceFileReferences,
        ReplaceFileReferencesJob,
    )

    system = System(case)
    client = system.client()
    table_id = system.create_table(client, "contention", case["leaves"]).table_id
    leaves = leaf_ids(client, table_id)
    store = client.state_store(table_id)
    inputs = tuple(data_file(table_id, f"ingest-{k}") for k in range(case["files"]))
    with Timer(case) as ingest:
        for name in inputs:  # one file spanning every leaf: a reference on each, rows approximate
            store.commit(AddFiles(tuple(FileReference(name, leaf, 1000, True, False) for leaf in leaves)))
    jobs = [(f"job-{i:04d}", leaf) for i, leaf in enumerate(leaves)]
    with Timer(case) as assign:
        store.commit(AssignJobIds(tuple(AssignJobIdRequest(job, leaf, inputs) for job, leaf in jobs)))
    outputs = {leaf: data_file(table_id, f"output-{leaf}") for leaf in leaves}
    commits = [
        ReplaceFileReferences(
            (
                ReplaceFileReferencesJob(
                    job, leaf, inputs, FileReference(outputs[leaf], leaf, 1000 * len(inputs))
                ),
            )
        )
        for job, leaf in jobs
    ]
    if case["mode"] == "threads":
        threads = case["threads"]
        stores = [system.client().state_store(table_id) for _ in range(threads)]
        for s in stores:
            s.state()  # loaded before the clock starts
        figures, errors = commit_at_once(case, stores, [commits[t::threads] for t in range(threads)])
        retries = sum(System.retries(s) for s in stores)
    else:
        figures, errors, retries = through_committer(case, system, table_id, commits)
    state = system.client().state(table_id)
    exact = sum(
        1 for leaf in leaves if [r.filename for r in state.references_in_partition(leaf)] == [outputs[leaf]]
    )
    left = sum(len(state.files_by_name[n].references) for n in inputs if n in state.files_by_name)
    return {
        **figures,
        "ingest": ingest.figures(),
        "assign": assign.figures(),
        "commits": len(commits) - len(errors),
        "failed": len(errors),
        "first_error": first_error(errors),
        "retries": retries,
        "leaves": len(leaves),
        "leaves_with_output_only": exact,
        "input_references_left": left,
    }


def through_committer(
    case: Mapping[str, Any], system: System, table_id: str, commits: Sequence[Any]
) -> tuple[dict[str, float], list[str], int]:
    """``commits`` as commit requests through ``BatchCommitter.process``, in batches of 10; a message left on
    the queue (RETRY) is fed again in a later batch, as SQS redelivers it. Returns the timer's figures, the
    errors of requests that did not commit and how many times messages were fed again."""
    from statestore.engine.requests import CommitRequest, encode_request
    from statestore.engine.snapshots import SnapshotStore
    from statestore.services.committer import BatchCommitter, MessageOutcome, ReceivedMessage
    from statestore.store.memory import InMemoryCommitQueue

    backend = system.backend()
    extra = {"file_store": system.file_store()} if system.on_postgres else {}
    committer = BatchCommitter(
        backend.table_index,
        backend.log,
        SnapshotStore(backend.snapshot_metadata, backend.blobs),
        backend.blobs,
        InMemoryCommitQueue(),  # the dead-letter queue: nothing should land there
        **extra,
    )
    sent = int(time.time() * 1000)
    queue = [
        ReceivedMessage(f"m-{i:05d}", encode_request(CommitRequest.new(table_id, t)), table_id, 1, sent)
        for i, t in enumerate(commits)
    ]
    errors: list[str] = []
    redelivered = 0
    warm_up(backend.blobs, backend.snapshot_metadata, table_id)
    with Timer(case) as timer:
        while queue:
            batch, queue = queue[:BATCH], queue[BATCH:]
            for message, result in zip(batch, committer.process(batch), strict=True):
                if result.outcome is MessageOutcome.RETRY:
                    redelivered += 1
                    queue.append(replace(message, receive_count=message.receive_count + 1))
                elif result.outcome is not MessageOutcome.COMMITTED:
                    errors.append(f"{result.outcome}: {result}"[:200])
    return timer.figures(), errors, redelivered


class DataDeletesSkipped(BlobStore):
    """The bucket, but deleting nothing: no data object exists, and S3's deletes cost the same for both."""

    def __init__(self, inner: BlobStore) -> None:
        self.inner = inner
        self.skipped = 0

    def put(self, key: str, data: bytes, tags: Mapping[str, str] | None = None) -> None:
        self.inner.put(key, data, tags)

    def get(self, key: str) -> bytes:
        return self.inner.get(key)

    def copy(self, source: str, destination: str) -> None:
        self.inner.copy(source, destination)

    def delete(self, keys: list[str]) -> None:
        self.skipped += len(keys)

    def list_modified(self, prefix: str) -> list[tuple[str, int]]:
        return self.inner.list_modified(prefix)

    def list(self, prefix: str) -> list[str]:
        return self.inner.list(prefix)


def case_gc(case: Mapping[str, Any]) -> dict[str, Any]:
    from statestore.engine.snapshots import SnapshotStore
    from statestore.model.files import FileReference
    from statestore.services.cleanup import cleanup_table
    from statestore.services.cleanup_policy import CleanupPolicy
    from statestore.transactions import (
        AddFiles,
        AssignJobIdRequest,
        AssignJobIds,
        ReplaceFileReferences,
        ReplaceFileReferencesJob,
    )

    system = System(case)
    client = system.client()
    table = system.create_table(client, "gc", 1)
    table_id = table.table_id
    (root,) = leaf_ids(client, table_id)
    store = client.state_store(table_id)
    files = case["files"]
    start = time.perf_counter()
    for c in range(
        math.ceil(files / CHUNK)
    ):  # each chunk compacted into one file: its inputs lose their references
        names = tuple(data_file(table_id, f"gc-{c}-{i}") for i in range(min(CHUNK, files - c * CHUNK)))
        store.commit(AddFiles(tuple(FileReference(name, root, 1000) for name in names)))
        store.commit(AssignJobIds((AssignJobIdRequest(f"gc-{c}", root, names),)))
        output = FileReference(data_file(table_id, f"gc-{c}-output"), root, 1000 * len(names))
        store.commit(ReplaceFileReferences((ReplaceFileReferencesJob(f"gc-{c}", root, names, output),)))
    client.create_snapshot(table_id)  # the snapshot Lambda's, so cleanup starts from it
    prepared = time.perf_counter() - start
    outputs = math.ceil(files / CHUNK)

    cleaner = system.client()
    warm_up(cleaner.blobs, cleaner.snapshots.metadata, table_id)
    blobs = DataDeletesSkipped(cleaner.blobs)
    snapshots = SnapshotStore(cleaner.snapshots.metadata, blobs)
    policy = CleanupPolicy(gc_delay_ms=0, max_clock_skew_ms=0)  # one process: every clock is the same one
    reports = []
    gc_store = cleaner.state_store(table_id)  # a fresh store, not loaded: as the cleanup Lambda's cold start
    with Timer(case) as timer:
        # Two runs: on PostgreSQL the first marks the files with no reference and the second (a delay of 0
        # later) deletes them; on the log the first deletes them all and the second finds nothing.
        for _ in range(2):
            reports.append(
                cleanup_table(
                    gc_store, table, snapshots, blobs, policy=policy, now=int(time.time() * 1000) + 1
                )
            )
    state = system.client().state(table_id)
    return {
        **timer.figures(),
        "prepare_seconds": prepared,
        "files_deleted": sum(r.data_files_deleted for r in reports),
        "delete_commits": sum(r.delete_files_commits for r in reports),
        "files_expected": outputs,
        "files_counted": len(state.files()),
        "deletes_skipped": blobs.skipped,
    }


def case_prepare_load(case: Mapping[str, Any]) -> dict[str, Any]:
    """A table of ``references`` references over a tenth as many leaves, then its snapshot (not a figure)."""
    from statestore.model.files import FileReference
    from statestore.transactions import AddFiles

    system = System(case)
    client = system.client()
    references = case["references"]
    start = time.perf_counter()
    table_id = system.create_table(client, "load", max(1, references // 10)).table_id
    leaves = leaf_ids(client, table_id)
    store = client.state_store(table_id)
    for c in range(0, references, CHUNK):
        refs = tuple(
            FileReference(data_file(table_id, f"load-{i}"), leaves[i % len(leaves)], 1000)
            for i in range(c, min(references, c + CHUNK))
        )
        store.commit(AddFiles(refs))
    client.create_snapshot(table_id)
    return {"seconds": time.perf_counter() - start, "table_id": table_id}


def case_load(case: Mapping[str, Any]) -> dict[str, Any]:
    system = System(case)
    client = system.client()
    warm_up(client.blobs, client.snapshots.metadata, case["table_id"])
    store = client.state_store(case["table_id"])
    baseline = rss_mb()
    with Timer(case) as timer:
        state = store.state()
    count = state.reference_count()
    peak = peak_rss_mb()
    return {**timer.figures(), "references": count, "peak_rss_mb": peak, "above_start_mb": peak - baseline}


CASES: dict[str, Callable[[Mapping[str, Any]], dict[str, Any]]] = {
    "commits": case_commits,
    "contention": case_contention,
    "gc": case_gc,
    "prepare_load": case_prepare_load,
    "load": case_load,
}


def child_main(case_json: str) -> None:
    logging.getLogger("botocore").setLevel(logging.ERROR)
    logging.getLogger("statestore").setLevel(logging.ERROR)
    case = json.loads(case_json)
    result = CASES[case["work"]](case)
    print("RESULT " + json.dumps(result), flush=True)


def attempt(case: Mapping[str, Any], timeout: float = 3600) -> dict[str, Any] | None:
    """:func:`run_child`, or None (saying why) when the case failed: one system's failure leaves the rest."""
    try:
        return run_child(case, timeout)
    except subprocess.TimeoutExpired:
        print(f"  {case['work']:<10} {case['system']}: did not finish within {timeout:.0f} s", flush=True)
        return None
    except RuntimeError as e:
        print(f"  {case['work']:<10} {case['system']}: not run: {str(e)[-1500:]}", flush=True)
        return None


def run_child(case: Mapping[str, Any], timeout: float = 3600) -> dict[str, Any]:
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


# --- the parent: servers, the order of runs, the table ----------------------------------------------------


def postgres_missing() -> str | None:
    """Why the postgres system cannot run here, or None."""
    if importlib.util.find_spec("statestore.adapters.postgres") is None:
        return "statestore.adapters.postgres (the PostgreSQL adapter) is not in this tree"
    if importlib.util.find_spec("psycopg") is None:
        return "psycopg is not installed (the postgres extra)"
    if not (shutil.which("initdb") or Path(PG_BIN, "initdb").exists()):
        return f"PostgreSQL's initdb is neither on the PATH nor in {PG_BIN}"
    return None


@contextmanager
def postgres_cluster(directory: Path) -> Iterator[tuple[str, int]]:
    """A throwaway PostgreSQL cluster in ``directory`` (initdb, pg_ctl; as the ``postgres`` user when run as
    root), reached on a Unix socket in it; yields ``(dsn, postmaster pid)`` and stops it at the end."""
    pg_ctl = shutil.which("pg_ctl") or str(Path(PG_BIN, "pg_ctl"))
    initdb = shutil.which("initdb") or str(Path(PG_BIN, "initdb"))
    as_owner = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    directory.mkdir(parents=True)
    if os.geteuid() == 0:
        shutil.chown(directory, "postgres", "postgres")
        directory.parent.chmod(0o755)  # mkdtemp's 0700 would keep the postgres user out
    data = directory / "data"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    subprocess.run(
        [*as_owner, initdb, "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"],
        check=True,
        capture_output=True,
    )
    # A backend whose client went away (a case killed at its timeout) stops its query within a second.
    options = (
        f"-p {port} -k {directory} -c listen_addresses='' -c max_connections=300 -c shared_buffers=256MB "
        "-c client_connection_check_interval=1000 "
        + " ".join(f"-c {name}={value}" for name, value in POSTGRES_SERVER_SETTINGS.items())
    )
    subprocess.run(
        [
            *as_owner,
            pg_ctl,
            "-D",
            str(data),
            "-l",
            str(directory / "postgres.log"),
            "-w",
            "-o",
            options,
            "start",
        ],
        check=True,
        capture_output=True,
    )
    try:
        postmaster = int((data / "postmaster.pid").read_text().split()[0])
        yield f"host={directory} port={port} user=postgres dbname=postgres", postmaster
    finally:
        subprocess.run([*as_owner, pg_ctl, "-D", str(data), "-m", "fast", "-w", "stop"], capture_output=True)


@dataclass
class Results:
    """Every result of the run, best of its repeats, by (work, detail, system)."""

    best: dict[tuple[str, str, str], Best] = field(default_factory=dict)

    def add(self, work: str, detail: str, system: str, result: dict[str, Any]) -> None:
        self.best.setdefault((work, detail, system), Best()).add(result)

    def get(self, work: str, detail: str, system: str) -> dict[str, Any] | None:
        best = self.best.get((work, detail, system))
        return best.result if best else None


def cpu_text(r: Mapping[str, Any]) -> str:
    return (
        f"{r['seconds']:8.2f} s wall  {r['cpu']:6.2f} s CPU  {r['emulator_cpu']:6.2f} s emulators  "
        f"{r['db_cpu']:6.2f} s PostgreSQL"
    )


def describe(work: str, detail: str, system: str, r: Mapping[str, Any]) -> None:
    extra = ""
    if "commits" in r:
        extra = (
            f"  {r['commits'] / r['seconds']:7.1f} commits/s  retries {r['retries']}  failed {r['failed']}"
        )
    if "files_counted" in r:
        extra += f"  files {r['files_counted']:,}/{r['files_expected']:,}"
    if "leaves_with_output_only" in r:
        extra += (
            f"  leaves with only the output {r['leaves_with_output_only']:,}/{r['leaves']:,}, "
            f"input references left {r['input_references_left']:,}"
        )
    if "peak_rss_mb" in r:
        extra += f"  {r['references']:,} refs  peak RSS {r['peak_rss_mb']:,.0f} MB"
    if r.get("first_error"):
        extra += f"\n      first error: {r['first_error']}"
    print(f"  {work:<10} {detail:<16} {system:<8} {cpu_text(r)}{extra}", flush=True)


def bound_by(r: Mapping[str, Any]) -> str:
    """What the figures say bounds a case: the CPU busy for the largest share of the wall clock, or waiting
    when none is busy most of the time (backoff after lost races, lock waits, the network stack)."""
    wall = r["seconds"] or 1e-9
    shares = {
        "Python CPU": r["cpu"] / wall,
        "DynamoDB Local+moto CPU (round trips)": r["emulator_cpu"] / wall,
        "PostgreSQL CPU": r["db_cpu"] / wall,
    }
    text = ", ".join(f"{name.split(' (')[0]} {share:.0%}" for name, share in shares.items())
    if max(shares.values()) < 0.5:
        waiting = "backoff after lost races" if r.get("retries") else "waits"
        return f"waiting ({waiting}; {text} of the wall clock)"
    return f"{max(shares, key=lambda k: shares[k])} ({text} of the wall clock)"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small sizes: checks the code paths only")
    parser.add_argument("--only", nargs="+", choices=["commits", "contention", "gc", "load"], default=None)
    parser.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS))
    parser.add_argument(
        "--repeat", type=int, default=2, help="runs of each commits case, best kept (default 2)"
    )
    parser.add_argument(
        "--load-repeat", type=int, default=3, help="loads of each table, best kept (default 3)"
    )
    parser.add_argument(
        "--gc-timeout", type=float, default=300, help="seconds a GC case may take, table built (default 300)"
    )
    parser.add_argument("--references", type=int, help="references in the loaded table (default 100,000)")
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
    if args.references is not None:
        scale = replace(scale, load_references=args.references)
    works = args.only or ["commits", "contention", "gc", "load"]
    systems: list[str] = args.systems
    missing = postgres_missing() if "postgres" in systems else None
    if missing:
        print(f"postgres: not run: {missing}", flush=True)
        systems.remove("postgres")
    started = time.perf_counter()
    print(
        f"file references on the log vs in PostgreSQL, {'quick' if args.quick else 'full'} run, "
        f"{os.cpu_count()} CPU(s), load average {os.getloadavg()[0]:.1f}, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        flush=True,
    )
    from bench_committer import start_moto_server  # the same launcher as the other benchmarks

    from statestore.adapters.aws.backend import AwsBackend
    from statestore.instance import ResourceNames
    from statestore.local.dynamodb_local import DynamoDBLocal

    directory = Path(
        tempfile.mkdtemp(prefix="bench-file-stores-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None)
    )
    results = Results()
    moto, moto_endpoint = start_moto_server()
    dynamodb = DynamoDBLocal.start()
    try:
        cluster = (
            postgres_cluster(directory / "postgres") if "postgres" in systems else nullcontext((None, None))
        )
        with cluster as (dsn, postmaster):
            if dsn is not None:  # the schema once, so each client's store can skip it
                postgres = importlib.import_module("statestore.adapters.postgres")
                postgres.PostgresFileReferenceStore.connect(dsn, max_connections=1).close()
            AwsBackend.connect(
                ResourceNames.for_instance(INSTANCE),
                moto_endpoint,
                region=REGION,
                dynamodb_endpoint_url=dynamodb.endpoint_url,
            ).provision()
            base = {
                "instance": INSTANCE,
                "s3_endpoint": moto_endpoint,
                "dynamodb_endpoint": dynamodb.endpoint_url,
                "emulator_pids": [moto.pid, dynamodb.process.pid],
                "postgres_dsn": dsn,
                "postmaster_pid": postmaster,
            }
            run_cases(args, scale, works, systems, base, results)
    finally:
        dynamodb.stop()
        moto.terminate()
        moto.wait(timeout=10)
        shutil.rmtree(directory, ignore_errors=True)
    figures: list[Figure] = []
    ok = summarise(scale, systems, results, figures)
    print(f"\ntotal {time.perf_counter() - started:.0f} s")
    if figures:
        record(__file__, figures)
    return 0 if ok else 1


def run_cases(
    args: argparse.Namespace,
    scale: Scale,
    works: Sequence[str],
    systems: Sequence[str],
    base: Mapping[str, Any],
    results: Results,
) -> None:
    """Every case of ``works``, systems interleaved, each in a child; a failed case is said and left out."""

    def run(work: str, system: str, timeout: float = 3600, **fields: Any) -> dict[str, Any] | None:
        return attempt({**base, "work": work, "system": system, **fields}, timeout)

    for system in systems:  # DynamoDB Local's JIT (and PostgreSQL's caches): warm them up, untimed
        run("commits", system, writers=8, commits=16, leaves=scale.commit_leaves)
    if "commits" in works:
        print(f"\ncommits: {scale.commits} AddFiles of 1 file each, {scale.commit_leaves} leaves", flush=True)
        for _ in range(args.repeat):
            for writers in scale.writers:
                for system in systems:
                    r = run(
                        "commits", system, writers=writers, commits=scale.commits, leaves=scale.commit_leaves
                    )
                    if r is not None:
                        describe("commits", f"{writers} writer(s)", system, r)
                        results.add("commits", str(writers), system, r)
    if "contention" in works:
        print(
            f"\ncontention: {scale.contention_leaves:,} leaves, {scale.contention_files} ingests of a file "
            f"on every leaf, a job per leaf, {scale.contention_leaves:,} ReplaceFileReferences at once",
            flush=True,
        )
        for mode in ("threads", "committer"):
            for system in systems:
                r = run(
                    "contention",
                    system,
                    mode=mode,
                    leaves=scale.contention_leaves,
                    files=scale.contention_files,
                    threads=scale.contention_threads,
                )
                if r is None:
                    continue
                detail = f"{scale.contention_threads} threads" if mode == "threads" else "committer"
                describe("contention", detail, system, r)
                results.add("contention", mode, system, r)
                if mode == "threads":
                    results.add("ingest", "", system, r["ingest"])
                    results.add("assign", "", system, r["assign"])
    if "gc" in works:
        print(
            f"\nGC of {scale.gc_files:,} files that lost their references (S3 deletes left out):", flush=True
        )
        for system in systems:
            r = run("gc", system, timeout=args.gc_timeout, files=scale.gc_files)
            if r is not None:
                describe("gc", f"{scale.gc_files:,} files", system, r)
                results.add("gc", "", system, r)
    if "load" in works:
        references = scale.load_references
        print(f"\nload of {references:,} references over {max(1, references // 10):,} leaves:", flush=True)
        tables = {}
        for system in systems:
            r = run("prepare_load", system, references=references)
            if r is not None:
                print(f"  wrote {system:<8} in {r['seconds']:.1f} s (not judged)", flush=True)
                tables[system] = r["table_id"]
        for _ in range(args.load_repeat):
            for system in tables:
                r = run("load", system, table_id=tables[system])
                if r is not None:
                    describe("load", f"{references:,} refs", system, r)
                    results.add("load", "", system, r)


ROWS = (  # label, work, detail, unit ("rate": commits/s, else seconds)
    ("commits/s, 1 writer", "commits", "1", "rate"),
    ("commits/s, 8 writers", "commits", "8", "rate"),
    ("commits/s, 32 writers", "commits", "32", "rate"),
    ("contention: ingest (11 AddFiles)", "ingest", "", "s"),
    ("contention: AssignJobIds", "assign", "", "s"),
    ("contention: commits at once", "contention", "threads", "s"),
    ("contention: through the committer", "contention", "committer", "s"),
    ("GC", "gc", "", "s"),
    ("load", "load", "", "s"),
)


def summarise(scale: Scale, systems: Sequence[str], results: Results, figures: list[Figure]) -> bool:
    """One table, both systems side by side with the ratio and the CPU seconds, then the checks, then a line
    per figure saying what bounds it. Each system's figure is added to ``figures`` (not judged: the run
    compares the two)."""
    ok = True
    print("\n=== summary: the same work on each system, from the same run ===")
    print(
        f"(commits/s: higher is better; s: wall seconds, lower is better; 'PG speed-up' > 1: PostgreSQL "
        f"faster; CPU seconds: Python / DynamoDB Local+moto / PostgreSQL; contention: "
        f"{scale.contention_leaves:,} leaves from {scale.contention_threads} threads; "
        f"GC: {scale.gc_files:,} files; load: {scale.load_references:,} references)"
    )
    print(f"  {'figure':<36}" + "".join(f"{s:>12}" for s in systems) + f"{'PG speed-up':>13}    CPU seconds")
    bounds: list[str] = []
    for label, work, detail, unit in ROWS:
        found = {s: r for s in systems if (r := results.get(work, detail, s)) is not None}
        if not found:
            continue
        values = {
            s: r["commits"] / r["seconds"] if unit == "rate" else r["seconds"] for s, r in found.items()
        }
        line = f"  {label:<36}"
        for s in systems:
            if s not in values:
                line += f"{'-':>12}"
            else:
                line += f"{values[s]:>12.1f}" if unit == "rate" else f"{values[s]:>10.2f} s"
        if len(values) == 2 and min(values.values()) > 0:
            speed_up = (
                values["postgres"] / values["log"] if unit == "rate" else values["log"] / values["postgres"]
            )
            line += f"{speed_up:>12.2f}x"
        else:
            line += f"{'':>13}"
        line += "    " + "   ".join(
            f"{s} {r['cpu']:.1f}/{r['emulator_cpu']:.1f}/{r['db_cpu']:.1f}" for s, r in found.items()
        )
        print(line)
        bounds += [f"  {label:<36} {s:<8} {bound_by(r)}" for s, r in found.items()]
        figures += [
            Figure(f"{label}, {s}", values[s], "commits/s" if unit == "rate" else "s", bound_by(r))
            for s, r in found.items()
        ]

    print("\nchecks:")
    for writers in scale.writers:
        for system in systems:
            r = results.get("commits", str(writers), system)
            if r is not None:
                counted = r["files_counted"] == r["files_expected"]
                print(
                    f"  commits, {writers:>2} writer(s), {system:<8} retries {r['retries']:>5}  gave up "
                    f"{r['failed']:>4}  files {r['files_counted']}/{r['files_expected']}"
                    + ("" if counted else "  COUNT MISMATCH")
                )
                ok &= counted
    for mode in ("threads", "committer"):
        for system in systems:
            r = results.get("contention", mode, system)
            if r is not None:
                complete = r["leaves_with_output_only"] == r["leaves"] and r["input_references_left"] == 0
                print(
                    f"  contention, {mode:<9} {system:<8} retries {r['retries']:>5}  "
                    f"gave up {r['failed']:>4}  leaves holding only their output "
                    f"{r['leaves_with_output_only']}/{r['leaves']}  "
                    f"input references left {r['input_references_left']}"
                    + ("" if complete else "  (incomplete)")
                )
                ok &= complete or r["failed"] > 0  # commits that gave up leave their leaves; said above
    for system in systems:
        r = results.get("gc", "", system)
        if r is not None:
            print(
                f"  GC, {system:<8} deleted {r['files_deleted']:,} files in {r['delete_commits']} commits, "
                f"files left {r['files_counted']}/{r['files_expected']} "
                f"(table built in {r['prepare_seconds']:.1f} s)"
            )
            ok &= r["files_counted"] == r["files_expected"]
    for system in systems:
        r = results.get("load", "", system)
        if r is not None:
            print(
                f"  load, {system:<8} {r['references']:,} references, peak RSS {r['peak_rss_mb']:,.0f} MB "
                f"({r['above_start_mb']:,.0f} MB above the child's start)"
            )
            ok &= r["references"] == scale.load_references
    print("\nwhat bounds each figure (share of the wall clock each CPU was busy):")
    for line in bounds:
        print(line)
    return ok


if __name__ == "__main__":
    sys.exit(main())
