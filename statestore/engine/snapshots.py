"""Snapshots: the whole state of a table as Parquet in a blob store, recorded in snapshot metadata.

Each object's CRC-32 is recorded with the snapshot, after the objects were read back and found to hold
exactly what was written; every read checks it, so a truncated or altered object is found as such (and a
load falls back to an older snapshot, see :meth:`TransactionLogStateStore.load`), never read as a state.

Once recorded, a snapshot's objects are also copied to the table's fixed "latest" keys
(``layout.latest_snapshot_keys``). A reader that does not know yet which snapshot is the latest can read
them at once with the record instead of after it: one round trip fewer for a cold load. The copy is
trusted only where its bytes match the checksums of the record read and say they are of its transaction
(stamped in each object's Parquet metadata); anything else (an older copy, a copy being overwritten,
none) is read from the snapshot's own keys, as without it.
"""

from __future__ import annotations

import contextlib
import logging
import zlib
from collections.abc import Iterator
from functools import partial

from statestore.codec.parquet import SnapshotObjectError, state_from_parquet, state_to_parquet, written_at
from statestore.codec.snapshot_guard import GuardColumns, guard_from_parquet
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

logger = logging.getLogger(__name__)

# A snapshot's two objects, as read from the latest copy's keys: None where absent or too large to read.
Copy = tuple[bytes | None, bytes | None]


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
            for key, expected in zip(objects, info.checksums, strict=True):
                if checksum(self.blobs.get(key)) != expected:
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
            if not landed:
                self.blobs.delete(written)
                raise
        self._copy_as_latest(info, objects)
        return info

    def _copy_as_latest(self, info: SnapshotInfo, objects: dict[str, bytes]) -> None:
        """Overwrite the table's latest copy with a recorded snapshot's objects. Best effort: a copy that
        is missing, stale or half written only costs a reader the round trip it saves."""
        copies = layout.latest_snapshot_keys(info.table_id)
        try:
            for key, data in zip(copies, objects.values(), strict=True):
                self.blobs.put(key, data, tags=layout.LATEST_COPY_TAGS)
        except StateStoreError as e:
            logger.warning(
                "table %r: snapshot %d is recorded but not copied to its latest keys (a cold load reads it "
                "one round trip later): %s", info.table_id, info.transaction_number, e,
            )  # fmt: skip

    def latest_copy(self, table_id: str, max_bytes: int) -> Copy:
        """The two objects at the table's latest keys, each None where absent or over ``max_bytes`` (not
        read past that). Whose snapshot they are is for :meth:`read` to check; read both at once."""

        def get(key: str) -> bytes | None:
            try:
                return self.blobs.get_at_most(key, max_bytes)
            except BlobNotFoundError:
                return None

        partitions_key, files_key = layout.latest_snapshot_keys(table_id)
        files, partitions = overlap.both(partial(get, files_key), partial(get, partitions_key))
        return partitions.get(), files.get()

    def read(self, info: SnapshotInfo, schema: Schema, copy: Copy | None = None) -> TableState:
        """The state a snapshot holds. Raises SnapshotNotFoundError when an object is gone, and
        UnreadableSnapshotError when one does not match its checksum or does not decode; both name the
        table, the snapshot and the object.

        ``copy`` is what :meth:`latest_copy` read: an object of it that is this snapshot's (its bytes match
        the recorded checksum, and it says it is of this transaction) is used instead of reading the
        snapshot's own."""
        partitions_bytes, files_bytes = self._objects(info, copy)
        with _naming_the_object(info):
            return state_from_parquet(schema, partitions_bytes, files_bytes, info.transaction_number)

    def read_guard(
        self, info: SnapshotInfo, schema: Schema, copy: Copy | None = None
    ) -> tuple[GuardColumns | None, Copy]:
        """What a table's guard needs of a snapshot (:mod:`statestore.codec.snapshot_guard`; None where its
        objects store no name hashes), and its two objects as read, for a load to take where the guard
        cannot serve (as ``copy``). Reads and raises as :meth:`read` does."""
        partitions_bytes, files_bytes = self._objects(info, copy)
        with _naming_the_object(info):
            return guard_from_parquet(schema, partitions_bytes, files_bytes), (partitions_bytes, files_bytes)

    def verify(self, info: SnapshotInfo, schema: Schema) -> None:
        """Check that the snapshot can be read: its objects match their checksums (a snapshot recorded
        without checksums is decoded whole). Raises as :meth:`read` does."""
        if info.checksums:
            self._objects(info)
        else:
            self.read(info, schema)

    def _objects(self, info: SnapshotInfo, copy: Copy | None = None) -> tuple[bytes, bytes]:
        """The snapshot's two objects, checked against the checksums recorded with it: those of ``copy``
        that are this snapshot's, the others read from the snapshot's keys."""
        keys = (info.partitions_key, info.files_key)
        copied = [
            data if data is not None and self._is_of(info, data, expected) else None
            for data, expected in zip(copy or (None, None), info.checksums or (None, None), strict=True)
        ]
        if copied[0] is not None and copied[1] is not None:
            return copied[0], copied[1]

        def get(key: str) -> bytes:
            try:
                return self.blobs.get(key)
            except BlobNotFoundError as e:
                raise SnapshotNotFoundError(
                    f"snapshot {info.transaction_number} of table {info.table_id!r} is recorded but its "
                    f"object {key!r} is gone: {e}"
                ) from e

        if copied[0] is not None or copied[1] is not None:  # one to read
            objects = [data if data is not None else get(key) for key, data in zip(keys, copied, strict=True)]
        else:  # both at once: their round trips overlap
            read = overlap.both(lambda: get(info.files_key), lambda: get(info.partitions_key))
            objects = [read[1].get(), read[0].get()]
        # No checksums: a snapshot recorded before they were kept (Parquet's page CRCs still apply). An
        # object taken from the copy was checked as it was taken.
        for key, data, expected, was_copied in zip(
            keys, objects, info.checksums or (None, None), copied, strict=True
        ):
            if expected is None or was_copied is not None:
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

    @staticmethod
    def _is_of(info: SnapshotInfo, data: bytes, expected: str | None) -> bool:
        """Whether ``data``, read from the latest copy's key, is the object of ``info`` recorded with the
        checksum ``expected``. The CRC-32 alone could match another snapshot's by chance (one in 2^32); the
        transaction the object says it is of cannot."""
        return (
            expected is not None
            and checksum(data) == expected
            and written_at(data) == info.transaction_number
        )

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


@contextlib.contextmanager
def _naming_the_object(info: SnapshotInfo) -> Iterator[None]:
    """Raise a snapshot object's decoding error as UnreadableSnapshotError naming the table, the snapshot
    and the object's key."""
    try:
        yield
    except SnapshotObjectError as e:
        key = info.files_key if e.part == "files" else info.partitions_key
        raise UnreadableSnapshotError(info.table_id, info.transaction_number, key, str(e)) from e
