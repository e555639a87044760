"""Orphan data files: written under a table's data prefix, named by nothing, swept after the GC delay."""

from __future__ import annotations

from statestore.engine.orphans import find_orphan_files
from statestore.model import layout
from statestore.services.cleanup import cleanup_table
from statestore.services.cleanup_policy import CleanupPolicy
from statestore.store.memory import InMemoryBlobStore
from statestore.transactions import AddFiles, ClearFiles
from tests.builders import ref
from tests.committer.harness import FakeClock, Harness

HOUR_MS = 3_600_000
# One fake clock (no skew), and queues that hold a request at most as long as the GC delay: an orphan is then
# swept once older than that delay.
POLICY = CleanupPolicy(
    gc_delay_ms=2 * HOUR_MS, log_min_snapshot_age_ms=0, max_clock_skew_ms=0, max_request_age_ms=2 * HOUR_MS
)


def setup() -> tuple[Harness, str, InMemoryBlobStore]:
    clock = FakeClock(step=0)
    blobs = InMemoryBlobStore(clock)
    h = Harness(blobs=blobs, clock=clock)
    return h, h.create_table("orders"), blobs


def data_file(table_id: str, name: str) -> str:
    return f"{layout.data_prefix(table_id)}root/{name}.parquet"


def orphans(h: Harness, table_id: str, before: int) -> list[str]:
    return [
        o.filename for o in find_orphan_files(h.store(table_id), h.snapshot_metadata, h.blobs, before=before)
    ]


def test_a_file_nothing_names_is_an_orphan_only_once_its_last_write_is_older_than_the_delay() -> None:
    h, table_id, blobs = setup()
    committed, orphan = data_file(table_id, "committed"), data_file(table_id, "orphan")
    blobs.put(committed, b"x")
    blobs.put(orphan, b"x")
    blobs.put(layout.snapshot_prefix(table_id) + "s/files.parquet", b"not data")
    h.store(table_id).commit(AddFiles((ref(committed),)))

    written = h.clock.now
    assert orphans(h, table_id, before=written) == []  # not older than the cutoff yet
    assert orphans(h, table_id, before=written + 1) == [orphan]


def test_a_file_whose_commit_waits_in_the_queue_survives_cleanup_until_the_delay_has_passed() -> None:
    h, table_id, blobs = setup()
    pending = data_file(table_id, "pending")
    blobs.put(pending, b"x")  # the job wrote it; its AddFiles is still on the queue

    h.clock.advance(2 * HOUR_MS - 1)
    report = cleanup_table(
        h.store(table_id), h.tables.get(table_id), h.snapshots, blobs, policy=POLICY, now=h.clock.now
    )
    assert report.orphan_files_deleted == 0 and blobs.list(pending) == [pending]

    h.store(table_id).commit(AddFiles((ref(pending),)))  # the committer gets to it late
    h.clock.advance(HOUR_MS)
    report = cleanup_table(
        h.store(table_id), h.tables.get(table_id), h.snapshots, blobs, policy=POLICY, now=h.clock.now
    )
    assert report.orphan_files_deleted == 0 and blobs.list(pending) == [pending]


def test_cleanup_deletes_an_orphan_older_than_the_delay_and_nothing_committed() -> None:
    h, table_id, blobs = setup()
    orphan, kept = data_file(table_id, "orphan"), data_file(table_id, "kept")
    blobs.put(orphan, b"x")
    blobs.put(kept, b"x")
    h.store(table_id).commit(AddFiles((ref(kept),)))
    h.clock.advance(2 * HOUR_MS + 1)

    report = cleanup_table(
        h.store(table_id), h.tables.get(table_id), h.snapshots, blobs, policy=POLICY, now=h.clock.now
    )

    assert report.orphan_files_deleted == 1
    assert blobs.list(layout.data_prefix(table_id)) == [kept]
    assert set(h.state(table_id).files_by_name) == {kept}


def test_a_file_a_log_entry_since_the_latest_snapshot_names_is_not_an_orphan() -> None:
    h, table_id, blobs = setup()
    cleared = data_file(table_id, "cleared")
    blobs.put(cleared, b"x")
    store = h.store(table_id)
    h.snapshots.write(table_id, store.state(), h.clock.now)
    store.commit(AddFiles((ref(cleared),)))
    store.commit(ClearFiles())  # gone from the state, still named by the AddFiles in the log
    h.clock.advance(3 * HOUR_MS)
    assert cleared not in h.state(table_id).files_by_name

    assert orphans(h, table_id, before=h.clock.now) == []

    h.snapshots.write(table_id, h.store(table_id).state(), h.clock.now)  # the log since names it no more
    assert orphans(h, table_id, before=h.clock.now) == [cleared]
