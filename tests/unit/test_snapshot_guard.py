"""A table's guard read from its snapshot's objects (``statestore.codec.snapshot_guard``): the stored name
hashes and the partitions' ids, without decoding the state."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from statestore.codec.parquet import SnapshotObjectError, state_to_parquet
from statestore.codec.snapshot_guard import guard_from_parquet
from statestore.state import file_columns
from statestore.state.file_guard import FileGuard, GuardCannotTell
from statestore.state.string_column import ALL_HASH_BITS, _hash_of, split_filename
from statestore.state.table_state import TableState
from tests.builders import STRING_SCHEMA
from tests.unit.test_codec_parquet import (
    a_state_with_files_of_every_shape,
    other_names_hashes,
    replace_hashes,
    rewrite_files,
    without_a_known_index,
)


def name_hashes(state: TableState) -> list[int]:
    """Every file name's hash of all bits, ascending: what a guard must hold."""
    hashes = set()
    for name in state.files_by_name:
        directory, base_name = split_filename(name)
        hashes.add(_hash_of(directory, base_name.encode(), ALL_HASH_BITS))
    return sorted(hashes)


def guard_of(state: TableState) -> FileGuard:
    columns = guard_from_parquet(STRING_SCHEMA, *state_to_parquet(state))
    assert columns is not None
    ids = columns.partition_ids
    return FileGuard(
        columns.hashes, ALL_HASH_BITS, (), data_prefix=None, partition_ids=ids, leaf_ids=ids.leaves,
        transaction_number=state.transaction_number, last_update_time=columns.last_update_time,
        references=state.reference_count(), read_to_end_at=0,
    )  # fmt: skip


def test_the_guard_of_a_snapshot_holds_every_name_hash_and_partition_id_of_its_state() -> None:
    state = a_state_with_files_of_every_shape()
    state.last_update_time = 1_700_000_000_123  # of the entry the state is at

    columns = guard_from_parquet(STRING_SCHEMA, *state_to_parquet(state))

    assert columns is not None
    assert columns.hashes.tolist() == name_hashes(state)  # one per file, the one with no references too
    assert set(columns.partition_ids) == set(state.partitions_by_id)
    assert set(columns.partition_ids.leaves) == {p.id for p in state.leaf_partitions()}
    assert columns.last_update_time == 1_700_000_000_123


def test_a_guard_from_a_snapshot_cannot_tell_of_any_name_the_state_holds_and_clears_a_new_one() -> None:
    state = a_state_with_files_of_every_shape()
    guard = guard_of(state)

    for name in state.files_by_name:
        with pytest.raises(GuardCannotTell):
            guard.files_present([name])
    assert guard.files_present(["tables/t/data/partition=p1/new.parquet", "new-bare.parquet"]) == [
        False,
        False,
    ]


def test_a_snapshot_written_while_hashes_are_narrowed_gives_a_guard_of_whole_hashes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(file_columns, "HASH_MASK", 0x3)  # four hash values: names collide in the state
    state = a_state_with_files_of_every_shape()
    snapshot = state_to_parquet(state)
    monkeypatch.undo()

    columns = guard_from_parquet(STRING_SCHEMA, *snapshot)

    assert columns is not None and columns.hashes.tolist() == name_hashes(state)


@pytest.mark.parametrize("how", ["version 2", "another hash"])
def test_a_snapshot_that_stores_no_hashes_of_this_librarys_hash_gives_no_guard(how: str) -> None:
    state = a_state_with_files_of_every_shape()
    partitions_bytes, files_bytes = state_to_parquet(state)
    files_bytes = without_a_known_index(files_bytes, how)

    assert guard_from_parquet(STRING_SCHEMA, partitions_bytes, files_bytes) is None


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda h: h[::-1].copy(), "not in ascending order"),
        (other_names_hashes, "stores a name hash for file '.*' that is not its name's"),
    ],
    ids=["out-of-order", "of-other-names"],
)
def test_a_snapshot_whose_stored_hashes_are_wrong_gives_no_guard_but_an_error(
    change: Callable[[np.ndarray], np.ndarray], match: str
) -> None:
    state = a_state_with_files_of_every_shape()
    partitions_bytes, files_bytes = state_to_parquet(state)
    files_bytes = rewrite_files(files_bytes, lambda t: replace_hashes(t, change))

    with pytest.raises(SnapshotObjectError, match=match) as raised:
        guard_from_parquet(STRING_SCHEMA, partitions_bytes, files_bytes)
    assert raised.value.part == "files"


@pytest.mark.parametrize("part", ["partitions", "files"])
def test_an_object_that_does_not_decode_is_named(part: str) -> None:
    state = a_state_with_files_of_every_shape()
    objects = dict(zip(("partitions", "files"), state_to_parquet(state), strict=True))
    objects[part] = objects[part][: len(objects[part]) // 2]  # cut short

    with pytest.raises(SnapshotObjectError) as raised:
        guard_from_parquet(STRING_SCHEMA, objects["partitions"], objects["files"])
    assert raised.value.part == part


def test_the_objects_of_another_snapshot_kind_are_refused() -> None:
    partitions_bytes, files_bytes = state_to_parquet(a_state_with_files_of_every_shape())

    with pytest.raises(SnapshotObjectError, match="expected a files snapshot"):
        guard_from_parquet(STRING_SCHEMA, partitions_bytes, partitions_bytes)
    assert np.array_equal(  # the objects in their places still give the guard
        guard_from_parquet(STRING_SCHEMA, partitions_bytes, files_bytes).hashes,  # type: ignore[union-attr]
        np.array(name_hashes(a_state_with_files_of_every_shape()), np.uint64),
    )
