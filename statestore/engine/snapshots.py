"""Snapshots: the whole state of a table as Parquet in a blob store, recorded in snapshot metadata.

Each object's CRC-32 is recorded with the snapshot, after the objects were read back and found to hold
exactly what was written; every read checks it, so a truncated or altered object is found as such (and a
load falls back to an older snapshot, see :meth:`TransactionLogStateStore.load`), never read as a state.
"""

from __future__ import annotations

import zlib

from statestore.codec.parquet import SnapshotObjectError, state_from_parquet, state_to_parquet
from statestore.engine import overlap
from statestore.errors import (
    BlobNotFoundError,
    SnapshotNotFoundError,
    StateStoreError,
    StoreUnavailableError,
    UnreadableSnapshotError,
)
from statestore.model import layout
from statestore.model.schema import Schema
from statestore.state.table_state import TableState
from statestore.store.ports import BlobStore
from statestore.store.snapshot_ports import SnapshotInfo, SnapshotMetadataStore


def checksum(data: bytes) -> str:
    """The CRC-32 of ``data`` as 8 hex digits (fast enough to check on every load: a few ms per 100 MB)."""
    return f"{zlib.crc32(data):08x}"


class SnapshotStore:
    """Writes and reads Parquet snapshots; the metadata store decides which one is the latest."""

    def __init__(self, metadata: SnapshotMetadataStore, blobs: BlobStore) -> None:
        self.metadata = metadata
        self.blobs = blobs

    def write(self, table_id: str, state: TableState, created_time: int) -> SnapshotInfo:
        """Write ``state`` and make it the latest snapshot.

        The Parquet objects go first and are read back: a snapshot is recorded only once the store holds
        what was written (StoreUnavailableError otherwise, nothing recorded). If recording fails, the
        objects are deleted only once it is known that the record did not land (it may have, with its
        response lost: a retry then finds the pointer already at this snapshot); while that cannot be told
        they are kept, as orphans at worst. The error is raised unless the record turns out to be in place.
        """
        partitions_key, files_key = layout.snapshot_keys(table_id, state.transaction_number)
        objects = dict(zip((partitions_key, files_key), state_to_parquet(state), strict=True))
        info = SnapshotInfo(
            table_id,
            state.transaction_number,
            created_time,
            partitions_key,
            files_key,
            tuple(checksum(data) for data in objects.values()),
            state.reference_count(),
            len(state.partitions_by_id),
        )
        written: list[str] = []
        try:
            for key, data in objects.items():
                self.blobs.put(key, data)
                written.append(key)
            for key, data in objects.items():
                if checksum(self.blobs.get(key)) != checksum(data):
                    raise StoreUnavailableError(
                        f"table {table_id!r}: snapshot {state.transaction_number}'s object {key!r} reads "
                        "back other bytes than were written; not recorded"
                    )
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
        """The state a snapshot holds. Raises SnapshotNotFoundError when an object is gone, and
        UnreadableSnapshotError when one does not match its checksum or does not decode; both name the
        table, the snapshot and the object."""
        partitions_bytes, files_bytes = self._objects(info)
        try:
            return state_from_parquet(schema, partitions_bytes, files_bytes, info.transaction_number)
        except SnapshotObjectError as e:
            key = info.files_key if e.part == "files" else info.partitions_key
            raise UnreadableSnapshotError(info.table_id, info.transaction_number, key, str(e)) from e

    def verify(self, info: SnapshotInfo, schema: Schema) -> None:
        """Check that the snapshot can be read: its objects match their checksums (a snapshot recorded
        without checksums is decoded whole). Raises as :meth:`read` does."""
        if info.checksums:
            self._objects(info)
        else:
            self.read(info, schema)

    def _objects(self, info: SnapshotInfo) -> tuple[bytes, bytes]:
        """The snapshot's two objects, checked against the checksums recorded with it."""

        def get(key: str) -> bytes:
            try:
                return self.blobs.get(key)
            except BlobNotFoundError as e:
                raise SnapshotNotFoundError(
                    f"snapshot {info.transaction_number} of table {info.table_id!r} is recorded but its "
                    f"object {key!r} is gone: {e}"
                ) from e

        # Both at once: their round trips overlap.
        read = overlap.both(lambda: get(info.files_key), lambda: get(info.partitions_key))
        objects = [read[1].get(), read[0].get()]
        # No checksums: a snapshot recorded before they were kept (Parquet's page CRCs still apply).
        keys = (info.partitions_key, info.files_key)
        for key, data, expected in zip(keys, objects, info.checksums or (None, None), strict=True):
            if expected is None:
                continue
            if checksum(data) != expected:
                raise UnreadableSnapshotError(
                    info.table_id,
                    info.transaction_number,
                    key,
                    f"its CRC-32 is {checksum(data)} ({len(data):,} bytes), the snapshot recorded {expected}",
                )
        partitions_bytes, files_bytes = objects
        return partitions_bytes, files_bytes

    def latest_at_or_before(self, table_id: str, transaction_number: int | None) -> SnapshotInfo | None:
        """The newest snapshot with number <= ``transaction_number`` (the latest one if None)."""
        if transaction_number is None:
            return self.metadata.latest(table_id)
        candidates = self.at_or_before(table_id, transaction_number)
        return candidates[0] if candidates else None

    def at_or_before(self, table_id: str, transaction_number: int | None) -> list[SnapshotInfo]:
        """Every snapshot with number <= ``transaction_number`` (all if None), newest first."""
        return [
            s
            for s in reversed(self.metadata.list(table_id))
            if transaction_number is None or s.transaction_number <= transaction_number
        ]

    def delete(self, info: SnapshotInfo) -> None:
        """Forget a (non-latest) snapshot, then delete its objects."""
        self.metadata.delete(info.table_id, info.transaction_number)
        self.blobs.delete([info.partitions_key, info.files_key])

    def delete_table(self, table_id: str) -> None:
        self.metadata.delete_table(table_id)
        self.blobs.delete(self.blobs.list(layout.snapshot_prefix(table_id)))
