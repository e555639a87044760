"""Failures of AWS calls: translated at the adapter boundary into typed library errors (never botocore's),
and retried by exactly one layer, so the attempts of one call are bounded and countable.

Most tests talk HTTP to a fake endpoint (``tests/fixtures/fake_aws.py``), so botocore parses real error
responses and runs its real ``standard`` retries; a few use botocore's Stubber (no botocore retries)."""

from __future__ import annotations

import random
from typing import Any

import boto3
import botocore.exceptions
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from statestore.adapters.aws.clients import BOTOCORE_MAX_ATTEMPTS, AwsCaller, batch_delete_items, make_client
from statestore.adapters.aws.commit_status import DynamoDBCommitStatusStore
from statestore.adapters.aws.dynamodb_log import DynamoDBTransactionLog
from statestore.adapters.aws.dynamodb_snapshots import DynamoDBSnapshotMetadataStore
from statestore.adapters.aws.sqs_queue import SqsCommitQueue, provision_queues
from statestore.engine.log_store import RetryPolicy, TransactionLogStateStore
from statestore.errors import (
    AccessDeniedError,
    CommitOutcomeUnknownError,
    ResourceNotFoundError,
    ResourceSettingsConflictError,
    StaleSnapshotError,
    StateStoreError,
    StoreUnavailableError,
    ThrottledError,
)
from statestore.instance import ResourceNames
from statestore.model.backoff import full_jitter_delay
from statestore.store.memory import InMemoryBlobStore
from statestore.store.ports import LogEntry
from statestore.store.snapshot_ports import SnapshotInfo
from statestore.transactions import InitialisePartitions
from tests.builders import LONG_SCHEMA, tree
from tests.fixtures.aws_servers import free_port
from tests.fixtures.fake_aws import (
    ACCESS_DENIED,
    INTERNAL,
    NOT_FOUND,
    THROTTLED,
    FakeEndpoint,
    Reply,
    error,
    fake_endpoint,
    no_botocore_sleep,  # noqa: F401  (fixture)
)

ENTRY = LogEntry(1, 1_700_000_000_000, "AddFiles", b"{}")
pytestmark = pytest.mark.usefixtures("no_botocore_sleep")


def log_at(endpoint: FakeEndpoint) -> DynamoDBTransactionLog:
    client = make_client("dynamodb", endpoint_url=endpoint.url)
    return DynamoDBTransactionLog(client, "log", InMemoryBlobStore(), caller=AwsCaller(sleep=lambda _s: None))


def store_at(endpoint: FakeEndpoint, retry: RetryPolicy) -> TransactionLogStateStore:
    return TransactionLogStateStore("t1", LONG_SCHEMA, log_at(endpoint), retry=retry, sleep=lambda _s: None)


# --- typed errors -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "expected", "attempts"),
    [
        (THROTTLED, ThrottledError, BOTOCORE_MAX_ATTEMPTS),
        (error(400, "ProvisionedThroughputExceededException"), ThrottledError, BOTOCORE_MAX_ATTEMPTS),
        (INTERNAL, StoreUnavailableError, BOTOCORE_MAX_ATTEMPTS),
        (ACCESS_DENIED, AccessDeniedError, 1),
        (error(400, "UnrecognizedClientException", "The security token is invalid"), AccessDeniedError, 1),
        (NOT_FOUND, ResourceNotFoundError, 1),
        (error(400, "ValidationException", "One or more parameter values were invalid"), StateStoreError, 1),
    ],
    ids=["throttled", "throughput", "internal", "denied", "bad-token", "not-found", "invalid"],
)
def test_a_failed_call_becomes_one_typed_error_after_botocores_attempts_only(
    reply: Reply, expected: type[StateStoreError], attempts: int
) -> None:
    with fake_endpoint(lambda _o, _b: reply) as endpoint:
        with pytest.raises(expected, match="latest transaction number of table 't1'") as raised:
            log_at(endpoint).latest_number("t1")

        # Throttling and server errors: botocore's standard retries, and no other layer on top of them.
        assert endpoint.calls == {"Query": attempts}
    assert type(raised.value) is expected
    if attempts > 1:
        assert f"after {attempts} attempt(s)" in str(raised.value)
    assert not isinstance(raised.value, botocore.exceptions.BotoCoreError | botocore.exceptions.ClientError)
    assert isinstance(raised.value.__cause__, botocore.exceptions.ClientError)  # nothing is lost


def test_no_credentials_is_access_denied(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with fake_endpoint(lambda _o, _b: (200, {})) as endpoint:
        with pytest.raises(AccessDeniedError, match="configure AWS credentials"):
            log_at(endpoint).latest_number("t1")
        assert endpoint.total() == 0


def test_an_unreachable_endpoint_becomes_store_unavailable() -> None:
    client = make_client("dynamodb", endpoint_url=f"http://127.0.0.1:{free_port()}", max_attempts=1)
    log = DynamoDBTransactionLog(client, "log", InMemoryBlobStore(), caller=AwsCaller(sleep=lambda _s: None))

    with pytest.raises(StoreUnavailableError, match="kept failing"):
        log.append("t1", ENTRY)


def test_a_missing_queue_on_moto_is_resource_not_found_and_a_queue_with_other_settings_a_conflict() -> None:
    names = ResourceNames.for_instance("typed")
    with mock_aws():
        sqs = boto3.client("sqs", region_name="eu-west-2")
        with pytest.raises(ResourceNotFoundError, match="find queue"):
            SqsCommitQueue.named(sqs, names.commit_queue)

        provision_queues(names, sqs, max_receive_count=5)
        with pytest.raises(ResourceSettingsConflictError, match="QueueAlreadyExists"):
            provision_queues(names, sqs, max_receive_count=7)


def test_a_request_the_service_rejects_is_a_state_store_error_naming_the_operation() -> None:
    client = make_client("dynamodb", region="eu-west-2")
    log = DynamoDBTransactionLog(client, "log", InMemoryBlobStore())
    stubber = Stubber(client)
    stubber.add_client_error("query", "ResourceNotFoundException", "Requested resource not found")

    with stubber, pytest.raises(ResourceNotFoundError, match="latest transaction number.*ResourceNotFound"):
        log.latest_number("t1")


# --- one retry layer, bounded ------------------------------------------------------------------------------


def test_a_throttled_call_that_then_succeeds_is_retried_by_botocore_alone() -> None:
    replies = [THROTTLED, THROTTLED, (200, {})]
    with fake_endpoint(lambda _o, _b: replies.pop(0)) as endpoint:
        log_at(endpoint).append("t1", ENTRY)

        assert endpoint.calls == {"PutItem": 3}


def test_a_batch_that_always_throttles_is_sent_botocores_attempts_not_times_the_batch_rounds() -> None:
    """Before: botocore (5) x AwsCaller (4) x the unprocessed-items loop (8) = 160 attempts of one call."""
    caller = AwsCaller(max_attempts=4, sleep=lambda _s: None)
    with fake_endpoint(lambda _o, _b: THROTTLED) as endpoint:
        dynamodb = make_client("dynamodb", endpoint_url=endpoint.url)
        keys: list[dict[str, Any]] = [{"table_id": {"S": "t1"}, "transaction_number": {"N": "1"}}]
        with pytest.raises(ThrottledError):
            batch_delete_items(caller, dynamodb, "log", keys, "delete log entries")
        statuses = DynamoDBCommitStatusStore(dynamodb, "statuses", caller)
        with pytest.raises(ThrottledError):
            statuses.get_many([("t1", "r1")])

        assert endpoint.calls == {
            "BatchWriteItem": BOTOCORE_MAX_ATTEMPTS,
            "BatchGetItem": BOTOCORE_MAX_ATTEMPTS,
        }


def test_items_that_keep_coming_back_unprocessed_are_retried_a_bounded_number_of_rounds() -> None:
    sleeps: list[float] = []
    caller = AwsCaller(max_attempts=4, sleep=sleeps.append)

    def unprocessed(operation: str, body: dict[str, Any]) -> Reply:
        if operation == "BatchWriteItem":
            return 200, {"UnprocessedItems": body["RequestItems"]}
        return 200, {"Responses": {}, "UnprocessedKeys": body["RequestItems"]}

    with fake_endpoint(unprocessed) as endpoint:
        dynamodb = make_client("dynamodb", endpoint_url=endpoint.url)
        keys: list[dict[str, Any]] = [{"table_id": {"S": "t1"}, "transaction_number": {"N": "1"}}]
        with pytest.raises(ThrottledError, match="unprocessed after 4 rounds"):
            batch_delete_items(caller, dynamodb, "log", keys, "delete log entries")
        with pytest.raises(StoreUnavailableError, match="unprocessed"):
            DynamoDBCommitStatusStore(dynamodb, "statuses", caller).get_many([("t1", "r1")])

        assert endpoint.calls == {"BatchWriteItem": 4, "BatchGetItem": 4}
    assert len(sleeps) == 2 * 3  # a backoff between rounds, none after the last


def test_a_sync_commit_whose_put_always_throttles_is_attempted_botocores_attempts_and_fails_typed() -> None:
    """The engine's loop is for lost races and ambiguous puts; a throttled put was refused, not stored."""

    def throttle_puts(operation: str, _body: dict[str, Any]) -> Reply:
        return THROTTLED if operation == "PutItem" else (200, {"Items": [], "Count": 0})

    with fake_endpoint(throttle_puts) as endpoint:
        store = TransactionLogStateStore(
            "t1", LONG_SCHEMA, log_at(endpoint), retry=RetryPolicy(), sleep=lambda _s: None
        )
        with pytest.raises(ThrottledError):
            store.commit(InitialisePartitions(tuple(tree(LONG_SCHEMA))))

        assert endpoint.calls["PutItem"] == BOTOCORE_MAX_ATTEMPTS


def test_a_sync_commit_against_a_failing_log_is_bounded_by_engine_attempts_times_botocores() -> None:
    """A 500 may hide a stored put: the engine reads back and puts again, ``max_attempts`` times at most,
    each one call of at most botocore's attempts; then the outcome is unknown, never a validation error."""
    policy = RetryPolicy(max_attempts=3, base_delay=0.0, max_delay=0.0)

    def fail_puts(operation: str, _body: dict[str, Any]) -> Reply:
        return INTERNAL if operation == "PutItem" else (200, {"Items": [], "Count": 0})

    with fake_endpoint(fail_puts) as endpoint:
        store = TransactionLogStateStore(
            "t1", LONG_SCHEMA, log_at(endpoint), retry=policy, sleep=lambda _s: None
        )
        with pytest.raises(CommitOutcomeUnknownError):
            store.commit(InitialisePartitions(tuple(tree(LONG_SCHEMA))))

        assert endpoint.calls["PutItem"] == policy.max_attempts * BOTOCORE_MAX_ATTEMPTS


def test_a_transaction_cancelled_by_a_conflict_is_retried_but_a_failed_condition_is_not() -> None:
    client = make_client("dynamodb", region="eu-west-2")
    sleeps: list[float] = []
    store = DynamoDBSnapshotMetadataStore(client, "snapshots", AwsCaller(sleep=sleeps.append))
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
    assert len(sleeps) == 1


def test_a_transaction_that_keeps_conflicting_is_given_up_after_the_callers_attempts() -> None:
    client = make_client("dynamodb", region="eu-west-2")
    store = DynamoDBSnapshotMetadataStore(
        client, "snapshots", AwsCaller(max_attempts=3, sleep=lambda _s: None)
    )
    stubber = Stubber(client)
    for _ in range(3):
        stubber.add_client_error(
            "transact_write_items",
            "TransactionCanceledException",
            "Transaction cancelled, reasons [TransactionConflict, None]",
        )

    with stubber, pytest.raises(StoreUnavailableError, match="conflicting"):
        store.record(SnapshotInfo("t1", 5, 0, "p", "f"))
    stubber.assert_no_pending_responses()


def test_every_backoff_is_full_jitter_below_the_capped_exponential() -> None:
    sleeps: list[float] = []
    caller = AwsCaller(base_delay=0.01, max_delay=0.05, sleep=sleeps.append, rng=random.Random(7))
    for attempt in range(6):
        caller.backoff(attempt)

    expected = random.Random(7)
    assert sleeps == [full_jitter_delay(a, 0.01, 0.05, expected) for a in range(6)]
    assert all(0.0 <= s <= min(0.05, 0.01 * 2**a) for a, s in enumerate(sleeps))
