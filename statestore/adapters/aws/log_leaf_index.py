"""An index of which log entries concern which leaves, kept beside the entries in the log's own items.

A query of a few leaves through the queryable view merges the log entries written after the view
(``TransactionLogStore.read_about``). Filtering them in DynamoDB still reads every one, which costs what the
view lags by; this index lets a reader Query the few entries about its leaves instead.

The index lives in the table's own partition of the log, under negative sort keys (so no IAM grant beyond
the table's partition key, and no entry's number):

- a *hint* per leaf an entry adds to, at ``-(1 + h * 2**40 + n)`` for entry ``n`` and ``h`` a 60-bit hash
  of the leaf's id (at least 1), so a leaf's hints are one key range in number order; an entry that does more
  than add to leaves it lists (or whose hints would not fit its transaction) has one *wide* hint, ``h = 0``,
  which every reader reads. A hash shared by two leaves only makes a reader read an entry it then drops.
- the *chain* item at ``-1``: ``since`` and ``through``, every entry from ``since`` to ``through`` is
  indexed. It says whether the hints can be trusted for a range (an entry written without them, by an older
  writer or for a table that had no view then, breaks the chain, and readers read the range as before).

An entry's hints and the chain's update go in the TransactWriteItems of the entry's conditional put, so
they exist exactly when the entry does: no timing, no orphan. The chain goes on (``since`` kept) only on
the condition that it ends at the entry before (``through = n - 1``: that entry, which cleanup never
deletes while it is the latest, was indexed); when it does not, the transaction writes nothing and the
writer sends it again starting the chain at its own number. So what the chain says rests on what the
database checked, not on what a writer remembers.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterator
from typing import Any

from statestore import instance
from statestore.adapters.aws.clients import AwsCaller, pages
from statestore.store.ports import LogEntry

NUMBERS_AT_MOST = 2**40  # entries numbered from here on are not indexed (a hint's key holds 40 bits)
_HASH_BITS = 60
_TABLE_ID = instance.TRANSACTION_LOG_KEYS.hash_key[0]
_NUMBER = instance.TRANSACTION_LOG_KEYS.range_key[0]  # type: ignore[index]
_CHAIN_KEY = -1
_SINCE = "since"
_THROUGH = "through"
INDEXED = "indexed"  # on a log entry's item: its hints were written (cleanup deletes them with it)


def leaf_hash(leaf: str) -> int:
    """The leaf's hash, 1 .. 2**60 (0 is the wide hints')."""
    digest = hashlib.blake2b(leaf.encode("utf-8"), digest_size=8).digest()
    return (int.from_bytes(digest, "big") >> (64 - _HASH_BITS)) + 1


def hint_sort_key(hash_: int, number: int) -> int:
    return -(1 + hash_ * NUMBERS_AT_MOST + number)


def hint_hashes(entry: LogEntry, room: int) -> list[int]:
    """The hashes of ``entry``'s hints: its leaves' if it only adds to leaves it lists and they fit in
    ``room`` items, else the wide hint's."""
    if entry.adds_to_leaves and len(entry.adds_to_leaves) <= room:
        return sorted({leaf_hash(leaf) for leaf in entry.adds_to_leaves})
    return [0]


def key(table_id: str, sort_key: int) -> dict[str, Any]:
    return {_TABLE_ID: {"S": table_id}, _NUMBER: {"N": str(sort_key)}}


def index_writes(
    table_name: str, table_id: str, entry: LogEntry, room: int, chain_goes_on: bool
) -> list[dict[str, Any]]:
    """The TransactWriteItems actions indexing ``entry`` (at most ``room``, at least 2): the chain's update
    (going on from the entry before, on the condition that it ends there; else starting at ``entry``) and
    the entry's hints."""
    number = entry.transaction_number
    update: dict[str, Any] = {"TableName": table_name, "Key": key(table_id, _CHAIN_KEY)}
    if chain_goes_on:
        update["UpdateExpression"] = "SET #t = :n"
        update["ConditionExpression"] = "#t = :before"
        update["ExpressionAttributeNames"] = {"#t": _THROUGH}
        update["ExpressionAttributeValues"] = {":n": {"N": str(number)}, ":before": {"N": str(number - 1)}}
    else:
        update["UpdateExpression"] = "SET #t = :n, #s = :n"
        update["ExpressionAttributeNames"] = {"#t": _THROUGH, "#s": _SINCE}
        update["ExpressionAttributeValues"] = {":n": {"N": str(number)}}
    chain = {"Update": update}
    hints = [
        {"Put": {"TableName": table_name, "Item": key(table_id, hint_sort_key(h, number))}}
        for h in hint_hashes(entry, room - 1)
    ]
    return [chain, *hints]


# The sort keys of every item of the index, lowest and highest: every hint's and the chain's.
EVERY_INDEX_KEY = (-(1 + (2**_HASH_BITS + 1) * NUMBERS_AT_MOST), _CHAIN_KEY)


def hint_keys(table_id: str, number: int, leaves: Collection[str]) -> list[dict[str, Any]]:
    """The keys of the hints an indexed entry adding to ``leaves`` may have (all it could have: deleting
    one that is not there is harmless)."""
    hashes = {0, *(leaf_hash(leaf) for leaf in leaves)}
    return [key(table_id, hint_sort_key(h, number)) for h in sorted(hashes)]


def chain_covers(item: dict[str, Any] | None, from_number: int, to_number: int) -> bool:
    """Whether the chain item ``item`` says every entry ``from_number`` .. ``to_number`` is indexed."""
    if item is None or _SINCE not in item or _THROUGH not in item:
        return False
    return int(item[_SINCE]["N"]) <= from_number and int(item[_THROUGH]["N"]) >= to_number


def hint_range(hash_: int, from_number: int, to_number: int) -> tuple[int, int]:
    """The sort keys ``(low, high)`` of ``hash_``'s hints of entries ``from_number`` .. ``to_number``."""
    return hint_sort_key(hash_, to_number), hint_sort_key(hash_, from_number)


def number_of_hint(hash_: int, sort_key: int) -> int:
    return -sort_key - 1 - hash_ * NUMBERS_AT_MOST


def hashes_to_read(partition_ids: Collection[str]) -> list[int]:
    """The hint ranges a reader of ``partition_ids`` reads: the wide hints' and each leaf's."""
    return sorted({0, *(leaf_hash(leaf) for leaf in partition_ids)})


def numbers_about(
    call: AwsCaller,
    dynamodb: Any,
    table_name: str,
    table_id: str,
    from_number: int,
    to_number: int,
    partition_ids: Collection[str],
) -> list[int] | None:
    """The numbers ``from_number`` .. ``to_number`` of the entries with a hint a reader of
    ``partition_ids`` reads, in order; None if the chain does not cover the range (read the range)."""
    chain = call(
        f"read the leaf index of the log of table {table_id!r}",
        dynamodb.get_item,
        TableName=table_name,
        Key=key(table_id, _CHAIN_KEY),
        ConsistentRead=True,
    ).get("Item")
    if not chain_covers(chain, from_number, to_number):
        return None
    numbers: set[int] = set()
    for hash_ in hashes_to_read(partition_ids):
        low, high = hint_range(hash_, from_number, to_number)
        keys = sort_keys(call, dynamodb, table_name, table_id, low, high)
        numbers.update(number_of_hint(hash_, sort_key) for sort_key in keys)
    return sorted(numbers)


def sort_keys(
    call: AwsCaller, dynamodb: Any, table_name: str, table_id: str, low: int, high: int
) -> Iterator[int]:
    """The sort keys ``low`` .. ``high`` of the table's items in the log (one strongly consistent Query
    of keys, page by page)."""
    kwargs: dict[str, Any] = {
        "TableName": table_name,
        "KeyConditionExpression": "#t = :t AND #n BETWEEN :low AND :high",
        "ExpressionAttributeNames": {"#t": _TABLE_ID, "#n": _NUMBER},
        "ExpressionAttributeValues": {
            ":t": {"S": table_id},
            ":low": {"N": str(low)},
            ":high": {"N": str(high)},
        },
        "ProjectionExpression": "#n",
        "ConsistentRead": True,
    }
    what = f"read the leaf index of the log of table {table_id!r}"
    for response in pages(call, what, dynamodb.query, kwargs):
        yield from (int(item[_NUMBER]["N"]) for item in response.get("Items", []))
