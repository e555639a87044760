"""A table's whole state as two Parquet files: one row per partition, one row per file reference.

Partitions: ``id``, ``parent_id``, ``child_ids``, ``leaf``, ``dimension`` and, for each row key field ``i``
in schema order, ``region_min_<i>`` / ``region_max_<i>`` typed from the field (int32, int64, string,
binary; a null max is unbounded).

Files: one row per reference; the rows of one file are adjacent. A file with no references (awaiting
garbage collection) has one row whose ``partition_id`` and reference columns are null.
``file_last_update_time`` is the file's own update time, repeated on each of its rows.

Both files carry the format version, their kind and the schema's JSON in Parquet key-value metadata;
reading an unknown version, the wrong kind or a snapshot of other row keys raises CodecError.

Loading a million references is dominated by building Python objects, so both directions work on whole
columns: columns are built by transposing tuples, references are made with ``FileReference._make`` over
zipped columns, and partition ids come back through the Parquet dictionary, as the very ``str`` objects the
partitions hold (one copy per partition, however many references name it).
"""

from __future__ import annotations

import gc
import io
import json
import operator
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from itertools import chain, repeat
from operator import itemgetter
from typing import Any, cast

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from statestore.errors import CodecError, InvalidPartitionTreeError
from statestore.files import FileReference, TableFile
from statestore.partitions import Partition, Range, Region
from statestore.schema import KeyType, Schema
from statestore.state import TableState

FORMAT_VERSION = 1

_VERSION_KEY = b"statestore.snapshot.version"
_KIND_KEY = b"statestore.snapshot.kind"
_SCHEMA_KEY = b"statestore.schema"

_KEY_ARROW_TYPES = {
    KeyType.INT: pa.int32(),
    KeyType.LONG: pa.int64(),
    KeyType.STRING: pa.string(),
    KeyType.BYTES: pa.binary(),
}

_FILES_SCHEMA = pa.schema(
    [
        # large_string: a big table's filenames can pass the 2 GB a string column's offsets can address.
        ("filename", pa.large_string()),
        ("partition_id", pa.dictionary(pa.int32(), pa.string())),
        ("number_of_rows", pa.int64()),
        ("count_approximate", pa.bool_()),
        ("only_contains_data_for_this_partition", pa.bool_()),
        ("job_id", pa.string()),
        ("last_update_time", pa.int64()),
        ("file_last_update_time", pa.int64()),
    ]
)


# Build the NamedTuples straight from row tuples: ``_make`` would add a Python call per row.
_new_file_reference = cast(Callable[[Iterable[Any]], FileReference], partial(tuple.__new__, FileReference))
_new_table_file = cast(Callable[[Iterable[Any]], TableFile], partial(tuple.__new__, TableFile))
_REFERENCES = itemgetter(1)  # TableFile.references
_LAST_UPDATE_TIME = itemgetter(2)  # TableFile.last_update_time


def state_to_parquet(state: TableState) -> tuple[bytes, bytes]:
    """Return ``(partitions_bytes, files_bytes)``: the whole state as two Parquet files.

    Raises CodecError if a value does not fit its column (e.g. a key of another type than its field's).
    """
    try:
        with _gc_paused():
            return _partitions_to_parquet(state), _files_to_parquet(state)
    except CodecError:
        raise
    except (pa.ArrowException, TypeError, ValueError, OverflowError) as e:
        raise CodecError(f"cannot write the state as Parquet: {e}") from e


def state_from_parquet(
    schema: Schema, partitions_bytes: bytes, files_bytes: bytes, transaction_number: int
) -> TableState:
    """Rebuild the state written by :func:`state_to_parquet`, as of ``transaction_number``.

    Raises CodecError if either file is not a statestore snapshot of this format version and row keys.
    """
    with _gc_paused(freeze_survivors=_freeze_loaded_states):
        partitions = _partitions_from_parquet(schema, partitions_bytes)
        partitions_by_id = {p.id: p for p in partitions}
        files_by_name = _files_from_parquet(schema, files_bytes, partitions_by_id)
        state = TableState(schema, partitions_by_id, files_by_name, transaction_number)
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


@contextmanager
def _gc_paused(freeze_survivors: bool = False) -> Iterator[None]:
    """Pause the cycle collector while millions of tuples are made: none of them can form a cycle, and
    the collector's passes over the growing heap otherwise double the time taken. The collector is put
    back as it was found (a pause, not a setting: nothing of the host's tuning outlives the call).

    With ``freeze_survivors`` (see :func:`freeze_loaded_states`), what the process holds is moved to the
    collector's permanent generation before it is switched back on.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if freeze_survivors:
            gc.freeze()
        if was_enabled:
            gc.enable()


# --- shared -------------------------------------------------------------------------------------------


def _metadata(schema: Schema, kind: str) -> dict[bytes, bytes]:
    return {
        _VERSION_KEY: str(FORMAT_VERSION).encode(),
        _KIND_KEY: kind.encode(),
        _SCHEMA_KEY: json.dumps(schema.to_json()).encode(),
    }


def _write(table: pa.Table, dictionary_columns: list[str]) -> bytes:
    sink = io.BytesIO()
    pq.write_table(
        table,
        sink,
        compression="zstd",
        compression_level=1,
        use_dictionary=dictionary_columns,
        # 100,000 partition ids are ~4 MB: keep them one dictionary rather than falling back to plain
        # pages, which the reader would have to hash back into a dictionary.
        dictionary_pagesize_limit=256 * 1024 * 1024,
        write_statistics=False,
    )
    return sink.getvalue()


def _read(data: bytes, schema: Schema, kind: str, expected: pa.Schema) -> pa.Table:
    try:
        table = pq.read_table(io.BytesIO(data))
    except (pa.ArrowException, OSError, ValueError) as e:
        raise CodecError(f"the {kind} snapshot is not a readable Parquet file: {e}") from e
    metadata = table.schema.metadata or {}
    version = metadata.get(_VERSION_KEY)
    if version is None:
        raise CodecError(
            f"the {kind} Parquet file has no statestore format version: not a statestore snapshot"
        )
    if version != str(FORMAT_VERSION).encode():
        raise CodecError(
            f"the {kind} snapshot has format version {version.decode(errors='replace')!r}; "
            f"this library reads version {FORMAT_VERSION}"
        )
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
    actual = table.schema.remove_metadata()
    if [(f.name, f.type) for f in actual] != [(f.name, f.type) for f in expected]:
        raise CodecError(
            f"the {kind} snapshot has columns {actual.to_string()!r}, expected {expected.to_string()!r}"
        )
    return table


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
    table = pa.Table.from_arrays(arrays, schema=arrow_schema.with_metadata(_metadata(schema, "partitions")))
    return _write(table, [])


def _partitions_from_parquet(schema: Schema, data: bytes) -> list[Partition]:
    table = _read(data, schema, "partitions", _partitions_schema(schema))
    ranges_by_dimension = []
    try:
        for i in range(len(schema.row_keys)):
            lows = table.column(f"region_min_{i}").to_pylist()
            highs = table.column(f"region_max_{i}").to_pylist()
            ranges_by_dimension.append(list(map(Range, lows, highs)))
    except InvalidPartitionTreeError as e:
        raise CodecError(f"the partitions snapshot holds an invalid region: {e}") from e
    regions = map(Region, zip(*ranges_by_dimension, strict=True))
    if table.column("id").null_count:
        raise CodecError("the partitions snapshot has a partition with no id")
    ids = table.column("id").to_pylist()
    return list(
        map(
            Partition,
            ids,
            regions,
            table.column("parent_id").to_pylist(),
            map(tuple, table.column("child_ids").to_pylist()),
            table.column("leaf").to_pylist(),
            table.column("dimension").to_pylist(),
        )
    )


# --- files --------------------------------------------------------------------------------------------


def _files_to_parquet(state: TableState) -> bytes:
    files = list(state.files_by_name.values())
    reference_lists = list(map(_REFERENCES, files))
    references = list(chain.from_iterable(reference_lists))
    # Each file's own update time, repeated on each of its rows.
    file_times = list(
        chain.from_iterable(map(repeat, map(_LAST_UPDATE_TIME, files), map(len, reference_lists)))
    )
    columns = [list(map(itemgetter(i), references)) for i in range(len(FileReference._fields))]
    # A file with no references gets one row after all the references, with null reference columns.
    unreferenced = [f for f in files if not f.references]
    columns[0] += [f.filename for f in unreferenced]
    for column in columns[1:]:
        column += [None] * len(unreferenced)
    file_times += [f.last_update_time for f in unreferenced]
    filenames, partition_ids, row_counts, approximate, whole_file, job_ids, times = columns

    # Dictionary-encode partition ids with a dict lookup (cheaper than Arrow hashing a million strings).
    # The dictionary holds every partition of the state; None (no reference) gives a null index.
    index = {partition_id: i for i, partition_id in enumerate(state.partitions_by_id)}
    indices = list(map(index.get, partition_ids))
    if indices.count(None) != len(unreferenced):
        # A reference names a partition the state does not hold: write it as it is all the same.
        for partition_id in partition_ids:
            if partition_id is not None:
                index.setdefault(partition_id, len(index))
        indices = list(map(index.get, partition_ids))
    arrays = [
        _array(filenames, pa.large_string(), "files", "filename"),
        pa.DictionaryArray.from_arrays(
            pa.array(indices, pa.int32()), _array(list(index), pa.string(), "files", "partition_id")
        ),
        _array(row_counts, pa.int64(), "files", "number_of_rows"),
        _array(approximate, pa.bool_(), "files", "count_approximate"),
        _array(whole_file, pa.bool_(), "files", "only_contains_data_for_this_partition"),
        _array(job_ids, pa.string(), "files", "job_id"),
        _array(times, pa.int64(), "files", "last_update_time"),
        _array(file_times, pa.int64(), "files", "file_last_update_time"),
    ]
    table = pa.Table.from_arrays(arrays, schema=_FILES_SCHEMA.with_metadata(_metadata(state.schema, "files")))
    return _write(table, ["partition_id", "job_id"])


def _partition_id_column(table: pa.Table, partitions_by_id: dict[str, Partition]) -> list[str | None]:
    """The partition id of every row, as the ``str`` objects the partitions hold where they match."""
    canonical: dict[str, str] = {p: p for p in partitions_by_id}
    out: list[str | None] = []
    dictionary: pa.Array | None = None
    values: list[str | None] = []
    for chunk in table.column("partition_id").chunks:
        # Chunks usually share one dictionary; map its strings to the partitions' own once.
        if dictionary is None or not chunk.dictionary.equals(dictionary):
            dictionary = chunk.dictionary
            values = [canonical.get(v, v) for v in dictionary.to_pylist()]
            values.append(None)  # where null indices (rows of files with no references) point
        indices = chunk.indices.fill_null(len(values) - 1).to_pylist()
        out += map(values.__getitem__, indices)
    return out


def _interned(values: list[Any]) -> list[Any]:
    # Update times and job ids take few distinct values: share one object per value.
    seen: dict[Any, Any] = {}
    return [seen.setdefault(v, v) for v in values]


def _files_from_parquet(
    schema: Schema, data: bytes, partitions_by_id: dict[str, Partition]
) -> dict[str, TableFile]:
    table = _read(data, schema, "files", _FILES_SCHEMA)
    n = table.num_rows
    if table.column("filename").null_count or table.column("file_last_update_time").null_count:
        raise CodecError("the files snapshot has a row with no filename or no file update time")
    filenames = table.column("filename").to_pylist()
    partition_ids = _partition_id_column(table, partitions_by_id)
    file_times = _interned(table.column("file_last_update_time").to_pylist())
    references: list[FileReference] = list(
        map(
            _new_file_reference,
            zip(
                filenames,
                partition_ids,
                table.column("number_of_rows").to_pylist(),
                table.column("count_approximate").to_pylist(),
                table.column("only_contains_data_for_this_partition").to_pylist(),
                _interned(table.column("job_id").to_pylist()),
                _interned(table.column("last_update_time").to_pylist()),
                strict=True,
            ),
        )
    )
    unreferenced_rows = pc.indices_nonzero(pc.is_null(table.column("partition_id"))).to_pylist()
    del table

    # Most files have exactly one reference: make every row a one-reference file, then fix the rest.
    per_row: list[tuple[FileReference, ...]] = list(zip(references))
    for i in unreferenced_rows:
        per_row[i] = ()
    table_files = map(_new_table_file, zip(filenames, per_row, file_times, strict=True))
    files_by_name = dict(zip(filenames, table_files, strict=True))
    if len(files_by_name) == n:
        return files_by_name

    # Some files have several rows: group each run of adjacent rows with the same filename.
    same_as_previous = map(operator.eq, filenames[1:], filenames)
    repeats = [i for i, same in enumerate(same_as_previous, 1) if same]
    runs: list[tuple[int, int]] = []
    for i in repeats:
        if runs and runs[-1][1] == i:
            runs[-1] = (runs[-1][0], i + 1)
        else:
            runs.append((i - 1, i + 1))
    for start, end in runs:
        name = filenames[start]
        rows = references[start:end]
        if any(r.partition_id is None for r in rows):
            raise CodecError(f"the files snapshot lists file {name!r} both with and without references")
        if any(t != file_times[start] for t in file_times[start:end]):
            raise CodecError(f"the files snapshot gives file {name!r} several update times")
        files_by_name[name] = TableFile(name, tuple(rows), file_times[start])
    if len(files_by_name) != n - len(repeats):
        raise CodecError("the files snapshot lists a file's rows apart from each other")
    return files_by_name
