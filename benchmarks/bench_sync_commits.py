"""Synchronous commits per second on a moto server: the transaction log against the older whole-state-in-S3
store (reference 003), with 1, 4 and 8 writer threads each holding its own store.

Each writer commits a fixed number of AddFiles (a few files each) to a table that starts with 10,000 files.
Requests and bytes per commit come from botocore's event hooks (``before-send`` for every attempt sent,
``after-call`` for each response). Retries are lost races for the next number (log) or for the revision
(baseline); failures are commits that gave up. Answers: "5% quicker, or 5x quicker under contention?"

    python benchmarks/bench_sync_commits.py [--commits 12] [--writers 1 4 8] [--only log|baseline]
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from moto.server import ThreadedMotoServer

from statestore.adapters.aws.backend import AwsBackend
from statestore.adapters.aws.clients import make_client
from statestore.engine.log_store import RetryPolicy
from statestore.errors import CommitConflictError
from statestore.instance import ResourceNames
from statestore.model import layout
from statestore.model.files import FileReference
from statestore.model.partitions import root_partition
from statestore.model.schema import Schema
from statestore.services.client import StateStoreClient
from statestore.state.table_state import TableState
from statestore.transactions import AddFiles, InitialisePartitions, Transaction

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from baseline_s3_state_store import S3StateStore, create_revision_table  # noqa: E402
from results import Figure, record  # noqa: E402

SCHEMA = Schema.of({"key": "long"}, values={"value": "string"})
INITIAL_FILES = 10_000
FILES_PER_COMMIT = 3
RETRY = RetryPolicy()  # the engine's default: 12 attempts, full jitter from 5 ms, capped at 1 s


@dataclass
class Meter:
    """Counts the requests a client sends and the bytes both ways, from botocore's event system."""

    requests: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def attach(self, client: Any) -> Any:
        client.meta.events.register("before-send", self._before_send)
        client.meta.events.register("after-call", self._after_call)
        return client

    def _before_send(self, request: Any, **_: Any) -> None:
        with self._lock:
            self.requests += 1
            self.bytes_sent += int(request.headers.get("Content-Length", 0) or 0)

    def _after_call(self, http_response: Any, **_: Any) -> None:
        with self._lock:
            self.bytes_received += int(http_response.headers.get("content-length", 0) or 0)


@dataclass
class RunResult:
    design: str
    writers: int
    commits: int
    seconds: float
    requests: int
    bytes_sent: int
    bytes_received: int
    retries: int
    failures: int

    @property
    def commits_per_second(self) -> float:
        return self.commits / self.seconds if self.seconds else 0.0


def new_files(table_id: str, writer: str, i: int) -> AddFiles:
    """A writer's next files: keys under the table's data prefix, as a store takes them."""
    prefix = layout.data_prefix(table_id)
    return AddFiles(
        tuple(
            FileReference(f"{prefix}{writer}/{i}/{j}.parquet", "root", 1000) for j in range(FILES_PER_COMMIT)
        )
    )


def initial_files(table_id: str) -> AddFiles:
    prefix = layout.data_prefix(table_id)
    return AddFiles(
        tuple(
            FileReference(f"{prefix}initial/{uuid.uuid4()}.parquet", "root", 1000)
            for _ in range(INITIAL_FILES)
        )
    )


def race(
    design: str,
    table_id: str,
    writers: int,
    commits: int,
    open_writer: Callable[[Meter], tuple[Callable[[Transaction], Any], Any]],
) -> RunResult:
    """Start ``writers`` threads, each opening its own store (untimed), then commit together (timed)."""
    meter = Meter()
    barrier = threading.Barrier(writers + 1)
    outcome = {"commits": 0, "retries": 0, "failures": 0}
    lock = threading.Lock()
    errors: list[BaseException] = []

    def run(name: str) -> None:
        try:
            commit, store = open_writer(meter)
        except BaseException as e:
            errors.append(e)
            barrier.abort()
            raise
        barrier.wait()
        done = failed = 0
        for i in range(commits):
            try:
                commit(new_files(table_id, name, i))
                done += 1
            except CommitConflictError:
                failed += 1
        barrier.wait()
        with lock:
            outcome["commits"] += done
            outcome["failures"] += failed
            outcome["retries"] += store.retries

    threads = [threading.Thread(target=run, args=(f"w{i}",)) for i in range(writers)]
    for t in threads:
        t.start()
    barrier.wait()  # everyone has loaded the table
    with meter._lock:
        meter.requests = meter.bytes_sent = meter.bytes_received = 0
    start = time.perf_counter()
    barrier.wait()  # everyone has finished
    seconds = time.perf_counter() - start
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return RunResult(
        design,
        writers,
        outcome["commits"],
        seconds,
        meter.requests,
        meter.bytes_sent,
        meter.bytes_received,
        outcome["retries"],
        outcome["failures"],
    )


def bench_log(resources: ResourceNames, endpoint: str, writers: int, commits: int) -> RunResult:
    admin = StateStoreClient.for_aws(resources, endpoint, region="eu-west-2")
    table = admin.create_table(f"log-{writers}-{uuid.uuid4().hex[:6]}", SCHEMA)
    admin.commit(table.table_id, initial_files(table.table_id))

    def open_writer(meter: Meter) -> tuple[Callable[[Transaction], Any], Any]:
        backend = AwsBackend.connect(resources, endpoint, region="eu-west-2")
        meter.attach(backend.dynamodb)
        meter.attach(backend.s3)
        client = StateStoreClient(
            backend.table_index, backend.log, backend.snapshot_metadata, backend.blobs, retry=RETRY
        )
        store = client.state_store(table.table_id)
        store.state()
        return store.commit, store

    return race("log", table.table_id, writers, commits, open_writer)


def bench_baseline(resources: ResourceNames, endpoint: str, writers: int, commits: int) -> RunResult:
    revision_table = f"statestore-{resources.instance_id}-baseline-revisions"
    table_id = f"baseline-{writers}-{uuid.uuid4().hex[:6]}"
    dynamodb = make_client("dynamodb", endpoint_url=endpoint, region="eu-west-2")
    s3 = make_client("s3", endpoint_url=endpoint, region="eu-west-2")
    if revision_table not in dynamodb.list_tables()["TableNames"]:
        create_revision_table(dynamodb, revision_table)
    state = TableState(SCHEMA)
    InitialisePartitions((root_partition(SCHEMA),)).apply(state, 0)
    initial_files(table_id).apply(state, 0)
    S3StateStore(table_id, SCHEMA, dynamodb, s3, revision_table, resources.bucket, RETRY).initialise(state)

    def open_writer(meter: Meter) -> tuple[Callable[[Transaction], Any], Any]:
        store = S3StateStore(
            table_id,
            SCHEMA,
            meter.attach(make_client("dynamodb", endpoint_url=endpoint, region="eu-west-2")),
            meter.attach(make_client("s3", endpoint_url=endpoint, region="eu-west-2")),
            revision_table,
            resources.bucket,
            RETRY,
        )
        store.state()
        return store.commit, store

    return race("baseline", table_id, writers, commits, open_writer)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def print_table(results: Sequence[RunResult]) -> None:
    header = (
        f"{'design':<9} {'writers':>7} {'commits':>7} {'seconds':>8} {'commits/s':>10} {'req/commit':>10} "
        f"{'KB sent/c':>10} {'KB recv/c':>10} {'retries':>8} {'failures':>8}"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        per = max(r.commits, 1)
        print(
            f"{r.design:<9} {r.writers:>7} {r.commits:>7} {r.seconds:>8.2f} {r.commits_per_second:>10.1f} "
            f"{r.requests / per:>10.1f} {r.bytes_sent / per / 1024:>10.1f} "
            f"{r.bytes_received / per / 1024:>10.1f} "
            f"{r.retries:>8} {r.failures:>8}"
        )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--commits", type=int, default=12, help="commits per writer (default 12)")
    parser.add_argument("--writers", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--only", choices=["log", "baseline"])
    args = parser.parse_args(argv)
    # Local endpoint only: fake credentials, so nothing can reach a real account.
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        os.environ[name] = "testing"
    os.environ.pop("AWS_PROFILE", None)

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # the moto server's per-request lines
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    try:
        resources = ResourceNames.for_instance("bench")
        AwsBackend.connect(resources, endpoint, region="eu-west-2").provision()
        results: list[RunResult] = []
        for writers in args.writers:
            if args.only in (None, "log"):
                results.append(bench_log(resources, endpoint, writers, args.commits))
            if args.only in (None, "baseline"):
                results.append(bench_baseline(resources, endpoint, writers, args.commits))
    finally:
        server.stop()

    print(
        f"\nSynchronous commits on a moto server: {args.commits} AddFiles of {FILES_PER_COMMIT} files "
        f"per writer, "
        f"table starting with {INITIAL_FILES:,} files\n"
    )
    print_table(results)
    figures = [
        Figure(
            f"{'log' if r.design == 'log' else 'whole state in S3 (baseline)'}, {r.writers} writer(s)",
            r.commits_per_second,
            "commits/s",
            "round trips to the emulator and lost races"
            + ("" if r.design == "log" else "; each commit rewrites the whole state"),
        )
        for r in results
    ]
    by_key = {(r.design, r.writers): r for r in results}
    if args.only is None:
        print("\nthroughput ratio log / baseline (commits per second):")
        for writers in args.writers:
            log, base = by_key[("log", writers)], by_key[("baseline", writers)]
            ratio = (
                log.commits_per_second / base.commits_per_second if base.commits_per_second else float("inf")
            )
            print(f"  {writers} writer(s): {ratio:5.1f}x")
            if base.commits_per_second:
                figures.append(
                    Figure(f"log / baseline, {writers} writer(s)", ratio, "x", "round trips, lost races")
                )
    record(__file__, figures)


if __name__ == "__main__":
    main()
