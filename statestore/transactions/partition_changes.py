"""Transactions that change the partition tree: initialise it, split a leaf, extend it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from statestore.errors import (
    FilesPresentError,
    InvalidPartitionSplitError,
    InvalidPartitionTreeError,
    PartitionAlreadyExistsError,
    PartitionNotFoundError,
    PartitionNotLeafError,
)
from statestore.model.partition_tree import check_split, children_in_key_order, extend_tree, validate_tree
from statestore.model.partitions import Partition, check_partition_for_schema
from statestore.state.table_state import TableState
from statestore.transactions.base import Transaction


@dataclass(frozen=True)
class InitialisePartitions(Transaction):
    """Replace the partition tree. Only allowed while the table has no files."""

    TYPE: ClassVar[str] = "InitialisePartitions"
    partitions: tuple[Partition, ...]

    def most_added(self) -> tuple[int, int]:
        return 0, len(self.partitions)

    def validate(self, state: TableState) -> None:
        if state.has_files():
            raise FilesPresentError(len(state.files_by_name))
        validate_tree(state.schema, self.partitions)

    def apply(self, state: TableState, update_time: int) -> None:
        state.replace_partitions(children_in_key_order(self.partitions))


@dataclass(frozen=True)
class SplitPartition(Transaction):
    """Turn leaf ``parent`` (given as it is after the split) into two new leaf ``children``."""

    TYPE: ClassVar[str] = "SplitPartition"
    parent: Partition
    children: tuple[Partition, ...]

    def most_added(self) -> tuple[int, int]:
        return 0, len(self.children)

    def validate(self, state: TableState) -> None:
        for partition in (self.parent, *self.children):
            try:
                check_partition_for_schema(state.schema, partition)
            except InvalidPartitionTreeError as e:
                raise InvalidPartitionSplitError(str(e)) from e
        before = state.partitions_by_id.get(self.parent.id)
        if before is None:
            raise PartitionNotFoundError(self.parent.id)
        if not before.leaf:
            raise PartitionNotLeafError(self.parent.id)
        for child in self.children:
            if child.id in state.partitions_by_id:
                raise PartitionAlreadyExistsError(child.id)
        if before.parent_id != self.parent.parent_id:
            raise InvalidPartitionSplitError(f"the split must not change the parent of {self.parent.id!r}")
        check_split(before, self.parent, self.children)

    def apply(self, state: TableState, update_time: int) -> None:
        state.put_partitions(children_in_key_order((self.parent, *self.children)))


@dataclass(frozen=True)
class ExtendPartitionTree(Transaction):
    """Split several leaves, several levels deep, in one transaction (the tree a bulk import computes).

    ``updated_partitions`` are existing leaves as they are after being split; ``new_partitions`` are every
    partition below them, leaves or split again. Validated as a whole: one wrong node rejects it all.
    """

    TYPE: ClassVar[str] = "ExtendPartitionTree"
    updated_partitions: tuple[Partition, ...]
    new_partitions: tuple[Partition, ...]

    def most_added(self) -> tuple[int, int]:
        return 0, len(self.new_partitions)

    def validate(self, state: TableState) -> None:
        for partition in (*self.updated_partitions, *self.new_partitions):
            check_partition_for_schema(state.schema, partition)
        extend_tree(state.partitions_by_id, self.updated_partitions, self.new_partitions)

    def apply(self, state: TableState, update_time: int) -> None:
        state.put_partitions(children_in_key_order((*self.updated_partitions, *self.new_partitions)))
