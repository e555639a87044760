"""Cleanup: never loses what a retained point of the table needs, checked over random histories."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

from statestore.codec.transaction_json import decode_entry
from statestore.engine.log_store import TransactionLogStateStore
from statestore.model import layout
from statestore.services.cleanup import cleanup_table, may_delete_data_file
from statestore.services.cleanup_policy import GC_DELAY_PROPERTY, CleanupPolicy
from statestore.state.table_state import TableState
from statestore.store.memory import InMemoryTransactionLog
from statestore.store.ports import CommitStatus, LogEntry
from statestore.transactions import (
    AddFiles,
    AssignJobIdRequest,
    AssignJobIds,
    ReplaceFileReferences,
    ReplaceFileReferencesJob,
    Transaction,
)
from tests.builders import INT_SCHEMA, append_unchecked, ref
from tests.committer.harness import Harness


class RecordingLog(InMemoryTransactionLog):
    """A log that also keeps every entry ever appended, for a full replay to compare against."""

    def __init__(self) -> None:
        super().__init__()
        self.recorded: list[LogEntry] = []

    def append(self, table_id: str, entry: LogEntry, outcomes: Sequence[CommitStatus] = ()) -> None:
        super().append(table_id, entry, outcomes)
        self.recorded.append(entry)


def replay(entries: list[LogEntry], up_to: int | None = None) -> TableState:
    state = TableState(INT_SCHEMA)
    for entry in entries:
        if up_to is not None and entry.transaction_number > up_to:
            break
        decode_entry(entry).apply(state, entry.update_time)
        state.transaction_number = entry.transaction_number
    return state


operations = st.lists(
    st.one_of(
        st.tuples(
            st.just("add"), st.integers(1, 4), st.integers(0, 4).map(lambda n: n == 0)
        ),  # 1 in 5 foreign
        st.tuples(st.just("compact"), st.sampled_from(["p1", "p2"]), st.just(False)),
        st.tuples(st.just("snapshot"), st.just(0), st.just(False)),
        st.tuples(st.just("tick"), st.integers(1, 4_000), st.just(False)),
        st.tuples(st.just("cleanup"), st.just(0), st.just(False)),
    ),
    min_size=15,
    max_size=60,
)


@settings(max_examples=100, deadline=None)
@given(operations, st.integers(0, 6_000), st.integers(0, 9_000))
def test_cleanup_keeps_everything_a_retained_point_needs(
    ops: list[tuple[str, Any, bool]], log_min_age: int, retention: int
) -> None:
    log = RecordingLog()
    h = Harness(log=log)
    table_id = h.create_table("t", split_points=[0], properties={GC_DELAY_PROPERTY: "0.02"})  # 1.2 s
    table = h.tables.get(table_id)
    store = TransactionLogStateStore(table_id, INT_SCHEMA, log, h.snapshots, clock=h.clock)
    policy = CleanupPolicy(
        log_min_snapshot_age_ms=log_min_age, snapshot_retention_ms=retention, max_clock_skew_ms=0
    )  # one fake clock: the table's 1.2-second delay holds
    names = itertools.count()

    def commit(transaction: Transaction) -> None:
        store.commit(transaction)

    for op, n, foreign in ops:
        if op == "add":
            refs = []
            for _ in range(n):
                number = next(names)
                name = (
                    f"elsewhere/{number}.parquet"
                    if foreign
                    else f"{layout.data_prefix(table_id)}{number}.parquet"
                )
                h.blobs.put(name, b"rows")
                refs.append(ref(name, "p1" if number % 2 else "p2"))
            if foreign:  # no longer accepted: added before a new file had to be a key under the data prefix
                append_unchecked(log, table_id, AddFiles(tuple(refs)), h.clock())
                store.state()  # caught up: its next commit does not first lose a race to this entry
            else:
                commit(AddFiles(tuple(refs)))
        elif op == "compact":
            free = [r.filename for r in store.state().references_in_partition(n) if r.job_id is None][:2]
            if not free:
                continue
            job = f"job-{next(names)}"
            output = f"{layout.data_prefix(table_id)}{next(names)}.parquet"
            h.blobs.put(output, b"rows")
            commit(AssignJobIds((AssignJobIdRequest(job, n, tuple(free)),)))
            commit(ReplaceFileReferences((ReplaceFileReferencesJob(job, n, tuple(free), ref(output, n)),)))
        elif op == "snapshot":
            store.create_snapshot()
        elif op == "tick":
            h.clock.advance(n)
        else:
            latest_before = h.snapshot_metadata.latest(table_id)
            report = cleanup_table(store, table, h.snapshots, h.blobs, policy=policy, now=h.clock())
            check_invariants(h, log, table_id, latest_before)
            for what, count in (
                ("log entries deleted", report.log_entries_deleted),
                ("snapshots expired", report.snapshots_deleted),
                ("data files deleted", report.data_files_deleted),
                ("files refused", len(report.refused_files)),
            ):
                if count:
                    event(what)
            assert all(not may_delete_data_file(table_id, f) for f in report.refused_files)

    check_invariants(h, log, table_id, h.snapshot_metadata.latest(table_id))


def check_invariants(h: Harness, log: RecordingLog, table_id: str, latest_before: object) -> None:
    latest = h.snapshot_metadata.latest(table_id)
    # The latest snapshot is never deleted, and its objects are all there.
    assert latest == latest_before
    if latest is not None:
        h.blobs.get(latest.partitions_key)
        h.blobs.get(latest.files_key)
    # The latest state loads and equals the full replay of everything ever committed.
    head = log.latest_number(table_id)
    loaded = h.store(table_id).load()
    assert loaded == replay(log.recorded)
    # Every referenced data file is still in the bucket.
    for reference in loaded.file_references():
        h.blobs.get(reference.filename)
    # Log entries are only gone where a snapshot covers them, and every point from there on loads.
    # (The log always keeps its latest entry, so the first retained entry can be one a snapshot covers.)
    retained = [e.transaction_number for e in log.read(table_id, 1)]
    deleted_up_to = (retained[0] - 1) if retained else head
    first_loadable = 1
    if deleted_up_to > 0:
        covering = [s.transaction_number for s in h.snapshot_metadata.list(table_id)]
        assert any(n >= deleted_up_to for n in covering), "log entries were deleted that no snapshot covers"
        first_loadable = min(n for n in covering if n >= deleted_up_to)
    for point in range(max(first_loadable, 1), head + 1):
        assert h.store(table_id).load(as_of=point) == replay(log.recorded, point)


def test_unreferenced_files_outside_the_table_are_refused_and_stay_in_the_state() -> None:
    h = Harness()
    table_id = h.create_table("t", properties={GC_DELAY_PROPERTY: "0"})
    store = h.store(table_id)
    inside, outside = f"{layout.data_prefix(table_id)}a.parquet", "tables/other/data/b.parquet"
    own = f"{layout.snapshot_prefix(table_id)}000000000001-x/files.parquet"  # a snapshot object of the store
    output = f"{layout.data_prefix(table_id)}out.parquet"
    for name in (inside, outside, own, output):
        h.blobs.put(name, b"x")
    # Files outside the table's data prefix are no longer accepted: these were added before that rule.
    append_unchecked(h.log, table_id, AddFiles((ref(inside), ref(outside), ref(own))), h.clock())
    store.commit(AssignJobIds((AssignJobIdRequest("j", "root", (inside, outside, own)),)))
    store.commit(
        ReplaceFileReferences((ReplaceFileReferencesJob("j", "root", (inside, outside, own), ref(output)),))
    )
    h.clock.advance(1)

    policy = CleanupPolicy(max_clock_skew_ms=0)  # one fake clock: the table's own delay holds
    report = cleanup_table(store, h.tables.get(table_id), h.snapshots, h.blobs, policy=policy, now=h.clock())

    assert report.data_files_deleted == 1 and report.delete_files_commits == 1
    assert set(report.refused_files) == {outside, own}
    progress = layout.orphan_sweep_key(table_id)  # what cleanup keeps of its orphan sweep
    assert h.blobs.list("tables/") == sorted([outside, own, output, progress])
    assert set(h.state(table_id).files_by_name) == {outside, own, output}


def test_garbage_collection_waits_for_the_tables_delay_and_commits_in_batches() -> None:
    h = Harness()
    table_id = h.create_table("t", properties={GC_DELAY_PROPERTY: "1"})
    store = h.store(table_id)
    inputs = tuple(f"{layout.data_prefix(table_id)}{i}.parquet" for i in range(5))
    store.commit(AddFiles(tuple(ref(f) for f in inputs)))
    store.commit(AssignJobIds((AssignJobIdRequest("j", "root", inputs),)))
    output = f"{layout.data_prefix(table_id)}out.parquet"
    store.commit(ReplaceFileReferences((ReplaceFileReferencesJob("j", "root", inputs, ref(output)),)))
    policy = CleanupPolicy(delete_files_batch_size=2, max_clock_skew_ms=0)  # one fake clock
    table = h.tables.get(table_id)

    early = cleanup_table(store, table, h.snapshots, h.blobs, policy=policy, now=h.clock() + 30_000)
    late = cleanup_table(store, table, h.snapshots, h.blobs, policy=policy, now=h.clock() + 61_000)

    assert early.data_files_deleted == 0
    assert (late.data_files_deleted, late.delete_files_commits) == (5, 3)
    assert not set(inputs) & set(h.state(table_id).files_by_name)
