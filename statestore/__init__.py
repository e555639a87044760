"""statestore: the state of large sorted data-lake tables, kept as a transaction log with snapshots.

What a user needs is here, imported on first use (so ``import statestore`` stays light for the CLI, the
Lambda handlers and Spark's workers, which import one submodule each)::

    import statestore

    client = statestore.connect()  # $STATESTORE_RESOURCES / $STATESTORE_INSTANCE_ID, endpoints from env
    table = client.create_table("events", statestore.Schema.of({"id": "long"}), split_points=[1_000])
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# name -> the module that defines it
_EXPORTS: dict[str, str] = {
    "connect": "statestore.services.connect",
    "StateStoreClient": "statestore.services.client",
    "ResourceNames": "statestore.instance",
    "LocalRuntime": "statestore.local.runtime",
    "TableInfo": "statestore.store.tables",
    "TableState": "statestore.state.table_state",
    "Schema": "statestore.model.schema",
    "Field": "statestore.model.schema",
    "FileReference": "statestore.model.files",
    "TableFile": "statestore.model.files",
    "Partition": "statestore.model.partitions",
    "Range": "statestore.model.partitions",
    "Region": "statestore.model.partitions",
    **dict.fromkeys(
        (
            "Transaction",
            "InitialisePartitions",
            "SplitPartition",
            "ExtendPartitionTree",
            "AddFiles",
            "AssignJobIds",
            "AssignJobIdRequest",
            "ReleaseClaims",
            "ReplaceFileReferences",
            "ReplaceFileReferencesJob",
            "SplitFileReferences",
            "SplitFileReferenceRequest",
            "DeleteFiles",
            "ClearFiles",
            "ClearTable",
            "TransactionBatch",
        ),
        "statestore.transactions",
    ),
    **dict.fromkeys(
        (
            "StateStoreError",
            "ConnectionSettingsError",
            "TableNotFoundError",
            "TableAlreadyExistsError",
            "TransactionValidationError",
            "CommitConflictError",
            "CommitOutcomeUnknownError",
            "StoreUnavailableError",
            "UnreadableDataError",
            "QueryableViewOffError",
        ),
        "statestore.errors",
    ),
}

__all__ = [
    "AddFiles",
    "AssignJobIdRequest",
    "AssignJobIds",
    "ClearFiles",
    "ClearTable",
    "CommitConflictError",
    "CommitOutcomeUnknownError",
    "ConnectionSettingsError",
    "DeleteFiles",
    "ExtendPartitionTree",
    "Field",
    "FileReference",
    "InitialisePartitions",
    "LocalRuntime",
    "Partition",
    "QueryableViewOffError",
    "Range",
    "Region",
    "ReleaseClaims",
    "ReplaceFileReferences",
    "ReplaceFileReferencesJob",
    "ResourceNames",
    "Schema",
    "SplitFileReferenceRequest",
    "SplitFileReferences",
    "SplitPartition",
    "StateStoreClient",
    "StateStoreError",
    "StoreUnavailableError",
    "TableAlreadyExistsError",
    "TableFile",
    "TableInfo",
    "TableNotFoundError",
    "TableState",
    "Transaction",
    "TransactionBatch",
    "TransactionValidationError",
    "UnreadableDataError",
    "connect",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'statestore' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


if TYPE_CHECKING:
    from statestore.errors import (
        CommitConflictError,
        CommitOutcomeUnknownError,
        ConnectionSettingsError,
        QueryableViewOffError,
        StateStoreError,
        StoreUnavailableError,
        TableAlreadyExistsError,
        TableNotFoundError,
        TransactionValidationError,
        UnreadableDataError,
    )
    from statestore.instance import ResourceNames
    from statestore.local.runtime import LocalRuntime
    from statestore.model.files import FileReference, TableFile
    from statestore.model.partitions import Partition, Range, Region
    from statestore.model.schema import Field, Schema
    from statestore.services.client import StateStoreClient
    from statestore.services.connect import connect
    from statestore.state.table_state import TableState
    from statestore.store.tables import TableInfo
    from statestore.transactions import (
        AddFiles,
        AssignJobIdRequest,
        AssignJobIds,
        ClearFiles,
        ClearTable,
        DeleteFiles,
        ExtendPartitionTree,
        InitialisePartitions,
        ReleaseClaims,
        ReplaceFileReferences,
        ReplaceFileReferencesJob,
        SplitFileReferenceRequest,
        SplitFileReferences,
        SplitPartition,
        Transaction,
        TransactionBatch,
    )
