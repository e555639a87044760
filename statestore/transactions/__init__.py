"""The transactions that change a table's state: one small immutable class each.

``validate(state)`` raises a precise :class:`~statestore.errors.TransactionValidationError` and never changes
the state; ``apply(state, update_time)`` changes it, taking the update time (epoch ms) from the log entry so
every replica derives the same state. ``apply`` is only called after ``validate`` passed on that state, or
when following a log whose entries were validated before they were written.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import cast

from statestore.transactions.base import Transaction
from statestore.transactions.batch import BatchItem, TransactionBatch, request_ids_of
from statestore.transactions.file_changes import (
    AddFiles,
    AssignJobIdRequest,
    AssignJobIds,
    ClearFiles,
    ClearTable,
    DeleteFiles,
    ReleaseClaims,
    ReplaceFileReferences,
    ReplaceFileReferencesJob,
    SplitFileReferenceRequest,
    SplitFileReferences,
)
from statestore.transactions.partition_changes import (
    ExtendPartitionTree,
    InitialisePartitions,
    SplitPartition,
)

TRANSACTION_TYPES: dict[str, type[Transaction]] = {
    cls.TYPE: cls
    for cls in (
        InitialisePartitions,
        SplitPartition,
        ExtendPartitionTree,
        AddFiles,
        AssignJobIds,
        ReleaseClaims,
        ReplaceFileReferences,
        SplitFileReferences,
        DeleteFiles,
        ClearFiles,
        ClearTable,
        TransactionBatch,
    )
}

# The most leaves a log entry lists as those it adds references to (LogEntry.adds_to_leaves), and the most
# bytes their ids take: they are stored with the entry (whose item DynamoDB caps at 400 KB, the body up to
# 300 KB), and a reader asks about a few (a region's leaves).
LISTED_PARTITIONS_AT_MOST = 100
LISTED_BYTES_AT_MOST = 16 * 1024


def only_adds(transaction: Transaction) -> list[AddFiles] | None:
    """The ``AddFiles`` a transaction that only adds files is made of (itself, or a batch's items), or None
    when it does anything else."""
    if isinstance(transaction, AddFiles):
        return [transaction]
    if isinstance(transaction, TransactionBatch) and all(
        isinstance(item.transaction, AddFiles) for item in transaction.items
    ):
        return [cast(AddFiles, item.transaction) for item in transaction.items]
    return None


def leaves_added_to(
    transaction: Transaction,
    leaves: Collection[str] | Callable[[str], bool],
) -> frozenset[str] | None:
    """For a transaction that only adds files (an ``AddFiles``, or a batch of nothing else): the ids of the
    partitions it adds references to when every one is a leaf of the tree it is written on (``leaves``: the
    ids of its leaves, or whether an id is a leaf's, ``TableState.is_leaf``), at most
    ``LISTED_PARTITIONS_AT_MOST`` taking at most ``LISTED_BYTES_AT_MOST`` bytes; else empty (the entry is
    not listed). None for every other transaction: it may change anything."""
    adds = only_adds(transaction)
    if adds is None:
        return None
    listed: set[str] = set()
    for add in adds:
        listed.update(add._reference_columns()[1])  # the partition ids, transposed once per transaction
        if len(listed) > LISTED_PARTITIONS_AT_MOST:
            return frozenset()
    if sum(len(i.encode()) for i in listed) > LISTED_BYTES_AT_MOST:
        return frozenset()
    is_leaf = leaves if callable(leaves) else leaves.__contains__
    if not all(is_leaf(i) for i in listed):
        return frozenset()
    return frozenset(listed)


__all__ = [
    "LISTED_BYTES_AT_MOST",
    "LISTED_PARTITIONS_AT_MOST",
    "TRANSACTION_TYPES",
    "AddFiles",
    "AssignJobIdRequest",
    "AssignJobIds",
    "BatchItem",
    "ClearFiles",
    "ClearTable",
    "DeleteFiles",
    "ExtendPartitionTree",
    "InitialisePartitions",
    "ReleaseClaims",
    "ReplaceFileReferences",
    "ReplaceFileReferencesJob",
    "SplitFileReferenceRequest",
    "SplitFileReferences",
    "SplitPartition",
    "Transaction",
    "TransactionBatch",
    "leaves_added_to",
    "only_adds",
    "request_ids_of",
]
