"""Behaviour only the AWS adapters have: bodies in S3, paging, size limits, cleanup order."""

from __future__ import annotations

from typing import Any

import pytest

from statestore.adapters.aws.backend import AwsBackend
from statestore.adapters.aws.dynamodb_log import DynamoDBTransactionLog
from statestore.adapters.aws.s3_blobs import S3BlobStore
from statestore.engine.log_store import GroupMember, TransactionLogStateStore
from statestore.errors import (
    StateStoreError,
    TransactionNotRetainedError,
    TransactionNumberTakenError,
    TransactionTooLargeError,
)
from statestore.instance import MAX_INLINE_BODY_BYTES
from statestore.model import layout
from statestore.model.files import FileReference
from statestore.model.partitions import root_partition
from statestore.model.schema import Schema
from statestore.store.ports import CommitOutcome, LogEntry
from statestore.transactions import AddFiles, InitialisePartitions
from tests.builders import data_key

SCHEMA = Schema.of({"key": "long"})

BIG = b"y" * (MAX_INLINE_BODY_BYTES + 10)


def entry(number: int, body: bytes = b"{}") -> LogEntry:
    return LogEntry(number, 1_700_000_000_000 + number, "AddFiles", body)


def test_a_blob_read_up_to_a_size_asks_s3_for_no_more(aws: AwsBackend) -> None:
    blobs = aws.blobs
    assert isinstance(blobs, S3BlobStore)
    blobs.put("tables/t1/a", b"x" * 5000)
    asked: list[str] = []
    blobs.s3.meta.events.register(
        "provide-client-params.s3.GetObject", lambda params, **_: asked.append(params.get("Range"))
    )

    assert blobs.get_at_most("tables/t1/a", 100) is None
    assert blobs.get_at_most("tables/t1/a", 5000) == b"x" * 5000

    assert asked == ["bytes=0-99", "bytes=0-4999"]


def test_an_entry_appended_while_the_table_is_deleted_is_deleted_too(
    aws: AwsBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer appends entry 4 after the deletion listed entries 1..3 and before it deleted 3: the entry
    it follows is there, so the append lands. A deletion that stopped after one pass left it behind."""
    log = aws.log
    assert isinstance(log, DynamoDBTransactionLog)
    for number in (1, 2, 3):
        log.append("t1", entry(number))
    delete_items = log._delete_items
    appended: list[int] = []

    def racing_writer(table_id: str, items: list[dict[str, Any]]) -> int:
        if not appended:
            log.append("t1", entry(4))
            appended.append(4)
        return delete_items(table_id, items)

    monkeypatch.setattr(log, "_delete_items", racing_writer)

    log.delete_table("t1")

    assert appended == [4]
    assert list(log.read("t1", 0)) == [] and log.latest_number("t1") == 0


def test_a_log_writers_keep_appending_to_is_not_deleted_for_ever(
    aws: AwsBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = aws.log
    assert isinstance(log, DynamoDBTransactionLog)
    log.append("t1", entry(1))
    delete_items = log._delete_items

    def a_writer_that_never_stops(table_id: str, items: list[dict[str, Any]]) -> int:
        log.append("t1", entry(log.latest_number("t1") + 1))
        return delete_items(table_id, items)

    monkeypatch.setattr(log, "_delete_items", a_writer_that_never_stops)

    with pytest.raises(StateStoreError, match="writers kept appending to its log while it was deleted"):
        log.delete_table("t1")


def test_a_large_body_lives_in_the_bucket_under_the_tables_log_prefix(aws: AwsBackend) -> None:
    aws.log.append("t1", entry(1, BIG))

    keys = aws.blobs.list(layout.log_body_prefix("t1"))
    assert len(keys) == 1
    assert aws.blobs.get(keys[0]) == BIG


def test_a_large_body_that_loses_the_race_leaves_no_object_behind(aws: AwsBackend) -> None:
    aws.log.append("t1", entry(1, BIG))

    with pytest.raises(TransactionNumberTakenError):
        aws.log.append("t1", entry(1, b"z" * (MAX_INLINE_BODY_BYTES + 10)))

    assert len(aws.blobs.list(layout.log_body_prefix("t1"))) == 1
    assert [e.body for e in aws.log.read("t1", 1)] == [BIG]


def test_a_body_larger_than_the_bucket_accepts_is_refused_with_the_limit_named(aws: AwsBackend) -> None:
    log = DynamoDBTransactionLog(
        aws.dynamodb,
        aws.resources.transaction_log_table,
        aws.blobs,
        max_inline_body_bytes=10,
        max_blob_bytes=100,
    )

    with pytest.raises(TransactionTooLargeError, match="101 bytes.*100 bytes"):
        log.append("t1", entry(1, b"a" * 101))

    assert log.latest_number("t1") == 0
    assert aws.blobs.list(layout.log_body_prefix("t1")) == []


def test_reads_and_cleanup_page_through_long_logs(aws: AwsBackend) -> None:
    log = DynamoDBTransactionLog(aws.dynamodb, aws.resources.transaction_log_table, aws.blobs, page_size=4)
    for n in range(1, 12):
        log.append("t1", entry(n, BIG if n % 5 == 0 else b"{}"))

    assert [e.transaction_number for e in log.read("t1", 2)] == list(range(2, 12))
    assert log.delete_up_to("t1", 10) == 10
    assert [e.transaction_number for e in log.read("t1", 1)] == [11]
    assert aws.blobs.list(layout.log_body_prefix("t1")) == []  # bodies of 5 and 10 went with their entries


def test_cleanup_deletes_the_entry_before_its_body(aws: AwsBackend) -> None:
    aws.log.append("t1", entry(1, BIG))
    aws.log.append("t1", entry(2))
    order: list[str] = []
    delete_items, delete_blobs = aws.dynamodb.batch_write_item, aws.blobs.delete

    def crash_before_body(keys: list[str]) -> None:
        order.append("body")
        raise KeyboardInterrupt  # the process dies between the two deletes

    def delete_items_recorded(**kwargs: Any) -> Any:
        order.append("item")
        return delete_items(**kwargs)

    aws.dynamodb.batch_write_item = delete_items_recorded
    aws.blobs.delete = crash_before_body  # type: ignore[method-assign]
    try:
        with pytest.raises(KeyboardInterrupt):
            aws.log.delete_up_to("t1", 1)
    finally:
        aws.dynamodb.batch_write_item = delete_items
        aws.blobs.delete = delete_blobs  # type: ignore[method-assign]

    assert order == ["item", "body"]
    # The crash left an orphan body but the log reads correctly from what remains ...
    assert [e.transaction_number for e in aws.log.read("t1", 1)] == [2]
    assert len(aws.blobs.list(layout.log_body_prefix("t1"))) == 1
    # ... and deleting the table removes the orphan too.
    aws.log.delete_table("t1")
    assert aws.blobs.list(layout.table_prefix("t1")) == []


def test_a_body_deleted_while_its_entry_is_read_reports_the_entry_as_not_retained(aws: AwsBackend) -> None:
    aws.log.append("t1", entry(1, BIG))
    aws.blobs.delete(aws.blobs.list(layout.log_body_prefix("t1")))  # cleanup racing a reader

    with pytest.raises(TransactionNotRetainedError, match="transaction 1"):
        list(aws.log.read("t1", 1))


def test_blob_listing_pages_through_many_objects(aws: AwsBackend) -> None:
    blobs = S3BlobStore(aws.s3, aws.resources.bucket, page_size=3)
    keys = [f"tables/t1/k{i:02d}" for i in range(10)]
    for key in keys:
        blobs.put(key, b"x")

    assert blobs.list("tables/t1/") == keys
    blobs.delete(keys)
    assert blobs.list("tables/t1/") == []


def test_a_blob_put_with_tags_carries_them_as_s3_object_tags(aws: AwsBackend) -> None:
    blobs = S3BlobStore(aws.s3, aws.resources.bucket)
    tags = {"statestore-lifecycle": "request-body", "a b": "c/d=e+f"}  # needs URL encoding
    blobs.put("tables/t1/requests/r1.json", b"{}", tags=tags)
    blobs.put("tables/t1/data/f.parquet", b"x")

    tagged = aws.s3.get_object_tagging(Bucket=aws.resources.bucket, Key="tables/t1/requests/r1.json")
    untagged = aws.s3.get_object_tagging(Bucket=aws.resources.bucket, Key="tables/t1/data/f.parquet")
    assert {t["Key"]: t["Value"] for t in tagged["TagSet"]} == tags
    assert untagged["TagSet"] == []


def test_provisioning_creates_every_table_on_demand_with_ttl_on_commit_status_and_can_run_again(
    aws: AwsBackend,
) -> None:
    aws.provision()  # the fixture already did it once: a second run changes nothing and does not fail

    for table_name, keys in aws.resources.table_key_schemas.items():
        table = aws.dynamodb.describe_table(TableName=table_name)["Table"]
        assert table["KeySchema"][0]["AttributeName"] == keys.hash_key[0]
        assert table["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
    ttl = aws.dynamodb.describe_time_to_live(TableName=aws.resources.commit_status_table)
    assert ttl["TimeToLiveDescription"]["AttributeName"] == "expires_at"
    assert aws.blobs.list("") == []


class _PutsTwice:
    """A DynamoDB client whose put_item is sent twice, as botocore retries a put whose response was lost."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def put_item(self, **kwargs: Any) -> Any:
        self._client.put_item(**kwargs)
        return self._client.put_item(**kwargs)


def test_a_large_body_whose_put_response_was_lost_stays_with_its_entry(aws: AwsBackend) -> None:
    log = DynamoDBTransactionLog(_PutsTwice(aws.dynamodb), aws.log.table_name, aws.blobs)
    mine = LogEntry(1, 1_700_000_000_001, "AddFiles", BIG, writer_token="w-1")

    with pytest.raises(TransactionNumberTakenError):  # the retry fails the condition on our own item
        log.append("t1", mine)

    [stored] = list(aws.log.read("t1", 1))
    assert (stored.body, stored.writer_token) == (BIG, "w-1")


class _TransactsTwice:
    """A DynamoDB client whose transact_write_items is sent twice, as botocore retries a call whose response
    was lost."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def transact_write_items(self, **kwargs: Any) -> Any:
        self._client.transact_write_items(**kwargs)
        return self._client.transact_write_items(**kwargs)


def test_a_group_commit_whose_response_was_lost_is_committed_once_with_its_statuses(aws: AwsBackend) -> None:
    statuses = aws.commit_statuses
    log = DynamoDBTransactionLog(
        _TransactsTwice(aws.dynamodb), aws.log.table_name, aws.blobs, statuses=statuses
    )
    store = TransactionLogStateStore("t1", SCHEMA, log, sleep=lambda _: None)
    store.commit(InitialisePartitions((root_partition(SCHEMA),)))

    outcome = store.commit_group(
        [GroupMember("r1", AddFiles((FileReference(data_key("t1", "a"), "root", 1),)))]
    )

    # The retry is the same transaction (its client request token): it succeeds or finds its own entry.
    assert outcome.committed == ("r1",) and outcome.transaction_number == 2
    assert [e.transaction_number for e in aws.log.read("t1", 1)] == [1, 2]
    status = statuses.get("t1", "r1")
    assert status is not None and (status.outcome, status.transaction_number) == (CommitOutcome.COMMITTED, 2)


def test_entries_carry_their_writer_token(aws: AwsBackend) -> None:
    aws.log.append("t1", LogEntry(1, 1_700_000_000_001, "AddFiles", b"{}", writer_token="w-1"))
    aws.log.append("t1", LogEntry(2, 1_700_000_000_002, "AddFiles", BIG, writer_token="w-2"))

    assert [e.writer_token for e in aws.log.read("t1", 1)] == ["w-1", "w-2"]
