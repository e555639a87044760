"""The queryable view's item values as JSON text (how the DynamoDB adapter stores them), read back checked."""

from __future__ import annotations

import json
from typing import Any

from statestore.codec.json_encoding import _partition_to_json, _reference_to_json
from statestore.codec.transaction_json import _Object, _partition_from_json, _reference_from_json
from statestore.errors import CodecError
from statestore.model.files import FileReference, TableFile
from statestore.model.partitions import Partition
from statestore.views.queryable_view import ViewValue


def view_value_to_json(value: ViewValue) -> str:
    """One compact JSON object naming the value's kind: ``f`` file, ``r`` reference, ``p`` partition,
    ``root`` the root partition's id."""
    data: dict[str, Any]
    if isinstance(value, TableFile):
        data = {
            "f": {
                "filename": value.filename,
                "references": [_reference_to_json(r) for r in value.references],
                "last_update_time": value.last_update_time,
            }
        }
    elif isinstance(value, FileReference):
        data = {"r": _reference_to_json(value)}
    elif isinstance(value, Partition):
        data = {"p": _partition_to_json(value)}
    elif isinstance(value, str):
        data = {"root": value}
    else:
        raise CodecError(f"not a value of the queryable view: {type(value).__name__}")
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


def view_value_from_json(text: str) -> ViewValue:
    """Read what :func:`view_value_to_json` wrote; raises CodecError naming what is wrong."""
    try:
        data = json.loads(text)
    except ValueError as e:
        raise CodecError(f"a queryable view item is not JSON: {e}") from e
    if not isinstance(data, dict) or len(data) != 1:
        raise CodecError("a queryable view item must be an object with one kind")
    ((kind, body),) = data.items()
    if kind == "r":
        return _reference_from_json(body, "view item reference")
    if kind == "p":
        return _partition_from_json(body, "view item partition")
    if kind == "root":
        if not isinstance(body, str):
            raise CodecError("a queryable view root item must name a partition id")
        return body
    if kind == "f":
        obj = _Object(body, "view item file")
        value = TableFile(
            obj.string("filename"),
            tuple(obj.items("references", _reference_from_json)),
            obj.integer("last_update_time"),
        )
        obj.done()
        return value
    raise CodecError(f"unknown queryable view item kind {kind!r}")
