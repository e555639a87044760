"""The log engine: commits append last + 1 and apply only after success; collisions retry; loads replay."""

from __future__ import annotations

import itertools
import random
from collections.abc import Collection, Iterator, Sequence

import pytest

from statestore.engine.log_store import GroupMember, RetryPolicy, TransactionLogStateStore
from statestore.engine.snapshots import SnapshotStore
from statestore.errors import (
    CommitConflictError,
    CommitOutcomeUnknownError,
    FileAlreadyExistsError,
    InvalidTransactionError,
    StateStoreError,
    StoreUnavailableError,
    TableLogGoneError,
    TableNotFoundError,
    TransactionNotRetainedError,
)
from statestore.state.table_state import TableState
from statestore.store.memory import InMemoryBlobStore, InMemorySnapshotMetadataStore, InMemoryTransactionLog
from statestore.store.ports import CommitStatus, LogEntry
from statestore.transactions import (
    AddFiles,
    AssignJobIdRequest,
    AssignJobIds,
    BatchItem,
    InitialisePartitions,
    ReplaceFileReferences,
    ReplaceFileReferencesJob,
    Transaction,
    TransactionBatch,
)
from tests.builders import STRING_SCHEMA, ReadRecordingLog, data_key, ref, tree

TABLE = "table-1"


def key(name: str) -> str:
    """A data file's key under the table's data prefix."""
    return data_key(TABLE, name)


def ticking_clock(start: int = 1_000) -> Iterator[int]:
    return itertools.count(start, 10)


def make_store(
    log: InMemoryTransactionLog,
    snapshots: SnapshotStore | None = None,
    *,
    retry: RetryPolicy | None = None,
    clock_start: int = 1_000,
    sleeps: list[float] | None = None,
    rng: random.Random | None = None,
) -> TransactionLogStateStore:
    clock = ticking_clock(clock_start)
    recorded = sleeps if sleeps is not None else []
    return TransactionLogStateStore(
        TABLE,
        STRING_SCHEMA,
        log,
        snapshots,
        retry=retry,
        clock=lambda: next(clock),
        sleep=recorded.append,
        rng=rng,
    )


def snapshot_store() -> SnapshotStore:
    return SnapshotStore(InMemorySnapshotMetadataStore(), InMemoryBlobStore())


def initialise(store: TransactionLogStateStore) -> None:
    store.commit(InitialisePartitions(tuple(tree(STRING_SCHEMA, ["m"]))))


def add(name: str, partition_id: str = "p1") -> AddFiles:
    """Add the data file ``name`` (its key under the table's data prefix)."""
    return AddFiles((ref(key(name), partition_id),))


class RacingLog(InMemoryTransactionLog):
    """A log where, before each of the next ``rivals`` appends, a rival writer takes the number first."""

    def __init__(self) -> None:
        super().__init__()
        self.rivals = 0
        self.rival_files: list[str] = []
        self._racing = False

    def race(self, rivals: int, file_for_rival: str | None = None) -> None:
        self.rivals = rivals
        self._file_for_rival = file_for_rival

    def append(self, table_id: str, entry: LogEntry, outcomes: Sequence[CommitStatus] = ()) -> None:
        if self.rivals > 0 and not self._racing:
            self.rivals -= 1
            self._racing = True
            try:
                rival = make_store(self, clock_start=50_000)
                filename = self._file_for_rival or f"rival-{len(self.rival_files)}"
                rival.commit(add(filename))
                self.rival_files.append(filename)
            finally:
                self._racing = False
        super().append(table_id, entry, outcomes)


class FailingLog(InMemoryTransactionLog):
    """A log whose appends fail after ``ok`` successes."""

    def __init__(self, ok: int) -> None:
        super().__init__()
        self.ok = ok

    def append(self, table_id: str, entry: LogEntry, outcomes: Sequence[CommitStatus] = ()) -> None:
        if self.ok <= 0:
            raise StoreUnavailableError("the log is down")
        self.ok -= 1
        super().append(table_id, entry, outcomes)


# --- committing ---------------------------------------------------------------------------------------


def test_commit_appends_the_next_number_and_applies_with_the_entry_update_time() -> None:
    log = InMemoryTransactionLog()
    store = make_store(log)

    first = store.commit(InitialisePartitions(tuple(tree(STRING_SCHEMA, ["m"]))))
    second = store.commit(add("a"))

    assert (first.transaction_number, second.transaction_number) == (1, 2)
    assert log.latest_number(TABLE) == 2
    entries = list(log.read(TABLE, 1))
    assert [(e.transaction_number, e.transaction_type) for e in entries] == [
        (1, "InitialisePartitions"),
        (2, "AddFiles"),
    ]
    assert entries[1].update_time == second.update_time
    state = store.state()
    assert state.transaction_number == 2
    assert state.file(key("a")).last_update_time == second.update_time
    assert second.attempts == 1 and store.retries == 0


def test_a_second_store_replays_the_same_state_including_update_times() -> None:
    log = InMemoryTransactionLog()
    writer = make_store(log)
    initialise(writer)
    writer.commit(add("a"))
    writer.commit(AssignJobIds((AssignJobIdRequest("job", "p1", (key("a"),)),)))

    reader = make_store(log, clock_start=99_999_999)

    assert reader.state() == writer.state()


def test_a_commit_that_fails_validation_writes_nothing() -> None:
    log = InMemoryTransactionLog()
    store = make_store(log)
    initialise(store)
    store.commit(add("a"))
    before = store.state().copy()

    with pytest.raises(FileAlreadyExistsError):
        store.commit(add("a", "p2"))

    assert log.latest_number(TABLE) == 2
    assert store.state() == before


def test_a_commit_whose_append_fails_is_not_applied_locally() -> None:
    log = FailingLog(ok=1)
    store = make_store(log)
    initialise(store)
    before = store.state().copy()

    # The put may have reached the log before failing: the outcome is unknown, never a validation error.
    with pytest.raises(CommitOutcomeUnknownError):
        store.commit(add("a"))

    assert store.cached_state() == before
    assert key("a") not in store.state().files_by_name


def test_a_collision_makes_the_commit_catch_up_and_land_after_the_other_writer() -> None:
    log = RacingLog()
    sleeps: list[float] = []
    store = make_store(log, sleeps=sleeps)
    initialise(store)
    log.race(1)

    result = store.commit(add("mine"))

    assert result.transaction_number == 3 and result.attempts == 2 and store.retries == 1
    assert len(sleeps) == 1
    assert [e.transaction_type for e in log.read(TABLE, 2)] == ["AddFiles", "AddFiles"]
    state = store.state()
    assert {key("mine"), key("rival-0")} <= set(state.files_by_name)
    assert make_store(log).state() == state


def test_a_collision_revalidates_and_rejects_a_file_the_other_writer_already_added() -> None:
    log = RacingLog()
    store = make_store(log)
    initialise(store)
    log.race(1, file_for_rival="same")

    with pytest.raises(FileAlreadyExistsError, match="same"):
        store.commit(add("same", "p2"))

    assert log.latest_number(TABLE) == 2  # only the rival's entry was written
    assert [r.partition_id for r in store.state().file(key("same")).references] == ["p1"]


def test_retries_back_off_with_full_jitter_capped_exponential_delays() -> None:
    log = RacingLog()
    sleeps: list[float] = []
    policy = RetryPolicy(max_attempts=6, base_delay=0.01, max_delay=0.05)
    store = make_store(log, retry=policy, sleeps=sleeps, rng=random.Random(7))
    initialise(store)
    log.race(5)

    result = store.commit(add("mine"))

    assert result.attempts == 6 and result.transaction_number == 1 + 5 + 1
    assert len(sleeps) == 5
    for attempt, delay in enumerate(sleeps):
        assert 0.0 <= delay <= min(0.05, 0.01 * 2**attempt)
    # Full jitter: each delay is drawn uniformly from [0, bound], not the bound itself.
    expected_rng = random.Random(7)
    assert sleeps == [expected_rng.uniform(0.0, min(0.05, 0.01 * 2**a)) for a in range(5)]
    assert len(set(sleeps)) == 5


def test_a_commit_gives_up_with_commit_conflict_after_its_attempts_and_writes_nothing() -> None:
    log = RacingLog()
    sleeps: list[float] = []
    store = make_store(log, retry=RetryPolicy(max_attempts=3, base_delay=0.001), sleeps=sleeps)
    initialise(store)
    log.race(10)

    with pytest.raises(CommitConflictError, match="3 attempts"):
        store.commit(add("mine"))

    assert log.rival_files == ["rival-0", "rival-1", "rival-2"]
    assert log.latest_number(TABLE) == 4
    assert key("mine") not in make_store(log).state().files_by_name
    assert key("mine") not in store.state().files_by_name


def test_commit_reports_the_jobs_it_skipped() -> None:
    log = InMemoryTransactionLog()
    store = make_store(log)
    initialise(store)
    store.commit(AddFiles((ref(key("a"), "p1"), ref(key("b"), "p2"))))
    store.commit(
        AssignJobIds(
            (AssignJobIdRequest("j1", "p1", (key("a"),)), AssignJobIdRequest("j2", "p2", (key("b"),)))
        )
    )

    result = store.commit(
        ReplaceFileReferences(
            (
                ReplaceFileReferencesJob("j1", "p1", (key("a"),), ref(key("out-a"), "p1")),
                ReplaceFileReferencesJob("j9", "p2", (key("b"),), ref(key("out-b"), "p2")),
            )
        )
    )

    assert [job_id for job_id, _ in result.rejected_parts] == ["j9"]
    assert "not assigned to job 'j9'" in result.rejected_parts[0][1]
    assert key("out-a") in store.state().files_by_name and key("out-b") not in store.state().files_by_name
    assert make_store(log).state() == store.state()


# --- loading and time travel --------------------------------------------------------------------------


def history() -> list[Transaction]:
    return [
        InitialisePartitions(tuple(tree(STRING_SCHEMA, ["m"]))),
        AddFiles((ref(key("a"), "p1"), ref(key("b"), "p1"), ref(key("b"), "p2"))),
        AssignJobIds((AssignJobIdRequest("j1", "p1", (key("a"), key("b"))),)),
        AddFiles((ref(key("c"), "p2"),)),
        ReplaceFileReferences(
            (ReplaceFileReferencesJob("j1", "p1", (key("a"), key("b")), ref(key("ab"), "p1")),)
        ),
        AddFiles((ref(key("d"), "p1"),)),
    ]


def commit_history(store: TransactionLogStateStore, snapshot_after: Collection[int] = ()) -> list[TableState]:
    """Commit ``history()``; return the state after each number (index 0 = empty)."""
    states = [TableState(STRING_SCHEMA)]
    for transaction in history():
        number = store.commit(transaction).transaction_number
        states.append(store.state().copy())
        if number in snapshot_after:
            store.create_snapshot()
    return states


@pytest.mark.parametrize("snapshot_after", [set(), {2}, {3, 5}, {6}], ids=str)
def test_load_as_of_each_number_equals_the_state_after_that_many_commits(snapshot_after: set[int]) -> None:
    log = InMemoryTransactionLog()
    snapshots = snapshot_store()
    states = commit_history(make_store(log, snapshots), snapshot_after)

    reader = make_store(log, snapshots)
    for number, expected in enumerate(states):
        assert reader.load(as_of=number) == expected
    assert reader.load() == states[-1]


def test_load_rejects_numbers_outside_the_log() -> None:
    log = InMemoryTransactionLog()
    store = make_store(log)
    initialise(store)

    with pytest.raises(StateStoreError, match="no transaction 2 yet"):
        store.load(as_of=2)
    with pytest.raises(StateStoreError, match=">= 0"):
        store.load(as_of=-1)


def test_load_of_an_empty_log_is_an_empty_state() -> None:
    assert make_store(InMemoryTransactionLog(), snapshot_store()).load() == TableState(STRING_SCHEMA)


def test_loading_starts_from_the_latest_snapshot_and_reads_only_the_log_after_it() -> None:
    log = ReadRecordingLog()
    snapshots = snapshot_store()
    states = commit_history(make_store(log, snapshots), snapshot_after={4})
    log.reads_from.clear()

    loaded = make_store(log, snapshots).load()

    assert loaded == states[-1]
    assert log.reads_from == [5]


def test_time_travel_before_a_deleted_part_of_the_log_is_not_retained() -> None:
    log = InMemoryTransactionLog()
    snapshots = snapshot_store()
    states = commit_history(make_store(log, snapshots), snapshot_after={4})
    log.delete_up_to(TABLE, 4)
    reader = make_store(log, snapshots)

    assert reader.load(as_of=5) == states[5]
    assert reader.load(as_of=4) == states[4]
    with pytest.raises(TransactionNotRetainedError):
        reader.load(as_of=3)


# --- snapshots and cleanup ----------------------------------------------------------------------------


def test_snapshot_creation_skips_when_the_log_has_not_moved() -> None:
    log = InMemoryTransactionLog()
    snapshots = snapshot_store()
    store = make_store(log, snapshots)

    assert store.create_snapshot() is None  # nothing in the log yet
    initialise(store)
    first = store.create_snapshot()
    assert first is not None and first.transaction_number == 1
    assert store.create_snapshot() is None
    assert make_store(log, snapshots).create_snapshot() is None
    store.commit(add("a"))
    second = store.create_snapshot()
    assert second is not None and second.transaction_number == 2
    assert [s.transaction_number for s in snapshots.metadata.list(TABLE)] == [1, 2]


def test_a_store_without_a_snapshot_store_cannot_create_snapshots() -> None:
    with pytest.raises(StateStoreError, match="no snapshot store"):
        make_store(InMemoryTransactionLog()).create_snapshot()


def test_a_store_behind_catches_up_from_a_newer_snapshot_after_cleanup_deleted_its_next_entries() -> None:
    log = InMemoryTransactionLog()
    snapshots = snapshot_store()
    behind = make_store(log, snapshots)
    initialise(behind)
    behind.commit(add("a"))
    writer = make_store(log, snapshots)
    for name in ("b", "c", "d", "e"):
        writer.commit(add(name))
    writer.create_snapshot()  # at 6
    writer.commit(add("f"))  # 7
    log.delete_up_to(TABLE, 5)

    assert behind.state() == writer.state()
    assert behind.commit(add("g")).transaction_number == 8


def test_a_store_behind_catches_up_when_cleanup_deleted_every_entry_up_to_the_snapshot() -> None:
    log = InMemoryTransactionLog()
    snapshots = snapshot_store()
    behind = make_store(log, snapshots)
    initialise(behind)
    writer = make_store(log, snapshots)
    writer.commit(add("b"))
    writer.commit(add("c"))
    writer.create_snapshot()  # at 3, the latest transaction
    log.delete_up_to(TABLE, 3)
    # The latest entry is kept, so the reader behind sees a gap rather than an empty log.
    assert [e.transaction_number for e in log.read(TABLE, 0)] == [3]

    assert behind.state() == writer.state()
    # The next commit must take number 4, not reuse a deleted number.
    assert behind.commit(add("d")).transaction_number == 4
    assert [e.transaction_number for e in log.read(TABLE, 0)] == [3, 4]


def test_catching_up_over_deleted_entries_no_snapshot_covers_is_not_retained() -> None:
    log = InMemoryTransactionLog()
    behind = make_store(log, snapshot_store())
    initialise(behind)
    writer = make_store(log)
    for name in ("b", "c", "d"):
        writer.commit(add(name))
    log.delete_up_to(TABLE, 3)

    with pytest.raises(TransactionNotRetainedError, match="deleted"):
        behind.state()
    with pytest.raises(TransactionNotRetainedError):
        behind.commit(add("e"))
    assert log.latest_number(TABLE) == 4


def test_a_cached_state_is_used_as_is_while_fresh_and_caught_up_once_unread_for_too_long() -> None:
    log = InMemoryTransactionLog()
    now = [1_000]
    store = TransactionLogStateStore(TABLE, STRING_SCHEMA, log, clock=lambda: now[0], max_unread_ms=60_000)
    initialise(store)
    store.state()
    make_store(log).commit(add("by-another-writer"))

    now[0] += 30_000
    assert key("by-another-writer") not in store.cached_state().files_by_name  # fresh enough: no log read
    now[0] += 31_000
    assert key("by-another-writer") in store.cached_state().files_by_name  # unread for > 60 s: caught up


def test_a_stale_writer_cannot_reuse_a_number_cleanup_deleted() -> None:
    log = InMemoryTransactionLog()
    snapshots = snapshot_store()
    stale = make_store(log, snapshots)
    initialise(stale)
    stale.state()
    writer = make_store(log, snapshots)
    for name in ("b", "c"):
        writer.commit(add(name))
    writer.create_snapshot()  # at 3, the latest
    log.delete_up_to(TABLE, 3)  # keeps entry 3: the log never loses its latest entry

    result = stale.commit(add("d"))

    assert result.transaction_number == 4
    assert [e.transaction_number for e in log.read(TABLE, 0)] == [3, 4]
    assert stale.state() == make_store(log, snapshots).load()


def test_a_writer_fresh_by_its_clock_but_behind_cleanup_never_fills_a_deleted_number() -> None:
    # Cleanup deletes only entries older than its minimum age, longer than a writer may go without reading
    # the log; but entries' ages come from their writers' clocks. Here cleanup ran early (as a fast clock
    # makes it), while the stale writer's own clock says its state is fresh: the log itself must refuse.
    log = InMemoryTransactionLog()
    snapshots = snapshot_store()
    now = [1_000]
    stale = TransactionLogStateStore(
        TABLE, STRING_SCHEMA, log, snapshots, clock=lambda: now[0], max_unread_ms=60_000
    )
    initialise(stale)
    writer = make_store(log, snapshots, clock_start=2_000)
    for name in ("b", "c", "d"):
        writer.commit(add(name))
    writer.create_snapshot()  # at 4
    writer.commit(add("e"))  # 5
    log.delete_up_to(TABLE, 4)

    result = stale.commit_group([GroupMember("late", add("f"))])

    assert result.transaction_number == 6  # not 2, a number cleanup deleted, which no reader would read
    assert [e.transaction_number for e in log.read(TABLE, 0)] == [5, 6]
    assert set(make_store(log, snapshots).load().files_by_name) == {key(n) for n in "bcdef"}


def test_a_writer_whose_tables_log_was_emptied_is_told_so_at_once_and_writes_nothing() -> None:
    """The log keeps its latest entry, so one with nothing at or after a writer's state was emptied: the
    table was deleted. No retry can land there (nor should one be mistaken for other writers' races)."""
    log = InMemoryTransactionLog()
    sleeps: list[float] = []
    writer = make_store(log, snapshot_store(), sleeps=sleeps)
    initialise(writer)
    writer.commit(add("a"))
    log.delete_table(TABLE)

    with pytest.raises(TableLogGoneError, match="no longer holds transaction 2") as raised:
        writer.commit_group([GroupMember("late", add("b"))])

    assert isinstance(raised.value, TableNotFoundError)  # CLI: "not found"; a committer: read its record
    assert log.latest_number(TABLE) == 0 and sleeps == []  # refused once, not retried


def test_a_malformed_transaction_is_reported_by_its_validation_not_by_the_codec() -> None:
    log = InMemoryTransactionLog()
    store = make_store(log)
    initialise(store)
    nested = TransactionBatch((BatchItem("outer", TransactionBatch((BatchItem("inner", add("a")),))),))

    with pytest.raises(InvalidTransactionError, match="nested"):
        store.commit(nested)
    assert log.latest_number(TABLE) == 1


# --- log times never run backwards -------------------------------------------------------------------------


def update_times(log: InMemoryTransactionLog) -> list[int]:
    return [entry.update_time for entry in log.read(TABLE, 1)]


def test_a_writer_whose_clock_is_behind_never_writes_an_entry_older_than_the_one_before() -> None:
    log = InMemoryTransactionLog()
    on_time = make_store(log, clock_start=1_000_000)
    slow = make_store(log, clock_start=1_000_000 - 10 * 60_000)  # ten minutes behind
    on_time.commit(InitialisePartitions(tuple(tree(STRING_SCHEMA))))
    on_time.commit(AddFiles((ref(key("a")),)))

    slow.commit(AddFiles((ref(key("b")),)))
    on_time.commit(AddFiles((ref(key("c")),)))

    times = update_times(log)
    assert times == sorted(times)
    assert times[2] == times[1]  # the slow writer's entry takes the time of the one before it
    assert slow.state().files_by_name[key("b")].last_update_time == times[1]


@pytest.mark.parametrize("kept_in_snapshot", [True, False], ids=["snapshot-keeps-it", "older-snapshot"])
def test_a_state_loaded_from_a_snapshot_knows_the_time_its_next_entry_starts_from(
    kept_in_snapshot: bool,
) -> None:
    log, blobs = InMemoryTransactionLog(), InMemoryBlobStore()
    snapshots = SnapshotStore(InMemorySnapshotMetadataStore(), blobs)
    fast = make_store(log, snapshots, clock_start=5_000_000)
    fast.commit(InitialisePartitions(tuple(tree(STRING_SCHEMA))))
    fast.commit(AddFiles((ref(key("a")),)))
    if not kept_in_snapshot:  # a snapshot written before it kept the time: the log's latest entry tells
        fast.state().last_update_time = 0
    fast.create_snapshot()
    slow = make_store(log, snapshots, clock_start=1_000)  # cold, and its clock far behind

    slow.commit(AddFiles((ref(key("b")),)))

    times = update_times(log)
    assert times == sorted(times) and times[-1] == times[-2]
