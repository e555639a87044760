"""Snapshots: the whole state of a table as Parquet in a blob store, recorded in snapshot metadata."""

from __future__ import annotations

from statestore import layout
from statestore.codec.parquet import state_from_parquet, state_to_parquet
from statestore.errors import SnapshotNotFoundError, StateStoreError
from statestore.ports import BlobStore, SnapshotInfo, SnapshotMetadataStore
from statestore.schema import Schema
from statestore.state import TableState


class SnapshotStore:
    """Writes and reads Parquet snapshots; the metadata store decides which one is the latest."""

    def __init__(self, metadata: SnapshotMetadataStore, blobs: BlobStore) -> None:
        self.metadata = metadata
        self.blobs = blobs

    def write(self, table_id: str, state: TableState, created_time: int) -> SnapshotInfo:
        """Write ``state`` and make it the latest snapshot.

        The Parquet objects go first, then the record. If recording fails, the objects are deleted only once
        it is known that the record did not land (it may have, with its response lost: a retry then finds
        the pointer already at this snapshot); while that cannot be told they are kept, as orphans at
        worst. The error is raised unless the record turns out to be in place.
        """
        partitions_key, files_key = layout.snapshot_keys(table_id, state.transaction_number)
        partitions_bytes, files_bytes = state_to_parquet(state)
        info = SnapshotInfo(table_id, state.transaction_number, created_time, partitions_key, files_key)
        written: list[str] = []
        try:
            self.blobs.put(partitions_key, partitions_bytes)
            written.append(partitions_key)
            self.blobs.put(files_key, files_bytes)
            written.append(files_key)
        except StateStoreError:
            self.blobs.delete(written)  # nothing refers to them yet
            raise
        try:
            self.metadata.record(info)
        except StateStoreError:
            try:
                landed = any(s.partitions_key == partitions_key for s in self.metadata.list(table_id))
            except StateStoreError:
                raise  # cannot tell: keep the objects
            if landed:
                return info
            self.blobs.delete(written)
            raise
        return info

    def read(self, info: SnapshotInfo, schema: Schema) -> TableState:
        try:
            partitions_bytes = self.blobs.get(info.partitions_key)
            files_bytes = self.blobs.get(info.files_key)
        except StateStoreError as e:
            raise SnapshotNotFoundError(
                f"snapshot {info.transaction_number} of table {info.table_id!r} is recorded but its data "
                f"is gone: {e}"
            ) from e
        return state_from_parquet(schema, partitions_bytes, files_bytes, info.transaction_number)

    def latest_at_or_before(self, table_id: str, transaction_number: int | None) -> SnapshotInfo | None:
        """The newest snapshot with number <= ``transaction_number`` (the latest one if None)."""
        if transaction_number is None:
            return self.metadata.latest(table_id)
        candidates = [s for s in self.metadata.list(table_id) if s.transaction_number <= transaction_number]
        return candidates[-1] if candidates else None

    def delete(self, info: SnapshotInfo) -> None:
        """Forget a (non-latest) snapshot, then delete its objects."""
        self.metadata.delete(info.table_id, info.transaction_number)
        self.blobs.delete([info.partitions_key, info.files_key])

    def delete_table(self, table_id: str) -> None:
        self.metadata.delete_table(table_id)
        self.blobs.delete(self.blobs.list(layout.snapshot_prefix(table_id)))
