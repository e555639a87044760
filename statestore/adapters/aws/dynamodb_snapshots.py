"""Snapshot records on DynamoDB: one item per snapshot plus a ``latest`` pointer item per table."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from botocore.exceptions import ClientError

from statestore import instance
from statestore.adapters.aws.clients import AwsCaller, batch_delete_items, cancellation_reasons, pages
from statestore.adapters.aws.dynamodb_items import whole_number
from statestore.errors import StaleSnapshotError, StateStoreError
from statestore.store.snapshot_ports import SnapshotInfo, SnapshotMetadataStore

logger = logging.getLogger(__name__)

_TABLE_ID = instance.SNAPSHOTS_KEYS.hash_key[0]
_SNAPSHOT_KEY = instance.SNAPSHOTS_KEYS.range_key[0]  # type: ignore[index]
_NUMBER = "transaction_number"
_CREATED = "created_time"
_PARTITIONS_KEY = "partitions_key"
_FILES_KEY = "files_key"
_CHECKSUMS = "checksums"  # list of S: the objects' CRC-32, in the order partitions, files
# N: the state's counts (a hint to make room before a load; absent from records made before they were kept)
_REFERENCES = "reference_count"
_PARTITION_COUNT = "partition_count"

LATEST = "latest"
_SNAPSHOT_PREFIX = "snapshot#"


def snapshot_item_key(transaction_number: int) -> str:
    """``snapshot#<number zero padded to 20>``: sorts in number order."""
    return f"{_SNAPSHOT_PREFIX}{transaction_number:020d}"


class DynamoDBSnapshotMetadataStore(SnapshotMetadataStore):
    """``record`` writes the snapshot item and moves the pointer in one TransactWriteItems, refusing to
    move the pointer backwards; reads are strongly consistent."""

    def __init__(self, dynamodb_client: Any, table_name: str, caller: AwsCaller | None = None) -> None:
        self.dynamodb = dynamodb_client
        self.table_name = table_name
        self.call = caller or AwsCaller()

    def record(self, snapshot: SnapshotInfo) -> None:
        number = snapshot.transaction_number
        snapshot_item = _item(snapshot, snapshot_item_key(number))
        pointer_item = _item(snapshot, LATEST)

        def stale(code: str, error: ClientError) -> StateStoreError | None:
            if code == "TransactionCanceledException" and "ConditionalCheckFailed" in cancellation_reasons(
                error
            ):
                return StaleSnapshotError(
                    f"table {snapshot.table_id!r} already has a snapshot at or after transaction {number}; "
                    "the latest pointer was left where it was"
                )
            return None

        self.call(
            f"record snapshot {number} of table {snapshot.table_id!r}",
            self.dynamodb.transact_write_items,
            stale,
            TransactItems=[
                {
                    "Put": {
                        "TableName": self.table_name,
                        "Item": snapshot_item,
                        "ConditionExpression": "attribute_not_exists(#k)",
                        "ExpressionAttributeNames": {"#k": _SNAPSHOT_KEY},
                    }
                },
                {
                    "Put": {
                        "TableName": self.table_name,
                        "Item": pointer_item,
                        "ConditionExpression": "attribute_not_exists(#k) OR #n < :n",
                        "ExpressionAttributeNames": {"#k": _SNAPSHOT_KEY, "#n": _NUMBER},
                        "ExpressionAttributeValues": {":n": {"N": str(number)}},
                    }
                },
            ],
        )

    def latest(self, table_id: str) -> SnapshotInfo | None:
        response = self.call(
            f"read the latest snapshot of table {table_id!r}",
            self.dynamodb.get_item,
            TableName=self.table_name,
            Key={_TABLE_ID: {"S": table_id}, _SNAPSHOT_KEY: {"S": LATEST}},
            ConsistentRead=True,
        )
        item = response.get("Item")
        return None if item is None else _info(item)

    def list(self, table_id: str) -> list[SnapshotInfo]:
        return [
            _info(item)
            for item in self._query(
                table_id, "#t = :t AND begins_with(#k, :p)", {":p": {"S": _SNAPSHOT_PREFIX}}, "list snapshots"
            )
        ]

    def delete(self, table_id: str, transaction_number: int) -> None:
        def is_latest(code: str, error: ClientError) -> StateStoreError | None:
            if code == "TransactionCanceledException" and "ConditionalCheckFailed" in cancellation_reasons(
                error
            ):
                return StateStoreError(
                    f"refusing to delete snapshot {transaction_number} of table {table_id!r}: "
                    "it is the latest"
                )
            return None

        self.call(
            f"delete snapshot {transaction_number} of table {table_id!r}",
            self.dynamodb.transact_write_items,
            is_latest,
            TransactItems=[
                {
                    "ConditionCheck": {
                        "TableName": self.table_name,
                        "Key": {_TABLE_ID: {"S": table_id}, _SNAPSHOT_KEY: {"S": LATEST}},
                        "ConditionExpression": "attribute_not_exists(#k) OR #n <> :n",
                        "ExpressionAttributeNames": {"#k": _SNAPSHOT_KEY, "#n": _NUMBER},
                        "ExpressionAttributeValues": {":n": {"N": str(transaction_number)}},
                    }
                },
                {
                    "Delete": {
                        "TableName": self.table_name,
                        "Key": {
                            _TABLE_ID: {"S": table_id},
                            _SNAPSHOT_KEY: {"S": snapshot_item_key(transaction_number)},
                        },
                    }
                },
            ],
        )

    def delete_table(self, table_id: str) -> None:
        keys = [
            {_TABLE_ID: item[_TABLE_ID], _SNAPSHOT_KEY: item[_SNAPSHOT_KEY]}
            for item in self._query(table_id, "#t = :t", {}, "delete snapshot records")
        ]
        # Snapshot items first, the pointer last: an interrupted delete still has a consistent pointer.
        keys.sort(key=lambda k: k[_SNAPSHOT_KEY]["S"] == LATEST)
        batch_delete_items(
            self.call, self.dynamodb, self.table_name, keys, f"delete snapshot records of {table_id!r}"
        )

    def _query(
        self, table_id: str, condition: str, values: dict[str, Any], what: str
    ) -> Iterator[dict[str, Any]]:
        kwargs: dict[str, Any] = {
            "TableName": self.table_name,
            "KeyConditionExpression": condition,
            "ExpressionAttributeNames": {
                "#t": _TABLE_ID,
                **({"#k": _SNAPSHOT_KEY} if "#k" in condition else {}),
            },
            "ExpressionAttributeValues": {":t": {"S": table_id}, **values},
            "ConsistentRead": True,
        }
        for response in pages(self.call, f"{what} of table {table_id!r}", self.dynamodb.query, kwargs):
            yield from response.get("Items", [])


def _item(snapshot: SnapshotInfo, key: str) -> dict[str, Any]:
    item: dict[str, Any] = {
        _TABLE_ID: {"S": snapshot.table_id},
        _SNAPSHOT_KEY: {"S": key},
        _NUMBER: {"N": str(snapshot.transaction_number)},
        _CREATED: {"N": str(snapshot.created_time)},
        _PARTITIONS_KEY: {"S": snapshot.partitions_key},
        _FILES_KEY: {"S": snapshot.files_key},
    }
    if snapshot.checksums:
        item[_CHECKSUMS] = {"L": [{"S": checksum} for checksum in snapshot.checksums]}
    for name, count in ((_REFERENCES, snapshot.references), (_PARTITION_COUNT, snapshot.partitions)):
        if count is not None:
            item[name] = {"N": str(count)}
    return item


def _info(item: dict[str, Any]) -> SnapshotInfo:
    return SnapshotInfo(
        table_id=item[_TABLE_ID]["S"],
        transaction_number=int(item[_NUMBER]["N"]),
        created_time=int(item[_CREATED]["N"]),
        partitions_key=item[_PARTITIONS_KEY]["S"],
        files_key=item[_FILES_KEY]["S"],
        checksums=tuple(value["S"] for value in item.get(_CHECKSUMS, {}).get("L", [])),
        references=_count(item, _REFERENCES),
        partitions=_count(item, _PARTITION_COUNT),
    )


def _count(item: dict[str, Any], name: str) -> int | None:
    """A count the record holds, or None where it holds none or one that does not read as a count (a hint
    only: the load it sizes reads the snapshot itself, and checks that)."""
    try:
        return whole_number(item, name)
    except ValueError as e:
        logger.warning("snapshot record of table %r: %s; ignored", item.get(_TABLE_ID), e)
        return None
