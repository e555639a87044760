"""Parquet snapshots: any state reached by valid transactions loads back exactly; bad files are rejected."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statestore.codec.parquet import state_from_parquet, state_to_parquet, written_at
from statestore.errors import CodecError
from statestore.model.files import FileReference, TableFile
from statestore.model.schema import Schema
from statestore.state import file_columns
from statestore.state.file_columns import FileColumns
from statestore.state.table_state import TableState
from statestore.transactions import (
    AddFiles,
    AssignJobIdRequest,
    AssignJobIds,
    DeleteFiles,
    ReplaceFileReferences,
    ReplaceFileReferencesJob,
    SplitFileReferenceRequest,
    SplitFileReferences,
)
from tests.builders import (
    BYTES_SCHEMA,
    INT_SCHEMA,
    LONG_SCHEMA,
    STRING_SCHEMA,
    TWO_KEY_SCHEMA,
    commit,
    new_state,
)

SPLIT_POINTS: dict[Schema, list[Any]] = {
    INT_SCHEMA: [-(2**31) + 1, -5, 0, 7, 2**31 - 1],
    LONG_SCHEMA: [-(2**63) + 1, 0, 2**40, 2**63 - 1],
    STRING_SCHEMA: ["a", "m", "m\x00", "zz", "\U0001f600"],
    BYTES_SCHEMA: [b"\x00", b"\x00\x00", b"m", b"\xff\xff"],
    TWO_KEY_SCHEMA: ["b", "q"],
}


def round_trip(state: TableState) -> TableState:
    partitions_bytes, files_bytes = state_to_parquet(state)
    return state_from_parquet(state.schema, partitions_bytes, files_bytes, state.transaction_number)


def assert_same(loaded: TableState, state: TableState) -> None:
    assert loaded == state
    # Equality walks both states; a lookup goes through the name index the snapshot stored.
    for name, table_file in state.files_by_name.items():
        assert loaded.file(name) == table_file
    # TableState equality ignores the order of a file's references; the snapshot keeps it too.
    assert {n: f.references for n, f in loaded.files_by_name.items()} == {
        n: f.references for n, f in state.files_by_name.items()
    }


@st.composite
def states(draw: st.DrawFn) -> TableState:
    """A state reached by valid transactions: added, split, assigned, compacted and collected files."""
    schema = draw(st.sampled_from(list(SPLIT_POINTS)))
    points = sorted(draw(st.sets(st.sampled_from(SPLIT_POINTS[schema]), max_size=4)))
    state = new_state(schema, points)
    partitions = sorted(state.partitions_by_id)
    times = st.integers(min_value=0, max_value=2**62)
    counter = iter(range(10_000))
    for _ in range(draw(st.integers(min_value=0, max_value=12))):
        op = draw(st.sampled_from(["add", "add", "split", "assign", "compact", "collect"]))
        refs = [r for f in state.files_by_name.values() for r in f.references]
        if op == "add":
            new = []
            for _ in range(draw(st.integers(min_value=1, max_value=3))):
                name = f"tables/t/data/{next(counter)}.parquet"
                for pid in draw(st.sets(st.sampled_from(partitions), min_size=1, max_size=2)):
                    rows = draw(st.integers(min_value=0, max_value=2**63 - 1))
                    new.append(FileReference(name, pid, rows, draw(st.booleans()), draw(st.booleans())))
            commit(state, AddFiles(tuple(new)), draw(times))
        elif op == "split":
            movable = [
                r for r in refs if r.job_id is None and not state.partitions_by_id[r.partition_id].leaf
            ]
            if movable:
                ref = draw(st.sampled_from(movable))
                taken = {r.partition_id for r in state.files_by_name[ref.filename].references}
                children = [c for c in state.partitions_by_id[ref.partition_id].child_ids if c not in taken]
                if children:
                    new_refs = tuple(ref._replace(partition_id=c, number_of_rows=1) for c in children)
                    split = SplitFileReferenceRequest(ref.filename, ref.partition_id, new_refs)
                    commit(state, SplitFileReferences((split,)), draw(times))
        elif op == "assign":
            free = [r for r in refs if r.job_id is None]
            if free:
                ref = draw(st.sampled_from(free))
                request = AssignJobIdRequest(f"job-{next(counter)}", ref.partition_id, (ref.filename,))
                commit(state, AssignJobIds((request,)), draw(times))
        elif op == "compact":
            owned = [r for r in refs if r.job_id is not None]
            if owned:
                ref = draw(st.sampled_from(owned))
                output = FileReference(f"tables/t/data/{next(counter)}.parquet", ref.partition_id, 5)
                job = ReplaceFileReferencesJob(ref.job_id or "", ref.partition_id, (ref.filename,), output)
                commit(state, ReplaceFileReferences((job,)), draw(times))
        else:
            unreferenced = sorted(f.filename for f in state.files_by_name.values() if not f.references)
            if unreferenced:
                doomed = draw(st.sets(st.sampled_from(unreferenced), min_size=1))
                commit(state, DeleteFiles(tuple(sorted(doomed))), draw(times))
    return state


@settings(max_examples=150, deadline=None)
@given(states())
def test_any_state_reached_by_valid_transactions_round_trips_exactly(state: TableState) -> None:
    assert_same(round_trip(state), state)


@pytest.mark.parametrize("schema", list(SPLIT_POINTS), ids=lambda s: "+".join(f.type for f in s.row_keys))
def test_every_key_type_round_trips_with_extreme_split_points(schema: Schema) -> None:
    state = new_state(schema, SPLIT_POINTS[schema])
    loaded = round_trip(state)
    assert_same(loaded, state)
    assert any(p.region.ranges[0].max is None for p in loaded.partitions())  # unbounded max kept


def test_an_empty_table_round_trips() -> None:
    state = TableState(STRING_SCHEMA)
    assert_same(round_trip(state), state)


def test_files_with_no_references_job_ids_and_counts_round_trip() -> None:
    state = new_state(LONG_SCHEMA, [0])
    left, right = sorted(p.id for p in state.leaf_partitions())
    state.put_file(TableFile("gone-1.parquet", (), 1_700_000_000_000))
    state.put_file(
        TableFile(
            "split.parquet",
            (
                FileReference("split.parquet", right, 7, True, False, "job-1", 12),
                FileReference("split.parquet", left, 2**63 - 1, False, False, None, 13),
            ),
            14,
        )
    )
    state.put_file(TableFile("gone-2.parquet", (), 3))
    state.put_file(TableFile("one.parquet", (FileReference("one.parquet", left, 0),), 0))
    state.transaction_number = 42
    loaded = round_trip(state)
    assert_same(loaded, state)
    assert loaded.transaction_number == 42
    assert loaded.file("gone-1.parquet").references == ()
    # Loaded references name their partition by a code into one list of ids, not by a string each.
    assert loaded.file("one.parquet").references[0].partition_id == loaded.partition(left).id
    assert loaded.file_columns().partition_ids.count(left) == 1


def rewrite_metadata(data: bytes, key: bytes, value: bytes) -> bytes:
    table = pq.read_table(io.BytesIO(data))
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), key: value})
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


@pytest.mark.parametrize("which", ["partitions", "files"])
def test_an_unknown_format_version_is_rejected(which: str) -> None:
    state = new_state(STRING_SCHEMA, ["m"], [FileReference("a.parquet", "root", 1)])
    partitions_bytes, files_bytes = state_to_parquet(state)
    if which == "partitions":
        partitions_bytes = rewrite_metadata(partitions_bytes, b"statestore.snapshot.version", b"99")
    else:
        files_bytes = rewrite_metadata(files_bytes, b"statestore.snapshot.version", b"99")
    with pytest.raises(CodecError, match=f"the {which} snapshot has format version '99'"):
        state_from_parquet(STRING_SCHEMA, partitions_bytes, files_bytes, 2)


def test_each_snapshot_object_says_which_transaction_it_is_of() -> None:
    """What tells one snapshot's object from another's where a key may hold either (the latest copy)."""
    state = new_state(STRING_SCHEMA, ["m"], [FileReference("a.parquet", "root", 1)])
    state.transaction_number = 7
    partitions_bytes, files_bytes = state_to_parquet(state)

    assert written_at(partitions_bytes) == written_at(files_bytes) == 7
    assert state_from_parquet(STRING_SCHEMA, partitions_bytes, files_bytes, 7) == state
    unstamped = io.BytesIO()  # as written before the number was kept
    table = pq.read_table(io.BytesIO(files_bytes))
    metadata = {
        k: v for k, v in (table.schema.metadata or {}).items() if k != b"statestore.transaction_number"
    }
    pq.write_table(table.replace_schema_metadata(metadata), unstamped)
    assert written_at(unstamped.getvalue()) is None
    assert written_at(b"not parquet") is None and written_at(files_bytes[:-10]) is None


def test_files_that_are_not_snapshots_are_rejected() -> None:
    state = new_state(STRING_SCHEMA, ["m"])
    partitions_bytes, files_bytes = state_to_parquet(state)
    with pytest.raises(CodecError, match="not a readable Parquet file"):
        state_from_parquet(STRING_SCHEMA, b"not parquet", files_bytes, 1)
    with pytest.raises(CodecError, match="expected a partitions snapshot"):
        state_from_parquet(STRING_SCHEMA, files_bytes, partitions_bytes, 1)
    plain = io.BytesIO()
    pq.write_table(pq.read_table(io.BytesIO(files_bytes)).replace_schema_metadata(None), plain)
    with pytest.raises(CodecError, match="no statestore format version"):
        state_from_parquet(STRING_SCHEMA, partitions_bytes, plain.getvalue(), 1)


def test_a_snapshot_of_other_row_keys_is_rejected() -> None:
    state = new_state(STRING_SCHEMA, ["m"])
    partitions_bytes, files_bytes = state_to_parquet(state)
    with pytest.raises(CodecError, match="written for row keys \\['key:string'\\]"):
        state_from_parquet(LONG_SCHEMA, partitions_bytes, files_bytes, 1)


def test_a_key_of_the_wrong_type_cannot_be_written() -> None:
    state = new_state(LONG_SCHEMA, [5])
    state.schema = Schema.of({"key": "string"})  # the partitions still hold int keys
    with pytest.raises(CodecError, match="cannot write the state as Parquet"):
        state_to_parquet(state)


# --- the stored name index (format 3) -----------------------------------------------------------------


def a_state_with_files_of_every_shape() -> TableState:
    """300 files in two partitions, one of them in both, one bare name, one with no references."""
    state = new_state(STRING_SCHEMA, ["m"])
    references = [
        FileReference(f"tables/t/data/partition=p{i % 2 + 1}/f{i}.parquet", f"p{i % 2 + 1}", i + 1)
        for i in range(300)
    ]
    spanning = FileReference(references[0].filename, "p2", 5, only_contains_data_for_this_partition=False)
    commit(state, AddFiles((*references, spanning)))
    bare = FileReference("bare.parquet", "p1", 3)
    commit(state, AddFiles((bare,), unreferenced_files=("tables/t/gone.parquet",)))
    return state


def rewrite_files(data: bytes, change: Callable[[pa.Table], pa.Table]) -> bytes:
    table = pq.read_table(io.BytesIO(data))
    sink = io.BytesIO()
    pq.write_table(change(table), sink)
    return sink.getvalue()


def test_a_snapshot_stores_its_name_index_and_a_load_finds_every_name_without_hashing_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state = a_state_with_files_of_every_shape()
    partitions_bytes, files_bytes = state_to_parquet(state)
    monkeypatch.setattr(FileColumns, "_build_index", None)  # loading may not hash the names

    loaded = state_from_parquet(STRING_SCHEMA, partitions_bytes, files_bytes, state.transaction_number)

    assert_same(loaded, state)
    monkeypatch.undo()
    rebuilt = FileColumns.from_table_files(state.files_by_name.values())
    assert loaded.file_columns().hash_order()[0].tolist() == rebuilt.hash_order()[0].tolist()
    assert "tables/t/data/partition=p1/f1.parquet" not in loaded.files_by_name


def test_a_snapshot_written_while_hashes_are_narrowed_stores_them_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(file_columns, "HASH_MASK", 0x3)  # four hash values: names collide
    state = a_state_with_files_of_every_shape()
    snapshot = state_to_parquet(state)
    monkeypatch.undo()
    assert_same(state_from_parquet(STRING_SCHEMA, *snapshot, state.transaction_number), state)


def without_a_known_index(files_bytes: bytes, how: str) -> bytes:
    """The files object as a snapshot of format ``version 2`` (no hashes) or of ``another hash`` holds it."""
    if how == "version 2":
        return rewrite_files(
            files_bytes,
            lambda t: t.drop_columns(["name_hash"]).replace_schema_metadata(
                {**t.schema.metadata, b"statestore.snapshot.version": b"2"}
            ),
        )
    return rewrite_metadata(files_bytes, b"statestore.state.name_hash", b"2")


@pytest.mark.parametrize("how", ["version 2", "another hash"])
def test_a_snapshot_without_an_index_this_library_knows_loads_by_hashing_its_names(how: str) -> None:
    state = a_state_with_files_of_every_shape()
    partitions_bytes, files_bytes = state_to_parquet(state)
    files_bytes = without_a_known_index(files_bytes, how)

    assert_same(
        state_from_parquet(STRING_SCHEMA, partitions_bytes, files_bytes, state.transaction_number), state
    )


def replace_hashes(table: pa.Table, hashes: Callable[[np.ndarray], np.ndarray]) -> pa.Table:
    column = table.schema.get_field_index("name_hash")
    changed = hashes(table.column("name_hash").to_numpy().copy())
    return table.set_column(column, table.schema.field(column), pa.array(changed, pa.uint64()))


def other_names_hashes(hashes: np.ndarray) -> np.ndarray:
    """Hashes in order and one per file, but of other names."""
    starts = np.flatnonzero(np.r_[True, hashes[1:] != hashes[:-1]])
    return np.repeat(np.arange(len(starts), dtype=np.uint64) * 1000, np.diff([*starts, len(hashes)]))


def two_for_one_file(hashes: np.ndarray) -> np.ndarray:
    """The second row of the file with two references given a hash of its own."""
    second_row = int(np.flatnonzero(hashes[1:] == hashes[:-1])[0]) + 1
    hashes[second_row] += np.uint64(1)
    return hashes


@pytest.mark.parametrize(
    ("hashes", "match"),
    [
        (lambda h: h[::-1].copy(), "not one per file in ascending order"),
        (two_for_one_file, "not one per file in ascending order"),
        (other_names_hashes, "stores a name hash for file '.*' that is not its name's"),
    ],
    ids=["out-of-order", "two-for-one-file", "of-other-names"],
)
def test_a_snapshot_whose_stored_name_index_is_wrong_is_rejected(
    hashes: Callable[[np.ndarray], np.ndarray], match: str
) -> None:
    state = a_state_with_files_of_every_shape()
    partitions_bytes, files_bytes = state_to_parquet(state)
    files_bytes = rewrite_files(files_bytes, lambda t: replace_hashes(t, hashes))

    with pytest.raises(CodecError, match=match):
        state_from_parquet(STRING_SCHEMA, partitions_bytes, files_bytes, state.transaction_number)
