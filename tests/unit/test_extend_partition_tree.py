"""ExtendPartitionTree splits several leaves, several levels deep, in one transaction, validated as a whole;
SplitPartition takes its two children in either order. Errors name the partition that is wrong."""

from __future__ import annotations

from dataclasses import replace

import pytest

from statestore.errors import (
    InvalidPartitionTreeError,
    PartitionAlreadyExistsError,
    PartitionNotFoundError,
    PartitionNotLeafError,
    TransactionValidationError,
)
from statestore.model.partitions import Partition, Range, Region
from statestore.state.table_state import TableState
from statestore.transactions import ExtendPartitionTree, SplitPartition
from tests.builders import STRING_SCHEMA, TWO_KEY_SCHEMA, commit, new_state, ref


def bulk_import_tree(state: TableState) -> ExtendPartitionTree:
    """p1 ["", "m") split at "f", its lower half again at "c"; p2 ["m", ...) split at "t"."""
    p1, p1_low, p1_high = state.partition("p1").split(0, "f", "A", "B")
    a, a_low, a_high = p1_low.split(0, "c", "A1", "A2")
    p2, p2_low, p2_high = state.partition("p2").split(0, "t", "C", "D")
    return ExtendPartitionTree((p1, p2), (a, p1_high, a_low, a_high, p2_low, p2_high))


def rejected(state: TableState, transaction: ExtendPartitionTree | SplitPartition) -> str:
    before = state.copy()
    with pytest.raises(TransactionValidationError) as caught:
        transaction.validate(state)
    assert state == before
    return str(caught.value)


def test_extend_partition_tree_splits_several_leaves_several_levels_deep_in_one_transaction() -> None:
    state = new_state(STRING_SCHEMA, ["m"], [ref("f.parquet", "p1")])

    commit(state, bulk_import_tree(state))

    assert sorted(p.id for p in state.leaf_partitions()) == ["A1", "A2", "B", "C", "D"]
    tree = state.partition_tree
    tree.validate()
    assert [tree.leaf_for_key([k]).id for k in ("a", "d", "g", "p", "z")] == ["A1", "A2", "B", "C", "D"]
    assert [p.id for p in tree.ancestors("A1")] == ["A", "p1", "root"]
    # References stay where they were until they are split down.
    assert state.file("f.parquet").references[0].partition_id == "p1"


def test_extend_partition_tree_accepts_children_in_either_order() -> None:
    state = new_state(STRING_SCHEMA, ["m"])
    txn = bulk_import_tree(state)
    swapped = tuple(replace(p, child_ids=p.child_ids[::-1]) for p in txn.updated_partitions)

    commit(state, ExtendPartitionTree(swapped, txn.new_partitions[::-1]))

    # Stored lower child first, whatever the order given.
    assert state.partition("p1").child_ids == ("A", "B")
    assert state.partition_tree.leaf_for_key(["a"]).id == "A1"


def test_extend_partition_tree_with_one_wrong_node_is_rejected_whole_naming_that_node() -> None:
    state = new_state(STRING_SCHEMA, ["m"])
    txn = bulk_import_tree(state)
    # A2 should start at "c", where A1 ends.
    new = tuple(
        replace(p, region=Region((Range("d", "f"),))) if p.id == "A2" else p for p in txn.new_partitions
    )

    message = rejected(state, ExtendPartitionTree(txn.updated_partitions, new))

    assert "'A2'" in message and "do not meet" in message


@pytest.mark.parametrize(
    ("change", "error", "named"),
    [
        (lambda t: (t.updated_partitions, ()), InvalidPartitionTreeError, "'p1' names child 'A'"),
        (
            lambda t: ((), t.new_partitions),
            InvalidPartitionTreeError,
            "at least one existing leaf",
        ),
        (
            lambda t: (t.updated_partitions[:1], t.new_partitions),
            InvalidPartitionTreeError,
            "new partition 'C' is not the child",
        ),
        (
            lambda t: ((replace(t.updated_partitions[0], id="nope"),), ()),
            PartitionNotFoundError,
            "'nope'",
        ),
        (
            lambda t: ((replace(t.updated_partitions[0], id="root"),), ()),
            PartitionNotLeafError,
            "'root'",
        ),
        (
            lambda t: (t.updated_partitions, (*t.new_partitions, replace(t.new_partitions[0], id="p2"))),
            PartitionAlreadyExistsError,
            "'p2'",
        ),
        (
            lambda t: (t.updated_partitions, (*t.new_partitions, t.new_partitions[1])),
            InvalidPartitionTreeError,
            "'B' is listed more than once",
        ),
        (
            lambda t: ((replace(t.updated_partitions[0], parent_id=None), t.updated_partitions[1]), ()),
            InvalidPartitionTreeError,
            "parent of 'p1'",
        ),
        (
            lambda t: (
                t.updated_partitions,
                tuple(replace(p, parent_id="p2") if p.id == "B" else p for p in t.new_partitions),
            ),
            InvalidPartitionTreeError,
            "child 'B' must name 'p1'",
        ),
        (
            lambda t: (
                t.updated_partitions,
                tuple(
                    replace(p, region=Region((Range("m", "s"),))) if p.id == "C" else p
                    for p in t.new_partitions
                ),
            ),
            InvalidPartitionTreeError,
            "'C'",
        ),
        (
            lambda t: (
                t.updated_partitions,
                tuple(
                    replace(p, region=Region((Range("a"), Range(0)))) if p.id == "D" else p
                    for p in t.new_partitions
                ),
            ),
            InvalidPartitionTreeError,
            "'D' has 2 range(s)",
        ),
    ],
    ids=[
        "child-missing",
        "nothing-split",
        "unplaced-new",
        "unknown",
        "not-leaf",
        "exists",
        "listed-twice",
        "moved",
        "wrong-parent",
        "gap",
        "wrong-range-count",
    ],
)
def test_extend_partition_tree_is_rejected_naming_the_wrong_partition(
    change: object, error: type[TransactionValidationError], named: str
) -> None:
    state = new_state(STRING_SCHEMA, ["m"])
    updated, new = change(bulk_import_tree(state))  # type: ignore[operator]

    before = state.copy()
    with pytest.raises(error) as caught:
        ExtendPartitionTree(updated, new).validate(state)
    assert named in str(caught.value)
    assert state == before


def test_split_partition_accepts_the_two_children_in_either_order() -> None:
    state = new_state(TWO_KEY_SCHEMA, ["m"])
    parent, low, high = state.partition("p1").split(1, 100, "L", "H")

    commit(state, SplitPartition(replace(parent, child_ids=("H", "L")), (high, low)))

    assert state.partition("p1").child_ids == ("L", "H")
    assert state.partition_tree.leaf_for_key(["a", 5]).id == "L"
    assert state.partition_tree.leaf_for_key(["a", 500]).id == "H"


def test_split_partition_errors_name_the_child_that_is_wrong() -> None:
    state = new_state(STRING_SCHEMA, ["m"])
    parent, low, high = state.partition("p2").split(0, "t", "L", "H")

    short_high = replace(high, region=Region((Range("t", "x"),)))
    assert "child 'H' ends at 'x'" in rejected(state, SplitPartition(parent, (short_high, low)))
    late_low = replace(low, region=Region((Range("n", "t"),)))
    assert "child 'L' starts at 'n'" in rejected(state, SplitPartition(parent, (high, late_low)))
    exists = replace(high, id="p1")
    assert "'p1'" in rejected(state, SplitPartition(replace(parent, child_ids=("L", "p1")), (low, exists)))


def test_the_partition_tree_invariants_hold_after_an_extension_of_a_two_key_table() -> None:
    state = new_state(TWO_KEY_SCHEMA, ["m"])
    p2, low, high = state.partition("p2").split(1, 0, "N", "P")
    high_split, high_low, high_high = high.split(0, "t", "P1", "P2")

    commit(state, ExtendPartitionTree((p2,), (low, high_split, high_low, high_high)))

    state.partition_tree.validate()
    assert state.partition_tree.leaf_for_key(["z", 5]).id == "P2"
    assert state.partition_tree.leaf_for_key(["n", 5]).id == "P1"
    assert state.partition_tree.leaf_for_key(["z", -5]).id == "N"
    assert isinstance(state.partition("P"), Partition) and not state.partition("P").leaf
