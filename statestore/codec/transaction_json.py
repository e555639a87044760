"""Versioned JSON for transactions: the body of a log entry and of a commit request.

Every body is one JSON object with ``"version"`` and ``"type"`` (the transaction's ``TYPE``) followed by
the transaction's own fields. Decoding needs no schema because key values describe themselves: an ``int``
or a ``str`` is written as itself, ``bytes`` as ``{"b64": "<base64>"}``.

``AddFiles`` is written column by column (``[filename, partition_id]`` pairs, row counts, flags, ...):
ingest adds thousands of references at a time, and columns compress better than a list of objects that
repeats every field name (measured on 10,000 references with UUID paths: 29-54 stored bytes per reference
against 32-57 for objects). Other file references are objects with their full field names. An optional
time (``AssignJobIds.take_over_claimed_before``, ``ReleaseClaims.claimed_before``) is left out when unset: the
first was added after version 1, and bodies written before it read the same. So is an empty
``AddFiles.unreferenced_files`` (files added with no reference), added later too.

Stored bodies are zlib-compressed when that pays (see :func:`encode_transaction`). Every malformed input
raises :class:`~statestore.errors.CodecError` saying where and what was wrong: a ``true`` or a ``1.0`` where
an integer belongs, an integer where a flag belongs. Integer *ranges* are not the decoder's to check: it
reads any integer JSON holds, so a log written before a range check existed still loads, and each
transaction's ``validate`` rejects a number the Parquet snapshots cannot hold (int64 counts and times,
int32 or int64 keys) before it is logged.
"""

from __future__ import annotations

import base64
import binascii
import json
import zlib
from collections.abc import Callable, Mapping
from itertools import repeat
from typing import Any, TypeVar

from statestore.codec.json_encoding import (
    COMPRESS_ABOVE_BYTES,
    FORMAT_VERSION,
    encode_transaction,
    transaction_to_json,
)
from statestore.errors import CodecError, InvalidPartitionTreeError, UnreadableLogEntryError
from statestore.model.files import FileReference
from statestore.model.partitions import Partition, Range, Region
from statestore.model.schema import Key
from statestore.state.cycle_collector import collector_paused_for_body
from statestore.store.ports import LogEntry
from statestore.transactions import (
    AddFiles,
    AssignJobIdRequest,
    AssignJobIds,
    BatchItem,
    ClearFiles,
    ClearTable,
    DeleteFiles,
    ExtendPartitionTree,
    InitialisePartitions,
    ReleaseClaims,
    ReplaceFileReferences,
    ReplaceFileReferencesJob,
    SplitFileReferenceRequest,
    SplitFileReferences,
    SplitPartition,
    Transaction,
    TransactionBatch,
)

T = TypeVar("T")

__all__ = [
    "COMPRESS_ABOVE_BYTES",
    "FORMAT_VERSION",
    "decode_entry",
    "decode_transaction",
    "encode_transaction",
    "transaction_from_json",
    "transaction_to_json",
]


def decode_transaction(
    body: bytes, compressed: bool, attachments: Mapping[str, bytes] | None = None
) -> Transaction:
    """Parse a body written by :func:`encode_transaction` (raises CodecError naming what was wrong).

    ``attachments`` are the bodies, by key, that batch items name with ``body_key`` (a log entry's).
    """
    if compressed:
        try:
            body = zlib.decompress(body)
        except zlib.error as e:
            raise CodecError(f"transaction body is marked compressed but is not valid zlib data: {e}") from e
    # A batch entry's items may be attached bodies (a bulk request's, by key): they are decoded here too.
    attached_bytes = sum(map(len, attachments.values())) if attachments else 0
    with collector_paused_for_body(len(body) + attached_bytes):
        try:
            data = json.loads(body.decode("utf-8"))
        except UnicodeDecodeError as e:
            raise CodecError(f"transaction body is not UTF-8: {e}") from e
        except ValueError as e:  # JSONDecodeError, or an integer too long to convert
            raise CodecError(f"transaction body is not valid JSON: {e}") from e
        except RecursionError as e:
            raise CodecError("transaction body is nested too deeply to be a transaction") from e
        return transaction_from_json(data, attachments)


def decode_entry(entry: LogEntry, table_id: str = "?") -> Transaction:
    """Decode a log entry's body (with its attachments) and check it holds the type the entry says it does.

    Batch items stored as attachments come back with their transaction and without ``body_key``: the
    decoded batch is the same whichever way its entry held them. An entry that cannot be decoded raises
    UnreadableLogEntryError naming ``table_id`` and the entry: the log holds it, so it is not the caller's
    input that is wrong.
    """
    try:
        txn = decode_transaction(entry.body, entry.compressed, dict(entry.attachments))
    except CodecError as e:
        raise UnreadableLogEntryError(table_id, entry.transaction_number, str(e)) from e
    if txn.TYPE != entry.transaction_type:
        raise UnreadableLogEntryError(
            table_id,
            entry.transaction_number,
            f"it says it holds a {entry.transaction_type!r} transaction but its body is a {txn.TYPE!r}",
        )
    return txn


def transaction_from_json(data: Any, attachments: Mapping[str, bytes] | None = None) -> Transaction:
    """Build a transaction from its JSON object (as made by :func:`transaction_to_json`); ``attachments``
    as for :func:`decode_transaction`."""
    if not isinstance(data, dict):
        raise CodecError(f"a transaction must be a JSON object, got {_describe(data)}")
    if "version" not in data:
        raise CodecError("transaction has no 'version' field")
    version = data["version"]
    if type(version) is not int or version != FORMAT_VERSION:
        raise CodecError(
            f"unknown transaction format version {version!r}; this library reads {FORMAT_VERSION}"
        )
    fields = dict(data)
    del fields["version"]
    return _transaction_from_fields(_Object(fields, "transaction"), nested=False, attachments=attachments)


class _Object:
    """A JSON object being read: typed getters that name the path on error, then a check for leftovers."""

    def __init__(self, data: Any, where: str) -> None:
        if not isinstance(data, dict):
            raise CodecError(f"{where}: expected a JSON object, got {_describe(data)}")
        self.data = data
        self.where = where
        self.read: set[str] = set()

    def raw(self, name: str) -> Any:
        if name not in self.data:
            raise CodecError(f"{self.where}: missing field {name!r}")
        self.read.add(name)
        return self.data[name]

    def string(self, name: str) -> str:
        return _check_str(self.raw(name), f"{self.where}.{name}")

    def optional_string(self, name: str) -> str | None:
        value = self.raw(name)
        return None if value is None else _check_str(value, f"{self.where}.{name}")

    def integer(self, name: str) -> int:
        return _check_int(self.raw(name), f"{self.where}.{name}")

    def optional_integer(self, name: str) -> int | None:
        """An integer field that may be left out (see :func:`_optional`); None when it is."""
        return self.integer(name) if name in self.data else None

    def boolean(self, name: str) -> bool:
        return _check_bool(self.raw(name), f"{self.where}.{name}")

    def items(self, name: str, item: Callable[[Any, str], T]) -> list[T]:
        value = self.raw(name)
        path = f"{self.where}.{name}"
        if not isinstance(value, list):
            raise CodecError(f"{path}: expected a list, got {_describe(value)}")
        return [item(v, f"{path}[{i}]") for i, v in enumerate(value)]

    def child(self, name: str) -> _Object:
        return _Object(self.raw(name), f"{self.where}.{name}")

    def done(self) -> None:
        unexpected = set(self.data) - self.read
        if unexpected:
            raise CodecError(f"{self.where}: unexpected field(s) {sorted(unexpected)}")


def _describe(value: Any) -> str:
    kind = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}
    return f"{kind.get(type(value), type(value).__name__)} {json.dumps(value)[:60]}"


def _check_str(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise CodecError(f"{where}: expected a string, got {_describe(value)}")
    return value


def _check_optional_str(value: Any, where: str) -> str | None:
    return None if value is None else _check_str(value, where)


def _check_int(value: Any, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise CodecError(f"{where}: expected an integer, got {_describe(value)}")
    return value


def _check_bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise CodecError(f"{where}: expected true or false, got {_describe(value)}")
    return value


def _key_from_json(value: Any, where: str) -> Key:
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    if isinstance(value, dict) and set(value) == {"b64"} and isinstance(value["b64"], str):
        try:
            return base64.b64decode(value["b64"], validate=True)
        except binascii.Error as e:
            raise CodecError(f"{where}: invalid base64 in a bytes key: {value['b64']!r}") from e
    raise CodecError(f'{where}: a key must be an integer, a string or {{"b64": ...}}, got {_describe(value)}')


def _partition_from_json(data: Any, where: str) -> Partition:
    obj = _Object(data, where)
    ranges = obj.items("region", _range_from_json)
    partition = Partition(
        id=obj.string("id"),
        region=Region(tuple(ranges)),
        parent_id=obj.optional_string("parent_id"),
        child_ids=tuple(obj.items("child_ids", _check_str)),
        leaf=obj.boolean("leaf"),
        dimension=obj.integer("dimension"),
    )
    obj.done()
    return partition


def _range_from_json(data: Any, where: str) -> Range:
    obj = _Object(data, where)
    low = _key_from_json(obj.raw("min"), f"{where}.min")
    high_json = obj.raw("max")
    high = None if high_json is None else _key_from_json(high_json, f"{where}.max")
    obj.done()
    if high is not None and type(low) is not type(high):
        raise CodecError(f"{where}: min {low!r} and max {high!r} are of different types")
    try:
        return Range(low, high)
    except InvalidPartitionTreeError as e:
        raise CodecError(f"{where}: {e}") from e


def _reference_from_json(data: Any, where: str) -> FileReference:
    obj = _Object(data, where)
    ref = FileReference(
        filename=obj.string("filename"),
        partition_id=obj.string("partition_id"),
        number_of_rows=obj.integer("number_of_rows"),
        count_approximate=obj.boolean("count_approximate"),
        only_contains_data_for_this_partition=obj.boolean("only_contains_data_for_this_partition"),
        job_id=obj.optional_string("job_id"),
        last_update_time=obj.integer("last_update_time"),
    )
    obj.done()
    return ref


def _column(
    obj: _Object, name: str, check: Callable[[Any, str], T], allowed: frozenset[type], length: int
) -> list[T]:
    """A column of ``length`` values, each of a type in ``allowed`` (else ``check`` names the first bad one).

    Checking the set of the column's types runs in C; a bulk commit's columns hold 100,000s of values.
    """
    values = obj.raw(name)
    if not (type(values) is list and set(map(type, values)) <= allowed):
        values = obj.items(name, check)
    if len(values) != length:
        raise CodecError(f"{obj.where}.{name}: has {len(values)} values but there are {length} references")
    return values


def _filename_and_partition_id(value: Any, where: str) -> tuple[str, str]:
    if not isinstance(value, list) or len(value) != 2:
        raise CodecError(f"{where}: expected [filename, partition_id], got {_describe(value)}")
    return _check_str(value[0], f"{where}[0]"), _check_str(value[1], f"{where}[1]")


_INT: frozenset[type] = frozenset({int})
_BOOL: frozenset[type] = frozenset({bool})
_STR: frozenset[type] = frozenset({str})
_OPTIONAL_STR: frozenset[type] = frozenset({str, type(None)})


def _references_from_columns(obj: _Object) -> tuple[FileReference, ...]:
    pairs = obj.raw("filename_partition_id")
    filenames: list[str] = []
    partition_ids: list[str] = []
    fast = type(pairs) is list and set(map(type, pairs)) <= {list} and set(map(len, pairs)) <= {2}
    if fast and pairs:
        filenames, partition_ids = map(list, zip(*pairs, strict=True))
        fast = set(map(type, filenames)) <= _STR and set(map(type, partition_ids)) <= _STR
    if not fast:  # something of another shape or type: the checks name it
        files = obj.items("filename_partition_id", _filename_and_partition_id)
        filenames, partition_ids = [f for f, _ in files], [p for _, p in files]
    n = len(filenames)
    columns = (
        filenames,
        partition_ids,
        _column(obj, "number_of_rows", _check_int, _INT, n),
        _column(obj, "count_approximate", _check_bool, _BOOL, n),
        _column(obj, "only_contains_data_for_this_partition", _check_bool, _BOOL, n),
        _column(obj, "job_id", _check_optional_str, _OPTIONAL_STR, n),
        _column(obj, "last_update_time", _check_int, _INT, n),
    )
    obj.done()
    # tuple.__new__ straight from the columns: what FileReference._make does, without a Python call each.
    return tuple(map(tuple.__new__, repeat(FileReference), zip(*columns, strict=True)))


def _transaction_from_fields(
    obj: _Object, nested: bool, attachments: Mapping[str, bytes] | None = None
) -> Transaction:
    type_name = obj.string("type")
    obj.where = type_name if not nested else f"{obj.where} ({type_name})"
    txn: Transaction
    if type_name == InitialisePartitions.TYPE:
        txn = InitialisePartitions(tuple(obj.items("partitions", _partition_from_json)))
    elif type_name == SplitPartition.TYPE:
        parent = _partition_from_json(obj.raw("parent"), f"{obj.where}.parent")
        txn = SplitPartition(parent, tuple(obj.items("children", _partition_from_json)))
    elif type_name == ExtendPartitionTree.TYPE:
        updated = tuple(obj.items("updated_partitions", _partition_from_json))
        txn = ExtendPartitionTree(updated, tuple(obj.items("new_partitions", _partition_from_json)))
    elif type_name == AddFiles.TYPE:
        references = _references_from_columns(obj.child("references"))
        unreferenced = obj.items("unreferenced_files", _check_str) if "unreferenced_files" in obj.data else []
        txn = AddFiles(references, tuple(unreferenced))
    elif type_name == AssignJobIds.TYPE:
        requests = tuple(obj.items("requests", _assign_request_from_json))
        txn = AssignJobIds(requests, obj.optional_integer("take_over_claimed_before"))
    elif type_name == ReleaseClaims.TYPE:
        job_ids = tuple(obj.items("job_ids", _check_str))
        txn = ReleaseClaims(job_ids, obj.optional_integer("claimed_before"))
    elif type_name == ReplaceFileReferences.TYPE:
        txn = ReplaceFileReferences(tuple(obj.items("jobs", _replace_job_from_json)))
    elif type_name == SplitFileReferences.TYPE:
        txn = SplitFileReferences(tuple(obj.items("requests", _split_request_from_json)))
    elif type_name == DeleteFiles.TYPE:
        txn = DeleteFiles(tuple(obj.items("filenames", _check_str)))
    elif type_name == ClearFiles.TYPE:
        txn = ClearFiles()
    elif type_name == ClearTable.TYPE:
        txn = ClearTable()
    elif type_name == TransactionBatch.TYPE:
        if nested:
            raise CodecError(f"{obj.where}: batches cannot be nested")
        attached = attachments or {}
        txn = TransactionBatch(
            tuple(obj.items("items", lambda data, where: _batch_item_from_json(data, where, attached)))
        )
    else:
        raise CodecError(f"{obj.where}: unknown transaction type {type_name!r}")
    obj.done()
    return txn


def _assign_request_from_json(data: Any, where: str) -> AssignJobIdRequest:
    obj = _Object(data, where)
    request = AssignJobIdRequest(
        job_id=obj.string("job_id"),
        partition_id=obj.string("partition_id"),
        filenames=tuple(obj.items("filenames", _check_str)),
    )
    obj.done()
    return request


def _replace_job_from_json(data: Any, where: str) -> ReplaceFileReferencesJob:
    obj = _Object(data, where)
    job = ReplaceFileReferencesJob(
        job_id=obj.string("job_id"),
        partition_id=obj.string("partition_id"),
        input_files=tuple(obj.items("input_files", _check_str)),
        new_reference=_reference_from_json(obj.raw("new_reference"), f"{where}.new_reference"),
    )
    obj.done()
    return job


def _split_request_from_json(data: Any, where: str) -> SplitFileReferenceRequest:
    obj = _Object(data, where)
    request = SplitFileReferenceRequest(
        filename=obj.string("filename"),
        from_partition_id=obj.string("from_partition_id"),
        new_references=tuple(obj.items("new_references", _reference_from_json)),
    )
    obj.done()
    return request


def _batch_item_from_json(data: Any, where: str, attachments: Mapping[str, bytes]) -> BatchItem:
    obj = _Object(data, where)
    request_id = obj.string("request_id")
    if "body_key" not in obj.data:
        transaction = _transaction_from_fields(obj.child("transaction"), nested=True)
        obj.done()
        return BatchItem(request_id, transaction)
    key = obj.string("body_key")
    type_name = obj.string("type")
    obj.done()
    if key not in attachments:
        raise CodecError(f"{where}: request {request_id!r}'s body {key!r} is not attached to the entry")
    try:
        body = json.loads(attachments[key].decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise CodecError(f"{where}: request {request_id!r}'s body {key!r} is not JSON: {e}") from e
    if not isinstance(body, dict) or body.get("type") == TransactionBatch.TYPE:
        raise CodecError(
            f"{where}: request {request_id!r}'s body {key!r} must hold one transaction, not a batch"
        )
    transaction = transaction_from_json(body)
    if transaction.TYPE != type_name:
        raise CodecError(
            f"{where}: request {request_id!r} is said to be a {type_name!r} but its body {key!r} is a "
            f"{transaction.TYPE!r}"
        )
    return BatchItem(request_id, transaction)
