"""A cold load's reads that do not depend on each other run at once (``statestore.engine.overlap``): the
snapshot's two objects and the log after it. Each test's stores wait for one another on a barrier, so a
load that made its calls one after another would stop there (a broken barrier) instead of loading."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from statestore.engine import log_loading
from statestore.engine.log_store import TransactionLogStateStore
from statestore.engine.overlap import both
from statestore.engine.snapshots import SnapshotStore
from statestore.errors import TransactionNotRetainedError
from statestore.store.memory import InMemoryBlobStore, InMemorySnapshotMetadataStore, InMemoryTransactionLog
from statestore.store.ports import LogEntry
from statestore.transactions import AddFiles, InitialisePartitions
from tests.builders import STRING_SCHEMA, data_key, ref, tree

TABLE = "t-overlap"
WAIT = 10  # seconds: far longer than any call here takes


def test_both_runs_its_two_calls_at_once_and_gives_each_outcome() -> None:
    met = threading.Barrier(2, timeout=WAIT)

    def meets(value: str) -> str:
        met.wait()
        return value

    here, beside = both(lambda: meets("here"), lambda: meets("beside"))
    assert (here.get(), beside.get()) == ("here", "beside")

    def fails() -> str:
        raise TransactionNotRetainedError("gone")

    failed, fine = both(fails, lambda: "still read")
    assert fine.get() == "still read"
    with pytest.raises(TransactionNotRetainedError, match="gone"):
        failed.get()


class MeetingBlobs(InMemoryBlobStore):
    def __init__(self) -> None:
        super().__init__()
        self.met: threading.Barrier | None = None

    def get(self, key: str) -> bytes:
        if self.met is not None:
            self.met.wait()
        return super().get(key)


class MeetingLog(InMemoryTransactionLog):
    def __init__(self, blobs: InMemoryBlobStore) -> None:
        super().__init__(blobs)
        self.met: threading.Barrier | None = None

    def read(self, table_id: str, from_number: int, to_number: int | None = None) -> Iterator[LogEntry]:
        if self.met is not None:
            self.met.wait()
        return super().read(table_id, from_number, to_number)


def a_table(after_snapshot: int) -> tuple[TransactionLogStateStore, MeetingBlobs, MeetingLog]:
    blobs = MeetingBlobs()
    log = MeetingLog(blobs)
    store = TransactionLogStateStore(
        TABLE, STRING_SCHEMA, log, SnapshotStore(InMemorySnapshotMetadataStore(), blobs)
    )
    store.commit(InitialisePartitions(tuple(tree(STRING_SCHEMA))))
    store.commit(AddFiles((ref(data_key(TABLE, "before")),)))
    assert store.create_snapshot() is not None
    for i in range(after_snapshot):
        store.commit(AddFiles((ref(data_key(TABLE, f"after-{i}")),)))
    return store, blobs, log


def test_a_cold_load_reads_the_snapshots_objects_and_the_log_after_it_at_once() -> None:
    writer, blobs, log = a_table(3)
    expected = writer.load()
    met = threading.Barrier(3, timeout=WAIT)  # the two objects and the log's read
    blobs.met = log.met = met

    loaded = TransactionLogStateStore(TABLE, STRING_SCHEMA, log, writer.snapshots).load()

    assert loaded == expected and loaded.transaction_number == 5


def test_a_log_longer_than_the_read_ahead_is_read_to_its_end(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(log_loading, "READ_AHEAD", 2)
    writer, _, log = a_table(7)

    loaded = TransactionLogStateStore(TABLE, STRING_SCHEMA, log, writer.snapshots).load()

    assert loaded == writer.load() and loaded.transaction_number == 9
    assert data_key(TABLE, "after-6") in loaded.files_by_name


def test_a_commit_after_a_load_from_the_latest_entrys_snapshot_reads_the_log_once() -> None:
    """The snapshot keeps the time of the entry it is at, so the append after a load from it needs no read of
    that entry to keep the log's times in order: one read of the log (the load's, after the snapshot)."""
    writer, _, log = a_table(0)
    reads: list[tuple[int, int | None]] = []
    read = log.read

    def counted(table_id: str, from_number: int, to_number: int | None = None) -> Iterator[LogEntry]:
        reads.append((from_number, to_number))
        return read(table_id, from_number, to_number)

    log.read = counted  # type: ignore[method-assign]
    cold = TransactionLogStateStore(TABLE, STRING_SCHEMA, log, writer.snapshots)

    cold.commit(AddFiles((ref(data_key(TABLE, "cold")),)))

    assert reads == [(3, None)]  # the log after snapshot 2, and nothing more
    assert log.latest_number(TABLE) == 3
