"""The queryable view's items in the instance's snapshots table, beside the snapshot records.

The snapshots table's key (``table_id``, ``snapshot_key`` string) takes the view under its own prefixes,
so no new table is needed and the grants that read snapshot records (the reader's managed policy, per
table where it is scoped to tables) read the view too::

    snapshot_key = "view#meta"         the meta: ``transaction_number`` and, while written, ``writing_to``
    snapshot_key = "view#i#<item key>" one item (``statestore.views.queryable_view``): its value as JSON

Snapshot records are ``snapshot#...`` and ``latest``, so neither listing nor deleting snapshots sees the
view; deleting a table's snapshot records (``delete_table``) deletes its view with them. Items are read
strongly consistent, with BatchGetItem (100 keys per call) and Query (by key prefix, or a key range read
backwards in pages that grow from one item, so a read that stops early costs one call), and written with
BatchWriteItem (25 per call), unprocessed items retried with backoff. The Queries of several prefixes
(a region's partitions) run at once on a few threads: their round trips, not DynamoDB's work, bound a
region query. The meta is moved by a conditional PutItem.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from botocore.exceptions import ClientError

from statestore import instance
from statestore.adapters.aws.clients import BATCH_GET_LIMIT, AwsCaller, batch_get_items, pages
from statestore.adapters.aws.dynamodb_items import whole_number
from statestore.codec.view_items import view_value_from_json, view_value_to_json
from statestore.errors import (
    CodecError,
    DamagedViewItemError,
    QueryableViewConflictError,
    StateStoreError,
    ThrottledError,
)
from statestore.store.view_ports import QueryableViewStore
from statestore.views.queryable_view import ViewMeta, ViewValue

_TABLE_ID = instance.SNAPSHOTS_KEYS.hash_key[0]
_KEY = instance.SNAPSHOTS_KEYS.range_key[0]  # type: ignore[index]
_VALUE = "view_value"
_NUMBER = "transaction_number"
_WRITING_TO = "writing_to"
_FORMAT = "view_format"  # absent: format 1

META_KEY = "view#meta"
ITEM_PREFIX = "view#i#"
_BATCH_WRITE_LIMIT = 25
_PARALLEL_QUERIES = 8  # the clients' pool holds 32 connections
_PARALLEL_WRITES = 8
_PAGES = (1, 10, 100, 1000)  # the item limits of a descending read's pages, the last repeated


class DynamoDBQueryableViewStore(QueryableViewStore):
    def __init__(self, dynamodb_client: Any, table_name: str, caller: AwsCaller | None = None) -> None:
        self.dynamodb = dynamodb_client
        self.table_name = table_name
        self.call = caller or AwsCaller()

    def meta(self, table_id: str) -> ViewMeta | None:
        response = self.call(
            f"read the queryable view of table {table_id!r}",
            self.dynamodb.get_item,
            TableName=self.table_name,
            Key=_key(table_id, META_KEY),
            ConsistentRead=True,
        )
        item = response.get("Item")
        return None if item is None else _meta(table_id, item)

    def replace_meta(self, table_id: str, new: ViewMeta, expected: ViewMeta | None) -> None:
        item = _meta_item(table_id, new)
        names: dict[str, str] = {}
        values: dict[str, Any] = {}
        if expected is None:
            names["#k"] = _KEY
            condition = "attribute_not_exists(#k)"
        else:
            names["#n"] = _NUMBER
            names["#w"] = _WRITING_TO
            values[":n"] = {"N": str(expected.transaction_number)}
            if expected.writing_to is None:
                condition = "#n = :n AND attribute_not_exists(#w)"
            else:
                condition = "#n = :n AND #w = :w"
                values[":w"] = {"N": str(expected.writing_to)}

        def conflict(code: str, error: ClientError) -> StateStoreError | None:
            if code == "ConditionalCheckFailedException":
                return QueryableViewConflictError(
                    f"the queryable view of table {table_id!r} is no longer at {expected}: another upkeep "
                    "moved it"
                )
            return None

        self.call(
            f"move the queryable view of table {table_id!r}",
            self.dynamodb.put_item,
            conflict,
            TableName=self.table_name,
            Item=item,
            ConditionExpression=condition,
            ExpressionAttributeNames=names,
            **({"ExpressionAttributeValues": values} if values else {}),
        )

    def replace_damaged_meta(self, table_id: str, new: ViewMeta) -> None:
        what = f"repair the queryable view's meta of table {table_id!r}"
        response = self.call(
            what, self.dynamodb.get_item, TableName=self.table_name, Key=_key(table_id, META_KEY),
            ConsistentRead=True,
        )  # fmt: skip
        damaged = response.get("Item")
        if damaged is None or _readable(table_id, damaged):
            raise QueryableViewConflictError(
                f"the queryable view's meta of table {table_id!r} is no longer damaged: another upkeep "
                "repaired it"
            )
        # On the condition that it is still the damaged item read: each of the meta's attributes as it was.
        names: dict[str, str] = {}
        values: dict[str, Any] = {}
        conditions = []
        for i, attribute in enumerate((_NUMBER, _WRITING_TO, _FORMAT)):
            names[f"#a{i}"] = attribute
            if attribute in damaged:
                values[f":v{i}"] = damaged[attribute]
                conditions.append(f"#a{i} = :v{i}")
            else:
                conditions.append(f"attribute_not_exists(#a{i})")

        def conflict(code: str, error: ClientError) -> StateStoreError | None:
            if code == "ConditionalCheckFailedException":
                return QueryableViewConflictError(
                    f"the queryable view's meta of table {table_id!r} changed while it was repaired: another "
                    "upkeep moved it"
                )
            return None

        self.call(
            what,
            self.dynamodb.put_item,
            conflict,
            TableName=self.table_name,
            Item=_meta_item(table_id, new),
            ConditionExpression=" AND ".join(conditions),
            ExpressionAttributeNames=names,
            **({"ExpressionAttributeValues": values} if values else {}),
        )

    def get(self, table_id: str, keys: Collection[str]) -> dict[str, ViewValue]:
        wanted = list(dict.fromkeys(keys))
        batches = [wanted[i : i + BATCH_GET_LIMIT] for i in range(0, len(wanted), BATCH_GET_LIMIT)]
        found: dict[str, ViewValue] = {}
        if len(batches) < 2:
            for batch in batches:
                found.update(self._get_batch(table_id, batch))
            return found
        # The partitions above the leaves of a deep tree, a rebuild's reads: the round trips overlap.
        with ThreadPoolExecutor(min(len(batches), _PARALLEL_QUERIES)) as pool:
            for part in pool.map(lambda batch: self._get_batch(table_id, batch), batches):
                found.update(part)
        return found

    def _get_batch(self, table_id: str, keys: list[str]) -> dict[str, ViewValue]:
        what = f"read the queryable view of table {table_id!r}"
        wanted = [_key(table_id, ITEM_PREFIX + k) for k in keys]
        items = batch_get_items(self.call, self.dynamodb, self.table_name, wanted, what)
        return {item[_KEY]["S"][len(ITEM_PREFIX) :]: _value(table_id, item) for item in items}

    def with_prefix(self, table_id: str, prefix: str) -> dict[str, ViewValue]:
        return {
            item[_KEY]["S"][len(ITEM_PREFIX) :]: _value(table_id, item)
            for item in self._items_with_prefix(table_id, prefix)
        }

    def keys(self, table_id: str) -> list[str]:
        return [item[_KEY]["S"][len(ITEM_PREFIX) :] for item in self._items_with_prefix(table_id, "", True)]

    def _items_with_prefix(
        self, table_id: str, prefix: str, keys_only: bool = False
    ) -> Iterator[dict[str, Any]]:
        """The raw items (with ``keys_only``, their keys) whose key starts with ``prefix``."""
        # A range of keys rather than begins_with: DynamoDB Local answers a range from its index and a
        # begins_with by reading the table's whole partition key (every item of the table). The range's
        # upper end is the prefix with its last character incremented, which only a key equal to it can
        # reach beyond the prefix: such a key is left out below.
        low = ITEM_PREFIX + prefix
        following = ord(low[-1]) + 1
        if following > 0x10FFFF or 0xD800 <= following <= 0xDFFF:  # no next character: begins_with
            high = None
            condition, values = "#t = :t AND begins_with(#k, :low)", {":low": {"S": low}}
        else:
            high = low[:-1] + chr(following)
            condition = "#t = :t AND #k BETWEEN :low AND :high"
            values = {":low": {"S": low}, ":high": {"S": high}}
        pages = self._pages(table_id, condition, values, forward=True, limits=(), keys_only=keys_only)
        for items in pages:
            yield from (item for item in items if item[_KEY]["S"] != high)

    def with_prefixes(self, table_id: str, prefixes: Sequence[str]) -> list[dict[str, ViewValue]]:
        if len(prefixes) < 2:
            return [self.with_prefix(table_id, prefix) for prefix in prefixes]
        with ThreadPoolExecutor(min(len(prefixes), _PARALLEL_QUERIES)) as pool:
            return list(pool.map(lambda prefix: self.with_prefix(table_id, prefix), prefixes))

    def descending(self, table_id: str, low: str, high: str) -> Iterator[ViewValue]:
        values = {":low": {"S": ITEM_PREFIX + low}, ":high": {"S": ITEM_PREFIX + high}}
        condition = "#t = :t AND #k BETWEEN :low AND :high"
        for items in self._pages(table_id, condition, values, forward=False, limits=_PAGES):
            for item in items:
                yield _value(table_id, item)

    def _pages(
        self,
        table_id: str,
        condition: str,
        values: dict[str, Any],
        *,
        forward: bool,
        limits: Sequence[int],
        keys_only: bool = False,
    ) -> Iterator[list[dict[str, Any]]]:
        """The pages of one Query, each of at most the next of ``limits`` items (the last repeated; none:
        DynamoDB's own page size); with ``keys_only``, of the items' keys."""
        kwargs: dict[str, Any] = {
            "TableName": self.table_name,
            "KeyConditionExpression": condition,
            "ExpressionAttributeNames": {"#t": _TABLE_ID, "#k": _KEY},
            "ExpressionAttributeValues": {":t": {"S": table_id}, **values},
            "ConsistentRead": True,
            "ScanIndexForward": forward,
        }
        if keys_only:
            kwargs["ProjectionExpression"] = "#k"
        what = f"read the queryable view of table {table_id!r}"
        for response in pages(self.call, what, self.dynamodb.query, kwargs, limits):
            yield response.get("Items", [])

    def write(self, table_id: str, puts: Mapping[str, ViewValue], deletes: Collection[str]) -> None:
        if puts.keys() & set(deletes):
            raise ValueError("an item cannot be both put and deleted in one write")
        requests: list[dict[str, Any]] = [
            {
                "PutRequest": {
                    "Item": {**_key(table_id, ITEM_PREFIX + key), _VALUE: {"S": view_value_to_json(value)}}
                }
            }
            for key, value in puts.items()
        ]
        requests += ({"DeleteRequest": {"Key": _key(table_id, ITEM_PREFIX + key)}} for key in deletes)
        what = f"write the queryable view of table {table_id!r}"
        batches = [requests[i : i + _BATCH_WRITE_LIMIT] for i in range(0, len(requests), _BATCH_WRITE_LIMIT)]
        if len(batches) < 2:
            for batch in batches:
                self._write_batch(what, batch)
            return
        # A rebuild writes every item of the table: batches go on several threads, whose round trips
        # overlap (each batch is retried on its own; the meta says the items are being written meanwhile).
        with ThreadPoolExecutor(_PARALLEL_WRITES) as pool:
            for _ in pool.map(lambda batch: self._write_batch(what, batch), batches):
                pass

    def _write_batch(self, what: str, batch: list[dict[str, Any]]) -> None:
        for attempt in range(self.call.max_attempts):
            response = self.call(what, self.dynamodb.batch_write_item, RequestItems={self.table_name: batch})
            batch = response.get("UnprocessedItems", {}).get(self.table_name, [])
            if not batch:
                return
            if attempt + 1 < self.call.max_attempts:
                self.call.backoff(attempt)
        raise ThrottledError(
            f"could not {what}: DynamoDB kept returning {len(batch)} item(s) unprocessed after "
            f"{self.call.max_attempts} rounds; try again later"
        )

    def delete_table(self, table_id: str) -> None:
        keys = self.keys(table_id)  # damaged items too
        self.write(table_id, {}, keys)
        self.call(
            f"delete the queryable view of table {table_id!r}",
            self.dynamodb.delete_item,
            TableName=self.table_name,
            Key=_key(table_id, META_KEY),
        )


def _value(table_id: str, item: dict[str, Any]) -> ViewValue:
    """An item's value; raises DamagedViewItemError naming it if it cannot be decoded."""
    key = item[_KEY]["S"][len(ITEM_PREFIX) :]
    text = item.get(_VALUE, {}).get("S")
    if text is None:
        raise DamagedViewItemError(table_id, key, f"it has no string attribute {_VALUE!r}")
    try:
        return view_value_from_json(text)
    except CodecError as e:
        raise DamagedViewItemError(table_id, key, str(e)) from None


def _key(table_id: str, key: str) -> dict[str, Any]:
    return {_TABLE_ID: {"S": table_id}, _KEY: {"S": key}}


def _meta(table_id: str, item: dict[str, Any]) -> ViewMeta:
    """The meta an item holds; raises DamagedViewItemError naming the attribute that does not read."""

    def number(attribute: str) -> int | None:
        try:
            return whole_number(item, attribute)
        except ValueError as e:
            raise DamagedViewItemError(table_id, META_KEY, str(e)) from None

    transaction_number, written_format = number(_NUMBER), number(_FORMAT)
    if transaction_number is None:
        raise DamagedViewItemError(table_id, META_KEY, f"it has no attribute {_NUMBER!r}")
    return ViewMeta(transaction_number, number(_WRITING_TO), 1 if written_format is None else written_format)


def _readable(table_id: str, item: dict[str, Any]) -> bool:
    try:
        _meta(table_id, item)
    except DamagedViewItemError:
        return False
    return True


def _meta_item(table_id: str, meta: ViewMeta) -> dict[str, Any]:
    item = {
        **_key(table_id, META_KEY),
        _NUMBER: {"N": str(meta.transaction_number)},
        _FORMAT: {"N": str(meta.format)},
    }
    if meta.writing_to is not None:
        item[_WRITING_TO] = {"N": str(meta.writing_to)}
    return item
