"""``statestore local --data-dir DIR`` killed with SIGKILL at random points of a stream of commits, and
restarted on the same ports and directory, round after round.

Each round one producer sends queued commit requests (the commit queue and the runtime's committer) while
another makes direct commits (a conditional put from this process), each adding one new file and racing for
transaction numbers, while snapshots are taken every second. At a random moment the runtime is killed. Then:

- no process the dead runtime started is left (DynamoDB Local follows its owner);
- the runtime restarts at once on the same ports and data directory;
- every acknowledged commit (a direct commit that returned its number, a queued one whose status said
  committed) is in the log exactly once, in the entry it was acknowledged at;
- every queued request sent, acknowledged or not, when sent again with its request id, is answered
  truthfully: committed, at the one entry of the log that holds it (applied now if it had been lost with
  the queue, never applied twice, never "rejected" for a file it added itself).

The seed is printed; ``STATESTORE_KILL_ROUNDS`` and ``STATESTORE_KILL_SEED`` change the rounds and the seed.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from statestore.codec.transaction_json import decode_entry
from statestore.engine.requests import CommitSender
from statestore.instance import ResourceNames
from statestore.local.dynamodb_local import free_port
from statestore.local.runtime import connect_commit_sender
from statestore.model.files import FileReference
from statestore.services.client import StateStoreClient
from statestore.store.ports import CommitOutcome
from statestore.transactions import AddFiles, Transaction, TransactionBatch, request_ids_of
from tests.e2e.runtime_process import RuntimeProcess, running, statestore_command, wait_until_gone

pytestmark = [pytest.mark.e2e, pytest.mark.dynamodb_local]

ROUNDS = int(os.environ.get("STATESTORE_KILL_ROUNDS", "4"))
SCHEMA = {"row_keys": [{"name": "key", "type": "long"}]}


@dataclass
class Stream:
    """What one round's producers sent and what they were told."""

    queued: dict[str, AddFiles] = field(default_factory=dict)  # request id -> transaction, every one sent
    acknowledged_queued: dict[str, int] = field(default_factory=dict)  # request id -> entry it was told
    acknowledged_direct: dict[str, int] = field(default_factory=dict)  # filename -> entry it was told
    stopped_by: list[BaseException] = field(default_factory=list)


def connect(env: dict[str, str]) -> tuple[StateStoreClient, CommitSender]:
    resources = ResourceNames.from_json(env["STATESTORE_RESOURCES"])
    client = StateStoreClient.for_aws(
        resources, env["AWS_ENDPOINT_URL"], dynamodb_endpoint_url=env["AWS_ENDPOINT_URL_DYNAMODB"]
    )
    sender = connect_commit_sender(
        resources, env["AWS_ENDPOINT_URL"], dynamodb_endpoint_url=env["AWS_ENDPOINT_URL_DYNAMODB"]
    )
    return client, sender


def send_queued(sender: CommitSender, table_id: str, leaf: str, name: str, stream: Stream) -> None:
    """Send queued requests, each adding a new file, reading their statuses as they come, until the runtime
    is gone."""
    unanswered: list[str] = []
    try:
        for i in range(100_000):
            request_id = f"{name}-queued-{i:05d}"
            transaction = AddFiles((FileReference(f"tables/{table_id}/data/{request_id}.parquet", leaf, 10),))
            stream.queued[request_id] = transaction
            sender.send(table_id, transaction, request_id)
            unanswered.append(request_id)
            statuses = (sender.status(table_id, request_id) for request_id in unanswered)
            for answered in [s for s in statuses if s is not None]:
                if answered.outcome is CommitOutcome.COMMITTED and answered.transaction_number is not None:
                    stream.acknowledged_queued[answered.request_id] = answered.transaction_number
                    unanswered.remove(answered.request_id)
    except Exception as e:  # the runtime was killed: the stream ends here
        stream.stopped_by.append(e)


def commit_directly(client: StateStoreClient, table_id: str, leaf: str, name: str, stream: Stream) -> None:
    """Commit directly (a conditional put from this process), each commit adding a new file, racing the
    committer for transaction numbers, until the runtime is gone."""
    try:
        for i in range(100_000):
            filename = f"tables/{table_id}/data/{name}-direct-{i:05d}.parquet"
            transaction = AddFiles((FileReference(filename, leaf, 10),))
            stream.acknowledged_direct[filename] = client.commit(table_id, transaction).transaction_number
    except Exception as e:
        stream.stopped_by.append(e)


def log_contents(
    client: StateStoreClient, table_id: str
) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
    """(the entries adding each file, the entries holding each request id) in the table's log."""
    files: dict[str, list[int]] = {}
    requests: dict[str, list[int]] = {}
    for entry in client.log.read(table_id, 1):
        transaction = decode_entry(entry)
        for request_id in request_ids_of(transaction):
            requests.setdefault(request_id, []).append(entry.transaction_number)
        parts: list[Transaction] = (
            [item.transaction for item in transaction.items]
            if isinstance(transaction, TransactionBatch)
            else [transaction]
        )
        for part in parts:
            if isinstance(part, AddFiles):
                for reference in part.references:
                    files.setdefault(reference.filename, []).append(entry.transaction_number)
    return files, requests


def test_killed_at_random_points_the_runtime_restarts_and_keeps_every_acknowledged_commit_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    seed = int(os.environ.get("STATESTORE_KILL_SEED", random.randrange(1 << 30)))
    print(f"seed {seed} (STATESTORE_KILL_SEED={seed} repeats this run)")
    chosen = random.Random(seed)
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_DYNAMODB", "STATESTORE_RESOURCES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-2")
    port, dynamodb_port = free_port(), free_port()
    command = statestore_command(
        "local",
        *("--port", str(port), "--dynamodb-port", str(dynamodb_port)),
        *("--data-dir", str(tmp_path / "data"), "--instance", "killed"),
        *("--snapshot-interval", "1", "--cleanup-interval", "0"),
    )
    runtime = RuntimeProcess.start(command, stderr=tmp_path / "runtime-0.err")
    request.addfinalizer(lambda: runtime.kill())  # the round's runtime, should the test fail while it runs
    client, _ = connect(runtime.environment())
    table = client.create_table("events", SCHEMA, [])
    [leaf] = [p.id for p in client.leaf_partitions(table.table_id)]
    acknowledged_queued: dict[str, int] = {}
    acknowledged_direct: dict[str, int] = {}

    for round_ in range(1, ROUNDS + 1):
        client, sender = connect(runtime.environment())
        stream = Stream()
        name = f"round{round_}"
        producers = [
            threading.Thread(target=send_queued, args=(sender, table.table_id, leaf, name, stream)),
            threading.Thread(target=commit_directly, args=(client, table.table_id, leaf, name, stream)),
        ]
        for producer in producers:
            producer.start()
        killed_after = chosen.uniform(0.3, 4.0)
        time.sleep(killed_after)
        started = runtime.descendants()
        assert started, "the runtime started no DynamoDB Local"
        runtime.kill()
        for producer in producers:
            producer.join(timeout=300)
        assert not any(p.is_alive() for p in producers) and len(stream.stopped_by) == 2
        acknowledged_queued |= stream.acknowledged_queued
        acknowledged_direct |= stream.acknowledged_direct
        print(
            f"round {round_}: killed after {killed_after:.1f}s; {len(stream.queued)} queued requests sent, "
            f"{len(stream.acknowledged_queued)} acknowledged; {len(stream.acknowledged_direct)} direct"
        )

        runtime = RuntimeProcess.start(command, stderr=tmp_path / f"runtime-{round_}.err")
        assert wait_until_gone(started, timeout=0) == [], (
            f"round {round_}: the dead runtime's children live on"
        )

        client, sender = connect(runtime.environment())
        files, requests = log_contents(client, table.table_id)
        where = f"round {round_} (seed {seed})"
        for filename, number in acknowledged_direct.items():
            assert files.get(filename) == [number], f"{where}: {filename} committed directly at {number}"
        for request_id, number in acknowledged_queued.items():
            assert requests.get(request_id) == [number], f"{where}: {request_id} acknowledged at {number}"
        assert [f for f, entries in files.items() if len(entries) > 1] == [], f"{where}: files added twice"

        # Every request of the round sent again: answered with the truth, applied at most once.
        for request_id, transaction in stream.queued.items():
            sender.send(table.table_id, transaction, request_id)
        for request_id in stream.queued:
            status = sender.wait(table.table_id, request_id, timeout=120)
            assert status is not None, f"{where}: no answer to the resent {request_id}"
            assert status.outcome is CommitOutcome.COMMITTED, f"{where}: resent {request_id}: {status}"
            assert status.transaction_number is not None
            acknowledged_queued[request_id] = status.transaction_number
        files, requests = log_contents(client, table.table_id)
        for request_id, number in acknowledged_queued.items():
            assert requests.get(request_id) == [number], f"{where}: resent {request_id} answered {number}"
        assert [f for f, entries in files.items() if len(entries) > 1] == [], (
            f"{where}: a resend applied twice"
        )

    assert runtime.stop() == 0


OWNER_WITH_A_FORKED_CHILD = """
import os, sys, time
from statestore.local.dynamodb_local import DynamoDBLocal
server = DynamoDBLocal.start(port=0)
child = os.fork()  # as multiprocessing's default start method does on Linux
if child == 0:
    time.sleep(600)
    os._exit(0)
print(server.process.pid, child, flush=True)
time.sleep(600)
"""


def test_dynamodb_local_ends_with_its_owner_even_while_a_forked_child_of_the_owner_lives(
    tmp_path: Path,
) -> None:
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER_WITH_A_FORKED_CHILD], stdout=subprocess.PIPE, text=True, cwd=tmp_path
    )
    assert owner.stdout is not None
    java, child = (int(pid) for pid in owner.stdout.readline().split())
    try:
        owner.send_signal(signal.SIGKILL)
        owner.wait()

        assert wait_until_gone([java], timeout=30) == []
        assert running(child)  # the fork did not hold DynamoDB Local's pipe open
    finally:
        os.kill(child, signal.SIGKILL)
