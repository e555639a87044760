"""The transactions that change a table's state: one small immutable class each.

``validate(state)`` raises a precise :class:`~statestore.errors.TransactionValidationError` and never changes
the state; ``apply(state, update_time)`` changes it, taking the update time (epoch ms) from the log entry so
every replica derives the same state. ``apply`` is only called after ``validate`` passed on that state, or
when following a log whose entries were validated before they were written.
"""

from __future__ import annotations

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

__all__ = [
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
    "request_ids_of",
]
