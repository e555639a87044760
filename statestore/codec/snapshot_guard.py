"""What a table's guard needs, read from its snapshot's objects without decoding the state.

A guard (:mod:`statestore.state.file_guard`) keeps the 64-bit hash of every file name and the partitions'
ids. A snapshot of format version 3 stores each file's name hash in its files object (``name_hash``, the
files in ascending order of it), so the guard is that one column and the partitions object: for a
million-reference table ~10 ms of decoding and ~10 MB kept, where its state takes ~0.2 s and ~200 MB.

The column is trusted as a load trusts it: the object's CRC-32 was checked by the caller, each Parquet page
carries its own CRC (checked on reading), the hashes must ascend, and the first rows' hashes are computed
again from their names (a writer using another hash under the same name would fail there). A snapshot of
an older version, or of a hash this library does not know, holds none: :func:`guard_from_parquet` returns
None and the caller loads the state.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from statestore.codec.parquet import (
    FILES_SCHEMAS,
    SnapshotObjectError,
    files_last_update_time,
    open_checked,
    partitions_from_parquet,
    stores_name_index,
)
from statestore.errors import CodecError
from statestore.model.schema import Schema
from statestore.state.partition_columns import PartitionIds
from statestore.state.string_column import ALL_HASH_BITS, _hash_of, split_filename

# The rows whose name hash is computed again from the name.
_CHECKED_ROWS = 64


@dataclass(frozen=True)
class GuardColumns:
    """A snapshot's file-name hashes (one per file, ascending, of all bits), its partitions' ids, and the
    update time of the entry it is at."""

    hashes: np.ndarray
    partition_ids: PartitionIds
    last_update_time: int


def guard_from_parquet(schema: Schema, partitions_bytes: bytes, files_bytes: bytes) -> GuardColumns | None:
    """The guard's columns of a snapshot's two objects, or None where its files object stores no name
    hashes of this library's hash. Raises SnapshotObjectError naming the object that does not decode."""
    try:
        parquet, version = open_checked(files_bytes, schema, "files", FILES_SCHEMAS)
        if not stores_name_index(parquet.schema_arrow, version):
            return None
        hashes = _file_hashes(parquet.read(columns=["name_hash"]).column(0))
        _check_first_rows(
            next(parquet.iter_batches(_CHECKED_ROWS, columns=["directory", "base_name", "name_hash"]), None)
        )
        last_update_time = files_last_update_time(parquet.schema_arrow)
    except CodecError as e:
        raise SnapshotObjectError("files", str(e)) from e
    except (pa.ArrowException, OSError, ValueError) as e:
        raise SnapshotObjectError("files", f"the files snapshot is not a readable Parquet file: {e}") from e
    try:
        partitions = partitions_from_parquet(schema, partitions_bytes)
    except CodecError as e:
        raise SnapshotObjectError("partitions", str(e)) from e
    return GuardColumns(hashes, partitions.ids_index(), last_update_time)


def _file_hashes(column: pa.ChunkedArray) -> np.ndarray:
    """One hash per file from the rows' (a file's rows are adjacent, each holding its hash); they ascend."""
    if column.null_count:
        raise CodecError("the files snapshot has a row with no name hash")
    rows = column.to_numpy()
    if len(rows) and bool((rows[1:] < rows[:-1]).any()):
        raise CodecError("the files snapshot's name hashes are not in ascending order")
    first_of_file = np.empty(len(rows), np.bool_)
    first_of_file[:1] = True
    np.not_equal(rows[1:], rows[:-1], out=first_of_file[1:])
    return rows[first_of_file]


def _check_first_rows(batch: pa.RecordBatch | None) -> None:
    """Each row's stored hash is its name's (a snapshot written with another hash under the same name)."""
    if batch is None:
        return
    directories, base_names, stored = (batch.column(i).to_pylist() for i in range(3))
    for directory, base_name, hash_ in zip(directories, base_names, stored, strict=True):
        name = f"{directory}{base_name}"
        own_directory, own_base_name = split_filename(name)
        if _hash_of(own_directory, own_base_name.encode(), ALL_HASH_BITS) != hash_:
            raise CodecError(
                f"the files snapshot stores a name hash for file {name!r} that is not its name's"
            )
