"""Concurrent commits on real PostgreSQL, from threads with a connection each: design record 002's contention
case scaled to a test, claims racing, an ingest racing garbage collection, and a request id committed twice
at once."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar

import pytest

from statestore.adapters.postgres import PostgresFileReferenceStore
from statestore.errors import (
    FileAlreadyExistsError,
    FileReferenceAssignedToJobError,
    FileReferenceNotFoundError,
)
from statestore.model.partitions import Partition
from statestore.store.ports import FileCommitMember, FileCommitOutcome
from statestore.transactions import (
    AddFiles,
    AssignJobIdRequest,
    AssignJobIds,
    DeleteFiles,
    ReleaseClaims,
    ReplaceFileReferences,
    ReplaceFileReferencesJob,
    Transaction,
)
from tests.builders import STRING_SCHEMA, data_key, ref, tree

T = TypeVar("T")
THREADS = 16


@pytest.fixture
def store(postgres_conninfo: str) -> Iterator[PostgresFileReferenceStore]:
    """A store whose pool gives each of ``THREADS`` threads a connection of its own."""
    with PostgresFileReferenceStore.connect(
        postgres_conninfo, max_connections=THREADS, ensure_schema=False
    ) as s:
        yield s


def all_at_once(calls: list[Callable[[], T]], threads: int = THREADS) -> list[T]:
    """Run ``calls`` on ``threads`` threads released together; their results in order."""
    barrier = threading.Barrier(min(threads, len(calls)))

    def run(call: Callable[[], T], index: int) -> T:
        if index < barrier.parties:
            barrier.wait(timeout=30)
        return call()

    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(run, calls, range(len(calls))))


def commit(
    store: PostgresFileReferenceStore,
    table_id: str,
    partitions: dict[str, Partition],
    transaction: Transaction,
    request_id: str | None = None,
    time: int = 2_000,
) -> FileCommitOutcome:
    member = FileCommitMember(transaction, request_id or f"req-{uuid.uuid4().hex}")
    return store.commit(table_id, STRING_SCHEMA, dict(partitions), [member], time)


def table() -> str:
    return f"table-{uuid.uuid4().hex[:12]}"


def test_compactions_of_the_same_files_on_every_leaf_commit_at_once_without_contention(
    store: PostgresFileReferenceStore,
) -> None:
    # 64 leaves; 11 ingested files, each referenced on every leaf; one compaction job per leaf claims the
    # leaf's 11 references; then all 64 compactions commit at once from 16 threads.
    table_id = table()
    points = [f"k{i:03}" for i in range(1, 64)]
    partitions = {p.id: p for p in tree(STRING_SCHEMA, points)}
    leaves = sorted(p.id for p in partitions.values() if p.leaf)
    inputs = tuple(data_key(table_id, f"ingest-{i:02}.parquet") for i in range(11))
    assert len(leaves) == 64
    for filename in inputs:
        add = AddFiles(tuple(ref(filename, leaf, 10, whole_file=False) for leaf in leaves))
        assert commit(store, table_id, partitions, add, time=1_000).committed == (0,)
    claims = AssignJobIds(tuple(AssignJobIdRequest(f"job-{leaf}", leaf, inputs) for leaf in leaves))
    assert commit(store, table_id, partitions, claims, time=1_500).committed == (0,)
    redone_before = store.redo_count

    def compact(leaf: str) -> Callable[[], FileCommitOutcome]:
        output = ref(data_key(table_id, f"out-{leaf}.parquet"), leaf, 110)
        job = ReplaceFileReferencesJob(f"job-{leaf}", leaf, inputs, output)
        return lambda: commit(store, table_id, partitions, ReplaceFileReferences((job,)), time=3_000)

    started = time.perf_counter()
    outcomes = all_at_once([compact(leaf) for leaf in leaves])
    elapsed = time.perf_counter() - started

    redone = store.redo_count - redone_before
    print(f"\n64 compactions of 11 shared files from {THREADS} threads: {elapsed:.2f}s, {redone} redone")
    assert all(o.committed == (0,) and not o.skipped_parts for o in outcomes)
    assert len({o.commit_number for o in outcomes}) == 64
    files = store.files(table_id)
    assert all(files[name].references == () for name in inputs)  # every input lost every reference
    outputs = [r for name, f in files.items() if name not in inputs for r in f.references]
    assert sorted((r.filename, r.partition_id) for r in outputs) == [
        (data_key(table_id, f"out-{leaf}.parquet"), leaf) for leaf in leaves
    ]
    assert redone == 0  # disjoint reference rows: no commit lost a race


def test_two_jobs_claiming_the_same_references_at_once_exactly_one_wins(
    store: PostgresFileReferenceStore,
) -> None:
    table_id = table()
    partitions = {p.id: p for p in tree(STRING_SCHEMA, ["m"])}
    for round_number in range(20):
        files = [data_key(table_id, f"r{round_number}-{i}") for i in range(3)]
        commit(store, table_id, partitions, AddFiles(tuple(ref(f, "p1") for f in files)))

        def claim(job: str, files: list[str] = files) -> Callable[[], FileCommitOutcome]:
            # The second job names the files in another order: the locks are still taken in key order.
            order = files if job == "a" else list(reversed(files))
            return lambda: commit(
                store, table_id, partitions, AssignJobIds((AssignJobIdRequest(job, "p1", tuple(order)),))
            )

        outcomes = all_at_once([claim("a"), claim("b")])

        winners = [o for o in outcomes if o.committed == (0,)]
        losers = [o for o in outcomes if o.rejected]
        assert len(winners) == 1 and len(losers) == 1
        assert isinstance(losers[0].rejected[0], FileReferenceAssignedToJobError)
        owners = {r.job_id for name in files for r in store.files(table_id)[name].references}
        assert len(owners) == 1  # every reference went to the one winner


def test_an_ingest_racing_a_gc_delete_of_the_same_name_ends_in_one_serial_order(
    store: PostgresFileReferenceStore,
) -> None:
    # The name is free-able (its file has no reference); the delete and a new add of the name race. Serial
    # orders: delete then add (both commit, the new file stays), or add then delete (the add is rejected
    # because the file exists, the delete commits). Never a new file deleted, never both rejected.
    table_id = table()
    partitions = {p.id: p for p in tree(STRING_SCHEMA, ["m"])}
    seen = set()
    for round_number in range(30):
        name = data_key(table_id, f"gc-{round_number}")
        commit(store, table_id, partitions, AddFiles((), unreferenced_files=(name,)), time=1_000)
        delete, add = all_at_once(
            [
                partial(commit, store, table_id, partitions, DeleteFiles((name,))),
                partial(commit, store, table_id, partitions, AddFiles((ref(name, "p1"),))),
            ]
        )
        assert delete.committed == (0,)
        file = store.files(table_id).get(name)
        if add.committed == (0,):
            assert file is not None and len(file.references) == 1
            seen.add("delete-then-add")
        else:
            assert isinstance(add.rejected[0], FileAlreadyExistsError) and file is None
            seen.add("add-then-delete")
    print(f"\nserial orders seen: {sorted(seen)}")


def test_ingests_racing_garbage_collection_never_lose_a_referenced_file(
    store: PostgresFileReferenceStore,
) -> None:
    table_id = table()
    partitions = {p.id: p for p in tree(STRING_SCHEMA, ["m"])}
    stop = threading.Event()
    deleted: list[str] = []

    def ingest_and_compact(worker: int) -> None:
        for i in range(15):
            name = data_key(table_id, f"w{worker}-{i}")
            job_id = f"j-w{worker}-{i}"
            commit(store, table_id, partitions, AddFiles((ref(name, "p1"),)))
            commit(store, table_id, partitions, AssignJobIds((AssignJobIdRequest(job_id, "p1", (name,)),)))
            job = ReplaceFileReferencesJob(job_id, "p1", (name,), ref(f"{name}-out", "p1"))
            assert commit(store, table_id, partitions, ReplaceFileReferences((job,))).committed == (0,)

    def collect() -> None:
        while not stop.is_set():
            store.mark_unreferenced(table_id, now=1)
            ready = store.files_ready_for_gc(table_id, before=2, limit=20)
            if ready:
                outcome = commit(store, table_id, partitions, DeleteFiles(tuple(ready)))
                if outcome.committed:
                    deleted.extend(ready)

    collector = threading.Thread(target=collect)
    collector.start()
    try:
        all_at_once([partial(ingest_and_compact, w) for w in range(6)], threads=6)
    finally:
        stop.set()
        collector.join(timeout=60)
    collect_once_more = store.files_ready_for_gc(table_id, before=10**12)
    files = store.files(table_id)
    outputs = {data_key(table_id, f"w{w}-{i}-out") for w in range(6) for i in range(15)}
    assert outputs <= set(files) and all(len(files[o].references) == 1 for o in outputs)
    assert not set(deleted) & outputs  # GC deleted only compacted inputs
    assert set(deleted) | {n for n in files if not files[n].references} | set(collect_once_more) == {
        data_key(table_id, f"w{w}-{i}") for w in range(6) for i in range(15)
    }


def test_the_same_request_committed_from_two_threads_at_once_is_applied_once(
    store: PostgresFileReferenceStore,
) -> None:
    table_id = table()
    partitions = {p.id: p for p in tree(STRING_SCHEMA, ["m"])}
    for round_number in range(20):
        # A file insert (its key collides) and a release of nothing (only the request rows collide).
        for transaction in (
            AddFiles((ref(data_key(table_id, f"once-{round_number}"), "p1"),)),
            ReleaseClaims((f"none-{round_number}",)),
        ):
            request_id = f"req-{uuid.uuid4().hex}"
            outcomes = all_at_once(
                [partial(commit, store, table_id, partitions, transaction, request_id)] * 2
            )

            applied = [o for o in outcomes if o.committed == (0,)]
            found = [o for o in outcomes if o.found]
            assert len(applied) == 1 and len(found) == 1, outcomes
            assert found[0].found == {0: applied[0].commit_number}
            assert store.committed_requests(table_id, [request_id]) == {request_id: applied[0].commit_number}
    assert len(store.files(table_id)) == 20


def test_a_split_racing_a_claim_of_the_reference_it_moves_serialises(
    store: PostgresFileReferenceStore,
) -> None:
    from statestore.transactions import SplitFileReferenceRequest, SplitFileReferences

    table_id = table()
    partitions = {p.id: p for p in tree(STRING_SCHEMA, ["m"])}
    for round_number in range(20):
        name = data_key(table_id, f"s-{round_number}")
        commit(store, table_id, partitions, AddFiles((ref(name, "root"),)))
        halves = (ref(name, "p1", 50, whole_file=False), ref(name, "p2", 50, whole_file=False))
        split = SplitFileReferences((SplitFileReferenceRequest(name, "root", halves),))
        claim = AssignJobIds((AssignJobIdRequest("j", "root", (name,)),))
        split_outcome, claim_outcome = all_at_once(
            [
                partial(commit, store, table_id, partitions, split),
                partial(commit, store, table_id, partitions, claim),
            ]
        )
        references = store.files(table_id)[name].references
        if split_outcome.committed:
            assert isinstance(claim_outcome.rejected[0], FileReferenceNotFoundError)
            assert sorted(r.partition_id for r in references) == ["p1", "p2"]
        else:
            assert isinstance(split_outcome.rejected[0], FileReferenceAssignedToJobError)
            assert [(r.partition_id, r.job_id) for r in references] == [("root", "j")]


def test_a_file_deleted_and_added_again_with_references_while_gc_marks_is_not_marked(
    store: PostgresFileReferenceStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first phase reads the files with no reference, then locks and marks them: between the two, the
    # file is deleted and added again with a reference. The new row must not be marked.
    table_id = table()
    partitions = {p.id: p for p in tree(STRING_SCHEMA, ["m"])}
    a, b, c = (data_key(table_id, name) for name in ("a", "b", "c"))
    commit(store, table_id, partitions, AddFiles((ref(a, "p1"), ref(b, "p1"))), time=1_000)
    commit(store, table_id, partitions, AssignJobIds((AssignJobIdRequest("j", "p1", (a, b)),)))
    job = ReplaceFileReferencesJob("j", "p1", (a, b), ref(c, "p1"))
    assert commit(store, table_id, partitions, ReplaceFileReferences((job,))).committed == (0,)
    run = store._run
    opened: list[str] = []

    def racing_run(what: str, *args: Any) -> Any:
        opened.append(what)
        if opened[:2] == ["finding unreferenced files", "marking unreferenced files"] and len(opened) == 2:
            assert commit(store, table_id, partitions, DeleteFiles((a,))).committed == (0,)
            assert commit(store, table_id, partitions, AddFiles((ref(a, "p1"),))).committed == (0,)
        return run(what, *args)

    monkeypatch.setattr(store, "_run", racing_run)
    assert store.mark_unreferenced(table_id, now=5_000) == 1
    monkeypatch.undo()

    assert store.files_ready_for_gc(table_id, before=10**12) == [b]
    files = store.files(table_id)
    assert len(files[a].references) == 1 and files[a].last_update_time == 2_000
    assert files[b].last_update_time == 5_000
