"""A batch for a table the committer does not keep reads the requests' statuses, the table's record, its
latest snapshot's record, the objects at its latest copy's keys and the log's last entries at once
(``statestore.services.committer.first_reads``), and each read's outcome, an error included, decides only
its own table's messages."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator

import pytest

from statestore.engine.log_store import TransactionLogStateStore
from statestore.errors import StoreUnavailableError
from statestore.services.committer import MessageOutcome
from statestore.store.memory import (
    InMemoryBlobStore,
    InMemoryCommitStatusStore,
    InMemorySnapshotMetadataStore,
    InMemoryTableIndex,
    InMemoryTransactionLog,
)
from statestore.store.ports import CommitStatus, LogEntry, LogTail, RequestKey
from statestore.store.snapshot_ports import SnapshotInfo
from statestore.store.tables import TableInfo
from tests.committer.harness import Harness, add_files, message, outcomes

WAIT = 5  # seconds: far longer than any call here takes


class Meeting:
    """A barrier the first call of each store waits at, once armed: stores that are called one after
    another never all arrive, and the barrier breaks."""

    def __init__(self) -> None:
        self.barrier: threading.Barrier | None = None
        self.met: set[str] = set()

    def arm(self, parties: int) -> None:
        self.barrier, self.met = threading.Barrier(parties, timeout=WAIT), set()

    def at(self, who: str) -> None:
        if self.barrier is not None and who not in self.met:
            self.met.add(who)
            self.barrier.wait()


class Counted:
    def __init__(self) -> None:
        self.calls: list[str] = []
        self.failing: set[str] = set()  # table ids whose reads fail

    def call(self, what: str, table_id: str) -> None:
        self.calls.append(what)
        if table_id in self.failing:
            raise StoreUnavailableError(f"{what} of {table_id!r}: the store is unavailable")


class MeetingStatuses(InMemoryCommitStatusStore):
    def __init__(self, meeting: Meeting) -> None:
        super().__init__()
        self.meeting = meeting

    def get_many(self, keys: Iterable[RequestKey]) -> dict[RequestKey, CommitStatus]:
        self.meeting.at("statuses")
        return super().get_many(keys)


class MeetingTables(InMemoryTableIndex):
    def __init__(self, meeting: Meeting, counted: Counted) -> None:
        super().__init__()
        self.meeting, self.counted = meeting, counted

    def get(self, table_id: str) -> TableInfo:
        self.meeting.at("table")
        self.counted.call("table", table_id)
        return super().get(table_id)


class MeetingSnapshots(InMemorySnapshotMetadataStore):
    def __init__(self, meeting: Meeting, counted: Counted) -> None:
        super().__init__()
        self.meeting, self.counted = meeting, counted

    def latest(self, table_id: str) -> SnapshotInfo | None:
        self.meeting.at("snapshot")
        self.counted.call("snapshot", table_id)
        return super().latest(table_id)


class MeetingBlobs(InMemoryBlobStore):
    """Meets at each object read up to a size (the latest copy's two), and counts every whole read."""

    def __init__(self, meeting: Meeting, counted: Counted) -> None:
        super().__init__()
        self.meeting, self.counted = meeting, counted

    def get_at_most(self, key: str, max_bytes: int) -> bytes | None:
        self.meeting.at(f"copy of {key.rsplit('/', 1)[-1]}")
        data = super().get(key)  # not counted: only the reads after these are
        return data if len(data) <= max_bytes else None

    def get(self, key: str) -> bytes:
        self.counted.calls.append("object")
        return super().get(key)


class MeetingLog(InMemoryTransactionLog):
    """Meets at the read of the log's tail, and counts every read of a range."""

    def __init__(self, meeting: Meeting, counted: Counted) -> None:
        super().__init__(None, MeetingStatuses(meeting))
        self.meeting, self.counted = meeting, counted

    def read_tail(self, table_id: str, count: int) -> LogTail:
        self.meeting.at("tail")
        return super().read_tail(table_id, count)

    def read(self, table_id: str, from_number: int, to_number: int | None = None) -> Iterator[LogEntry]:
        self.counted.calls.append("log")
        return super().read(table_id, from_number, to_number)


@pytest.fixture
def meeting() -> Meeting:
    return Meeting()


@pytest.fixture
def counted() -> Counted:
    return Counted()


@pytest.fixture
def h(meeting: Meeting, counted: Counted) -> Harness:
    return Harness(
        tables=MeetingTables(meeting, counted),
        log=MeetingLog(meeting, counted),
        snapshot_metadata=MeetingSnapshots(meeting, counted),
        blobs=MeetingBlobs(meeting, counted),
    )


def table_with_snapshot(h: Harness, name: str) -> str:
    table_id = h.create_table(name)
    store = h.store(table_id)
    store.commit(add_files(table_id, f"{name}-1").transaction)
    h.snapshots.write(table_id, store.state(), h.clock())
    store.commit(add_files(table_id, f"{name}-2").transaction)  # and a log entry after the snapshot
    return table_id


def test_a_cold_table_is_read_at_once_with_the_statuses_and_nothing_is_read_after(
    h: Harness, meeting: Meeting, counted: Counted
) -> None:
    table_id = table_with_snapshot(h, "cold")
    committer = h.committer()
    counted.calls.clear()
    meeting.arm(6)  # read one after another, the first of them would wait alone until the barrier broke

    [result] = committer.process([message(add_files(table_id, "new"))])

    assert result.outcome is MessageOutcome.COMMITTED, result.reason
    copies = {"copy of partitions.parquet", "copy of files.parquet"}
    assert meeting.met == {"statuses", "table", "snapshot", "tail", *copies}
    # The load used what was read beside the statuses: no snapshot object, no range of the log.
    assert sorted(counted.calls) == ["snapshot", "table"]
    assert committer.last_batch.cold_loads == 1
    names = {f.filename.rsplit("/", 1)[-1] for f in h.state(table_id).files()}
    assert names == {"cold-1", "cold-2", "new"}  # the snapshot, the log after it, and the commit


def test_a_warm_table_is_not_read_again(h: Harness, meeting: Meeting, counted: Counted) -> None:
    table_id = table_with_snapshot(h, "warm")
    committer = h.committer()
    committer.process([message(add_files(table_id, "first"))])
    counted.calls.clear()
    meeting.arm(1)  # a read that waited for another would break it

    [result] = committer.process([message(add_files(table_id, "second"))])

    assert result.outcome is MessageOutcome.COMMITTED, result.reason
    assert counted.calls == []
    assert meeting.met == {"statuses"}
    assert committer.last_batch.warm_loads == 1


def test_a_kept_tables_record_past_its_time_to_live_is_read_beside_the_statuses_without_its_snapshot(
    h: Harness, meeting: Meeting, counted: Counted
) -> None:
    table_id = table_with_snapshot(h, "stale")
    committer = h.committer(table_info_ttl_ms=1_000)
    committer.process([message(add_files(table_id, "first"))])
    h.clock.advance(2_000)
    counted.calls.clear()
    meeting.arm(2)

    [result] = committer.process([message(add_files(table_id, "second"))])

    assert result.outcome is MessageOutcome.COMMITTED, result.reason
    assert meeting.met == {"statuses", "table"}
    assert counted.calls == ["table"]


@pytest.mark.parametrize("failing_read", ["table", "snapshot"])
def test_a_first_read_that_fails_retries_its_own_tables_messages_only_and_they_commit_once_later(
    h: Harness, counted: Counted, failing_read: str
) -> None:
    broken, healthy = table_with_snapshot(h, "broken"), table_with_snapshot(h, "healthy")
    committer = h.committer()
    to_broken = message(add_files(broken, "b"))
    counted.failing = {broken}
    original = counted.call

    def fail_only(what: str, table_id: str) -> None:
        if what == failing_read:
            original(what, table_id)
        else:
            counted.calls.append(what)

    counted.call = fail_only  # type: ignore[method-assign]
    results = committer.process([to_broken, message(add_files(healthy, "h"))])

    assert outcomes(results) == ["retry", "committed"]
    assert "unavailable" in (results[0].reason or "")
    assert h.log_length(broken) == 3  # nothing written for it

    counted.failing = set()
    [again] = committer.process([to_broken])
    assert again.outcome is MessageOutcome.COMMITTED, again.reason
    assert h.log_length(broken) == 4
    [copy] = committer.process([to_broken])  # and the redelivery after the commit is a duplicate
    assert copy.outcome is MessageOutcome.DUPLICATE
    assert h.log_length(broken) == 4


def test_a_batch_for_a_table_that_is_gone_dead_letters_its_messages(h: Harness) -> None:
    table_id = table_with_snapshot(h, "gone")
    committer = h.committer()
    h.tables.delete(table_id)

    [result] = committer.process([message(add_files(table_id, "late"))])

    assert result.outcome is MessageOutcome.DEAD_LETTERED
    assert (result.reason or "").startswith(f"table not found: {table_id!r}")


def test_what_was_read_for_a_load_that_never_comes_is_not_kept(h: Harness) -> None:
    """Every request of the batch refused (its sender is not allowed): the table is kept, unloaded, and the
    snapshot's bytes read for its load are let go rather than held until some later load."""
    table_id = table_with_snapshot(h, "restricted")
    h.tables.set_allowed_senders(table_id, ["AROAJOBROLEOFTABLEA01"])
    committer = h.committer()

    [result] = committer.process([message(add_files(table_id, "forged"))])

    assert result.outcome is MessageOutcome.DEAD_LETTERED
    kept = committer._tables.peek(table_id)
    assert kept is not None and isinstance(kept.store, TransactionLogStateStore)
    assert kept.store.loaded_state is None and kept.store._first_reads is None
