"""A data file is checked against the table's schema and row count before anyone commits it."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spark_client.data_store import DataStore
from spark_client.errors import InvalidDataFileError
from spark_client.file_io import DataFileWriter, check_data_file

SCHEMA = pa.schema([pa.field("key", pa.int64(), nullable=False), pa.field("value", pa.string())])


def test_a_file_written_by_the_writer_passes_with_its_exact_row_count(tmp_path: Path) -> None:
    data = DataStore.local(tmp_path)
    writer = DataFileWriter(data, "t/a.parquet", SCHEMA)
    writer.write_table(pa.table({"key": [1, 2, 3], "value": ["a", None, "c"]}, schema=SCHEMA))
    writer.close()
    assert writer.rows == 3
    check_data_file(data, "t/a.parquet", SCHEMA, 3)
    with pytest.raises(InvalidDataFileError, match="holds 3 rows, but 4 were written"):
        check_data_file(data, "t/a.parquet", SCHEMA, 4)


def test_a_file_of_another_schema_is_refused_naming_both_schemas(tmp_path: Path) -> None:
    data = DataStore.local(tmp_path)
    pq.write_table(pa.table({"key": [1], "value": [2.5]}), tmp_path / "other.parquet")
    with pytest.raises(InvalidDataFileError, match="(?s)has schema .*value: double.*not the table's"):
        check_data_file(data, "other.parquet", SCHEMA, 1)


def test_a_file_that_is_not_parquet_is_refused(tmp_path: Path) -> None:
    data = DataStore.local(tmp_path)
    (tmp_path / "junk.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(InvalidDataFileError, match="not a readable Parquet file"):
        check_data_file(data, "junk.parquet", SCHEMA, 0)
