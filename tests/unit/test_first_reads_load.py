"""A load given the reads a caller made at once before knowing where the latest snapshot is
(``log_loading.FirstReads``): the latest snapshot's record, the objects at the table's latest-copy keys
and the log's tail. What they hold is used only where it is that snapshot's and reaches back to it;
anything else is read as a load without them reads it, and the state is the same either way."""

from __future__ import annotations

import logging
from collections.abc import Mapping

import pytest

from statestore.engine import snapshots as snapshots_module
from statestore.engine.log_loading import READ_AHEAD, FirstReads
from statestore.engine.log_store import TransactionLogStateStore
from statestore.engine.overlap import Outcome, outcome
from statestore.engine.snapshots import SnapshotStore
from statestore.errors import StoreUnavailableError
from statestore.model import layout
from statestore.store.memory import InMemoryBlobStore, InMemorySnapshotMetadataStore
from statestore.transactions import AddFiles, InitialisePartitions
from tests.builders import STRING_SCHEMA, ReadRecordingLog, data_key, ref, tree

TABLE = "t-first-reads"


class CountedBlobs(InMemoryBlobStore):
    """Counts the objects read, and refuses writes to the keys in ``refused``."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []
        self.refused: set[str] = set()

    def get(self, key: str) -> bytes:
        self.reads.append(key)
        return super().get(key)

    def put(self, key: str, data: bytes, tags: Mapping[str, str] | None = None) -> None:
        if key in self.refused:
            raise StoreUnavailableError(f"write {key}: the store is unavailable")
        super().put(key, data, tags)


def a_table(after_snapshot: int) -> tuple[TransactionLogStateStore, CountedBlobs, ReadRecordingLog]:
    """A table with a snapshot at transaction 2 and ``after_snapshot`` entries after it."""
    blobs, log = CountedBlobs(), ReadRecordingLog()
    store = TransactionLogStateStore(
        TABLE, STRING_SCHEMA, log, SnapshotStore(InMemorySnapshotMetadataStore(), blobs)
    )
    store.commit(InitialisePartitions(tuple(tree(STRING_SCHEMA))))
    store.commit(AddFiles((ref(data_key(TABLE, "before")),)))
    assert store.create_snapshot() is not None
    add(store, after_snapshot)
    return store, blobs, log


def add(store: TransactionLogStateStore, count: int) -> None:
    for _ in range(count):
        store.commit(AddFiles((ref(data_key(TABLE, f"file-{store.state().transaction_number}")),)))


def first_reads(writer: TransactionLogStateStore, tail_entries: int = READ_AHEAD) -> FirstReads:
    """The reads the committer makes at once for a table it does not keep (``first_reads.read_first``)."""
    snapshots = writer.snapshots
    assert snapshots is not None
    return FirstReads(
        outcome(lambda: snapshots.latest_at_or_before(TABLE, None)),
        outcome(lambda: snapshots.latest_copy(TABLE, 1 << 20)),
        outcome(lambda: (0, writer.log.read_tail(TABLE, tail_entries))),
    )


def load_with(writer: TransactionLogStateStore, reads: FirstReads) -> TransactionLogStateStore:
    cold = TransactionLogStateStore(TABLE, STRING_SCHEMA, writer.log, writer.snapshots)
    cold.use_first_reads(reads)
    cold.state()
    return cold


def test_a_load_from_first_reads_that_hold_it_all_reads_nothing_more() -> None:
    writer, blobs, log = a_table(3)
    reads, expected = first_reads(writer), writer.load()
    blobs.reads.clear()
    log.reads_from.clear()

    cold = load_with(writer, reads)

    assert cold.loaded_state == expected and expected.transaction_number == 5
    assert blobs.reads == [] and log.reads_from == []


def test_a_table_with_no_snapshot_loads_from_the_logs_tail_alone() -> None:
    blobs, log = CountedBlobs(), ReadRecordingLog()
    writer = TransactionLogStateStore(
        TABLE, STRING_SCHEMA, log, SnapshotStore(InMemorySnapshotMetadataStore(), blobs)
    )
    writer.commit(InitialisePartitions(tuple(tree(STRING_SCHEMA))))
    add(writer, 2)
    reads, expected = first_reads(writer), writer.load()
    log.reads_from.clear()

    cold = load_with(writer, reads)

    assert cold.loaded_state == expected and log.reads_from == []


def test_a_copy_of_an_older_snapshot_is_not_used_the_snapshots_own_objects_are(
    caplog: pytest.LogCaptureFixture,
) -> None:
    writer, blobs, _ = a_table(2)
    blobs.refused = set(layout.latest_snapshot_keys(TABLE))  # the next snapshot is not copied
    with caplog.at_level(logging.WARNING):
        newer = writer.create_snapshot()
    assert newer is not None and "not copied to its latest keys" in caplog.text
    add(writer, 1)
    reads, expected = first_reads(writer), writer.load()
    blobs.reads.clear()

    cold = load_with(writer, reads)

    assert cold.loaded_state == expected
    assert sorted(blobs.reads) == sorted([newer.partitions_key, newer.files_key])


def test_a_copy_whose_checksums_match_another_snapshots_is_told_apart_by_its_transaction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Were two snapshots' CRC-32s the same (here every checksum is), an older copy would pass for the
    newer snapshot; the transaction stamped in its objects says it is not, and the snapshot's own objects
    are read instead."""
    writer, blobs, _ = a_table(2)
    blobs.refused = set(layout.latest_snapshot_keys(TABLE))
    monkeypatch.setattr(snapshots_module, "checksum", lambda data: "00000000")
    newer = writer.create_snapshot()
    assert newer is not None
    reads, expected = first_reads(writer), writer.load()
    blobs.reads.clear()

    cold = load_with(writer, reads)

    assert cold.loaded_state == expected and expected.transaction_number == 4
    assert sorted(blobs.reads) == sorted([newer.partitions_key, newer.files_key])


def test_a_damaged_copy_is_not_used() -> None:
    writer, blobs, _ = a_table(1)
    partitions_copy, files_copy = layout.latest_snapshot_keys(TABLE)
    blobs.put(files_copy, blobs.get(files_copy)[:-10])
    reads, expected = first_reads(writer), writer.load()
    blobs.reads.clear()

    cold = load_with(writer, reads)

    info = writer.snapshots.metadata.latest(TABLE)  # type: ignore[union-attr]
    assert info is not None and cold.loaded_state == expected
    assert blobs.reads == [info.files_key]  # the partitions' copy is intact, and used


def test_a_tail_that_does_not_reach_back_to_the_snapshot_is_not_used() -> None:
    writer, _, log = a_table(5)
    reads, expected = first_reads(writer, tail_entries=3), writer.load()  # the tail: 5..7 of 3..7
    log.reads_from.clear()

    cold = load_with(writer, reads)

    assert cold.loaded_state == expected
    assert log.reads_from == [3]  # the log after snapshot 2, read as without the tail


def test_a_snapshot_newer_than_the_tail_loads_as_of_the_snapshot_and_catches_up_after() -> None:
    writer, _, _ = a_table(1)
    tail = outcome(lambda: (0, writer.log.read_tail(TABLE, READ_AHEAD)))  # entries 1..3
    add(writer, 2)
    newer = writer.create_snapshot()  # at 5, recorded after the tail was read
    assert newer is not None
    add(writer, 1)
    reads = first_reads(writer)

    cold = load_with(writer, FirstReads(reads.record, reads.copy, tail))

    assert cold.loaded_state is not None and cold.loaded_state.transaction_number == 5
    assert cold.state() == writer.load()  # the next read catches up with entry 6


def test_first_reads_that_failed_are_read_again_by_the_load() -> None:
    writer, blobs, log = a_table(2)
    record = outcome(lambda: writer.snapshots.latest_at_or_before(TABLE, None))  # type: ignore[union-attr]
    failed: Outcome[object] = Outcome(error=StoreUnavailableError("the store is unavailable"))
    expected = writer.load()
    blobs.reads.clear()
    log.reads_from.clear()

    cold = load_with(writer, FirstReads(record, failed, failed))  # type: ignore[arg-type]

    assert cold.loaded_state == expected
    assert len(blobs.reads) == 2 and log.reads_from == [3]
