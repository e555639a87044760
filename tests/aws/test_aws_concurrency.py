"""Many writers, each with its own state store, racing to append to one table's log.

The log is on DynamoDB Local, whose conditional puts are atomic as DynamoDB's are; moto's are not under
concurrent requests (two racing writers can both be told they won a number), so a race test on moto would
fail now and then for a defect of the emulator. S3 is on the moto server."""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

import pytest

from statestore.adapters.aws.backend import AwsBackend
from statestore.codec.transaction_json import decode_entry
from statestore.services.client import StateStoreClient
from statestore.transactions import AddFiles
from tests.aws.writers import SCHEMA, WriterReport, write
from tests.fixtures.aws_servers import unique_resources

pytestmark = [pytest.mark.e2e, pytest.mark.dynamodb_local]


@pytest.fixture
def endpoints(dynamodb_local: str, moto_server: str) -> tuple[str, str]:
    return dynamodb_local, moto_server


@pytest.fixture
def table(endpoints: tuple[str, str]) -> Iterator[tuple[AwsBackend, str]]:
    dynamodb_endpoint, s3_endpoint = endpoints
    backend = AwsBackend.connect(
        unique_resources(),
        region="eu-west-2",
        dynamodb_endpoint_url=dynamodb_endpoint,
        s3_endpoint_url=s3_endpoint,
    )
    backend.provision()
    client = StateStoreClient(backend.table_index, backend.log, backend.snapshot_metadata, backend.blobs)
    yield backend, client.create_table("contended", SCHEMA).table_id


def check_log_matches_every_writer(backend: AwsBackend, table_id: str, reports: list[WriterReport]) -> None:
    entries = list(backend.log.read(table_id, 1))
    numbers = [e.transaction_number for e in entries]
    assert numbers == list(range(1, len(entries) + 1)), "no number is skipped or repeated"

    added: dict[int, tuple[str, ...]] = {}
    for entry in entries[1:]:  # 1 is InitialisePartitions
        transaction = decode_entry(entry)
        assert isinstance(transaction, AddFiles)
        added[entry.transaction_number] = tuple(r.filename for r in transaction.references)
    acknowledged = {n: names for report in reports for n, names in report.acknowledged.items()}
    assert acknowledged == added, "each acknowledged transaction is in the log exactly once, nothing else is"

    store = StateStoreClient(backend.table_index, backend.log, backend.snapshot_metadata, backend.blobs)
    table = store.get_table(table_id)
    replay = store.state_store(table.table_id)
    for report in reports:
        view = replay.load(as_of=report.final_number)
        assert tuple(sorted(view.files_by_name)) == report.final_files
    assert len(replay.load().files()) == sum(len(names) for names in added.values())


def test_eight_threads_each_with_its_own_store_lose_and_skip_nothing(
    table: tuple[AwsBackend, str], endpoints: tuple[str, str]
) -> None:
    backend, table_id = table
    resources = backend.resources.to_json()
    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(write, resources, endpoints, table_id, f"w{i}", 12) for i in range(8)]
        reports = [f.result() for f in futures]

    assert sum(len(r.acknowledged) for r in reports) == 96
    assert sum(r.retries for r in reports) > 0, "the writers really did race for numbers"
    check_log_matches_every_writer(backend, table_id, reports)


def test_writer_processes_each_with_its_own_store_lose_and_skip_nothing(
    table: tuple[AwsBackend, str], endpoints: tuple[str, str]
) -> None:
    backend, table_id = table
    resources = backend.resources.to_json()
    with ProcessPoolExecutor(4, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(write, resources, endpoints, table_id, f"p{i}", 10) for i in range(4)]
        reports = [f.result() for f in futures]

    assert sum(len(r.acknowledged) for r in reports) == 40
    check_log_matches_every_writer(backend, table_id, reports)
