"""How the DynamoDB log keeps an entry in an item: its attributes, its body inline or in S3."""

from __future__ import annotations

import logging
from typing import Any

from statestore import instance
from statestore.errors import BlobNotFoundError, TransactionNotRetainedError
from statestore.store.ports import BlobStore, LogEntry

logger = logging.getLogger("statestore.dynamodb_log")

TABLE_ID = instance.TRANSACTION_LOG_KEYS.hash_key[0]
NUMBER = instance.TRANSACTION_LOG_KEYS.range_key[0]  # type: ignore[index]
UPDATE_TIME = "update_time"
TYPE = "transaction_type"
BODY = "body"  # inline body: S when uncompressed (readable in the console), B when compressed
BODY_KEY = "body_key"  # S3 key of a body too large for an item
ATTACHMENTS = "attachments"  # S3 keys of member bodies the body names instead of holding (list of S)
COMPRESSED = "compressed"
WRITER = "writer"  # the entry's writer token
ADDS_ONLY = "adds_only"  # true on an entry that only adds files (LogEntry.adds_to_leaves is not None)
ADDS_TO_LEAVES = "adds_to_leaves"  # the leaves such an entry adds references to (SS; absent if not listed)
MOST_ADDED = "most_added"  # LogEntry.most_added: [references, partitions] (L of two N; absent if not known)


def entry_of(blobs: BlobStore, table_id: str, item: dict[str, Any]) -> LogEntry:
    """The entry an item holds, its bodies kept aside read from ``blobs``."""
    number = int(item[NUMBER]["N"])
    compressed = bool(item.get(COMPRESSED, {}).get("BOOL", False))
    attachment_keys = [value["S"] for value in item.get(ATTACHMENTS, {}).get("L", [])]
    try:
        if BODY_KEY in item:
            body = blobs.get(item[BODY_KEY]["S"])
        else:
            value = item[BODY]
            body = value["B"] if "B" in value else value["S"].encode("utf-8")
        attachments = tuple((key, blobs.get(key)) for key in attachment_keys)
    except BlobNotFoundError as e:
        # Cleanup deletes the item before its objects, so the entry was deleted after we read it.
        raise TransactionNotRetainedError(
            f"table {table_id!r}: transaction {number} was deleted by cleanup while being read"
        ) from e
    return LogEntry(
        number,
        int(item[UPDATE_TIME]["N"]),
        item[TYPE]["S"],
        bytes(body),
        compressed,
        str(item.get(WRITER, {}).get("S", "")),
        attachments,
        frozenset(item.get(ADDS_TO_LEAVES, {}).get("SS", ())) if ADDS_ONLY in item else None,
        most_added_of(table_id, number, item),
    )


def most_added_value(most_added: tuple[int, int]) -> dict[str, Any]:
    return {"L": [{"N": str(count)} for count in most_added]}


def most_added_of(table_id: str, number: int, item: dict[str, Any]) -> tuple[int, int] | None:
    """The item's ``most_added`` counts; None where it has none. A value this code did not write is read as
    none, with a warning: it only says how much room to make before the body is decoded, and the reader
    makes room from the decoded transaction as well."""
    value = item.get(MOST_ADDED)
    if value is None:
        return None
    try:
        references, partitions = (int(count["N"]) for count in value["L"])
        if references >= 0 and partitions >= 0:
            return references, partitions
    except (KeyError, TypeError, ValueError):
        pass
    logger.warning("table %r: transaction %d has an unreadable %r: %r", table_id, number, MOST_ADDED, value)
    return None


def object_keys(item: dict[str, Any]) -> list[str]:
    """The S3 keys an item holds: its body's, if stored aside, and its attachments'."""
    keys = [item[BODY_KEY]["S"]] if BODY_KEY in item else []
    keys.extend(value["S"] for value in item.get(ATTACHMENTS, {}).get("L", []))
    return keys


def body_value(body: bytes, compressed: bool) -> dict[str, Any]:
    if compressed:
        return {"B": body}
    try:
        return {"S": body.decode("utf-8")}
    except UnicodeDecodeError:
        return {"B": body}
