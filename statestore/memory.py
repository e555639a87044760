"""In-memory implementations of the ports: used by tests, benchmarks and the in-memory demo.

Thread-safe, so concurrency tests can race several writers on one log.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterator

from statestore.errors import BlobNotFoundError, StaleSnapshotError, StateStoreError, TransactionNumberTakenError
from statestore.ports import BlobStore, LogEntry, SnapshotInfo, SnapshotMetadataStore, TransactionLogStore


class InMemoryTransactionLog(TransactionLogStore):
    def __init__(self) -> None:
        self._entries: dict[str, dict[int, LogEntry]] = {}
        self._latest: dict[str, int] = {}
        self._lock = threading.Lock()

    def append(self, table_id: str, entry: LogEntry) -> None:
        with self._lock:
            entries = self._entries.setdefault(table_id, {})
            if entry.transaction_number in entries:
                raise TransactionNumberTakenError(table_id, entry.transaction_number)
            entries[entry.transaction_number] = entry
            self._latest[table_id] = max(self._latest.get(table_id, 0), entry.transaction_number)

    def read(self, table_id: str, from_number: int, to_number: int | None = None) -> Iterator[LogEntry]:
        with self._lock:
            entries = self._entries.get(table_id, {})
            numbers = sorted(n for n in entries if n >= from_number and (to_number is None or n <= to_number))
            found = [entries[n] for n in numbers]
        yield from found

    def latest_number(self, table_id: str) -> int:
        with self._lock:
            return self._latest.get(table_id, 0)

    def delete_up_to(self, table_id: str, transaction_number: int) -> int:
        with self._lock:
            entries = self._entries.get(table_id, {})
            doomed = [n for n in entries if n <= transaction_number]
            for n in doomed:
                del entries[n]
            return len(doomed)

    def delete_table(self, table_id: str) -> None:
        with self._lock:
            self._entries.pop(table_id, None)
            self._latest.pop(table_id, None)


class InMemorySnapshotMetadataStore(SnapshotMetadataStore):
    def __init__(self) -> None:
        self._snapshots: dict[str, dict[int, SnapshotInfo]] = {}
        self._latest: dict[str, int] = {}
        self._lock = threading.Lock()

    def record(self, snapshot: SnapshotInfo) -> None:
        with self._lock:
            current = self._latest.get(snapshot.table_id)
            if current is not None and current >= snapshot.transaction_number:
                raise StaleSnapshotError(
                    f"table {snapshot.table_id!r} already has a snapshot at transaction {current}; "
                    f"refusing to move back to {snapshot.transaction_number}"
                )
            self._snapshots.setdefault(snapshot.table_id, {})[snapshot.transaction_number] = snapshot
            self._latest[snapshot.table_id] = snapshot.transaction_number

    def latest(self, table_id: str) -> SnapshotInfo | None:
        with self._lock:
            number = self._latest.get(table_id)
            return None if number is None else self._snapshots[table_id][number]

    def list(self, table_id: str) -> list[SnapshotInfo]:
        with self._lock:
            snapshots = self._snapshots.get(table_id, {})
            return [snapshots[n] for n in sorted(snapshots)]

    def delete(self, table_id: str, transaction_number: int) -> None:
        with self._lock:
            if self._latest.get(table_id) == transaction_number:
                raise StateStoreError(f"refusing to delete the latest snapshot of table {table_id!r}")
            self._snapshots.get(table_id, {}).pop(transaction_number, None)

    def delete_table(self, table_id: str) -> None:
        with self._lock:
            self._snapshots.pop(table_id, None)
            self._latest.pop(table_id, None)


class InMemoryBlobStore(BlobStore):
    def __init__(self) -> None:
        self._objects: dict[str, bytes] = {}
        self._keys: list[str] = []
        self._lock = threading.Lock()

    def put(self, key: str, data: bytes) -> None:
        with self._lock:
            if key not in self._objects:
                bisect.insort(self._keys, key)
            self._objects[key] = bytes(data)

    def get(self, key: str) -> bytes:
        with self._lock:
            try:
                return self._objects[key]
            except KeyError:
                raise BlobNotFoundError(key) from None

    def delete(self, keys: list[str]) -> None:
        with self._lock:
            for key in keys:
                if self._objects.pop(key, None) is not None:
                    self._keys.remove(key)

    def list(self, prefix: str) -> list[str]:
        with self._lock:
            start = bisect.bisect_left(self._keys, prefix)
            out = []
            for key in self._keys[start:]:
                if not key.startswith(prefix):
                    break
                out.append(key)
            return out
