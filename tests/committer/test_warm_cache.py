"""The committer over more tables than its warm budget holds: bounded memory, every commit exactly once."""

from __future__ import annotations

import gc
import random
import weakref
from collections.abc import Iterator, Sequence

import pytest

from statestore.codec.parquet import freeze_loaded_states
from statestore.engine import log_loading
from statestore.engine.snapshots import Copy
from statestore.errors import StoreUnavailableError
from statestore.model.schema import Schema
from statestore.services.committer import BatchCommitter, MessageOutcome, MessageResult, ReceivedMessage
from statestore.sizing import WarmBudget, warm_state_bytes
from statestore.state.file_guard import GUARD_OVERHEAD_BYTES
from statestore.state.table_state import TableState
from statestore.store.memory import InMemoryCommitStatusStore, InMemoryTransactionLog
from statestore.store.ports import CommitStatus, LogEntry
from statestore.store.snapshot_ports import SnapshotInfo
from statestore.store.tables import QUERYABLE_VIEW_PROPERTY
from statestore.transactions import AddFiles, Transaction
from tests.builders import data_key, ref
from tests.committer.harness import Harness, add_files, message, redelivered

TABLES = 12
FILES_PER_TABLE = 40  # references each table starts with
PARTITIONS = 1  # each table's tree: the root alone
TABLE_BYTES = warm_state_bytes(FILES_PER_TABLE, PARTITIONS)
KEPT = 3  # tables the budget holds as they start (they grow as they are committed to)
BUDGET = KEPT * TABLE_BYTES + TABLE_BYTES // 2
GUARD_BYTES = 8 * FILES_PER_TABLE + GUARD_OVERHEAD_BYTES  # a guard keeps at least its hashes and itself


@pytest.fixture
def h() -> Harness:
    return Harness()


def tables_with_files(h: Harness, count: int, files: int, prefix: str = "t") -> list[str]:
    table_ids = []
    for i in range(count):
        table_id = h.create_table(f"{prefix}{i}")
        h.store(table_id).commit(AddFiles(tuple(ref(data_key(table_id, f"seed-{n}")) for n in range(files))))
        table_ids.append(table_id)
    return table_ids


def assert_within_budget(committer: BatchCommitter) -> None:
    kept = committer.warm_tables
    assert sum(kept.values()) <= committer.warm_budget.bytes, kept
    # The accounting is of what is kept: a loaded state at its size, an evicted one's guard at its own.
    assert all(size >= GUARD_BYTES for size in kept.values()), kept


def test_a_committer_over_more_tables_than_its_budget_stays_within_it_and_commits_each_request_once(
    h: Harness,
) -> None:
    table_ids = tables_with_files(h, TABLES, FILES_PER_TABLE)
    committer = h.committer(warm_budget=WarmBudget(BUDGET))
    rng = random.Random(7)
    sent: list[tuple[ReceivedMessage, MessageResult]] = []
    expected: dict[str, set[str]] = {t: set() for t in table_ids}
    redeliveries = 0
    for round_ in range(60):
        table_id = rng.choice(table_ids)
        names = [f"r{round_}-{n}" for n in range(3)]
        batch = [message(add_files(table_id, name)) for name in names]
        results = committer.process(batch)
        assert [r.outcome for r in results] == [MessageOutcome.COMMITTED] * 3
        sent += zip(batch, results, strict=True)
        expected[table_id].update(names)
        assert_within_budget(committer)
        assert len(set(committer.warm_tables) - committer.guarded_tables) <= KEPT  # states loaded

        # Now and then a message committed earlier comes back (its acknowledgement was lost): once its
        # table's state has been evicted, it is answered from the status written with the log entry.
        if round_ % 5 == 4:
            loaded = set(committer.warm_tables) - committer.guarded_tables
            evicted = [(m, r) for m, r in sent if r.table_id not in loaded]
            assert evicted, "the budget evicted no table this test commits to"
            again, first = rng.choice(evicted)
            [result] = committer.process([redelivered(again)])
            assert (result.outcome, result.transaction_number) == (
                MessageOutcome.DUPLICATE,
                first.transaction_number,
            )
            redeliveries += 1
            assert_within_budget(committer)

    counts = committer.warm_counts
    assert counts.evictions + counts.demotions >= TABLES - KEPT and counts.oversized == 0
    assert redeliveries == 12
    for table_id in table_ids:  # every request landed exactly once: read back by a fresh reader
        state = h.state(table_id)
        added = {name.removeprefix(data_key(table_id, "")) for name in state.files_by_name}
        assert added - {f"seed-{n}" for n in range(FILES_PER_TABLE)} == expected[table_id]
        assert state.reference_count() == FILES_PER_TABLE + len(expected[table_id])


def test_a_batch_counts_the_tables_it_evicted_and_what_the_cache_keeps(h: Harness) -> None:
    first, second = tables_with_files(h, 2, FILES_PER_TABLE)
    committer = h.committer(warm_budget=WarmBudget(TABLE_BYTES + TABLE_BYTES // 2))  # one table at a time

    committer.process([message(add_files(first, "a"))])
    assert (committer.last_batch.evictions, committer.last_batch.warm_tables) == (0, 1)
    committer.process([message(add_files(second, "b"))])

    batch = committer.last_batch
    assert (batch.cold_loads, batch.warm_loads, batch.evictions, batch.oversized) == (1, 0, 1, 0)
    assert batch.warm_tables == 1
    assert batch.warm_bytes == warm_state_bytes(FILES_PER_TABLE + 1, PARTITIONS)
    assert list(committer.warm_tables) == [second]


def test_an_evicted_table_is_loaded_again_with_what_others_committed_meanwhile(h: Harness) -> None:
    table, other = tables_with_files(h, 2, FILES_PER_TABLE)
    committer = h.committer(warm_budget=WarmBudget(TABLE_BYTES + TABLE_BYTES // 2))
    committer.process([message(add_files(table, "a"))])
    committer.process([message(add_files(other, "x"))])  # evicts the first table
    assert table not in committer.warm_tables
    h.store(table).commit(AddFiles((ref(data_key(table, "elsewhere")),)))  # another writer
    h.store(table).create_snapshot()

    # Validated against the state reloaded from the snapshot: a file the other writer added is a duplicate.
    results = committer.process([message(add_files(table, "elsewhere")), message(add_files(table, "b"))])

    assert [r.outcome for r in results] == [MessageOutcome.REJECTED, MessageOutcome.COMMITTED]
    assert committer.last_batch.cold_loads == 1
    assert {"a", "b", "elsewhere"} <= {n.rsplit("/", 1)[-1] for n in h.state(table).files_by_name}


def test_a_table_larger_than_the_whole_budget_is_loaded_used_and_dropped(h: Harness) -> None:
    small, huge = tables_with_files(h, 1, FILES_PER_TABLE) + tables_with_files(
        h, 1, 4 * FILES_PER_TABLE, "huge"
    )
    committer = h.committer(warm_budget=WarmBudget(2 * TABLE_BYTES))
    committer.process([message(add_files(small, "a"))])

    for name in ("b", "c"):
        [result] = committer.process([message(add_files(huge, name))])
        assert result.outcome is MessageOutcome.COMMITTED
        assert committer.last_batch.oversized == 1 and committer.last_batch.cold_loads == 1
        assert huge not in committer.warm_tables
    # The second time its size was known: the small table was evicted to give its load the memory.
    assert list(committer.warm_tables) == []
    assert committer.warm_counts.evictions == 1
    assert h.state(huge).reference_count() == 4 * FILES_PER_TABLE + 2


def test_a_zero_budget_keeps_no_table_warm_and_commits_all_the_same(h: Harness) -> None:
    [table] = tables_with_files(h, 1, 2)
    committer = h.committer(warm_budget=WarmBudget(0))
    first = message(add_files(table, "a"))
    results = [committer.process([first]), committer.process([message(add_files(table, "b"))])]

    assert [r.outcome for batch in results for r in batch] == [MessageOutcome.COMMITTED] * 2
    assert committer.last_batch.cold_loads == 1 and committer.warm_tables == {}
    [again] = committer.process([redelivered(first)])
    assert (again.outcome, again.transaction_number) == (
        MessageOutcome.DUPLICATE,
        results[0][0].transaction_number,
    )


def kept_when_loaded(committer: BatchCommitter) -> dict[str, int]:
    """Watch the committer's snapshot reads: each table's estimated bytes kept warm when its snapshot was
    read (after the room for its load was made)."""
    assert committer.snapshots is not None
    snapshots, read = committer.snapshots, committer.snapshots.read
    kept: dict[str, int] = {}

    def read_and_watch(info: SnapshotInfo, schema: Schema, copy: Copy | None = None) -> TableState:
        kept[info.table_id] = sum(committer.warm_tables.values())
        return read(info, schema, copy)

    snapshots.read = read_and_watch  # type: ignore[method-assign]
    return kept


def test_a_never_seen_table_whose_snapshot_counts_its_state_has_room_made_for_its_loads_peak(
    h: Harness,
) -> None:
    small = tables_with_files(h, 5, FILES_PER_TABLE)
    [big] = tables_with_files(h, 1, 10 * FILES_PER_TABLE, "big")
    h.store(big).create_snapshot()  # its record counts its references and partitions
    big_bytes = warm_state_bytes(10 * FILES_PER_TABLE, PARTITIONS)
    budget = WarmBudget(
        3 * big_bytes + 3 * TABLE_BYTES + TABLE_BYTES // 2, 3.0
    )  # three small ones beside its peak
    committer = h.committer(warm_budget=budget)
    kept = kept_when_loaded(committer)
    for table_id in small:
        committer.process([message(add_files(table_id, "a"))])
    assert len(committer.warm_tables) == 5

    [result] = committer.process([message(add_files(big, "b"))])

    assert result.outcome is MessageOutcome.COMMITTED
    assert kept[big] + 3 * big_bytes <= budget.bytes  # the room was made before its snapshot was read
    assert committer.last_batch.demotions >= 1  # the least recently used states dropped first
    assert set(committer.warm_tables) - committer.guarded_tables == {big}


def test_a_never_seen_table_of_unknown_size_has_a_load_factor_th_of_the_budget_kept_beside_its_load(
    h: Harness,
) -> None:
    table_ids = tables_with_files(h, 7, FILES_PER_TABLE)
    unknown = table_ids.pop()  # no snapshot: its size is known only once loaded
    # Six states; a third of it holds one state and five guards (~4.5 KB each), not two states and four.
    budget = WarmBudget(12 * TABLE_BYTES, 3.0)
    committer = h.committer(warm_budget=budget)
    for table_id in table_ids:
        h.store(table_id).create_snapshot()
        committer.process([message(add_files(table_id, "a"))])
    assert len(committer.warm_tables) == 6
    kept = kept_when_loaded(committer)

    [result] = committer.process([message(add_files(unknown, "b"))])

    assert result.outcome is MessageOutcome.COMMITTED
    assert (committer.last_batch.demotions, committer.last_batch.evictions) == (5, 0)
    assert unknown not in kept  # no snapshot read: its log is its whole state
    assert list(committer.warm_tables) == [*table_ids, unknown]
    assert set(committer.warm_tables) - committer.guarded_tables == {table_ids[-1], unknown}
    assert sum(size for t, size in committer.warm_tables.items() if t != unknown) <= budget.bytes / 3


class _RefusingLog(InMemoryTransactionLog):
    """A log whose appends fail (a store that is down) while ``refusing``."""

    refusing = False

    def append(self, table_id: str, entry: LogEntry, outcomes: Sequence[CommitStatus] = ()) -> None:
        if self.refusing:
            raise StoreUnavailableError("the log is unavailable")
        super().append(table_id, entry, outcomes)


def test_a_table_loaded_for_a_commit_that_failed_is_counted_in_the_budget() -> None:
    log = _RefusingLog(None, InMemoryCommitStatusStore())
    h = Harness(log=log)
    [table_id] = tables_with_files(h, 1, FILES_PER_TABLE)
    committer = h.committer(warm_budget=WarmBudget(BUDGET))
    log.refusing = True

    [result] = committer.process([message(add_files(table_id, "a"))])

    assert result.retry
    # Loaded, so counted (as the budget counts: measured after use), though nothing was committed.
    assert committer.last_batch.warm_bytes == TABLE_BYTES


@pytest.fixture
def frozen_states() -> Iterator[None]:
    """Loaded states moved out of the cycle collector's reach, as a Lambda container does."""
    freeze_loaded_states()
    yield
    freeze_loaded_states(False)
    gc.unfreeze()


def snapshotted_tables(h: Harness, count: int) -> list[str]:
    """Tables with files and a snapshot each: loads come from snapshots, which freeze what they load."""
    table_ids = tables_with_files(h, count, FILES_PER_TABLE)
    for table_id in table_ids:
        h.store(table_id).create_snapshot()
    return table_ids


def test_an_evicted_tables_state_is_freed_where_loaded_states_are_frozen(
    h: Harness, frozen_states: None
) -> None:
    # Frozen objects are never collected as cycles: an evicted state must be freed by reference counting.
    table_ids = snapshotted_tables(h, 4)
    # KEPT states, and room beside them for the guard the oldest of them becomes to make room for the next.
    committer = h.committer(warm_budget=WarmBudget(BUDGET + GUARD_OVERHEAD_BYTES))
    assert committer.snapshots is not None
    snapshots, read = committer.snapshots, committer.snapshots.read
    seen: dict[str, weakref.ref[TableState]] = {}

    def read_and_watch(info: SnapshotInfo, schema: Schema, copy: Copy | None = None) -> TableState:
        state = read(info, schema, copy)
        seen[info.table_id] = weakref.ref(state)
        return state

    snapshots.read = read_and_watch  # type: ignore[method-assign]
    for table_id in table_ids:
        committer.process([message(add_files(table_id, "a"))])
    gc.collect()

    alive = {table_id for table_id, state in seen.items() if state() is not None}
    assert gc.get_freeze_count() > 0
    assert set(seen) == set(table_ids)
    loaded = set(committer.warm_tables) - committer.guarded_tables
    assert alive == loaded and len(alive) == KEPT


def test_a_dropped_committers_states_are_freed_where_loaded_states_are_frozen(
    h: Harness, frozen_states: None
) -> None:
    # Nothing a warm table holds may lead back to the committer: a cycle through frozen objects is never
    # collected, and would keep every state of a dropped committer (a rebuilt one, a benchmark's) for good.
    table_ids = snapshotted_tables(h, 2)
    committer = h.committer(warm_budget=WarmBudget(BUDGET))
    for table_id in table_ids:
        committer.process([message(add_files(table_id, "a"))])
    seen = []
    for table_id in table_ids:
        warm = committer._tables.peek(table_id)
        assert warm is not None and warm.store.loaded_state is not None
        seen.append(weakref.ref(warm.store.loaded_state))
    del warm

    del committer
    gc.collect()

    assert gc.get_freeze_count() > 0
    assert [state() for state in seen] == [None, None]


class _RecordingLog(InMemoryTransactionLog):
    """A log that records, per appended entry, whether it asked for the log's leaf index."""

    def __init__(self) -> None:
        super().__init__(None, InMemoryCommitStatusStore())
        self.asked: list[bool] = []

    def append(self, table_id: str, entry: LogEntry, outcomes: Sequence[CommitStatus] = ()) -> None:
        super().append(table_id, entry, outcomes)
        self.asked.append(entry.index_leaves)


def test_a_warm_table_whose_view_is_switched_asks_for_the_leaf_index_from_the_next_check() -> None:
    """The committer keeps a table warm across the view being switched on and off: once it reads the
    table's record again, its entries ask for the log's leaf index as the view does (or stop asking)."""
    h = Harness(log=_RecordingLog())
    log = h.log
    assert isinstance(log, _RecordingLog)
    table_id = h.create_table("t")
    committer = h.committer()
    for step, (view, files) in enumerate([(None, "a"), ("true", "b"), ("false", "c")]):
        if view is not None:
            h.tables.set_property(table_id, QUERYABLE_VIEW_PROPERTY, view)
            h.clock.advance(committer.table_info_ttl_ms)
        committer.process([message(add_files(table_id, f"{files}-{step}"))])
        assert committer.warm_tables.keys() == {table_id}  # kept warm throughout
    assert log.asked[-3:] == [False, True, False]


IMPORTS, PER_IMPORT = 4, 100  # entries in the log of a table since its snapshot, and the references each adds


def outgrown_table(h: Harness) -> tuple[str, WarmBudget, BatchCommitter]:
    """A table whose snapshot counts 40 references and whose log then adds ten times as many, in imports; a
    committer whose budget holds its largest entry's peak and two small tables beside it, keeping five."""
    small = tables_with_files(h, 5, FILES_PER_TABLE)
    [big] = tables_with_files(h, 1, FILES_PER_TABLE, "big")
    h.store(big).create_snapshot()
    for n in range(IMPORTS):
        h.store(big).commit(AddFiles(tuple(ref(data_key(big, f"import-{n}-{i}")) for i in range(PER_IMPORT))))
    largest_peak = warm_state_bytes(FILES_PER_TABLE + (IMPORTS - 1) * PER_IMPORT, PARTITIONS) + round(
        3 * warm_state_bytes(PER_IMPORT, 0)
    )
    budget = WarmBudget(largest_peak + 2 * TABLE_BYTES, 3.0)
    committer = h.committer(warm_budget=budget)
    for table_id in small:
        committer.process([message(add_files(table_id, "a"))])
    assert len(committer.warm_tables) == 5
    return big, budget, committer


def others_kept(committer: BatchCommitter, table_id: str) -> int:
    return sum(size for t, size in committer.warm_tables.items() if t != table_id)


def test_a_table_whose_log_outgrew_its_snapshot_has_room_made_as_its_load_applies_the_log(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A snapshot counts only what was before it: a table whose log grew by imports since is loaded past
    the room its snapshot's counts made. Room is made again as the load applies the log, before each entry
    that grows the state: the others kept and each entry's peak (the state, and the load factor times what
    the entry adds) stay within the budget throughout."""
    big, budget, committer = outgrown_table(h)
    peaks: list[tuple[int, int]] = []  # (others kept, the entry's peak) as each entry is applied to it
    apply = AddFiles.apply

    def apply_and_watch(self: AddFiles, state: TableState, update_time: int) -> None:
        if state.data_prefix is not None and big in state.data_prefix:
            before = warm_state_bytes(state.reference_count(), PARTITIONS)
            added = round(budget.load_factor * warm_state_bytes(len(self.references), 0))
            peaks.append((others_kept(committer, big), before + added))
        apply(self, state, update_time)

    monkeypatch.setattr(AddFiles, "apply", apply_and_watch)

    [result] = committer.process([message(add_files(big, "b"))])

    assert result.outcome is MessageOutcome.COMMITTED
    assert len(peaks) == IMPORTS + 1  # the entries since the snapshot, then the request's own
    assert all(others + peak <= budget.bytes for others, peak in peaks), (budget.bytes, peaks)
    assert committer.last_batch.demotions >= 2
    assert h.state(big).reference_count() == FILES_PER_TABLE + IMPORTS * PER_IMPORT + 1


def test_room_for_a_log_entry_is_made_before_its_body_is_decoded(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Decoding an entry costs about as much memory as applying it (a million-reference import is a million
    decoded references before it is applied). Each entry carries what it adds at most, written with it: the
    room is made from that before the body is decoded, not from the decoded transaction after."""
    big, budget, committer = outgrown_table(h)
    entries = list(h.log.read(big, 1))
    assert [e.most_added for e in entries[-IMPORTS:]] == [(PER_IMPORT, 0)] * IMPORTS  # written with each
    decoded: list[tuple[int, int]] = []  # (others kept, the entry's peak) as each import's body is decoded
    references = {"now": FILES_PER_TABLE}  # the big table's as its load applies the log: the snapshot's first
    decode = log_loading.decode_entry

    def decode_and_watch(entry: LogEntry, table_id: str = "?") -> Transaction:
        if table_id == big and entry.most_added == (PER_IMPORT, 0):
            before = warm_state_bytes(references["now"], PARTITIONS)
            added = round(budget.load_factor * warm_state_bytes(PER_IMPORT, 0))
            decoded.append((others_kept(committer, big), before + added))
        return decode(entry, table_id)

    apply = AddFiles.apply

    def apply_and_count(self: AddFiles, state: TableState, update_time: int) -> None:
        apply(self, state, update_time)
        if state.data_prefix is not None and big in state.data_prefix:
            references["now"] = state.reference_count()

    monkeypatch.setattr(log_loading, "decode_entry", decode_and_watch)
    monkeypatch.setattr(AddFiles, "apply", apply_and_count)

    [result] = committer.process([message(add_files(big, "b"))])

    assert result.outcome is MessageOutcome.COMMITTED
    assert len(decoded) == IMPORTS
    assert all(others + peak <= budget.bytes for others, peak in decoded), (budget.bytes, decoded)
