"""What an evicted table keeps (``statestore.state.file_guard``): it answers "held?" only when sure, and the
checks an ``AddFiles`` makes run against it as against the state."""

from __future__ import annotations

import gc
import tracemalloc

import numpy as np
import pyarrow as pa
import pytest

from statestore.codec.parquet import state_from_parquet, state_to_parquet
from statestore.errors import FileAlreadyExistsError, PartitionNotFoundError
from statestore.state.file_guard import GUARD_OVERHEAD_BYTES, FileGuard, GuardCannotTell
from statestore.state.partition_columns import PartitionIds
from statestore.state.table_state import TableState
from statestore.transactions import AddFiles, InitialisePartitions, SplitPartition, leaves_added_to
from tests.builders import INT_SCHEMA, ref, tree

PREFIX = "tables/t/data/"


def state_with(*names: str, from_snapshot: bool = True) -> TableState:
    state = TableState(INT_SCHEMA)
    InitialisePartitions(tuple(tree(INT_SCHEMA, [0]))).apply(state, 1)
    AddFiles(tuple(ref(f"{PREFIX}{n}", "root") for n in names)).apply(state, 2)
    state.transaction_number, state.last_update_time = 2, 2
    if from_snapshot:
        state = state_from_parquet(INT_SCHEMA, *state_to_parquet(state), 2)
        state.last_update_time = 2
    state.data_prefix = PREFIX
    return state


def guard_of(state: TableState) -> FileGuard:
    guard = state.file_guard(read_to_end_at=5)
    assert guard is not None
    return guard


@pytest.mark.parametrize("from_snapshot", [True, False])
def test_a_name_the_state_holds_cannot_be_told_and_one_it_does_not_is_not_held(from_snapshot: bool) -> None:
    state = state_with("a", "b", from_snapshot=from_snapshot)
    AddFiles((ref(f"{PREFIX}c", "root"),)).apply(state, 3)  # changed since the snapshot: the overlay
    guard = guard_of(state)

    assert guard.files_present([f"{PREFIX}new", 7]) == [False, False]
    for held in ("a", "b", "c"):
        with pytest.raises(GuardCannotTell):
            guard.files_present([f"{PREFIX}new", f"{PREFIX}{held}"])
    assert (guard.transaction_number, guard.last_update_time, guard.references) == (2, 2, 3)
    assert guard.read_to_end_at == 5
    assert guard.has_partition("root") and not guard.has_partition("nope")
    assert set(guard.leaf_ids) == {p.id for p in state.leaf_partitions()}


def test_the_checks_of_an_add_run_against_the_guard_as_against_the_state() -> None:
    state = state_with("a")
    guard = guard_of(state)
    new = AddFiles((ref(f"{PREFIX}new", "root"),))
    new.validate(state)
    new.validate(guard)
    for wrong, error in (
        (AddFiles((ref(f"{PREFIX}x", "nope"),)), PartitionNotFoundError),
        (AddFiles((ref("elsewhere/x", "root"),)), Exception),  # outside the data prefix
    ):
        with pytest.raises(error):
            wrong.validate(state)
        with pytest.raises(error):
            wrong.validate(guard)
    with pytest.raises(FileAlreadyExistsError):
        AddFiles((ref(f"{PREFIX}a", "root"),)).validate(state)
    with pytest.raises(GuardCannotTell):
        AddFiles((ref(f"{PREFIX}a", "root"),)).validate(guard)


def test_names_held_pending_and_added_count_as_maybe_held() -> None:
    guard = guard_of(state_with("a"))
    guard.hold_pending([f"{PREFIX}p"])
    with pytest.raises(GuardCannotTell):
        guard.files_present([f"{PREFIX}p"])
    guard.drop_pending()
    assert guard.files_present([f"{PREFIX}p"]) == [False]

    size = guard.estimated_bytes
    guard.hold_pending([f"{PREFIX}p", f"{PREFIX}q"])
    guard.keep_pending(2, 3, 9)  # appended: held from now on
    guard.drop_pending()
    with pytest.raises(GuardCannotTell):
        guard.files_present([f"{PREFIX}q"])
    assert (guard.transaction_number, guard.last_update_time, guard.references) == (3, 9, 3)
    assert guard.estimated_bytes > size


def test_another_writers_entry_is_taken_whole_or_not_at_all() -> None:
    guard = guard_of(state_with("a"))

    guard.take_entry([f"{PREFIX}x", f"{PREFIX}y"], 2, 3, 9)

    for held in ("x", "y"):
        with pytest.raises(GuardCannotTell):
            guard.files_present([f"{PREFIX}{held}"])
    assert (guard.transaction_number, guard.last_update_time, guard.references) == (3, 9, 3)
    with pytest.raises(ValueError, match="cannot take entry 5"):
        guard.take_entry([f"{PREFIX}z"], 1, 5, 10)  # not the next entry: one was skipped
    with pytest.raises(GuardCannotTell, match="not UTF-8"):
        guard.take_entry([f"{PREFIX}z", f"{PREFIX}\udc80"], 2, 4, 10)
    assert guard.files_present([f"{PREFIX}z"]) == [False]  # nothing of either was taken
    assert (guard.transaction_number, guard.references) == (3, 3)


def test_a_hash_collision_is_maybe_held_never_a_wrong_answer() -> None:
    every_hash = np.arange(4, dtype=np.uint64)  # of a two-bit hash: every name collides with one held
    guard = FileGuard(
        every_hash, 0b11, (), data_prefix=PREFIX, partition_ids=frozenset({"root"}), leaf_ids=frozenset(),
        transaction_number=1, last_update_time=1, references=4, read_to_end_at=0,
    )  # fmt: skip

    with pytest.raises(GuardCannotTell):
        guard.files_present([f"{PREFIX}other"])


def split_tree_state(*, split_since_snapshot: bool) -> TableState:
    """A snapshot-loaded state of a tree split at 0 and 100; and one of its leaves split at 50 since."""
    state = TableState(INT_SCHEMA)
    InitialisePartitions(tuple(tree(INT_SCHEMA, [0, 100]))).apply(state, 1)
    state.transaction_number = 1
    state = state_from_parquet(INT_SCHEMA, *state_to_parquet(state), 1)
    if split_since_snapshot:
        [middle] = [p for p in state.leaf_partitions() if p.region.ranges[0].min == 0]
        parent, left, right = middle.split(0, 50, "mid-L", "mid-R")
        SplitPartition(parent, (left, right)).apply(state, 2)
    state.data_prefix = PREFIX
    return state


@pytest.mark.parametrize("split_since_snapshot", [False, True])
def test_a_guard_knows_the_states_partitions_and_leaves_whether_or_not_they_changed_since_its_snapshot(
    split_since_snapshot: bool,
) -> None:
    state = split_tree_state(split_since_snapshot=split_since_snapshot)
    guard = guard_of(state)

    ids = set(state.partitions_by_id)
    leaves = {p.id for p in state.leaf_partitions()}
    assert len(guard.partition_ids) == len(ids) and set(guard.partition_ids) == ids
    assert len(guard.leaf_ids) == len(leaves) and set(guard.leaf_ids) == leaves
    for partition_id in [*ids, "nope", "mid-L", "mid-R"]:
        assert guard.has_partition(partition_id) == (partition_id in ids)
        assert (partition_id in guard.leaf_ids) == (partition_id in leaves)
    assert 7 not in guard.partition_ids and None not in guard.leaf_ids
    assert leaves_added_to(AddFiles((ref(f"{PREFIX}x", min(leaves)),)), guard.leaf_ids) == {min(leaves)}


def test_a_guard_shares_the_snapshots_index_of_partition_ids_where_they_did_not_change() -> None:
    unchanged = split_tree_state(split_since_snapshot=False)
    assert unchanged._partition_base is not None
    assert guard_of(unchanged).partition_ids is unchanged._partition_base.ids_index()  # nothing made
    changed = split_tree_state(split_since_snapshot=True)
    assert isinstance(guard_of(changed).partition_ids, frozenset)


def test_a_dropped_guard_and_the_index_it_shares_need_no_cycle_collection() -> None:
    # A Lambda container freezes its loaded states: a cycle among them would never be collected.
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection finds unreachable is kept in gc.garbage
    try:
        state = split_tree_state(split_since_snapshot=False)
        guard = guard_of(state)
        assert "nope" not in guard.leaf_ids and guard.has_partition(min(guard.leaf_ids))
        del state, guard
        gc.collect()
        assert not [o for o in gc.garbage if isinstance(o, (PartitionIds, FileGuard, TableState))]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


def test_a_state_with_an_undo_journal_open_keeps_no_guard() -> None:
    state = state_with("a")
    mark = state.begin_changes()
    assert state.file_guard(0) is None
    state.undo_changes(mark)
    assert state.file_guard(0) is not None


def test_a_guard_shares_its_states_search_over_the_name_hashes_rather_than_making_another() -> None:
    state = state_with("a", "b")
    assert state.files_present([f"{PREFIX}a"]) == [True]  # the state's own lookup makes its search

    guard = guard_of(state)
    assert guard._search is state._base.hash_search()
    assert guard.files_present([f"{PREFIX}c"]) == [False]
    with pytest.raises(GuardCannotTell):
        guard.files_present([f"{PREFIX}b"])


@pytest.mark.parametrize("from_snapshot", [True, False])
@pytest.mark.parametrize("leaves", [100, 3_000])
def test_a_guards_estimate_is_what_dropping_it_frees(from_snapshot: bool, leaves: int) -> None:
    """The warm cache keeps guards by their estimate: one that runs low lets the cache outgrow its budget,
    one that runs high keeps fewer than it could. Its partitions' ids are counted as they are kept: a
    snapshot's index of them (arrays, ~55 B a partition), or sets of their own (~190)."""
    tracemalloc.start()
    try:
        state = TableState(INT_SCHEMA)
        InitialisePartitions(tuple(tree(INT_SCHEMA, list(range(1, leaves))))).apply(state, 1)
        leaf_ids = sorted(p.id for p in state.leaf_partitions())
        names = [f"{PREFIX}{leaf_ids[i % leaves]}/{i:08d}.parquet" for i in range(10_000)]
        AddFiles(tuple(ref(name, leaf_ids[i % leaves]) for i, name in enumerate(names))).apply(state, 2)
        state.transaction_number = 2
        if from_snapshot:
            state = state_from_parquet(INT_SCHEMA, *state_to_parquet(state), 2)
        state.data_prefix = PREFIX
        guard = guard_of(state)
        assert isinstance(guard.partition_ids, PartitionIds) is from_snapshot
        estimate = guard.estimated_bytes
        del state, leaf_ids, names  # the guard alone holds what it keeps
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] + pa.total_allocated_bytes()
        del guard
        gc.collect()
        freed = held - tracemalloc.get_traced_memory()[0] - pa.total_allocated_bytes()
    finally:
        tracemalloc.stop()

    # Not low (by more than a few objects' worth), nor high by more than its fixed overhead and 5%.
    assert freed <= 1.01 * estimate and estimate <= 1.05 * freed + GUARD_OVERHEAD_BYTES, (freed, estimate)
