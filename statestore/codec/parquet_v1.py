"""Snapshot files of format version 1, which held each file's name in one ``filename`` column: read by
converting them to version 2's columns (a directory and a base name). Nothing writes them any more."""

from __future__ import annotations

import pyarrow as pa

from statestore.errors import CodecError
from statestore.state.string_column import split_filename

FILES_SCHEMA_V1 = pa.schema(
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


def as_version_2(table: pa.Table, version_2: pa.Schema) -> pa.Table:
    """A version 1 files table (one ``filename`` column) in version 2's columns."""
    directories, base_names = [], []
    for filename in table.column("filename").to_pylist():
        if filename is None:
            raise CodecError("the files snapshot has a row with no filename or no file update time")
        directory, base_name = split_filename(filename)
        directories.append(directory)
        base_names.append(base_name)
    columns = {
        "directory": pa.array(directories, pa.string()).dictionary_encode(),
        "base_name": pa.array(base_names, pa.large_string()),
        "job_id": table.column("job_id").combine_chunks().dictionary_encode(),
    }
    arrays = [columns.get(f.name) or table.column(f.name).combine_chunks() for f in version_2]
    return pa.Table.from_arrays(arrays, schema=version_2)
