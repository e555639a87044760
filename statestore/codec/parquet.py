"""A table's whole state as two Parquet files: one row per partition, one row per file reference.

Partitions: ``id``, ``parent_id``, ``child_ids``, ``leaf``, ``dimension`` and, for each row key field ``i``
in schema order, ``region_min_<i>`` / ``region_max_<i>`` typed from the field (int32, int64, string,
binary; a null max is unbounded).

Files: one row per reference; the rows of one file are adjacent. A file with no references (awaiting
garbage collection) has one row whose ``partition_id`` and reference columns are null.
``file_last_update_time`` is the file's own update time, repeated on each of its rows. Since format
version 2 a filename is two columns, its ``directory`` (dictionary-encoded: one per partition) and its
``base_name``, which is how the state holds it (:mod:`statestore.state.file_columns`); version 1 had one
``filename`` column, and is still read. Since version 3 the files come in ascending order of their name
hashes, each stored in ``name_hash`` (the hash named by the ``statestore.state.name_hash`` metadata key), so
the rows read are the state's name index: a load hashes no name. It checks the hashes are one per file and
ascending, and a sample of them against the names; each Parquet page carries a CRC, checked on reading.
Version 2, or a hash this library does not know, is read by hashing the names.

Both files carry the format version, their kind and the schema's JSON in Parquet key-value metadata;
reading an unknown version, the wrong kind or a snapshot of other row keys raises CodecError.

The state holds its files column-wise, so both directions work on whole columns with no Python object per
file or reference; partition ids come back through the Parquet dictionary, as the very ``str`` objects
the partitions hold.
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from statestore.codec.parquet_v1 import FILES_SCHEMA_V1 as _FILES_SCHEMA_V1
from statestore.codec.parquet_v1 import as_version_2
from statestore.errors import CodecError, InvalidPartitionTreeError
from statestore.model.schema import KeyType, Schema
from statestore.state.cycle_collector import collector_paused
from statestore.state.file_columns import FileColumns
from statestore.state.partition_columns import PartitionColumns
from statestore.state.string_column import ALL_HASH_BITS, one_array
from statestore.state.table_state import TableState

FORMAT_VERSION = 3
_READABLE_VERSIONS = (1, 2, 3)  # version 1: one ``filename`` column; version 2: no ``name_hash``

_VERSION_KEY = b"statestore.snapshot.version"
_KIND_KEY = b"statestore.snapshot.kind"
_SCHEMA_KEY = b"statestore.model.schema"
# Which hash ``name_hash`` holds (statestore.state.name_hash, combined as statestore.state.file_columns does):
# a reader that does not know it hashes the names itself.
_NAME_HASH_KEY = b"statestore.state.name_hash"
NAME_HASH_VERSION = b"1"
# The update time of the log entry the snapshot is at (epoch ms): where the next entry's time starts from,
# so log times never run backwards. Absent from snapshots written before it was kept.
_LAST_UPDATE_TIME_KEY = b"statestore.last_update_time"
# The transaction the state is at, in both objects (see written_at). Absent from those written before.
_TRANSACTION_KEY = b"statestore.transaction_number"

_KEY_ARROW_TYPES = {
    KeyType.INT: pa.int32(),
    KeyType.LONG: pa.int64(),
    KeyType.STRING: pa.string(),
    KeyType.BYTES: pa.binary(),
}

_FILES_SCHEMA = pa.schema(
    [
        ("directory", pa.dictionary(pa.int32(), pa.string())),
        ("base_name", pa.large_string()),
        ("partition_id", pa.dictionary(pa.int32(), pa.string())),
        ("number_of_rows", pa.int64()),
        ("count_approximate", pa.bool_()),
        ("only_contains_data_for_this_partition", pa.bool_()),
        ("job_id", pa.dictionary(pa.int32(), pa.string())),
        ("last_update_time", pa.int64()),
        ("file_last_update_time", pa.int64()),
    ]
)
_FILES_SCHEMA_V3 = _FILES_SCHEMA.append(pa.field("name_hash", pa.uint64()))
# The files object's columns in each version this library reads.
FILES_SCHEMAS = {1: _FILES_SCHEMA_V1, 2: _FILES_SCHEMA, 3: _FILES_SCHEMA_V3}


def state_to_parquet(state: TableState) -> tuple[bytes, bytes]:
    """Return ``(partitions_bytes, files_bytes)``: the whole state as two Parquet files.

    Raises CodecError if a value does not fit its column (e.g. a key of another type than its field's).
    """
    try:
        return _partitions_to_parquet(state), _files_to_parquet(state)
    except CodecError:
        raise
    except (pa.ArrowException, TypeError, ValueError, OverflowError) as e:
        raise CodecError(f"cannot write the state as Parquet: {e}") from e


class SnapshotObjectError(CodecError):
    """One of a snapshot's two objects (``part``: ``partitions`` or ``files``) does not decode."""

    def __init__(self, part: str, message: str) -> None:
        super().__init__(message)
        self.part = part


def state_from_parquet(
    schema: Schema, partitions_bytes: bytes, files_bytes: bytes, transaction_number: int
) -> TableState:
    """Rebuild the state written by :func:`state_to_parquet`, as of ``transaction_number``.

    Raises SnapshotObjectError (a CodecError) naming the object that is not a statestore snapshot of this
    format version and row keys.
    """
    with collector_paused(freeze_survivors=_freeze_loaded_states):
        try:
            partition_columns = partitions_from_parquet(schema, partitions_bytes)
        except CodecError as e:
            raise SnapshotObjectError("partitions", str(e)) from e
        try:
            file_columns, last_update_time = _files_from_parquet(schema, files_bytes)
        except CodecError as e:
            raise SnapshotObjectError("files", str(e)) from e
        state = TableState(
            schema,
            None,
            None,
            transaction_number,
            file_columns=file_columns,
            partition_columns=partition_columns,
        )
        state.last_update_time = last_update_time
    return state


# Off in a library: only a process that is ours turns it on (see freeze_loaded_states).
_freeze_loaded_states = False


def freeze_loaded_states(enabled: bool = True) -> None:
    """Whether each state loaded from now on is moved to the cycle collector's permanent generation
    (``gc.freeze``) — for a process that is ours, where it pays: a Lambda container that keeps a loaded
    state warm for its lifetime (``lambdas/_runtime.py`` turns it on).

    A loaded state is long-lived, acyclic and freed by reference counting alone; without the freeze the
    first full collection after a load rescans millions of tuples (~0.6 s for a million references) and
    every later one walks them again. But ``gc.freeze`` freezes *everything* the process holds at that
    moment, not only the state, so a library must not call it inside someone else's process (a Spark
    driver, a user's application): off by default.
    """
    global _freeze_loaded_states
    _freeze_loaded_states = enabled


# --- shared -------------------------------------------------------------------------------------------


def _metadata(state: TableState, kind: str) -> dict[bytes, bytes]:
    return {
        _VERSION_KEY: str(FORMAT_VERSION).encode(),
        _KIND_KEY: kind.encode(),
        _SCHEMA_KEY: json.dumps(state.schema.to_json()).encode(),
        _TRANSACTION_KEY: str(state.transaction_number).encode(),
    }


def written_at(data: bytes) -> int | None:
    """The transaction a snapshot object written by :func:`state_to_parquet` says its state is at, from its
    footer alone; None if it does not say (written before it was kept) or is no Parquet file. What tells
    one snapshot's object from another's where a key may hold either (the table's latest copy)."""
    try:
        metadata = pq.read_schema(pa.BufferReader(data)).metadata or {}
    except (pa.ArrowException, OSError, ValueError):
        return None
    value = metadata.get(_TRANSACTION_KEY, b"")
    return int(value) if value.isdigit() else None


def _write(table: pa.Table, dictionary_columns: list[str], encodings: dict[str, str] | None = None) -> bytes:
    sink = io.BytesIO()
    pq.write_table(
        table,
        sink,
        compression="zstd",
        compression_level=1,
        use_dictionary=dictionary_columns,
        column_encoding=encodings,
        # One row group, so each column reads back as one array (several would be joined: a copy).
        row_group_size=max(1, table.num_rows),
        # 100,000 partition ids are ~4 MB: keep them one dictionary rather than falling back to plain
        # pages, which the reader would have to hash back into a dictionary.
        dictionary_pagesize_limit=256 * 1024 * 1024,
        write_statistics=False,
        # Each page's CRC is checked on reading: a load trusts the stored name hashes.
        write_page_checksum=True,
    )
    return sink.getvalue()


def _read(
    data: bytes, schema: Schema, kind: str, expected_by_version: dict[int, pa.Schema]
) -> tuple[pa.Table, int]:
    """The table in ``data`` and its format version, checked against the columns that version has."""
    parquet, version = open_checked(data, schema, kind, expected_by_version)
    try:  # one chunk per row group (read_table would cut them into batches the state must join: a copy)
        return parquet.read(), version
    except (pa.ArrowException, OSError, ValueError) as e:
        raise CodecError(f"the {kind} snapshot is not a readable Parquet file: {e}") from e


def open_checked(
    data: bytes, schema: Schema, kind: str, expected_by_version: dict[int, pa.Schema]
) -> tuple[pq.ParquetFile, int]:
    """The Parquet file in ``data`` (its footer read, no column yet) and its format version, its metadata
    checked: a statestore snapshot object of ``kind``, of a version this library reads, written for the
    row keys of ``schema``, with the columns that version has. Raises CodecError saying which is not so."""
    try:  # in place: through io.BytesIO each read copies, which costs a 1M load ~1.5x the page faults
        parquet = pq.ParquetFile(pa.BufferReader(data), page_checksum_verification=True)
        arrow_schema = parquet.schema_arrow
    except (pa.ArrowException, OSError, ValueError) as e:
        raise CodecError(f"the {kind} snapshot is not a readable Parquet file: {e}") from e
    metadata = arrow_schema.metadata or {}
    version = metadata.get(_VERSION_KEY)
    if version is None:
        raise CodecError(
            f"the {kind} Parquet file has no statestore format version: not a statestore snapshot"
        )
    readable = {str(v).encode(): v for v in _READABLE_VERSIONS}
    if version not in readable:
        raise CodecError(
            f"the {kind} snapshot has format version {version.decode(errors='replace')!r}; "
            f"this library reads versions {', '.join(map(str, _READABLE_VERSIONS))}"
        )
    expected = expected_by_version[readable[version]]
    if metadata.get(_KIND_KEY) != kind.encode():
        raise CodecError(f"expected a {kind} snapshot, got {metadata.get(_KIND_KEY)!r}")
    try:
        written_schema = Schema.from_json(metadata.get(_SCHEMA_KEY, b"null"))
    except ValueError as e:
        raise CodecError(f"the {kind} snapshot's schema metadata is unreadable: {e}") from e
    if written_schema.row_keys != schema.row_keys:
        raise CodecError(
            f"the {kind} snapshot was written for row keys {_row_keys(written_schema)}, "
            f"not this table's {_row_keys(schema)}"
        )
    actual = arrow_schema.remove_metadata()
    if [(f.name, f.type) for f in actual] != [(f.name, f.type) for f in expected]:
        raise CodecError(
            f"the {kind} snapshot has columns {actual.to_string()!r}, expected {expected.to_string()!r}"
        )
    return parquet, readable[version]


def _array(values: Sequence[Any], arrow_type: pa.DataType, kind: str, column: str) -> pa.Array:
    """One column as Arrow, or a CodecError naming the column (Arrow's own message names no column)."""
    try:
        return pa.array(values, arrow_type)
    except (pa.ArrowException, TypeError, ValueError, OverflowError) as e:
        raise CodecError(
            f"cannot write the state as Parquet: {kind} column {column!r} ({arrow_type}): {e}"
        ) from e


def _row_keys(schema: Schema) -> list[str]:
    return [f"{f.name}:{f.type}" for f in schema.row_keys]


# --- partitions ---------------------------------------------------------------------------------------


def _partitions_schema(schema: Schema) -> pa.Schema:
    fields = [
        ("id", pa.string()),
        ("parent_id", pa.string()),
        ("child_ids", pa.list_(pa.string())),
        ("leaf", pa.bool_()),
        ("dimension", pa.int32()),
    ]
    for i, key_type in enumerate(schema.row_key_types):
        fields += [
            (f"region_min_{i}", _KEY_ARROW_TYPES[key_type]),
            (f"region_max_{i}", _KEY_ARROW_TYPES[key_type]),
        ]
    return pa.schema(fields)


def _partitions_to_parquet(state: TableState) -> bytes:
    schema = state.schema
    partitions = list(state.partitions_by_id.values())
    columns: list[Sequence[Any]] = [
        [p.id for p in partitions],
        [p.parent_id for p in partitions],
        [p.child_ids for p in partitions],
        [p.leaf for p in partitions],
        [p.dimension for p in partitions],
    ]
    for dimension in range(len(schema.row_keys)):
        ranges = [p.region.ranges[dimension] for p in partitions]
        columns += [[r.min for r in ranges], [r.max for r in ranges]]
    arrow_schema = _partitions_schema(schema)
    arrays = [_array(c, f.type, "partitions", f.name) for c, f in zip(columns, arrow_schema, strict=True)]
    table = pa.Table.from_arrays(arrays, schema=arrow_schema.with_metadata(_metadata(state, "partitions")))
    return _write(table, [])


def partitions_from_parquet(schema: Schema, data: bytes) -> PartitionColumns:
    expected = _partitions_schema(schema)
    table, _ = _read(data, schema, "partitions", dict.fromkeys(_READABLE_VERSIONS, expected))
    if table.column("id").null_count:
        raise CodecError("the partitions snapshot has a partition with no id")
    columns = PartitionColumns(table.replace_schema_metadata(None), len(schema.row_keys))
    try:
        columns.check_regions()
    except InvalidPartitionTreeError as e:
        raise CodecError(f"the partitions snapshot holds an invalid region: {e}") from e
    return columns


# --- files --------------------------------------------------------------------------------------------


def _files_to_parquet(state: TableState) -> bytes:
    columns = state.file_columns()
    # Files in the order of their name hashes, each hash stored: the loaded rows are the name index.
    hashes, order = columns.hash_order()
    counts = np.diff(columns.reference_starts)[order]
    # A file with no references gets one row, with null reference columns.
    rows_per_file = np.maximum(counts, 1)
    file_of_row = np.repeat(order, rows_per_file)
    is_reference = np.repeat(counts > 0, rows_per_file)
    no_reference = ~is_reference
    reference_of_row = np.zeros(len(file_of_row), np.int64)
    reference_of_row[is_reference] = columns.reference_rows_of(order)

    def per_row(values: np.ndarray) -> np.ndarray:
        if not len(values):
            return np.zeros(len(file_of_row), values.dtype)
        return values[reference_of_row]

    job_codes = per_row(columns.job_codes)
    arrays = [
        pa.DictionaryArray.from_arrays(
            pa.array(columns.directory_codes[file_of_row], pa.int32()), columns.directories
        ),
        columns.base_names.take(pa.array(file_of_row)),
        pa.DictionaryArray.from_arrays(
            pa.array(per_row(columns.partition_codes), pa.int32(), mask=no_reference),
            _array(columns.partition_ids, pa.string(), "files", "partition_id"),
        ),
        pa.array(per_row(columns.number_of_rows), pa.int64(), mask=no_reference),
        pa.array(per_row(columns.count_approximate), pa.bool_(), mask=no_reference),
        pa.array(per_row(columns.whole_file), pa.bool_(), mask=no_reference),
        pa.DictionaryArray.from_arrays(
            pa.array(job_codes, pa.int32(), mask=no_reference | (job_codes < 0)),
            _array(columns.job_ids, pa.string(), "files", "job_id"),
        ),
        pa.array(per_row(columns.reference_times), pa.int64(), mask=no_reference),
        pa.array(columns.file_times[file_of_row], pa.int64()),
        pa.array(np.repeat(hashes, rows_per_file), pa.uint64()),
    ]
    metadata = {**_metadata(state, "files"), _NAME_HASH_KEY: NAME_HASH_VERSION}
    metadata[_LAST_UPDATE_TIME_KEY] = str(state.last_update_time).encode()
    table = pa.Table.from_arrays(arrays, schema=_FILES_SCHEMA_V3.with_metadata(metadata))
    # Ascending hashes are stored as their differences: ~20% smaller than the random 64-bit values.
    return _write(table, ["directory", "partition_id", "job_id"], {"name_hash": "DELTA_BINARY_PACKED"})


def _files_from_parquet(schema: Schema, data: bytes) -> tuple[FileColumns, int]:
    """The file columns, and the snapshot's last update time (0 where it was not kept)."""
    table, version = _read(data, schema, "files", FILES_SCHEMAS)
    last_update_time = files_last_update_time(table.schema)
    has_index = stores_name_index(table.schema, version)
    if version == 1:
        table = as_version_2(table, _FILES_SCHEMA)
    # Each column is taken out of the table as it is converted, so the table no longer holds it: what the
    # read made is freed column by column, not all at the end (a 5M-reference load peaks ~0.3 GB lower).
    table = table.unify_dictionaries()
    columns_left: dict[str, Any] = {}
    for name in table.column_names:
        columns_left[name] = one_array(table.column(name))  # several row groups: joined, a copy
        table = table.drop_columns([name])
    del table
    n = len(columns_left["base_name"])
    directory = columns_left.pop("directory")
    base_names = columns_left.pop("base_name")
    file_times = columns_left.pop("file_last_update_time")
    if directory.null_count or base_names.null_count or file_times.null_count:
        raise CodecError("the files snapshot has a row with no filename or no file update time")
    directory_codes = directory.indices.to_numpy()
    file_times = file_times.to_numpy()

    # A file's rows are adjacent: a new file starts where the name differs from the row before.
    new_file = np.ones(n, np.bool_)
    if n > 1:
        same_base = pc.equal(base_names.slice(1), base_names.slice(0, n - 1)).to_numpy(zero_copy_only=False)
        new_file[1:] = (directory_codes[1:] != directory_codes[:-1]) | ~same_base
        del same_base
    file_starts = np.flatnonzero(new_file)
    del new_file
    rows_per_file = np.diff(np.append(file_starts, n))
    partition = columns_left.pop("partition_id")
    is_reference = partition.is_valid().to_numpy(zero_copy_only=False)
    if n:
        mixed = (np.add.reduceat(~is_reference, file_starts) > 0) & (rows_per_file > 1)
        if mixed.any():
            name = _filename_at(directory, base_names, int(file_starts[np.argmax(mixed)]))
            raise CodecError(f"the files snapshot lists file {name!r} both with and without references")
        differs = file_times != np.repeat(file_times[file_starts], rows_per_file)
        if differs.any():
            name = _filename_at(directory, base_names, int(np.argmax(differs)))
            raise CodecError(f"the files snapshot gives file {name!r} several update times")
        del mixed, differs
    whole_file = n == len(file_starts)  # every file has one row: no need to copy its columns
    if not whole_file:
        directory_codes = directory_codes[file_starts]
        base_names = base_names.take(pa.array(file_starts))
        file_times = file_times[file_starts]
    stored_hashes = columns_left.pop("name_hash", None)
    index = None if not has_index else _stored_index(stored_hashes, file_starts, rows_per_file)
    del stored_hashes
    reference_starts = np.empty(len(file_starts) + 1, np.int64)
    reference_starts[-1] = np.count_nonzero(is_reference)
    reference_starts[:-1] = (np.cumsum(is_reference) - is_reference)[file_starts]
    reference_rows = None if bool(is_reference.all()) else np.flatnonzero(is_reference)
    del is_reference, file_starts, rows_per_file

    def only_references(values: np.ndarray) -> np.ndarray:
        return values if reference_rows is None else values[reference_rows]

    def reference_column(name: str, fill: Any) -> np.ndarray:
        column = columns_left.pop(name)
        return only_references(column.fill_null(fill).to_numpy(zero_copy_only=False))

    job = columns_left.pop("job_id")
    columns = FileColumns(
        directory.dictionary,
        directory_codes,
        base_names,
        file_times,
        reference_starts,
        partition.dictionary.to_pylist(),
        only_references(partition.indices.fill_null(-1).to_numpy()),
        reference_column("number_of_rows", 0),
        reference_column("count_approximate", False),
        reference_column("only_contains_data_for_this_partition", False),
        job.dictionary.to_pylist(),
        only_references(job.indices.fill_null(-1).to_numpy()),
        reference_column("last_update_time", 0),
        index,
    )
    if columns.duplicate_filename() is not None:
        raise CodecError("the files snapshot lists a file's rows apart from each other")
    misfiled = None if index is None else columns.misfiled_name()
    if misfiled is not None:
        raise CodecError(
            f"the files snapshot stores a name hash for file {misfiled!r} that is not its name's"
        )
    return columns, last_update_time


def files_last_update_time(files_schema: pa.Schema) -> int:
    """The snapshot's last update time, from its files object's metadata (0 where it was not kept)."""
    value = (files_schema.metadata or {}).get(_LAST_UPDATE_TIME_KEY, b"0")
    try:
        time = int(value)
    except ValueError:
        raise CodecError(f"the files snapshot's last update time {value!r} is not a number") from None
    if not 0 <= time < 2**63:
        raise CodecError(f"the files snapshot's last update time {time} is out of range")
    return time


def stores_name_index(files_schema: pa.Schema, version: int) -> bool:
    """Whether the files object holds each file's name hash, of the hash this library uses."""
    return version == 3 and (files_schema.metadata or {}).get(_NAME_HASH_KEY) == NAME_HASH_VERSION


def _stored_index(
    stored_hashes: pa.Array | None, file_starts: np.ndarray, rows_per_file: np.ndarray
) -> tuple[np.ndarray, np.ndarray, int]:
    """The name index a version 3 snapshot stores: one hash per file, repeated on each of its rows, the
    files in ascending order of them (so the index's rows are the files in the order read)."""
    if stored_hashes is None or stored_hashes.null_count:
        raise CodecError("the files snapshot has a row with no name hash")
    row_hashes = stored_hashes.to_numpy()
    file_hashes = row_hashes[file_starts]
    if bool((row_hashes != np.repeat(file_hashes, rows_per_file)).any()) or bool(
        (file_hashes[1:] < file_hashes[:-1]).any()
    ):
        raise CodecError("the files snapshot's name hashes are not one per file in ascending order")
    return file_hashes, np.arange(len(file_starts), dtype=np.int32), ALL_HASH_BITS


def _filename_at(directory: pa.DictionaryArray, base_names: pa.Array, row: int) -> str:
    return f"{directory[row].as_py()}{base_names[row].as_py()}"
