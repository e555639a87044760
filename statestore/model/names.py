"""The one rule for what a name may be: a filename, a partition id, a job id.

Every store must be able to hold a name a transaction accepts, and every store makes the same decision, in
``validate``, before any store is touched: a name S3 can use as a key (at most 1,024 bytes of UTF-8) that
both the log's codecs and PostgreSQL's text columns and indexes can hold (no NUL character, no lone
surrogate, which a JSON ``\\udXXX`` escape can carry but UTF-8 cannot).

A new data file's name is also a key in the table's own part of the bucket: under its data prefix, with
no ``.`` or ``..`` segment and no empty one, so no table can name another's objects, or the store's own.
"""

from __future__ import annotations

MAX_NAME_BYTES = 1024  # S3's longest key


def name_problem(value: str) -> str | None:
    """What makes ``value`` unusable as a name, said so it completes "name X ...", or None."""
    if "\x00" in value:
        return "holds a NUL character, which no store can hold"
    if value.isascii():  # O(1) in CPython: the string knows its kind
        size = len(value)
    else:
        try:
            size = len(value.encode())
        except UnicodeEncodeError:
            return "holds a lone surrogate: it cannot be stored as UTF-8"
    if size > MAX_NAME_BYTES:
        return f"is {size:,} bytes of UTF-8; a name may have at most {MAX_NAME_BYTES:,}"
    return None


def key_problem(key: str, prefix: str) -> str | None:
    """What makes ``key`` unusable as the key of an object under ``prefix`` (a table's data prefix, from
    :func:`statestore.model.layout.data_prefix`, or its request prefix), or None."""
    if not key.startswith(prefix) or len(key) == len(prefix):
        return f"is not a key under the table's prefix {prefix!r}"
    if any(segment in ("", ".", "..") for segment in key[len(prefix) :].split("/")):
        return "has an empty, '.' or '..' path segment"
    return None
