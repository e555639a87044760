"""What a log entry lists as the leaves it adds to (LogEntry.adds_to_leaves): a region query skips the entries
that list none of its leaves, so a list must hold every partition the entry adds to, and only leaves."""

from __future__ import annotations

from statestore.codec.parquet import state_from_parquet, state_to_parquet
from statestore.transactions import (
    LISTED_BYTES_AT_MOST,
    LISTED_PARTITIONS_AT_MOST,
    AddFiles,
    BatchItem,
    ClearFiles,
    DeleteFiles,
    SplitPartition,
    TransactionBatch,
    leaves_added_to,
)
from tests.builders import STRING_SCHEMA, commit, new_state, ref, tree

PARTITIONS = {p.id: p for p in tree(STRING_SCHEMA, tuple(f"k{i:03d}" for i in range(1, 300)))}
LEAVES = sorted(i for i, p in PARTITIONS.items() if p.leaf)
ABOVE = sorted(i for i, p in PARTITIONS.items() if not p.leaf)
LEAF_IDS = frozenset(LEAVES)  # what the entries are written on: the tree's leaves


def add(*partition_ids: str) -> AddFiles:
    return AddFiles(tuple(ref(f"f{n}", pid) for n, pid in enumerate(partition_ids)))


def test_an_add_to_leaves_lists_each_leaf_once() -> None:
    assert leaves_added_to(add(LEAVES[0], LEAVES[1], LEAVES[0]), LEAF_IDS) == {LEAVES[0], LEAVES[1]}


def test_a_batch_of_adds_lists_the_leaves_of_all_its_members() -> None:
    batch = TransactionBatch((BatchItem("r1", add(LEAVES[0])), BatchItem("r2", add(LEAVES[5]))))
    assert leaves_added_to(batch, LEAF_IDS) == {LEAVES[0], LEAVES[5]}


def test_an_add_to_a_partition_above_a_leaf_lists_nothing() -> None:
    assert leaves_added_to(add(LEAVES[0], ABOVE[0]), LEAF_IDS) == frozenset()


def test_an_add_to_too_many_leaves_or_too_long_ids_lists_nothing() -> None:
    assert len(LEAVES) > LISTED_PARTITIONS_AT_MOST
    assert leaves_added_to(add(*LEAVES[:LISTED_PARTITIONS_AT_MOST]), LEAF_IDS) == set(
        LEAVES[:LISTED_PARTITIONS_AT_MOST]
    )
    assert leaves_added_to(add(*LEAVES[: LISTED_PARTITIONS_AT_MOST + 1]), LEAF_IDS) == frozenset()
    long_ids = {f"{'x' * 1000}{n}" for n in range(LISTED_BYTES_AT_MOST // 1000 + 1)}  # leaves, too long
    assert leaves_added_to(add(*long_ids), long_ids) == frozenset()


def test_an_entry_that_may_change_anything_else_is_not_an_add() -> None:
    assert leaves_added_to(ClearFiles(), LEAF_IDS) is None
    assert leaves_added_to(DeleteFiles(("f",)), LEAF_IDS) is None
    mixed = TransactionBatch((BatchItem("r1", add(LEAVES[0])), BatchItem("r2", DeleteFiles(("f",)))))
    assert leaves_added_to(mixed, LEAF_IDS) is None


def test_a_states_leaf_test_agrees_with_its_partitions_over_its_snapshot_and_its_changes() -> None:
    """``TableState.is_leaf`` (what the log's list of leaves asks of the state, without making partitions)
    answers as ``partitions_by_id`` does: for the snapshot's partitions, one split since (no longer a leaf),
    its new children, and ids it does not hold."""
    written = new_state(STRING_SCHEMA, ["m"])
    state = state_from_parquet(STRING_SCHEMA, *state_to_parquet(written), written.transaction_number)
    parent, low, high = state.partition("p1").split(0, "c", "L", "H")
    commit(state, SplitPartition(parent, (low, high)))

    ids = [*state.partitions_by_id, "no-such-partition", ""]
    assert {"root", "p1", "p2", "L", "H"} <= set(ids)
    assert [state.is_leaf(i) for i in ids] == [
        i in state.partitions_by_id and state.partitions_by_id[i].leaf for i in ids
    ]
    assert leaves_added_to(add("L", "p2"), state.is_leaf) == {"L", "p2"}
    assert leaves_added_to(add("L", "p1"), state.is_leaf) == frozenset()  # p1 was split
