"""The queryable view's item values as JSON text (how the DynamoDB adapter stores them), read back checked."""

from __future__ import annotations

import json
from typing import Any

from statestore.codec.json_encoding import _key_to_json, _partition_to_json, _reference_to_json
from statestore.codec.transaction_json import (
    _check_str,
    _key_from_json,
    _Object,
    _partition_from_json,
    _reference_from_json,
)
from statestore.errors import CodecError
from statestore.model.files import FileReference, TableFile
from statestore.views.queryable_view import FilePart, FileParts, ViewValue
from statestore.views.view_index import PlacedPartition


def view_value_to_json(value: ViewValue) -> str:
    """One compact JSON object naming the value's kind: ``f`` file, ``fs`` file held in parts, ``fp`` a
    part of its references, ``r`` reference, ``p`` placed partition, ``root`` a partition id."""
    data: dict[str, Any]
    if isinstance(value, TableFile):
        data = {
            "f": {
                "filename": value.filename,
                "references": [_reference_to_json(r) for r in value.references],
                "last_update_time": value.last_update_time,
            }
        }
    elif isinstance(value, FileParts):
        data = {
            "fs": {
                "filename": value.filename,
                "parts": value.parts,
                "last_update_time": value.last_update_time,
            }
        }
    elif isinstance(value, FilePart):
        data = {
            "fp": {
                "filename": value.filename,
                "number": value.number,
                "references": [_reference_to_json(r) for r in value.references],
            }
        }
    elif isinstance(value, FileReference):
        data = {"r": _reference_to_json(value)}
    elif isinstance(value, PlacedPartition):
        data = {
            "p": {
                "partition": _partition_to_json(value.partition),
                "ancestor_ids": list(value.ancestor_ids),
                "cell_min": _key_to_json(value.cell_min),
            }
        }
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
        obj = _Object(body, "view item partition")
        placed = PlacedPartition(
            _partition_from_json(obj.raw("partition"), "view item partition.partition"),
            tuple(obj.items("ancestor_ids", _check_str)),
            _key_from_json(obj.raw("cell_min"), "view item partition.cell_min"),
        )
        obj.done()
        return placed
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
    if kind == "fs":
        obj = _Object(body, "view item file in parts")
        parts = FileParts(obj.string("filename"), obj.integer("parts"), obj.integer("last_update_time"))
        obj.done()
        return parts
    if kind == "fp":
        obj = _Object(body, "view item part of a file")
        part = FilePart(
            obj.string("filename"),
            obj.integer("number"),
            tuple(obj.items("references", _reference_from_json)),
        )
        obj.done()
        return part
    raise CodecError(f"unknown queryable view item kind {kind!r}")
