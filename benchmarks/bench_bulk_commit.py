"""One big AddFiles, synchronously vs through the queue and the committer, on one moto server.

For each size (10k and 100k references, one per file, spread over 1,000 leaf partitions), on a fresh table:

- **sync**: ``StateStoreClient.commit`` through the client facade (validate, encode, upload the body, put);
- **queue**: ``CommitSender.send`` (the body goes to the bucket, the message to the SQS FIFO queue), then
  the committer, run in this process as ``bench_committer.py`` does, receives the message, commits it and
  deletes it, and the sender reads the committed status. The committer is warm on the table (as a Lambda
  that already served it), the state is not: both paths start from the table as created.

Prints files/s of each, the ratio queue/sync (target >= 0.8) and the committer's references/s, from the
message received to the status recorded (target >= 100,000). The moto server runs in its own process, so
the figures are bound by this machine's CPU shared between it and us, and by moto's S3 (it holds objects in
memory and copies them on every read): compare the ratios, not the absolute rates.

    python benchmarks/bench_bulk_commit.py [--sizes 10000 100000] [--leaves 1000] [--repeat 1]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from statestore.adapters.aws.backend import AwsBackend
from statestore.adapters.aws.clients import make_client
from statestore.adapters.aws.sqs_queue import provision_queues
from statestore.codec.transaction_json import transaction_to_json
from statestore.engine.requests import RequestEnvelope
from statestore.instance import ResourceNames
from statestore.model.files import FileReference
from statestore.model.schema import Schema
from statestore.services.client import StateStoreClient
from statestore.services.committer import MessageOutcome, ReceivedMessage
from statestore.state.table_state import TableState
from statestore.store.memory import InMemoryBlobStore
from statestore.store.ports import CommitOutcome
from statestore.transactions import AddFiles

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from bench_committer import start_moto_server, verdict  # noqa: E402
from results import Figure, record  # noqa: E402

BOUND = "CPU shared with the moto server; moto's S3 copies the body in memory"

SCHEMA = Schema.of({"key": "long"}, values={"value": "string"})
KEY_STEP = 1_000_000
QUEUE_VS_SYNC_TARGET = 0.8
COMMITTER_REFS_PER_SECOND_TARGET = 100_000


@dataclass(frozen=True)
class Figures:
    references: int
    sync_seconds: float
    queue_seconds: float
    committer_seconds: float
    model_seconds: float  # decode + validate + apply of the same AddFiles in this process, no AWS call

    @property
    def ratio(self) -> float:
        return self.sync_seconds / self.queue_seconds


def add_files(table_id: str, count: int, leaves: list[str], tag: str) -> AddFiles:
    return AddFiles(
        tuple(
            FileReference(
                f"tables/{table_id}/data/{tag}/{uuid.uuid4()}.parquet", leaves[i % len(leaves)], 1000
            )
            for i in range(count)
        )
    )


def new_table(client: StateStoreClient, leaves: int) -> tuple[str, list[str]]:
    info = client.create_table(
        f"bulk-{uuid.uuid4().hex[:8]}", SCHEMA, [i * KEY_STEP for i in range(1, leaves)]
    )
    return info.table_id, [p.id for p in client.leaf_partitions(info.table_id)]


def measure(backend: AwsBackend, endpoint: str, names: ResourceNames, count: int, leaves: int) -> Figures:
    from lambdas._runtime import Runtime

    client = StateStoreClient.for_aws(names, endpoint)

    table_id, leaf_ids = new_table(client, leaves)
    txn = add_files(table_id, count, leaf_ids, "sync")
    start = time.perf_counter()
    client.commit(table_id, txn)
    sync_seconds = time.perf_counter() - start

    table_id, leaf_ids = new_table(client, leaves)
    sqs = make_client("sqs", endpoint_url=endpoint)
    sender = backend.commit_sender(sqs)
    queue = backend.queue(sqs, names.commit_queue)
    committer = Runtime.for_aws(names, endpoint).committer()

    def commit_through_queue(txn: AddFiles) -> float:
        """Send, receive, commit, delete, read the status; returns the committer's seconds."""
        request_id = sender.send(table_id, txn)
        records: list[dict[str, Any]] = []
        while not records:
            records = queue.receive_event(10, 1)["Records"]
        started = time.perf_counter()
        results = committer.process([ReceivedMessage.from_sqs_record(r) for r in records])
        committer_seconds = time.perf_counter() - started
        if any(r.outcome is not MessageOutcome.COMMITTED for r in results):
            raise RuntimeError(f"benchmark request not committed: {results}")
        queue.delete([r["receiptHandle"] for r in records])
        status = sender.status(table_id, request_id)
        if status is None or status.outcome is not CommitOutcome.COMMITTED:
            raise RuntimeError(f"benchmark request {request_id} has status {status}")
        return committer_seconds

    commit_through_queue(add_files(table_id, 2, leaf_ids, "warm"))  # the committer learns the table
    state = client.state(table_id)
    txn = add_files(table_id, count, leaf_ids, "queue")
    start = time.perf_counter()
    committer_seconds = commit_through_queue(txn)
    queue_seconds = time.perf_counter() - start
    return Figures(count, sync_seconds, queue_seconds, committer_seconds, model_seconds(txn, state))


def model_seconds(txn: AddFiles, state: TableState) -> float:
    """What the committer must do in Python whatever the stores cost: decode the request body, validate
    the transaction against the state and apply it."""
    body = json.dumps(transaction_to_json(txn)).encode("utf-8")
    envelope = RequestEnvelope("model", "table", txn.TYPE, body_key="body")  # read as the committer does
    start = time.perf_counter()
    decoded = envelope.transaction(InMemoryBlobStore(), body)
    decoded.validate(state)
    decoded.apply(state, 1)
    return time.perf_counter() - start


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--leaves", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=1, help="runs per size; the best of each is reported")
    args = parser.parse_args(argv)
    for name, value in (("AWS_ACCESS_KEY_ID", "bench"), ("AWS_SECRET_ACCESS_KEY", "bench")):
        os.environ.setdefault(name, value)
    os.environ.setdefault("AWS_DEFAULT_REGION", "eu-west-2")
    logging.getLogger("statestore").setLevel(logging.ERROR)

    server, endpoint = start_moto_server()
    try:
        names = ResourceNames.for_instance(f"bulk{uuid.uuid4().hex[:8]}")
        backend = AwsBackend.connect(names, endpoint)
        backend.provision()
        provision_queues(names, make_client("sqs", endpoint_url=endpoint))
        results = []
        for count in args.sizes:
            runs = [measure(backend, endpoint, names, count, args.leaves) for _ in range(args.repeat)]
            results.append(
                Figures(
                    count,
                    min(r.sync_seconds for r in runs),
                    min(r.queue_seconds for r in runs),
                    min(r.committer_seconds for r in runs),
                    min(r.model_seconds for r in runs),
                )
            )
    finally:
        server.terminate()
        server.wait()

    print(
        f"\nOne AddFiles over {args.leaves} leaves, sync vs queue + committer, on a moto server "
        f"(own process); {os.cpu_count()} CPU(s) shared by it and this process; best of {args.repeat}\n"
    )
    header = (
        f"{'references':>10} {'sync files/s':>13} {'queue files/s':>14} {'queue/sync':>11} "
        f"{'committer refs/s':>17} {'model refs/s':>13}"
    )
    print(header)
    print("-" * len(header))
    passed = True
    figures: list[Figure] = []
    for f in results:
        committer_rate = f.references / f.committer_seconds
        figures += [
            Figure(
                f"{f.references:,} refs: synchronous commit", f.references / f.sync_seconds, "files/s", BOUND
            ),
            Figure(
                f"{f.references:,} refs: through the queue", f.references / f.queue_seconds, "files/s", BOUND
            ),
            Figure(
                f"{f.references:,} refs: model floor (decode + validate + apply, no AWS call)",
                f.references / f.model_seconds,
                "refs/s",
                "CPU: Python",
            ),
        ]
        print(
            f"{f.references:>10,} {f.references / f.sync_seconds:>13,.0f} "
            f"{f.references / f.queue_seconds:>14,.0f} {f.ratio:>11.2f} {committer_rate:>17,.0f} "
            f"{f.references / f.model_seconds:>13,.0f}"
        )
    print()
    for f in results:
        committer_rate = f.references / f.committer_seconds
        checks = [
            (f"{f.references:,} refs: queue/sync {f.ratio:.2f} (target >= {QUEUE_VS_SYNC_TARGET})",
             f.ratio >= QUEUE_VS_SYNC_TARGET),
            (f"{f.references:,} refs: committer {committer_rate:,.0f} refs/s "
             f"(target >= {COMMITTER_REFS_PER_SECOND_TARGET:,})",
             committer_rate >= COMMITTER_REFS_PER_SECOND_TARGET),
        ]  # fmt: skip
        for text, ok in checks:
            print(f"  {verdict(ok)}  {text}")
            passed = passed and ok
        figures += [
            Figure.judged(
                f"{f.references:,} refs: queue / sync",
                f.ratio,
                "",
                bound_by=BOUND,
                at_least=QUEUE_VS_SYNC_TARGET,
            ),
            Figure.judged(
                f"{f.references:,} refs: the committer's rate",
                committer_rate,
                "refs/s",
                bound_by="CPU: decoding, validating and applying the references in Python",
                at_least=COMMITTER_REFS_PER_SECOND_TARGET,
            ),
        ]
    print(
        "\nmodel refs/s: decode + validate + apply of the same AddFiles in this process, no AWS call: the "
        "committer's Python floor, which it cannot beat however fast the stores are."
    )
    print(
        "Bounds: CPU (the cores are shared with moto's S3/DynamoDB/SQS in its own process and with whatever "
        "else runs on the machine), moto's S3 (it keeps a 5-10 MB body in memory and copies it on each read "
        "and copy), a few local round trips (no network). The queue path adds the SQS send/receive/delete, "
        "the body's download and decode in the committer, and a status write."
    )
    record(__file__, figures)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
