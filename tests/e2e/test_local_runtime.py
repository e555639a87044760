"""End to end through the local runtime as the embedded default runs (tables on DynamoDB Local, bucket and
queues on a moto server): producers send commit requests to the SQS FIFO queue, the poller hands them to the
committer Lambda handler, and every request lands exactly once."""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from collections import Counter
from typing import Any

import pytest

from statestore.codec.transaction_json import decode_entry
from statestore.engine.requests import CommitRequest, encode_request
from statestore.local.draining import LocalDeadLetter
from statestore.local.runtime import LocalRuntime
from statestore.model.files import FileReference
from statestore.services import upkeep
from statestore.services.client import StateStoreClient
from statestore.services.snapshot_upkeep import SnapshotOutcome
from statestore.store.ports import CommitOutcome, QueueMessage
from statestore.transactions import AddFiles, TransactionBatch, request_ids_of
from tests.e2e.conftest import StartRuntime
from tests.e2e.producers import Sent, Tables, produce

pytestmark = [pytest.mark.e2e, pytest.mark.dynamodb_local]

SCHEMA = {"row_keys": [{"name": "key", "type": "long"}], "values": [{"name": "value", "type": "string"}]}


def new_table(
    client: StateStoreClient, name: str, split_points: list[int] | None = None
) -> tuple[str, list[str]]:
    table = client.create_table(name, SCHEMA, split_points or [])
    return table.table_id, sorted(p.id for p in client.leaf_partitions(table.table_id))


def add_file(table_id: str, leaf: str, name: str) -> AddFiles:
    return AddFiles((FileReference(f"tables/{table_id}/data/{name}", leaf, 10),))


def log_request_ids(client: StateStoreClient, table_id: str) -> dict[str, list[int]]:
    """Every request id in the table's log, with the numbers of the entries holding it."""
    found: dict[str, list[int]] = {}
    for entry in client.log.read(table_id, 1):
        for request_id in request_ids_of(decode_entry(entry)):
            found.setdefault(request_id, []).append(entry.transaction_number)
    return found


def added_files(client: StateStoreClient, table_id: str) -> Counter[str]:
    """How many times each file was added in the table's log."""
    added: Counter[str] = Counter()
    for entry in client.log.read(table_id, 1):
        transaction = decode_entry(entry)
        parts = (
            [i.transaction for i in transaction.items] if isinstance(transaction, TransactionBatch) else []
        )
        for part in parts:
            if isinstance(part, AddFiles):
                added.update(r.filename for r in part.references)
    return added


def test_eight_producer_processes_each_request_lands_exactly_once_and_its_status_names_its_entry(
    runtime: LocalRuntime,
) -> None:
    client = runtime.client()
    tables: Tables = [new_table(client, f"t{i}", [100 * (i + 1), 1000]) for i in range(3)]
    producers, per_producer = 8, 50
    # Each producer "writes" a data file for 0.1s before each request, as an ingest job would. Without that,
    # eight processes sending flat out outpace the one local poller on a small machine, and moto's SQS,
    # whose every call scans the whole queue, slows down as the queue deepens.
    work_seconds = 0.1

    started = time.monotonic()
    with multiprocessing.get_context("spawn").Pool(producers) as pool:
        results = pool.starmap(
            produce,
            [
                (
                    runtime.endpoint_url,
                    runtime.dynamodb_endpoint_url,
                    runtime.resources.to_json(),
                    tables,
                    p,
                    per_producer,
                    1,
                    work_seconds,
                )
                for p in range(producers)
            ],
        )
    runtime.wait_idle(timeout=90)
    elapsed = time.monotonic() - started

    sent: Sent = [item for result in results for item in result]
    assert len(sent) == producers * per_producer
    statuses = runtime.sender().statuses.get_many([(t, request_id) for request_id, t, _ in sent])
    for table_id, _ in tables:
        expected = {filename for _, t, filename in sent if t == table_id}
        assert set(client.state(table_id).files_by_name) == expected
        added = added_files(client, table_id)
        assert set(added) == expected and set(added.values()) == {1}, "every file added exactly once"
        in_log = log_request_ids(client, table_id)
        for request_id, t, _ in sent:
            if t != table_id:
                continue
            status = statuses[(t, request_id)]
            assert status.outcome is CommitOutcome.COMMITTED
            assert in_log[request_id] == [status.transaction_number]
    assert runtime.stats.committed == producers * per_producer
    assert runtime.stats.batches < producers * per_producer  # requests were grouped into log entries
    print(f"\n{len(sent)} requests committed in {elapsed:.1f}s, {runtime.stats.batches} batches")


def test_the_same_request_sent_twice_is_applied_once(runtime: LocalRuntime) -> None:
    client, sender = runtime.client(), runtime.sender()
    table_id, [leaf] = new_table(client, "dup")
    request = CommitRequest("request-sent-twice", table_id, add_file(table_id, leaf, "once.parquet"))

    sender.send(table_id, request.transaction, request.request_id)
    sender.send(table_id, request.transaction, request.request_id)  # the queue may drop this one itself
    runtime.wait_idle()
    # After the queue's five-minute deduplication window only the committer can recognise it.
    runtime.queue.send([QueueMessage(encode_request(request), table_id, "another-deduplication-id")])
    runtime.wait_idle()

    status = sender.status(table_id, request.request_id)
    assert status is not None and status.outcome is CommitOutcome.COMMITTED
    assert log_request_ids(client, table_id) == {request.request_id: [status.transaction_number]}
    assert added_files(client, table_id) == {f"tables/{table_id}/data/once.parquet": 1}
    assert runtime.stats.committed == 1 and runtime.stats.duplicates >= 1


def test_a_batch_redelivered_after_a_crash_before_its_delete_is_applied_once(runtime: LocalRuntime) -> None:
    client, sender = runtime.client(), runtime.sender()
    table_id, [leaf] = new_table(client, "crash")
    runtime.simulate_crashes(1)

    request_ids = [sender.send(table_id, add_file(table_id, leaf, f"f{i}.parquet")) for i in range(5)]
    runtime.wait_idle()

    assert runtime.stats.unacknowledged >= 1 and runtime.stats.redelivered >= 1
    assert runtime.stats.committed == 5
    in_log = log_request_ids(client, table_id)
    for request_id in request_ids:
        status = sender.status(table_id, request_id)
        assert status is not None and status.outcome is CommitOutcome.COMMITTED
        assert in_log[request_id] == [status.transaction_number]
    assert set(added_files(client, table_id).values()) == {1}
    assert len(client.files(table_id)) == 5


def test_a_message_never_acknowledged_moves_to_the_dead_letter_queue_after_max_receives(
    start_runtime: StartRuntime,
) -> None:
    runtime = start_runtime(max_receive_count=2)
    client, sender = runtime.client(), runtime.sender()
    table_id, [leaf] = new_table(client, "redrive")
    runtime.simulate_crashes(1_000)

    request_id = sender.send(table_id, add_file(table_id, leaf, "stuck.parquet"))
    [letter] = _dead_letters(runtime, 1)
    runtime.simulate_crashes(0)

    assert letter.reason is None  # moved by the queue's redrive policy, not by the committer
    assert json.loads(letter.body)["request_id"] == request_id
    assert letter.receive_count >= 2
    status = sender.status(
        table_id, request_id
    )  # committed on its first delivery; later ones were recognised
    assert status is not None and status.outcome is CommitOutcome.COMMITTED
    assert added_files(client, table_id) == {f"tables/{table_id}/data/stuck.parquet": 1}


def test_bad_messages_go_to_the_dead_letter_queue_with_reasons_while_every_table_keeps_committing(
    runtime: LocalRuntime,
) -> None:
    client, sender = runtime.client(), runtime.sender()
    tables = [new_table(client, f"bad{i}") for i in range(3)]
    (t1, [l1]), (t2, [l2]), (t3, [l3]) = tables
    unknown_type = json.dumps(
        {"version": 1, "request_id": "unknown-type", "table_id": t2, "type": "Bogus", "transaction": {}}
    )
    unknown_table = encode_request(
        CommitRequest("unknown-table", "no-such-table", add_file("x", "root", "x"))
    )

    good = [(t, sender.send(t, add_file(t, leaf, "before.parquet"))) for t, [leaf] in tables]
    runtime.queue.send(
        [
            QueueMessage("{oops", t1, "malformed"),
            QueueMessage(unknown_type, t2, "unknown-type"),
            QueueMessage(unknown_table, "no-such-table", "unknown-table"),
        ]
    )
    good += [(t, sender.send(t, add_file(t, leaf, "after.parquet"))) for t, [leaf] in tables]
    runtime.wait_idle()

    letters = {letter.group_id: letter for letter in runtime.take_dead_letters()}
    assert set(letters) == {t1, t2, "no-such-table"}
    assert letters[t1].body == "{oops" and "not valid JSON" in (letters[t1].reason or "")
    assert "unknown transaction type 'Bogus'" in (letters[t2].reason or "")
    assert "table not found" in (letters["no-such-table"].reason or "")
    unknown_table_status = sender.status("no-such-table", "unknown-table")
    assert unknown_table_status is not None and unknown_table_status.outcome is CommitOutcome.DEAD_LETTERED
    for table_id, request_id in good:
        status = sender.status(table_id, request_id)
        assert status is not None and status.outcome is CommitOutcome.COMMITTED
    for table_id, _ in tables:
        assert sorted(f.filename.rsplit("/", 1)[-1] for f in client.files(table_id)) == [
            "after.parquet",
            "before.parquet",
        ]


def test_an_invalid_transaction_is_rejected_with_its_reason_and_changes_nothing(
    runtime: LocalRuntime,
) -> None:
    client, sender = runtime.client(), runtime.sender()
    table_id, [leaf] = new_table(client, "invalid")
    sender.send(table_id, add_file(table_id, leaf, "kept.parquet"))
    runtime.wait_idle()
    before = client.state(table_id)

    rejected = [
        sender.send(table_id, add_file(table_id, "no-such-partition", "lost.parquet")),
        sender.send(table_id, add_file(table_id, leaf, "kept.parquet")),  # already there
    ]
    runtime.wait_idle()

    reasons = []
    for request_id in rejected:
        status = sender.wait(table_id, request_id, timeout=5)
        assert status is not None and status.outcome is CommitOutcome.REJECTED
        reasons.append(status.reason)
    assert reasons == [
        "partition not found: 'no-such-partition'",
        f"file already exists: 'tables/{table_id}/data/kept.parquet'",
    ]
    assert client.state(table_id) == before
    assert runtime.take_dead_letters() == []


def test_the_schedules_write_snapshots_of_tables_whose_log_moved(start_runtime: StartRuntime) -> None:
    runtime = start_runtime(snapshot_interval=0.5, cleanup_interval=0.5)
    client, sender = runtime.client(), runtime.sender()
    table_id, [leaf] = new_table(client, "scheduled")
    sender.send(table_id, add_file(table_id, leaf, "a.parquet"))
    runtime.wait_idle()

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        latest = client.snapshots.metadata.latest(table_id)
        if latest is not None and latest.transaction_number == 2 and runtime.stats.cleanup_runs:
            break
        time.sleep(0.1)
    latest = client.snapshots.metadata.latest(table_id)
    assert latest is not None and latest.transaction_number == 2
    assert runtime.stats.cleanup_runs >= 1 and runtime.stats.schedule_errors == 0


def test_a_runtime_starts_its_own_server_and_restores_the_environment_when_stopped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://example.invalid:1")
    monkeypatch.delenv("STATESTORE_RESOURCES", raising=False)
    with LocalRuntime.start("own", port=0, snapshot_interval=None, cleanup_interval=None) as runtime:
        assert runtime.endpoint_url.startswith("http://127.0.0.1:")
        assert os.environ["AWS_ENDPOINT_URL"] == runtime.endpoint_url
        assert json.loads(os.environ["STATESTORE_RESOURCES"])["instance_id"] == "own"
        with pytest.raises(RuntimeError, match="already runs"):
            LocalRuntime.start("other", port=0)
        client = runtime.client()
        table_id, [leaf] = new_table(client, "t")
        status = runtime.sender().wait(
            table_id, runtime.sender().send(table_id, add_file(table_id, leaf, "f")), timeout=30
        )
        assert status is not None and status.outcome is CommitOutcome.COMMITTED
    assert os.environ["AWS_ENDPOINT_URL"] == "http://example.invalid:1"
    assert "STATESTORE_RESOURCES" not in os.environ
    assert not runtime.running


def _dead_letters(runtime: LocalRuntime, count: int, timeout: float = 30) -> list[LocalDeadLetter]:
    letters: list[LocalDeadLetter] = []
    deadline = time.monotonic() + timeout
    while len(letters) < count and time.monotonic() < deadline:
        letters += runtime.take_dead_letters(wait_seconds=1)
    return letters


def test_a_scheduled_run_queues_one_message_per_moved_table_and_the_poller_works_each(
    runtime: LocalRuntime,
) -> None:
    client, sender = runtime.client(), runtime.sender()
    tables = [new_table(client, f"fan{i}") for i in range(3)]
    for table_id, [leaf] in tables:
        sender.send(table_id, add_file(table_id, leaf, "a.parquet"))
    runtime.wait_idle()
    still, _ = tables[2]
    client.create_snapshot(still)

    snapshots = runtime.run_snapshots()
    cleanup = runtime.run_cleanup()

    moved = {table_id for table_id, _ in tables[:2]}
    assert set(snapshots["planned"]) == moved and snapshots["skipped"] == 1
    assert snapshots["written"] == dict.fromkeys(moved, 2) and snapshots["errors"] == {}
    for table_id in moved:
        latest = client.snapshots.metadata.latest(table_id)
        assert latest is not None and latest.transaction_number == 2
    assert len(cleanup["planned"]) == 3 and cleanup["tables"] == 3 and cleanup["errors"] == {}
    # Every table's work went through the queues, one invocation each.
    assert runtime.stats.upkeep_work == 5 and runtime.stats.upkeep_errors == 0
    assert runtime.run_snapshots() == {
        "planned": [],
        "written": {},
        "skipped": 3,
        "errors": {},
        "views": {},
        "view_errors": {},
    }


def test_a_table_whose_snapshot_keeps_failing_ends_in_the_upkeep_dead_letter_queue_alone(
    start_runtime: StartRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = start_runtime(max_receive_count=2, retry_delay_seconds=0)
    client, sender = runtime.client(), runtime.sender()
    (broken, [leaf_b]), (fine, [leaf_f]) = new_table(client, "broken"), new_table(client, "fine")
    for table_id, leaf in ((broken, leaf_b), (fine, leaf_f)):
        sender.send(table_id, add_file(table_id, leaf, "a.parquet"))
    runtime.wait_idle()
    real = upkeep.snapshot_table

    def failing(table: Any, *args: Any, **kwargs: Any) -> SnapshotOutcome:
        if table.table_id == broken:
            return SnapshotOutcome(broken, error="the bucket refused the snapshot")
        return real(table, *args, **kwargs)

    monkeypatch.setattr(upkeep, "snapshot_table", failing)

    summary = runtime.run_snapshots()

    assert summary["written"] == {fine: 2}
    assert "the bucket refused the snapshot" in summary["errors"][broken]
    # Received twice (max_receive_count), then moved by the queue's redrive policy.
    [letter] = runtime.upkeep_dead_letter_queue.receive_event(10, 1)["Records"]
    assert json.loads(letter["body"])["table_id"] == broken
    assert letter["attributes"]["MessageGroupId"] == broken
    assert runtime.stats.upkeep_errors == 2


def test_the_handlers_run_here_keep_no_metrics_from_one_invocation_to_the_next(
    start_runtime: StartRuntime,
) -> None:
    """The runtime runs the handlers with Powertools' metrics disabled, whose flush neither prints nor
    clears: each invocation's metric values would stay in memory for the runtime's life."""
    from lambdas import cleanup, committer, snapshot

    runtime = start_runtime()
    client, sender = runtime.client(), runtime.sender()
    table_id, [leaf] = new_table(client, "no-metrics-kept")
    for i in range(3):
        sender.send(table_id, add_file(table_id, leaf, f"{i}.parquet"))
        runtime.wait_idle()
    runtime.run_snapshots()
    runtime.run_cleanup()

    assert os.environ["POWERTOOLS_METRICS_DISABLED"] == "true"
    assert runtime.stats.committed == 3
    for function in (committer, snapshot, cleanup):
        assert function.metrics.metric_set == {}, function.__name__
