"""A damaged snapshot never stops a table: loads fall back to the snapshot before it and the log after it,
commits and new snapshots go on, cleanup keeps what a load falls back to, and an error that remains names
the table, the snapshot or entry, and the object."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from statestore.engine.log_store import TransactionLogStateStore
from statestore.engine.snapshots import SnapshotStore
from statestore.errors import (
    CodecError,
    StateNotRecoverableError,
    StoreUnavailableError,
    UnreadableLogEntryError,
    UnreadableSnapshotError,
)
from statestore.services.cleanup import cleanup_table
from statestore.services.cleanup_policy import CleanupPolicy
from statestore.store.memory import InMemoryBlobStore, InMemorySnapshotMetadataStore, InMemoryTransactionLog
from statestore.store.ports import LogEntry
from statestore.store.snapshot_ports import SnapshotInfo
from statestore.store.tables import TableInfo
from statestore.transactions import AddFiles, ClearFiles, InitialisePartitions
from tests.builders import STRING_SCHEMA, data_key, data_keys, ref, tree

TABLE = "table-1"
DAY = 24 * 3600_000


def truncated(data: bytes) -> bytes:
    return data[: len(data) // 2]


def flipped(data: bytes) -> bytes:
    middle = len(data) // 2
    return data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1 :]


DAMAGE: dict[str, Callable[[bytes], bytes]] = {"truncated": truncated, "flipped-byte": flipped}


class Table:
    """One table on in-memory ports, with a writer and a clock."""

    def __init__(self) -> None:
        self.now = 1_700_000_000_000
        self.blobs = InMemoryBlobStore(lambda: self.now)
        self.log = InMemoryTransactionLog(self.blobs)
        self.snapshots = SnapshotStore(InMemorySnapshotMetadataStore(), self.blobs)
        self.writer = self.store()
        self.writer.commit(InitialisePartitions(tuple(tree(STRING_SCHEMA))))

    def clock(self) -> int:
        self.now += 1
        return self.now

    def store(self) -> TransactionLogStateStore:
        return TransactionLogStateStore(TABLE, STRING_SCHEMA, self.log, self.snapshots, clock=self.clock)

    def add(self, *names: str) -> None:
        self.writer.commit(AddFiles(tuple(ref(data_key(TABLE, n)) for n in names)))

    def files(self) -> list[str]:
        """The names of the table's files as loaded, without the table's data prefix."""
        return sorted(name.removeprefix(data_key(TABLE, "")) for name in self.store().load().files_by_name)

    def snapshot(self) -> SnapshotInfo:
        info = self.writer.create_snapshot()
        assert info is not None
        return info

    def damage(self, key: str, how: Callable[[bytes], bytes]) -> None:
        self.blobs.put(key, how(self.blobs.get(key)))


@pytest.mark.parametrize("how", DAMAGE.values(), ids=DAMAGE.keys())
def test_a_load_skips_a_damaged_latest_snapshot_and_names_it(
    how: Callable[[bytes], bytes], caplog: pytest.LogCaptureFixture
) -> None:
    t = Table()
    t.add("a")
    t.snapshot()
    t.add("b")
    latest = t.snapshot()
    t.add("c")
    expected = t.store().load()
    t.damage(latest.files_key, how)

    with caplog.at_level(logging.WARNING):
        loaded = t.store().load()

    assert loaded == expected
    assert f"table {TABLE!r}: snapshot {latest.transaction_number} cannot be read from object " in caplog.text
    assert repr(latest.files_key) in caplog.text


def test_a_table_with_a_damaged_snapshot_still_commits_and_snapshots() -> None:
    t = Table()
    t.add("a")
    t.snapshot()
    t.add("b")
    latest = t.snapshot()
    t.damage(latest.partitions_key, truncated)
    cold = t.store()

    result = cold.commit(AddFiles((ref(data_key(TABLE, "c")),)))
    written = cold.create_snapshot()

    assert result.transaction_number == latest.transaction_number + 1
    assert written is not None and written.transaction_number == result.transaction_number
    assert t.files() == ["a", "b", "c"]  # from the new, intact snapshot


def test_a_snapshot_recorded_without_checksums_that_does_not_decode_is_skipped_too() -> None:
    t = Table()
    t.add("a")
    t.snapshot()
    t.add("b")
    latest = t.snapshot()
    # A snapshot recorded before checksums were kept: only decoding it can tell.
    metadata = t.snapshots.metadata
    assert isinstance(metadata, InMemorySnapshotMetadataStore)
    metadata._snapshots[TABLE][latest.transaction_number] = SnapshotInfo(
        TABLE, latest.transaction_number, latest.created_time, latest.partitions_key, latest.files_key
    )
    t.damage(latest.files_key, truncated)

    assert t.files() == ["a", "b"]


def test_time_travel_falls_back_past_a_damaged_snapshot_too() -> None:
    t = Table()
    t.add("a")
    t.snapshot()
    t.add("b")
    middle = t.snapshot()
    t.add("c")
    t.snapshot()
    t.damage(middle.files_key, flipped)

    assert sorted(t.store().load(as_of=middle.transaction_number).files_by_name) == data_keys(TABLE, "a", "b")


def test_when_nothing_intact_covers_the_state_the_error_names_every_snapshot_tried() -> None:
    t = Table()
    t.add("a")
    first = t.snapshot()
    t.add("b")
    latest = t.snapshot()
    t.add("c")
    t.log.delete_up_to(TABLE, latest.transaction_number)  # the log after the first snapshot is gone too
    t.damage(latest.files_key, truncated)

    with pytest.raises(StateNotRecoverableError) as raised:
        t.store().load()

    message = str(raised.value)
    assert f"table {TABLE!r}: no intact snapshot and log cover its state" in message
    assert f"snapshot {latest.transaction_number} cannot be read from object {latest.files_key!r}" in message
    assert f"log entries {first.transaction_number + 1}.." in message
    assert not isinstance(raised.value, CodecError)  # the caller's input was fine


def test_a_damaged_log_entry_is_reported_naming_the_table_and_the_entry() -> None:
    t = Table()
    t.add(*(f"file-{i}" for i in range(300)))  # big enough to be compressed
    [entry] = list(t.log.read(TABLE, 2, 2))
    assert entry.compressed
    t.log._entries[TABLE][2] = LogEntry(2, entry.update_time, entry.transaction_type, entry.body[:40], True)

    with pytest.raises(UnreadableLogEntryError, match=f"table {TABLE!r}: log entry 2 cannot be read: "):
        t.store().load()


def test_the_snapshot_writer_records_only_what_reads_back_intact() -> None:
    class Mangling(InMemoryBlobStore):
        def put(self, key: str, data: bytes, tags: object = None) -> None:
            super().put(key, truncated(data) if key.endswith("files.parquet") else data)

    t = Table()
    t.add("a")
    blobs = Mangling()
    snapshots = SnapshotStore(InMemorySnapshotMetadataStore(), blobs)

    with pytest.raises(StoreUnavailableError, match="reads back other bytes than were written; not recorded"):
        snapshots.write(TABLE, t.store().load(), 1)

    assert snapshots.metadata.list(TABLE) == [] and blobs.list("") == []


def test_cleanup_keeps_the_last_intact_snapshot_and_the_log_after_it() -> None:
    t = Table()
    t.add("a")
    intact = t.snapshot()
    t.add("b")
    t.now += 2 * DAY
    damaged = t.snapshot()
    t.writer.commit(ClearFiles())
    t.writer.commit(AddFiles((ref(data_key(TABLE, "c")),)))
    t.now += 3 * DAY  # both snapshots are old enough to be cleanup's base, and past their retention
    latest = t.snapshot()
    t.damage(damaged.files_key, truncated)
    t.damage(latest.files_key, flipped)
    info = TableInfo(TABLE, "t", STRING_SCHEMA)
    policy = CleanupPolicy(log_min_snapshot_age_ms=DAY, snapshot_retention_ms=2 * DAY)

    t.now += 2 * DAY
    report = cleanup_table(t.store(), info, t.snapshots, t.blobs, policy=policy, now=t.now)

    assert report.log_retained_from == intact.transaction_number
    # The damaged one past its retention goes; the intact one a load falls back to stays, with its log.
    assert [s.transaction_number for s in t.snapshots.metadata.list(TABLE)] == [
        intact.transaction_number,
        latest.transaction_number,
    ]
    assert t.files() == ["c"]


def test_a_damaged_snapshot_is_reported_as_unreadable_not_as_bad_input() -> None:
    t = Table()
    t.add("a")
    info = t.snapshot()
    t.damage(info.files_key, flipped)

    with pytest.raises(UnreadableSnapshotError) as raised:
        t.snapshots.read(info, STRING_SCHEMA)

    assert (raised.value.table_id, raised.value.transaction_number, raised.value.key) == (
        TABLE,
        info.transaction_number,
        info.files_key,
    )
    assert "CRC-32" in str(raised.value) and not isinstance(raised.value, CodecError)
