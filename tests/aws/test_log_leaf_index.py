"""The log's leaf index (``statestore.adapters.aws.log_leaf_index``), on moto and DynamoDB Local: a
read_about names the entries it needs through it and reads no range, gives exactly what reading every entry
gives, and falls back to the range where the index does not record every entry."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterator
from typing import Any

import pytest

from statestore.adapters.aws import log_leaf_index
from statestore.adapters.aws.backend import AwsBackend
from statestore.adapters.aws.dynamodb_log import DynamoDBTransactionLog
from statestore.errors import TransactionNumberTakenError
from statestore.instance import TRANSACTION_LOG_KEYS
from statestore.model.clock import now_millis
from statestore.store.ports import CommitOutcome, CommitStatus, LogEntry, TransactionLogStore

_TABLE_ID, _NUMBER = TRANSACTION_LOG_KEYS.hash_key[0], TRANSACTION_LOG_KEYS.range_key[0]  # type: ignore[index]


def entry(number: int, adds: set[str] | None, *, indexed: bool = True) -> LogEntry:
    return LogEntry(
        number,
        1_700_000_000_000 + number,
        "AddFiles",
        f'{{"n": {number}}}'.encode(),
        adds_to_leaves=None if adds is None else frozenset(adds),
        index_leaves=indexed,
    )


def every_entry_read(log: TransactionLogStore, table_id: str, start: int, end: int, ids: list[str]) -> Any:
    """read_about as the port defines it: every entry read, those about ``ids`` kept."""
    return TransactionLogStore.read_about(log, table_id, start, end, ids)


@pytest.fixture
def calls(aws: AwsBackend) -> Iterator[list[str]]:
    """The DynamoDB operations the backend's client makes from here on (GetItem, Query, BatchGetItem)."""
    made: list[str] = []

    def record(model: Any, **_: Any) -> None:
        made.append(model.name)

    aws.dynamodb.meta.events.register("before-call.dynamodb", record)
    yield made
    aws.dynamodb.meta.events.unregister("before-call.dynamodb", record)


def random_history(rng: random.Random, count: int, leaves: list[str]) -> list[LogEntry]:
    history = []
    for n in range(1, count + 1):
        kind = rng.random()
        adds = None if kind < 0.15 else set() if kind < 0.25 else set(rng.sample(leaves, rng.randint(1, 4)))
        history.append(entry(n, adds))
    return history


def test_a_read_about_through_the_index_reads_only_the_entries_it_names(
    aws: AwsBackend, calls: list[str]
) -> None:
    rng = random.Random(7)
    leaves = [f"leaf-{i}" for i in range(12)]
    history = random_history(rng, 60, leaves)
    for e in history:
        aws.log.append("t1", e)
    aws.log.append("t2", entry(1, {"leaf-0"}))  # another table's index is not this one's

    for _ in range(25):
        start = rng.randint(1, 60)
        end = rng.randint(start - 1, 60)
        ids = rng.sample(leaves, rng.randint(0, 3))
        calls.clear()
        read, held = aws.log.read_about("t1", start, end, ids)
        made = list(calls)

        assert (read, held) == every_entry_read(aws.log, "t1", start, end, ids)
        if end >= start:  # the chain, a Query per hint range, the entries named and the range's first
            assert made == ["GetItem"] + ["Query"] * (len(ids) + 1) + ["BatchGetItem"]
    # Leaf ids that would need escaping in an expression, or look like an item's attributes.
    odd = ["a b.c:d#e", "entries", "wide"]
    for n, leaf in enumerate(odd, start=61):
        aws.log.append("t1", entry(n, {leaf}))
    for leaf in odd:
        assert aws.log.read_about("t1", 55, 63, [leaf]) == every_entry_read(aws.log, "t1", 55, 63, [leaf])


def test_a_range_holding_an_entry_the_index_does_not_record_is_read_whole(
    aws: AwsBackend, calls: list[str]
) -> None:
    history = [entry(n, {f"leaf-{n % 3}"}, indexed=n != 5) for n in range(1, 11)]
    for e in history:
        aws.log.append("t1", e)

    calls.clear()
    assert aws.log.read_about("t1", 3, 10, ["leaf-1"]) == (history[3:4] + history[6:7] + history[9:10], 8)
    assert "BatchGetItem" not in calls  # entry 5 is not in the index: the range was read (one Query)
    calls.clear()
    assert aws.log.read_about("t1", 6, 10, ["leaf-1"]) == (history[6:7] + history[9:10], 5)
    assert "BatchGetItem" in calls  # the chain starts again at 6: named through the index


def test_the_index_records_the_entry_that_took_the_number_not_the_one_refused(aws: AwsBackend) -> None:
    aws.log.append("t1", entry(1, {"a"}))
    with pytest.raises(TransactionNumberTakenError):
        aws.log.append("t1", entry(1, {"b"}))

    assert aws.log.read_about("t1", 1, 1, ["b"]) == ([], 1)
    assert [e.adds_to_leaves for e in aws.log.read_about("t1", 1, 1, ["a"])[0]] == [frozenset({"a"})]


def test_an_entry_with_commit_statuses_is_indexed_in_the_same_transaction(
    aws: AwsBackend, calls: list[str]
) -> None:
    status = CommitStatus("r1", "t1", CommitOutcome.COMMITTED, now_millis(), 1)
    aws.log.append("t1", entry(1, {"a"}), [status])
    aws.log.append("t1", entry(2, {"b"}))

    calls.clear()
    assert [e.transaction_number for e in aws.log.read_about("t1", 1, 2, ["a"])[0]] == [1]
    assert "BatchGetItem" in calls
    assert aws.commit_statuses.get("t1", "r1") == status


def test_cleanup_deletes_the_index_with_the_entries(aws: AwsBackend, calls: list[str]) -> None:
    history = [entry(n, {"a"} if n % 2 else None) for n in range(1, 21)]
    for e in history:
        aws.log.append("t1", e)
    aws.log.append("t2", entry(1, {"a"}))

    aws.log.delete_up_to("t1", 10)

    # The chain, and the hints of entries 11..20: one each (a leaf's, or the wide one).
    assert len(_index_keys(aws, "t1")) == 1 + 10
    assert aws.log.latest_number("t1") == 20
    calls.clear()
    assert aws.log.read_about("t1", 11, 20, ["a"]) == (history[10:], 10)
    assert "Query" in calls and len(calls) == 4  # the chain, two hint ranges, the entries: no range read
    # A range cleanup cut into: its first entry is gone, so the range is read and counted short.
    assert aws.log.read_about("t1", 5, 20, ["a"]) == (history[10:], 10)

    aws.log.delete_table("t1")
    assert _index_keys(aws, "t1") == []
    assert aws.log.latest_number("t1") == 0
    assert len(_index_keys(aws, "t2")) == 2  # another table's index is its own
    aws.log.append("t1", entry(1, {"b"}))  # a table made again under the id starts its index again
    assert aws.log.read_about("t1", 1, 1, ["b"]) == ([entry(1, {"b"})], 1)


def _index_keys(aws: AwsBackend, table_id: str) -> list[int]:
    response = aws.dynamodb.query(
        TableName=aws.log.table_name,
        KeyConditionExpression="#t = :t AND #n < :zero",
        ExpressionAttributeNames={"#t": _TABLE_ID, "#n": _NUMBER},
        ExpressionAttributeValues={":t": {"S": table_id}, ":zero": {"N": "0"}},
        ConsistentRead=True,
    )
    return [int(item[_NUMBER]["N"]) for item in response["Items"]]


def test_an_entry_not_asking_for_the_index_writes_none(aws: AwsBackend) -> None:
    aws.log.append("t1", dataclasses.replace(entry(1, {"a"}), index_leaves=False))
    assert _index_keys(aws, "t1") == []


def test_the_chain_goes_on_only_from_an_indexed_entry(aws: AwsBackend, calls: list[str]) -> None:
    """An entry written without the index (an older writer's, a table's before its view) breaks the chain:
    the next indexed entry finds the chain not ending before it, and starts it again."""
    other = DynamoDBTransactionLog(aws.dynamodb, aws.log.table_name, aws.blobs)  # another process's
    aws.log.append("t1", entry(1, {"a"}))
    other.append("t1", entry(2, {"a"}, indexed=False))
    calls.clear()
    other.append("t1", entry(3, {"b"}))
    assert calls == ["TransactWriteItems", "TransactWriteItems"]  # going on refused, then started here
    aws.log.append("t1", entry(4, {"a"}))  # another writer's entry 3 was indexed: going on is allowed

    for start, through_index in [(1, False), (2, False), (3, True), (4, True)]:
        calls.clear()
        read, held = aws.log.read_about("t1", start, 4, ["a"])
        assert [e.transaction_number for e in read] == [n for n in (1, 2, 4) if n >= start]
        assert held == 5 - start
        assert ("BatchGetItem" in calls) == through_index, start


def test_a_hash_two_leaves_share_only_makes_the_reader_read_an_entry_it_drops(
    aws: AwsBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(log_leaf_index, "leaf_hash", lambda leaf: 7)
    aws.log.append("t1", entry(1, {"a"}))
    aws.log.append("t1", entry(2, {"b"}))

    assert [e.transaction_number for e in aws.log.read_about("t1", 1, 2, ["b"])[0]] == [2]


def test_the_index_key_ranges_never_meet_each_other_nor_the_entries() -> None:
    """The chain at -1; the wide hints between it and the leaves' ranges; each leaf's hints one range in
    number order, apart from every other hash's; all below entry 1 and within DynamoDB's 38 digits."""
    last = log_leaf_index.NUMBERS_AT_MOST - 1
    top = 2**60  # the largest hash
    wide = (log_leaf_index.hint_sort_key(0, last), log_leaf_index.hint_sort_key(0, 1))
    leaf_1 = (log_leaf_index.hint_sort_key(1, last), log_leaf_index.hint_sort_key(1, 1))
    leaf_2 = (log_leaf_index.hint_sort_key(2, last), log_leaf_index.hint_sort_key(2, 1))
    assert leaf_2[1] < leaf_1[0] <= leaf_1[1] < wide[0] <= wide[1] < -1 < 1
    lowest, highest = log_leaf_index.EVERY_INDEX_KEY  # what deleting a table's index reads
    assert lowest <= log_leaf_index.hint_sort_key(top, last) and highest == -1
    assert len(str(abs(log_leaf_index.hint_sort_key(top, last)))) <= 38
    assert all(1 <= log_leaf_index.leaf_hash(f"leaf-{i}") <= top for i in range(1000))
    for hash_ in (0, 1, top):
        for number in (1, 77, last):
            assert log_leaf_index.number_of_hint(hash_, log_leaf_index.hint_sort_key(hash_, number)) == number
