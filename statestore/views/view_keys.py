"""Names as parts of the queryable view's keys, the key of a partition's item, and the error of an item
another names that is not there."""

from __future__ import annotations

import hashlib

# A name longer than this (in UTF-8 bytes) is keyed by its SHA-256: a key of three names stays well under
# DynamoDB's 1,024-byte sort key, while names (up to 1,024 bytes each) are held whole in the item's value.
_LONGEST_NAME_IN_KEY = 200


PARTITION_PREFIX = "p#"


class MissingViewItemError(ValueError):
    """An item the view's other items name is not there (``key``): read while an upkeep moved the view, or
    the view is damaged."""

    def __init__(self, key: str, named_by: str) -> None:
        super().__init__(f"the view holds no item {key!r}, which {named_by} names")
        self.key = key


def sized(name: str) -> str:
    """``name`` as one part of a key: its length, a colon and itself (or ``#`` and its hash if long), so no
    name can run into the next part."""
    if len(name.encode()) > _LONGEST_NAME_IN_KEY:
        return "#" + hashlib.sha256(name.encode()).hexdigest()
    return f"{len(name)}:{name}"


def partition_key(partition_id: str) -> str:
    return PARTITION_PREFIX + sized(partition_id)
