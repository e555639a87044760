"""A loaded snapshot's partitions, read one by one from their columns, equal the partitions written."""

from __future__ import annotations

import pytest

from statestore.codec.parquet import state_from_parquet, state_to_parquet
from statestore.model.partition_tree import partitions_from_split_points
from statestore.model.partitions import Partition
from statestore.model.schema import Key, Schema
from statestore.state import partition_columns
from statestore.state.table_state import TableState

CASES: list[tuple[str, list[Key]]] = [
    ("string", ["d", "k", "p\u00e9", "zz"]),
    ("long", [-(2**40), -5, 0, 7, 2**40]),
    ("int", [-100, 0, 3, 2**20]),
    ("bytes", [b"\x00\x01", b"b", b"k\xff", b"z"]),
]


def loaded(schema: Schema, partitions: list[Partition]) -> TableState:
    state = TableState(schema, {p.id: p for p in partitions}, {}, transaction_number=3)
    return state_from_parquet(schema, *state_to_parquet(state), 3)


@pytest.mark.parametrize(("key_type", "points"), CASES, ids=[c[0] for c in CASES])
def test_each_partition_read_alone_equals_the_one_written(key_type: str, points: list[Key]) -> None:
    schema = Schema.of({"key": key_type})
    written = partitions_from_split_points(schema, points)
    state = loaded(schema, written)
    # One by one, in an order unlike the file's, each on first sight (none made before).
    for partition in reversed(written):
        assert state.partition(partition.id) == partition
    assert sorted(state.partitions(), key=lambda p: p.id) == sorted(written, key=lambda p: p.id)


def test_two_row_keys_and_a_root_with_no_children() -> None:
    schema = Schema.of({"a": "string", "b": "long"})
    root_only = partitions_from_split_points(schema, [])
    assert loaded(schema, root_only).partition("root") == root_only[0]
    split_on_second = partitions_from_split_points(schema, [10, 20], dimension=1)
    state = loaded(schema, split_on_second)
    for partition in split_on_second:
        assert state.partition(partition.id) == partition
        assert state.partition(partition.id) is state.partition(partition.id)  # made once


def test_an_id_the_columns_do_not_hold_is_not_found_however_often_asked() -> None:
    schema = Schema.of({"key": "string"})
    state = loaded(schema, partitions_from_split_points(schema, ["m"]))
    for _ in range(3):
        assert "no-such-partition" not in state.partitions_by_id


def test_a_state_made_over_a_loaded_states_partitions_holds_the_same_tree_and_changes_apart() -> None:
    schema = Schema.of({"key": "string"})
    written = partitions_from_split_points(schema, ["g", "m", "t"])
    state = loaded(schema, written)
    leaf = next(p for p in written if p.leaf)  # the lowest: ["", "g")
    parent, low, high = leaf.split(0, "a", "low", "high")
    state.put_partitions([parent, low, high])  # a change over the loaded columns
    other = TableState(schema, state.partitions_by_id, {})
    assert dict(other.partitions_by_id) == dict(state.partitions_by_id)
    assert len(other.partitions_by_id) == len(written) + 2
    other.put_partitions([leaf])  # changing one state leaves the other as it was
    assert state.partition(leaf.id) == parent
    assert other.partition(leaf.id) == leaf


def test_partitions_made_from_the_columns_are_remembered_only_lately(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(partition_columns, "_RECENT_ROWS", 2)
    schema = Schema.of({"key": "long"})
    written = partitions_from_split_points(schema, [10, 20, 30, 40])
    state = loaded(schema, written)
    for _ in range(2):
        for partition in written:
            assert state.partition(partition.id) == partition
    columns = state._partition_base
    assert columns is not None and len(columns._made) <= 2 and len(columns._rows_by_id) <= 2
