"""Cleanup of a table whose files are rows: garbage collection in two phases deletes an object only after
the delay since its file was found unreferenced, never a referenced file; old request ids are forgotten;
expired claims are released as for log tables."""

from __future__ import annotations

from statestore import instance as resources
from statestore.engine.row_store import RowFilesStateStore
from statestore.model import layout
from statestore.model.clock import now_millis
from statestore.services.cleanup import cleanup_one, cleanup_table
from statestore.services.cleanup_policy import CleanupPolicy
from statestore.store.ports import FileReferenceStore
from statestore.store.tables import TableInfo
from statestore.transactions import (
    AddFiles,
    AssignJobIdRequest,
    AssignJobIds,
    InitialisePartitions,
    ReplaceFileReferences,
    ReplaceFileReferencesJob,
)
from tests.builders import INT_SCHEMA, ref, tree
from tests.committer.harness import Harness
from tests.file_stores import file_store  # noqa: F401  (the fixture)

DELAY = 60_000
# One fake clock for everything: no skew between clocks to allow for.
POLICY = CleanupPolicy(gc_delay_ms=DELAY, claim_expiry_ms=10 * DELAY, max_clock_skew_ms=0)


def postgres_table(h: Harness, files: FileReferenceStore) -> tuple[TableInfo, RowFilesStateStore]:
    info = TableInfo.new("t", INT_SCHEMA, None, "postgres")
    h.tables.create(info)
    store = RowFilesStateStore(info.table_id, INT_SCHEMA, h.log, files, h.snapshots, clock=h.clock)
    store.commit(InitialisePartitions(tuple(tree(INT_SCHEMA))))
    return info, store


def exists(h: Harness, key: str) -> bool:
    return key in h.blobs.list(key)


def data_file(h: Harness, table_id: str, name: str) -> str:
    key = layout.data_prefix(table_id) + name
    h.blobs.put(key, b"rows")
    return key


def test_an_unreferenced_file_is_deleted_only_a_delay_after_it_was_found_so(
    file_store: FileReferenceStore,  # noqa: F811
) -> None:
    h = Harness()
    info, store = postgres_table(h, file_store)
    a, b, c = (data_file(h, info.table_id, n) for n in ("a", "b", "c"))
    store.commit(AddFiles((ref(a), ref(b))))
    store.commit(AssignJobIds((AssignJobIdRequest("job", "root", (a,)),)))
    store.commit(ReplaceFileReferences((ReplaceFileReferencesJob("job", "root", (a,), ref(c)),)))

    # a lost its last reference long ago by the clock, but nothing had marked it: it is marked now.
    h.clock.advance(10 * DELAY)
    first = cleanup_table(store, info, h.snapshots, h.blobs, policy=POLICY, now=h.clock.now)
    assert (first.files_marked_unreferenced, first.data_files_deleted) == (1, 0)
    assert exists(h, a)

    h.clock.advance(DELAY // 2)
    early = cleanup_table(store, info, h.snapshots, h.blobs, policy=POLICY, now=h.clock.now)
    assert (early.files_marked_unreferenced, early.data_files_deleted) == (0, 0)
    assert exists(h, a)

    h.clock.advance(DELAY)
    late = cleanup_table(store, info, h.snapshots, h.blobs, policy=POLICY, now=h.clock.now)
    assert late.data_files_deleted == 1 and late.delete_files_commits == 1
    assert not exists(h, a)
    assert exists(h, b) and exists(h, c)  # referenced: never deleted
    assert sorted(file_store.files(info.table_id)) == sorted([b, c])


def test_old_request_ids_are_forgotten_and_expired_claims_released(
    file_store: FileReferenceStore,  # noqa: F811
) -> None:
    h = Harness()
    info, store = postgres_table(h, file_store)
    a = data_file(h, info.table_id, "a")
    store.commit(AddFiles((ref(a),)))
    store.commit(AssignJobIds((AssignJobIdRequest("dead-job", "root", (a,)),)))

    # The file store stamps request ids with its own (the database's) clock: look from well past it.
    retention_ms = resources.COMMIT_STATUS_RETENTION_SECONDS * 1000
    outcome = cleanup_one(
        info,
        h.log,
        h.snapshots,
        h.blobs,
        policy=POLICY,
        clock=lambda: now_millis() + retention_ms + 60_000,
        file_store=file_store,
    )

    assert outcome.report is not None, outcome.error
    assert outcome.report.requests_forgotten == 3  # the two commits above, and the claims released now
    assert outcome.report.released_jobs == ("dead-job",)
    assert [r.job_id for r in store.state().file_references()] == [None]
    assert exists(h, a)


def test_cleanup_without_a_file_store_reports_the_postgres_table_and_touches_nothing(
    file_store: FileReferenceStore,  # noqa: F811
) -> None:
    h = Harness()
    info, store = postgres_table(h, file_store)
    store.commit(AddFiles((ref(data_file(h, info.table_id, "a")),)))
    outcome = cleanup_one(info, h.log, h.snapshots, h.blobs, policy=POLICY, clock=h.clock)
    assert outcome.report is None and "STATESTORE_POSTGRES_URL" in (outcome.error or "")
