"""Throttling and failures: retried with backoff, and never seen by callers as botocore exceptions."""

from __future__ import annotations

import botocore.exceptions
import pytest
from botocore.stub import Stubber

from statestore.aws.clients import AwsCaller, make_client
from statestore.aws.dynamodb_log import DynamoDBTransactionLog
from statestore.aws.dynamodb_snapshots import DynamoDBSnapshotMetadataStore
from statestore.errors import StaleSnapshotError, StateStoreError, StoreUnavailableError
from statestore.memory import InMemoryBlobStore
from statestore.ports import LogEntry, SnapshotInfo
from tests.fixtures.aws_servers import free_port

ENTRY = LogEntry(1, 1_700_000_000_000, "AddFiles", b"{}")


def stubbed_log(sleeps: list[float]) -> tuple[DynamoDBTransactionLog, Stubber]:
    client = make_client("dynamodb", region="eu-west-2")
    caller = AwsCaller(max_attempts=4, sleep=sleeps.append)
    return DynamoDBTransactionLog(client, "log", InMemoryBlobStore(), caller=caller), Stubber(client)


def test_a_throttled_append_is_retried_with_backoff_until_it_succeeds() -> None:
    sleeps: list[float] = []
    log, stubber = stubbed_log(sleeps)
    for _ in range(2):
        stubber.add_client_error("put_item", "ProvisionedThroughputExceededException", http_status_code=400)
    stubber.add_response("put_item", {})

    with stubber:
        log.append("t1", ENTRY)

    stubber.assert_no_pending_responses()
    assert len(sleeps) == 2


def test_persistent_throttling_becomes_store_unavailable_not_a_botocore_error() -> None:
    log, stubber = stubbed_log([])
    for _ in range(4):
        stubber.add_client_error("query", "ThrottlingException", http_status_code=400)

    with stubber, pytest.raises(StoreUnavailableError, match="after 4 attempts") as raised:
        log.latest_number("t1")

    assert not isinstance(raised.value, botocore.exceptions.BotoCoreError | botocore.exceptions.ClientError)


def test_a_transaction_cancelled_by_a_conflict_is_retried_but_a_failed_condition_is_not() -> None:
    client = make_client("dynamodb", region="eu-west-2")
    store = DynamoDBSnapshotMetadataStore(client, "snapshots", AwsCaller(sleep=lambda _s: None))
    stubber = Stubber(client)
    stubber.add_client_error(
        "transact_write_items",
        "TransactionCanceledException",
        "Transaction cancelled, reasons [TransactionConflict, None]",
    )
    stubber.add_response("transact_write_items", {})
    stubber.add_client_error(
        "transact_write_items",
        "TransactionCanceledException",
        "Transaction cancelled, reasons [None, ConditionalCheckFailed]",
    )
    info = SnapshotInfo("t1", 5, 0, "p", "f")

    with stubber:
        store.record(info)
        with pytest.raises(StaleSnapshotError):
            store.record(info)

    stubber.assert_no_pending_responses()


def test_a_request_the_service_rejects_is_a_state_store_error_naming_the_operation() -> None:
    log, stubber = stubbed_log([])
    stubber.add_client_error("query", "ResourceNotFoundException", "Requested resource not found")

    with stubber, pytest.raises(StateStoreError, match="latest transaction number.*ResourceNotFound"):
        log.latest_number("t1")


def test_an_unreachable_endpoint_becomes_store_unavailable() -> None:
    client = make_client("dynamodb", endpoint_url=f"http://127.0.0.1:{free_port()}", max_attempts=1)
    log = DynamoDBTransactionLog(client, "log", InMemoryBlobStore(), caller=AwsCaller(sleep=lambda _s: None))

    with pytest.raises(StoreUnavailableError, match="kept failing"):
        log.append("t1", ENTRY)
