"""What a log entry lists as the leaves it adds to (LogEntry.adds_to_leaves): a region query skips the entries
that list none of its leaves, so a list must hold every partition the entry adds to, and only leaves."""

from __future__ import annotations

from statestore.transactions import (
    LISTED_BYTES_AT_MOST,
    LISTED_PARTITIONS_AT_MOST,
    AddFiles,
    BatchItem,
    ClearFiles,
    DeleteFiles,
    TransactionBatch,
    leaves_added_to,
)
from tests.builders import STRING_SCHEMA, ref, tree

PARTITIONS = {p.id: p for p in tree(STRING_SCHEMA, tuple(f"k{i:03d}" for i in range(1, 300)))}
LEAVES = sorted(i for i, p in PARTITIONS.items() if p.leaf)
ABOVE = sorted(i for i, p in PARTITIONS.items() if not p.leaf)


def add(*partition_ids: str) -> AddFiles:
    return AddFiles(tuple(ref(f"f{n}", pid) for n, pid in enumerate(partition_ids)))


def test_an_add_to_leaves_lists_each_leaf_once() -> None:
    assert leaves_added_to(add(LEAVES[0], LEAVES[1], LEAVES[0]), PARTITIONS) == {LEAVES[0], LEAVES[1]}


def test_a_batch_of_adds_lists_the_leaves_of_all_its_members() -> None:
    batch = TransactionBatch((BatchItem("r1", add(LEAVES[0])), BatchItem("r2", add(LEAVES[5]))))
    assert leaves_added_to(batch, PARTITIONS) == {LEAVES[0], LEAVES[5]}


def test_an_add_to_a_partition_above_a_leaf_lists_nothing() -> None:
    assert leaves_added_to(add(LEAVES[0], ABOVE[0]), PARTITIONS) == frozenset()


def test_an_add_to_too_many_leaves_or_too_long_ids_lists_nothing() -> None:
    assert len(LEAVES) > LISTED_PARTITIONS_AT_MOST
    assert leaves_added_to(add(*LEAVES[:LISTED_PARTITIONS_AT_MOST]), PARTITIONS) == set(
        LEAVES[:LISTED_PARTITIONS_AT_MOST]
    )
    assert leaves_added_to(add(*LEAVES[: LISTED_PARTITIONS_AT_MOST + 1]), PARTITIONS) == frozenset()
    long_ids = {f"{'x' * 1000}{n}": PARTITIONS[LEAVES[0]] for n in range(LISTED_BYTES_AT_MOST // 1000 + 1)}
    assert leaves_added_to(add(*long_ids), long_ids) == frozenset()


def test_an_entry_that_may_change_anything_else_is_not_an_add() -> None:
    assert leaves_added_to(ClearFiles(), PARTITIONS) is None
    assert leaves_added_to(DeleteFiles(("f",)), PARTITIONS) is None
    mixed = TransactionBatch((BatchItem("r1", add(LEAVES[0])), BatchItem("r2", DeleteFiles(("f",)))))
    assert leaves_added_to(mixed, PARTITIONS) is None
