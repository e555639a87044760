"""The snapshot records' port: where each table's snapshots live, with an in-memory twin in ``memory.py``
and the DynamoDB adapter in ``statestore.adapters.aws.dynamodb_snapshots`` (the snapshots' objects are in
the :class:`~statestore.store.ports.BlobStore`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SnapshotInfo:
    """Where a table's snapshot at ``transaction_number`` lives, and when it was made (epoch ms).

    ``checksums``: the CRC-32 (8 hex digits) of the partitions and the files object as written, checked on
    every read (empty for snapshots recorded before they were kept). ``references`` and ``partitions``
    count the state's, a hint for the room a load makes first (:mod:`statestore.services.warm_cache`);
    None where not known (snapshots recorded before they were counted).
    """

    table_id: str
    transaction_number: int
    created_time: int
    partitions_key: str
    files_key: str
    checksums: tuple[str, ...] = ()
    references: int | None = None
    partitions: int | None = None


class SnapshotMetadataStore(ABC):
    """Records of snapshots and each table's "latest" pointer."""

    @abstractmethod
    def record(self, snapshot: SnapshotInfo) -> None:
        """Record ``snapshot`` and move the latest pointer to it, atomically.

        Raises StaleSnapshotError (and records nothing) if the latest is already at or past its number.
        """

    @abstractmethod
    def latest(self, table_id: str) -> SnapshotInfo | None:
        """The table's latest snapshot, or None."""

    @abstractmethod
    def list(self, table_id: str) -> list[SnapshotInfo]:
        """Every recorded snapshot of the table, oldest first."""

    @abstractmethod
    def delete(self, table_id: str, transaction_number: int) -> None:
        """Delete one snapshot's record. Raises StateStoreError if it is the latest."""

    @abstractmethod
    def delete_table(self, table_id: str) -> None:
        """Delete every record and the pointer of a table."""
