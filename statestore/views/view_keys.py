"""Names as parts of the queryable view's keys."""

from __future__ import annotations

import hashlib

# A name longer than this (in UTF-8 bytes) is keyed by its SHA-256: a key of three names stays well under
# DynamoDB's 1,024-byte sort key, while names (up to 1,024 bytes each) are held whole in the item's value.
_LONGEST_NAME_IN_KEY = 200


def sized(name: str) -> str:
    """``name`` as one part of a key: its length, a colon and itself (or ``#`` and its hash if long), so no
    name can run into the next part."""
    if len(name.encode()) > _LONGEST_NAME_IN_KEY:
        return "#" + hashlib.sha256(name.encode()).hexdigest()
    return f"{len(name)}:{name}"
