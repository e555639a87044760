"""The streaming merge gives exactly a stable sort of its inputs, for every key type, and refuses or sorts
inputs that are not sorted; files are read restricted to a region. No Spark session: pyarrow only."""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_client import file_io
from spark_client.columns import arrow_schema, field_type
from spark_client.data_store import DataStore
from spark_client.errors import DataFileMissingError
from spark_client.file_io import merge_files, read_batches
from spark_client.merge import (
    UnsortedInputError,
    first_descent,
    merge_sorted,
    read_runs,
    sort_into_runs,
)
from statestore.model.partitions import Range, Region
from statestore.model.schema import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, Schema

Draw = Callable[..., Any]

# Few distinct values (many duplicates) or the type's whole range, including its extremes.
KEY_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "int": st.integers(-2, 2) | st.integers(INT32_MIN, INT32_MAX) | st.sampled_from([INT32_MIN, INT32_MAX]),
    "long": st.integers(-2, 2) | st.integers(INT64_MIN, INT64_MAX) | st.sampled_from([INT64_MIN, INT64_MAX]),
    "string": st.text(alphabet=st.sampled_from(["a", "b", "\x00", "é", "€", "\U0001f600"]), max_size=3),
    "bytes": st.binary(max_size=3) | st.sampled_from([b"", b"\x00", b"\xff", b"\x7f\x80"]),
}
KEY_TYPES = sorted(KEY_VALUES)


def python_key(row: dict[str, Any], keys: Sequence[str]) -> tuple[tuple[Any, ...], ...]:
    """The merge's order in plain Python: each key ascending, nulls first."""
    return tuple((0,) if row[k] is None else (1, row[k]) for k in keys)


def stable_sort(table: pa.Table, keys: Sequence[str]) -> pa.Table:
    """The reference: one stable in-memory sort, nulls first."""
    return table.take(pc.sort_indices(table, sort_keys=[(k, "ascending", "at_start") for k in keys]))


@st.composite
def schemas(draw: Draw) -> Schema:
    row_keys = draw(st.lists(st.sampled_from(KEY_TYPES), min_size=1, max_size=2))
    sort_keys = draw(st.lists(st.sampled_from(KEY_TYPES), max_size=2))
    return Schema.of(
        [(f"r{i}", t) for i, t in enumerate(row_keys)],
        [(f"s{i}", t) for i, t in enumerate(sort_keys)],
        [("origin", "long")],
    )


def draw_rows(draw: Draw, schema: Schema, count: int, origin: int) -> list[dict[str, Any]]:
    """Rows with random keys (row keys never null, sort keys sometimes) and a unique ``origin``."""
    rows = []
    for i in range(count):
        row: dict[str, Any] = {f.name: draw(KEY_VALUES[f.type]) for f in schema.row_keys}
        for f in schema.sort_keys:
            row[f.name] = draw(st.none() | KEY_VALUES[f.type])
        row["origin"] = origin * 1_000 + i
        rows.append(row)
    return rows


def keys_of(schema: Schema) -> list[str]:
    return [f.name for f in schema.row_keys + schema.sort_keys]


@st.composite
def merge_cases(draw: Draw, max_inputs: int = 6) -> tuple[Schema, list[pa.Table], list[int]]:
    """A schema, sorted input tables (some empty) and a batch size per input."""
    schema = draw(schemas())
    target = arrow_schema(schema)
    tables = []
    for origin in range(draw(st.integers(0, max_inputs))):
        rows = draw_rows(draw, schema, draw(st.integers(0, 25)), origin)
        tables.append(stable_sort(pa.Table.from_pylist(rows, schema=target), keys_of(schema)))
    batch_sizes = [draw(st.integers(1, 8)) for _ in tables]
    return schema, tables, batch_sizes


def with_empty_batches(table: pa.Table, size: int) -> list[pa.RecordBatch]:
    """The table in batches of ``size`` rows, with an empty batch at the start and between each."""
    empty = table.schema.empty_table().to_batches() or [pa.RecordBatch.from_pylist([], schema=table.schema)]
    out = list(empty)
    for batch in table.to_batches(max_chunksize=size):
        out.extend([batch, *empty])
    return out


@settings(max_examples=300, deadline=None)
@given(merge_cases())
def test_the_merge_equals_a_stable_sort_of_the_inputs_concatenated(
    case: tuple[Schema, list[pa.Table], list[int]],
) -> None:
    schema, tables, batch_sizes = case
    target, keys = arrow_schema(schema), keys_of(schema)
    inputs = [with_empty_batches(t, size) for t, size in zip(tables, batch_sizes, strict=True)]

    chunks = list(merge_sorted(inputs, keys, target))

    merged = pa.Table.from_batches([b for c in chunks for b in c.to_batches()], schema=target)
    reference = stable_sort(pa.concat_tables(tables) if tables else target.empty_table(), keys)
    assert merged.to_pylist() == reference.to_pylist()
    # Independently of Arrow's sort: ordered by Python's comparison of the key values.
    order = [python_key(row, keys) for row in merged.to_pylist()]
    assert order == sorted(order)
    # Each chunk holds at most one batch per input.
    assert all(c.num_rows <= sum(batch_sizes) for c in chunks)


def test_many_inputs_with_one_key_value_keep_their_input_order() -> None:
    target = pa.schema([("k", pa.int64()), ("origin", pa.int64())])
    tables = [pa.table({"k": [1, 2, 2, 2, 3], "origin": [i] * 5}, schema=target) for i in range(50)]

    merged = pa.concat_tables(
        list(merge_sorted([t.to_batches(max_chunksize=2) for t in tables], ["k"], target))
    )

    assert merged.column("k").to_pylist() == [1] * 50 + [2] * 150 + [3] * 50
    assert merged.column("origin").to_pylist() == (
        list(range(50)) + [i for i in range(50) for _ in range(3)] + list(range(50))
    )


def test_an_input_out_of_order_inside_a_batch_is_named_with_its_row() -> None:
    target = pa.schema([("k", pa.int64()), ("s", pa.string())])
    good = pa.table({"k": [1, 2, 3], "s": ["a", "a", "a"]}, schema=target)
    bad = pa.table({"k": [1, 2, 2, 5], "s": ["a", "b", "a", "c"]}, schema=target)

    with pytest.raises(UnsortedInputError, match=r"input 1 is not sorted: its row 2 has key \(2, 'a'\)") as e:
        list(merge_sorted([good.to_batches(), bad.to_batches()], ["k", "s"], target))

    assert (e.value.input_index, e.value.row) == (1, 2)


def test_an_input_out_of_order_across_batches_is_found() -> None:
    target = pa.schema([("k", pa.int64())])
    bad = pa.table({"k": [1, 5, 6, 4, 7]}, schema=target)

    with pytest.raises(UnsortedInputError, match="its row 3 has key \\(4\\)") as e:
        list(merge_sorted([bad.to_batches(max_chunksize=3)], ["k"], target))

    assert e.value.row == 3


def test_nulls_sort_first_and_a_file_with_nulls_last_is_out_of_order() -> None:
    target = pa.schema([("k", pa.int64()), ("s", pa.int64())])
    nulls_first = pa.table({"k": [1, 1, 1], "s": [None, None, 3]}, schema=target)
    nulls_last = pa.table({"k": [1, 1], "s": [2, None]}, schema=target)

    assert first_descent([nulls_first.column(c).combine_chunks() for c in ("k", "s")]) is None
    assert first_descent([nulls_last.column(c).combine_chunks() for c in ("k", "s")]) == 0
    with pytest.raises(UnsortedInputError, match="its row 1 has key \\(1, null\\)"):
        list(merge_sorted([nulls_first.to_batches(), nulls_last.to_batches()], ["k", "s"], target))


def test_a_merge_needs_key_columns_of_its_schema() -> None:
    target = pa.schema([("k", pa.int64())])
    with pytest.raises(ValueError, match="at least one key column"):
        list(merge_sorted([], [], target))
    with pytest.raises(ValueError, match=r"key column\(s\) \['ts'\] are not in the schema \['k'\]"):
        list(merge_sorted([], ["k", "ts"], target))


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 5), max_size=120), st.integers(1, 9), st.integers(1, 20))
def test_sorting_into_runs_then_merging_them_is_a_stable_sort(
    values: list[int], run_rows: int, batch_rows: int
) -> None:
    target = pa.schema([("k", pa.int64()), ("origin", pa.int64())])
    table = pa.table({"k": values, "origin": list(range(len(values)))}, schema=target)
    with tempfile.TemporaryDirectory() as directory:
        runs = sort_into_runs(
            table.to_batches(max_chunksize=batch_rows),
            ["k"],
            target,
            directory,
            run_rows=run_rows,
            batch_rows=batch_rows,
            max_runs=2,
        )
        assert len(runs) <= 2  # longer runs were merged down
        assert sorted(os.listdir(directory)) == sorted(os.path.basename(r) for r in runs)
        merged = pa.concat_tables(
            [target.empty_table(), *merge_sorted(read_runs(runs, batch_rows), ["k"], target)]
        )

    assert merged.to_pylist() == stable_sort(table, ["k"]).to_pylist()


# --- files: region restriction, row groups, unsorted and missing files ----------------------------------


def region_of_values(draw: Draw, schema: Schema) -> Region:
    """A random region: per row key, a min (or the type's minimum) and a max above it (or unbounded)."""
    ranges = []
    for field in schema.row_keys:
        low, high = sorted([draw(KEY_VALUES[field.type]), draw(KEY_VALUES[field.type])])
        if draw(st.booleans()):
            low = field.key_type.minimum
        ranges.append(Range(low, high if high > low and draw(st.booleans()) else None))
    return Region(tuple(ranges))


def write_file(data: DataStore, filename: str, table: pa.Table, row_group_rows: int) -> None:
    data.ensure_parent(filename)
    pq.write_table(table, data.path(filename), row_group_size=row_group_rows)


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_merging_files_restricted_to_a_region_keeps_exactly_the_rows_inside_it(data: st.DataObject) -> None:
    schema, tables, batch_sizes = data.draw(merge_cases(max_inputs=4))
    region = region_of_values(data.draw, schema)
    target, keys = arrow_schema(schema), keys_of(schema)
    with tempfile.TemporaryDirectory() as directory:
        store = DataStore.local(directory)
        names = [f"in/{i}.parquet" for i in range(len(tables))]
        for name, table, size in zip(names, tables, batch_sizes, strict=True):
            write_file(store, name, table, row_group_rows=size)  # many row groups: some skipped

        rows = merge_files(store, schema, [(n, region) for n in names], "out/merged.parquet", batch_rows=3)

        merged = pq.read_table(store.path("out/merged.parquet")).to_pylist()
    inside = [
        row
        for table in tables
        for row in table.to_pylist()
        if region.contains([row[f.name] for f in schema.row_keys])
    ]
    reference = stable_sort(pa.Table.from_pylist(inside, schema=target), keys).to_pylist()
    assert rows == len(reference)
    assert merged == reference


def test_reading_a_region_skips_row_groups_outside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    schema = Schema.of({"key": "long"}, values={"v": "string"})
    store = DataStore.local(tmp_path)
    table = pa.table(
        {"key": list(range(100)), "v": [str(i) for i in range(100)]}, schema=arrow_schema(schema)
    )
    write_file(store, "f.parquet", table, row_group_rows=25)
    read_groups: list[list[int]] = []
    iter_batches = pq.ParquetFile.iter_batches

    def spy(self: pq.ParquetFile, *args: Any, **kwargs: Any) -> Any:
        read_groups.append(list(kwargs["row_groups"]))
        return iter_batches(self, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", spy)

    batches = list(read_batches(store, "f.parquet", schema, Region((Range(30, 45),))))

    assert pa.Table.from_batches(batches).column("key").to_pylist() == list(range(30, 45))
    assert read_groups == [[1]]  # rows 25-49 only
    assert list(read_batches(store, "f.parquet", schema, Region((Range(500, None),)))) == []


def test_a_file_sorted_with_nulls_last_is_sorted_on_disk_and_merged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Compaction before the streaming merge sorted nulls last; such a file is sorted again, not refused."""
    schema = Schema.of({"key": "long"}, sort_keys={"ts": "long"}, values={"origin": "long"})
    target = arrow_schema(schema)
    store = DataStore.local(tmp_path)
    ingested = pa.table({"key": [1, 1, 2], "ts": [None, 5, 1], "origin": [0, 1, 2]}, schema=target)
    old_output = pa.table(
        {"key": [1, 1, 2, 2], "ts": [3, None, 0, None], "origin": [3, 4, 5, 6]}, schema=target
    )
    write_file(store, "a.parquet", ingested, 10)
    write_file(store, "b.parquet", old_output, 1)

    with caplog.at_level(logging.WARNING, logger="spark_client.file_io"):
        rows = merge_files(store, schema, [("a.parquet", None), ("b.parquet", None)], "out.parquet")

    merged = pq.read_table(store.path("out.parquet"))
    assert rows == 7
    assert (
        merged.to_pylist() == stable_sort(pa.concat_tables([ingested, old_output]), ["key", "ts"]).to_pylist()
    )
    assert [r.getMessage() for r in caplog.records if "b.parquet" in r.getMessage()]
    assert not any("a.parquet" in r.getMessage() for r in caplog.records)


def test_a_missing_input_fails_the_merge_and_leaves_no_output(tmp_path: Path) -> None:
    schema = Schema.of({"key": "long"})
    store = DataStore.local(tmp_path)
    write_file(store, "a.parquet", pa.table({"key": [1, 2]}, schema=arrow_schema(schema)), 10)

    with pytest.raises(DataFileMissingError, match="gone.parquet is missing"):
        merge_files(store, schema, [("a.parquet", None), ("gone.parquet", None)], "out.parquet")

    assert not store.exists("out.parquet")


def test_batches_have_the_table_schema_whatever_the_file_types(tmp_path: Path) -> None:
    schema = Schema.of({"key": "int"}, values={"v": "string"})
    store = DataStore.local(tmp_path)
    write_file(store, "f.parquet", pa.table({"key": pa.array([2, 1], pa.int64()), "v": ["x", "y"]}), 10)

    (batch,) = read_batches(store, "f.parquet", schema, None)

    assert batch.schema == arrow_schema(schema) and batch.column("key").type == field_type("int")


def test_a_writer_of_wide_rows_cuts_row_groups_by_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(file_io, "WRITE_BATCH_BYTES", 10_000)
    schema = Schema.of({"key": "long"}, values={"v": "string"})
    store = DataStore.local(tmp_path)
    writer = file_io.DataFileWriter(store, "wide.parquet", arrow_schema(schema))
    for start in range(0, 1_000, 10):  # tables of 10 rows of about 1,000 bytes each
        writer.write_table(
            pa.table({"key": range(start, start + 10), "v": ["x" * 1_000] * 10}, schema=arrow_schema(schema))
        )
    writer.close()

    metadata = pq.ParquetFile(store.path("wide.parquet")).metadata
    assert writer.rows == metadata.num_rows == 1_000
    assert [metadata.row_group(g).num_rows for g in range(metadata.num_row_groups)] == [10] * 100
