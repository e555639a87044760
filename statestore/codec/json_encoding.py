"""Writing transactions as versioned JSON.

The format is described in :mod:`statestore.codec.transaction_json`, which reads it and re-exports these
functions: import them from there."""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Sequence
from typing import Any, TypeVar

from statestore.errors import CodecError
from statestore.model.files import FileReference
from statestore.model.partitions import Partition
from statestore.model.schema import Key
from statestore.state.cycle_collector import collector_paused
from statestore.transactions import (
    AddFiles,
    AssignJobIds,
    ClearFiles,
    ClearTable,
    DeleteFiles,
    ExtendPartitionTree,
    InitialisePartitions,
    ReleaseClaims,
    ReplaceFileReferences,
    SplitFileReferences,
    SplitPartition,
    Transaction,
    TransactionBatch,
)

FORMAT_VERSION = 1

# Bodies below this size are stored as they are: zlib's header and dictionary-less start make small bodies
# barely smaller (or larger), and a readable body helps whoever inspects the log.
COMPRESS_ABOVE_BYTES = 256
# zlib's default. A bulk AddFiles' body is mostly random file names: level 9 made a 9.5 MB body 0.3% smaller
# than this level does, in 1.7 times the time (0.34 s against 0.20 s for 100,000 references).
COMPRESSION_LEVEL = 6

T = TypeVar("T")


def encode_transaction(txn: Transaction) -> tuple[bytes, bool]:
    """Return ``(body, compressed)``: compact UTF-8 JSON, zlib-compressed when that makes it smaller.

    Compression is tried only above :data:`COMPRESS_ABOVE_BYTES` and kept only if the result is smaller.
    Raises CodecError if the transaction holds a value JSON cannot carry (e.g. a float key).
    """
    try:
        with collector_paused():  # a bulk AddFiles is written as a list per reference, all short-lived
            body = json.dumps(transaction_to_json(txn), separators=(",", ":")).encode("ascii")
    except (TypeError, ValueError) as e:
        raise CodecError(f"cannot write {txn.TYPE} as JSON: {e}") from e
    if len(body) > COMPRESS_ABOVE_BYTES:
        compressed = zlib.compress(body, COMPRESSION_LEVEL)
        if len(compressed) < len(body):
            return compressed, True
    return body, False


def transaction_to_json(txn: Transaction) -> dict[str, Any]:
    """The JSON object of a transaction, with the format version and its type."""
    return {"version": FORMAT_VERSION, **_transaction_fields(txn)}


def _transaction_fields(txn: Transaction) -> dict[str, Any]:
    if isinstance(txn, InitialisePartitions):
        return {"type": txn.TYPE, "partitions": [_partition_to_json(p) for p in txn.partitions]}
    if isinstance(txn, SplitPartition):
        return {
            "type": txn.TYPE,
            "parent": _partition_to_json(txn.parent),
            "children": [_partition_to_json(p) for p in txn.children],
        }
    if isinstance(txn, ExtendPartitionTree):
        return {
            "type": txn.TYPE,
            "updated_partitions": [_partition_to_json(p) for p in txn.updated_partitions],
            "new_partitions": [_partition_to_json(p) for p in txn.new_partitions],
        }
    if isinstance(txn, AddFiles):
        return {
            "type": txn.TYPE,
            "references": _reference_columns(txn.references),
            **_optional("unreferenced_files", list(txn.unreferenced_files) or None),
        }
    if isinstance(txn, AssignJobIds):
        return {
            "type": txn.TYPE,
            "requests": [
                {"job_id": r.job_id, "partition_id": r.partition_id, "filenames": list(r.filenames)}
                for r in txn.requests
            ],
            **_optional("take_over_claimed_before", txn.take_over_claimed_before),
        }
    if isinstance(txn, ReleaseClaims):
        return {
            "type": txn.TYPE,
            "job_ids": list(txn.job_ids),
            **_optional("claimed_before", txn.claimed_before),
        }
    if isinstance(txn, ReplaceFileReferences):
        return {
            "type": txn.TYPE,
            "jobs": [
                {
                    "job_id": j.job_id,
                    "partition_id": j.partition_id,
                    "input_files": list(j.input_files),
                    "new_reference": _reference_to_json(j.new_reference),
                }
                for j in txn.jobs
            ],
        }
    if isinstance(txn, SplitFileReferences):
        return {
            "type": txn.TYPE,
            "requests": [
                {
                    "filename": r.filename,
                    "from_partition_id": r.from_partition_id,
                    "new_references": [_reference_to_json(n) for n in r.new_references],
                }
                for r in txn.requests
            ],
        }
    if isinstance(txn, DeleteFiles):
        return {"type": txn.TYPE, "filenames": list(txn.filenames)}
    if isinstance(txn, ClearFiles | ClearTable):
        return {"type": txn.TYPE}
    if isinstance(txn, TransactionBatch):
        items: list[dict[str, Any]] = []
        for item in txn.items:
            if isinstance(item.transaction, TransactionBatch):
                raise CodecError(f"batch item {item.request_id!r} holds a batch; batches cannot be nested")
            if item.body_key is not None:
                # The member's body is the entry's attachment ``body_key``; its type is repeated for readers.
                items.append(
                    {"request_id": item.request_id, "body_key": item.body_key, "type": item.transaction.TYPE}
                )
            else:
                items.append(
                    {"request_id": item.request_id, "transaction": _transaction_fields(item.transaction)}
                )
        return {"type": txn.TYPE, "items": items}
    raise CodecError(f"no JSON form for transaction class {type(txn).__name__}")


def _optional(name: str, value: Any) -> dict[str, Any]:
    """A field added to a type after its first version: left out when unset, so bodies written before it
    existed read the same (and stay as compact)."""
    return {} if value is None else {name: value}


def _key_to_json(value: Key) -> Any:
    # bool is an int subclass, but no key type holds one: writing it would decode as a different value.
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    if isinstance(value, bytes):
        return {"b64": base64.b64encode(value).decode("ascii")}
    raise CodecError(f"a key value must be int, str or bytes, got {type(value).__name__} {value!r}")


def _partition_to_json(p: Partition) -> dict[str, Any]:
    return {
        "id": p.id,
        "parent_id": p.parent_id,
        "child_ids": list(p.child_ids),
        "leaf": p.leaf,
        "dimension": p.dimension,
        "region": [
            {"min": _key_to_json(r.min), "max": None if r.max is None else _key_to_json(r.max)}
            for r in p.region.ranges
        ],
    }


def _reference_to_json(ref: FileReference) -> dict[str, Any]:
    return ref._asdict()


def _reference_columns(refs: Sequence[FileReference]) -> dict[str, Any]:
    return {
        # Each filename sits next to its partition id: filenames usually contain the id, so zlib finds it
        # a few bytes back whether a partition has one file or thousands (a separate list of distinct ids
        # costs ~10 more bytes per reference when most partitions get one file).
        "filename_partition_id": [[r.filename, r.partition_id] for r in refs],
        "number_of_rows": [r.number_of_rows for r in refs],
        "count_approximate": [r.count_approximate for r in refs],
        "only_contains_data_for_this_partition": [r.only_contains_data_for_this_partition for r in refs],
        "job_id": [r.job_id for r in refs],
        "last_update_time": [r.last_update_time for r in refs],
    }
