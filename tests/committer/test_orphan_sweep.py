"""The orphan sweep lists what was written since its watermark, not the whole data prefix, and stays safe:
never a referenced file, never one a queued request may still name, no key lost to a skewed clock or a
crash (statestore.engine.orphan_sweep)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from statestore.engine.orphan_sweep import SweepProgress, load_progress, save_progress, sweep_orphans
from statestore.model import layout
from statestore.model.names import key_problem
from statestore.services.cleanup import CleanupReport, cleanup_table
from statestore.services.cleanup_policy import CleanupPolicy
from statestore.store.memory import InMemoryBlobStore
from statestore.transactions import AddFiles
from tests.builders import ref
from tests.committer.harness import FakeClock, Harness

MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS
DAY_MS = 24 * HOUR_MS
SKEW_MS = 10 * MINUTE_MS
UPLOAD_MS = HOUR_MS
# Small delays so a test spans hours, not weeks; a skew and an upload allowance as the defaults have.
POLICY = CleanupPolicy(
    gc_delay_ms=2 * HOUR_MS,
    log_min_snapshot_age_ms=0,
    max_clock_skew_ms=SKEW_MS,
    max_request_age_ms=2 * HOUR_MS,
    max_upload_ms=UPLOAD_MS,
)
ORPHAN_DELAY_MS = POLICY.orphan_delay_ms(POLICY.gc_delay_ms)  # 2 h 10 min
START = 1_700_000_000_000


class CountingBlobs(InMemoryBlobStore):
    """The in-memory twin, counting the keys every listing of a table's data gives out, and the listings."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.keys_listed = 0
        self.data_listings = 0

    def list_modified(self, prefix: str) -> list[tuple[str, int]]:
        listed = super().list_modified(prefix)
        if "/data/" in prefix:
            self.keys_listed += len(listed)
            self.data_listings += 1
        return listed

    def list_modified_pages(self, prefix: str, start_after: str = "") -> Iterator[list[tuple[str, int]]]:
        if "/data/" in prefix:
            self.data_listings += 1
        for page in super().list_modified_pages(prefix, start_after):
            if "/data/" in prefix:
                self.keys_listed += len(page)
            yield page

    def reset(self) -> None:
        self.keys_listed = self.data_listings = 0


def setup() -> tuple[Harness, str, CountingBlobs]:
    clock = FakeClock(start=START, step=0)
    blobs = CountingBlobs(clock)
    h = Harness(blobs=blobs, clock=clock)
    return h, h.create_table("orders"), blobs


def write(h: Harness, blobs: InMemoryBlobStore, table_id: str, *, named_at: int, modified: int) -> str:
    """A data file whose writer made its key at ``named_at`` (its own clock) and whose object the store
    last wrote at ``modified`` (the store's clock)."""
    key = layout.new_data_key(table_id, named_at)
    saved = h.clock.now
    h.clock.now = modified
    blobs.put(key, b"x")
    h.clock.now = saved
    return key


def cleanup(h: Harness, table_id: str, blobs: InMemoryBlobStore, now: int) -> CleanupReport:
    h.clock.now = now
    return cleanup_table(
        h.store(table_id), h.tables.get(table_id), h.snapshots, blobs, policy=POLICY, now=now
    )


def test_a_new_data_key_is_a_valid_name_and_says_its_hour() -> None:
    table_id = "t1"
    key = layout.new_data_key(table_id, START)
    assert key_problem(key, layout.data_prefix(table_id)) is None
    assert layout.written_hour(table_id, key) == START - START % HOUR_MS
    assert key.startswith(layout.written_hour_prefix(table_id, START))
    assert layout.written_hour(table_id, f"{layout.data_prefix(table_id)}root/a.parquet") is None
    assert layout.written_hour(table_id, f"{layout.written_prefix(table_id)}2024-13-01T00/a.parquet") is None
    assert layout.written_hour(table_id, f"{layout.written_prefix(table_id)}2024-02-30T00/a.parquet") is None


def test_a_sweep_lists_the_keys_written_since_its_watermark_not_the_whole_table() -> None:
    h, table_id, blobs = setup()
    # A big table: 5,000 files written on day 0, all committed.
    old = [write(h, blobs, table_id, named_at=START, modified=START) for _ in range(5000)]
    h.store(table_id).commit(AddFiles(tuple(ref(f) for f in old)))
    now = START + DAY_MS
    cleanup(h, table_id, blobs, now)  # the first run's full pass reads everything once

    for hour in range(1, 7):  # then an hour of writes between runs: 20 new files, 5 of them orphans
        new = [write(h, blobs, table_id, named_at=now + m, modified=now + m) for m in range(20)]
        h.store(table_id).commit(AddFiles(tuple(ref(f) for f in new[5:])))
        now += HOUR_MS
        blobs.reset()
        report = cleanup(h, table_id, blobs, now + ORPHAN_DELAY_MS)

        # The window spans the hour since the last run, the overlap (skew + upload allowance) and the
        # skew past the cutoff: a few hours of writes, never the 5,000 files of day 0.
        assert blobs.keys_listed <= 20 * 5, f"run {hour} listed {blobs.keys_listed} keys"
        assert report.orphan_files_deleted == 5
        assert set(new[5:]) <= set(blobs.list(layout.data_prefix(table_id)))
    assert set(old) <= set(blobs.list(layout.data_prefix(table_id)))


def test_an_orphan_made_just_before_the_watermark_moved_by_a_writer_with_a_slow_clock_is_still_found() -> (
    None
):
    h, table_id, blobs = setup()
    first = START + DAY_MS
    cleanup(h, table_id, blobs, first)
    cutoff = first - ORPHAN_DELAY_MS
    assert load_progress(blobs, table_id).watermark == cutoff

    # Its object was last written at the cutoff (too young for that run), its key made by a writer whose
    # clock ran the whole skew behind, at the start of an upload that took the whole allowance: the key
    # names a time well before the watermark.
    orphan = write(h, blobs, table_id, named_at=cutoff - SKEW_MS - UPLOAD_MS, modified=cutoff)
    # And one the writer named with its clock the skew ahead, an instant before the next cutoff.
    ahead = write(h, blobs, table_id, named_at=cutoff + HOUR_MS - 1 + SKEW_MS, modified=cutoff + HOUR_MS - 1)

    report = cleanup(h, table_id, blobs, first + HOUR_MS)

    assert report.orphan_files_deleted == 2
    assert blobs.list(orphan) == [] and blobs.list(ahead) == []


def test_a_key_beyond_the_windows_bounds_is_found_by_the_next_full_pass() -> None:
    h, table_id, blobs = setup()
    first = START + DAY_MS
    cleanup(h, table_id, blobs, first)
    cutoff = first - ORPHAN_DELAY_MS
    # A writer that broke the bounds: its key names a day before its object's last write.
    stray = write(h, blobs, table_id, named_at=cutoff - DAY_MS, modified=cutoff)
    legacy = f"{layout.data_prefix(table_id)}root/named-by-hand.parquet"  # outside the layout
    h.clock.now = cutoff
    blobs.put(legacy, b"x")

    now = first
    for _ in range(24 * 7 - 1):  # the windows never reach them
        now += HOUR_MS
        assert cleanup(h, table_id, blobs, now).orphan_files_deleted == 0
    assert blobs.list(stray) == [stray] and blobs.list(legacy) == [legacy]

    report = cleanup(h, table_id, blobs, first + POLICY.full_sweep_interval_ms)  # a week on: a full pass
    assert report.orphan_files_deleted == 2
    assert blobs.list(stray) == [] and blobs.list(legacy) == []


def test_the_full_pass_goes_a_slice_per_run_and_finds_every_old_orphan_outside_the_layout() -> None:
    h, table_id, blobs = setup()
    prefix = f"{layout.data_prefix(table_id)}root/"
    h.clock.now = START
    files = [f"{prefix}{i:04d}.parquet" for i in range(250)]  # written before the layout existed
    for name in files:
        blobs.put(name, b"x")
    h.store(table_id).commit(AddFiles(tuple(ref(f) for f in files[::2])))  # every other one committed
    store = h.store(table_id)

    now = START + DAY_MS
    deleted = 0
    for run in range(3):
        blobs.reset()
        outcome = sweep_orphans(
            store, h.snapshot_metadata, blobs, now=now, cutoff=now - ORPHAN_DELAY_MS,
            max_clock_skew_ms=SKEW_MS, max_upload_ms=UPLOAD_MS,
            full_pass_interval_ms=POLICY.full_sweep_interval_ms, may_delete=lambda _key: True,
            slice_keys=100,
        )  # fmt: skip
        deleted += outcome.deleted
        assert outcome.keys_listed <= 100  # a slice per run, whatever the table's size
        assert blobs.data_listings == 2  # the window's and the slice's
        assert outcome.full_pass_finished == (run == 2)
        now += HOUR_MS
    assert deleted == 125
    assert blobs.list(prefix) == files[::2]


def test_a_crash_mid_sweep_leaves_the_watermark_unchanged_and_the_next_run_sweeps_the_same_keys() -> None:
    h, table_id, blobs = setup()
    first = START + DAY_MS
    cleanup(h, table_id, blobs, first)
    before = load_progress(blobs, table_id)
    orphan = write(h, blobs, table_id, named_at=first, modified=first)

    class Crash(Exception):
        pass

    real_delete = blobs.delete

    def crashing_delete(keys: list[str]) -> None:
        if orphan in keys:
            raise Crash("the function timed out while deleting")
        real_delete(keys)

    blobs.delete = crashing_delete  # type: ignore[method-assign]
    with pytest.raises(Crash):
        cleanup(h, table_id, blobs, first + ORPHAN_DELAY_MS + HOUR_MS)
    assert load_progress(blobs, table_id) == before
    assert blobs.list(orphan) == [orphan]

    blobs.delete = real_delete  # type: ignore[method-assign]
    report = cleanup(h, table_id, blobs, first + ORPHAN_DELAY_MS + 2 * HOUR_MS)
    assert report.orphan_files_deleted == 1 and blobs.list(orphan) == []
    assert load_progress(blobs, table_id).watermark == first + 2 * HOUR_MS


def test_a_crash_mid_full_pass_leaves_its_cursor_and_the_next_run_judges_the_slice_again() -> None:
    h, table_id, blobs = setup()
    prefix = f"{layout.data_prefix(table_id)}root/"
    h.clock.now = START
    for i in range(150):
        blobs.put(f"{prefix}{i:04d}.parquet", b"x")
    store = h.store(table_id)
    now = START + DAY_MS

    def sweep(at: int) -> None:
        sweep_orphans(
            store, h.snapshot_metadata, blobs, now=at, cutoff=at - ORPHAN_DELAY_MS,
            max_clock_skew_ms=SKEW_MS, max_upload_ms=UPLOAD_MS,
            full_pass_interval_ms=POLICY.full_sweep_interval_ms, may_delete=lambda _key: True,
            slice_keys=100,
        )  # fmt: skip

    sweep(now)
    progress = load_progress(blobs, table_id)
    assert progress.full_pass_cursor == f"{prefix}0099.parquet"
    real_delete = blobs.delete
    blobs.delete = lambda keys: (_ for _ in ()).throw(RuntimeError("crash"))  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        sweep(now + HOUR_MS)
    after = load_progress(blobs, table_id)  # the window finished first: its watermark moved, the pass not
    assert (after.full_pass_cursor, after.full_pass_started) == (
        progress.full_pass_cursor,
        progress.full_pass_started,
    )
    blobs.delete = real_delete  # type: ignore[method-assign]
    sweep(now + 2 * HOUR_MS)
    assert blobs.list(prefix) == []
    assert load_progress(blobs, table_id).full_pass_cursor is None


def test_the_window_never_deletes_a_referenced_file_or_one_a_queued_request_may_still_name() -> None:
    h, table_id, blobs = setup()
    first = START + DAY_MS
    cleanup(h, table_id, blobs, first)
    cutoff = first + HOUR_MS - ORPHAN_DELAY_MS
    referenced = write(h, blobs, table_id, named_at=cutoff - 1, modified=cutoff - 1)
    h.store(table_id).commit(AddFiles((ref(referenced),)))
    # The job wrote it at the cutoff; its AddFiles is still on the queue.
    pending = write(h, blobs, table_id, named_at=cutoff, modified=cutoff)

    blobs.reset()
    report = cleanup(h, table_id, blobs, first + HOUR_MS)
    assert blobs.keys_listed >= 2  # both were in the window
    assert report.orphan_files_deleted == 0
    assert blobs.list(referenced) == [referenced] and blobs.list(pending) == [pending]

    h.store(table_id).commit(AddFiles((ref(pending),)))  # the committer gets to it late
    for hours in range(2, 10):
        assert cleanup(h, table_id, blobs, first + hours * HOUR_MS).orphan_files_deleted == 0
    assert blobs.list(pending) == [pending]


def test_a_file_committed_while_its_page_was_listed_is_known_before_it_is_judged() -> None:
    h, table_id, blobs = setup()
    first = START + DAY_MS
    cleanup(h, table_id, blobs, first)
    cutoff = first + HOUR_MS - ORPHAN_DELAY_MS
    late = write(h, blobs, table_id, named_at=cutoff - 1, modified=cutoff - 1)
    real_pages = blobs.list_modified_pages

    def pages_then_commit(prefix: str, start_after: str = "") -> Iterator[list[tuple[str, int]]]:
        for page in real_pages(prefix, start_after):
            if late in dict(page):  # the committer applies its AddFiles right after the LIST
                h.store(table_id).commit(AddFiles((ref(late),)))
            yield page

    blobs.list_modified_pages = pages_then_commit  # type: ignore[method-assign]
    report = cleanup(h, table_id, blobs, first + HOUR_MS)
    assert report.orphan_files_deleted == 0 and blobs.list(late) == [late]


def test_an_unreadable_progress_object_starts_the_sweep_over_rather_than_skipping() -> None:
    h, table_id, blobs = setup()
    blobs.put(layout.orphan_sweep_key(table_id), b"{not json")
    assert load_progress(blobs, table_id) == SweepProgress()
    save_progress(blobs, table_id, SweepProgress(watermark=5, full_pass_started=1, full_pass_done=1))
    assert load_progress(blobs, table_id) == SweepProgress(watermark=5, full_pass_started=1, full_pass_done=1)
    h.clock.now = START
    orphan = f"{layout.data_prefix(table_id)}root/lost.parquet"
    blobs.put(orphan, b"x")
    blobs.put(layout.orphan_sweep_key(table_id), b'{"watermark": "yesterday"}')
    report = cleanup(h, table_id, blobs, START + DAY_MS)  # a fresh start: a full pass, which finds it
    assert report.orphan_files_deleted == 1


def test_the_progress_object_is_not_a_data_file_garbage_collection_may_delete() -> None:
    from statestore.services.cleanup import may_delete_data_file

    assert not may_delete_data_file("t1", layout.orphan_sweep_key("t1"))


def test_the_upload_allowance_and_the_full_pass_interval_come_from_the_environment() -> None:
    from statestore.services.cleanup_policy import policy_from_environment

    policy = policy_from_environment(
        {"STATESTORE_MAX_UPLOAD_MINUTES": "90", "STATESTORE_FULL_SWEEP_INTERVAL_MINUTES": "1440"}
    )
    assert (policy.max_upload_ms, policy.full_sweep_interval_ms) == (90 * MINUTE_MS, DAY_MS)
    with pytest.raises(ValueError, match="STATESTORE_MAX_UPLOAD_MINUTES='-1'.*must not be negative"):
        policy_from_environment({"STATESTORE_MAX_UPLOAD_MINUTES": "-1"})


def test_a_backlog_bigger_than_a_runs_window_is_worked_off_over_several_runs_without_losing_a_key() -> None:
    h, table_id, blobs = setup()
    store = h.store(table_id)
    first = START + DAY_MS

    def sweep(now: int) -> int:
        outcome = sweep_orphans(
            store, h.snapshot_metadata, blobs, now=now, cutoff=now - ORPHAN_DELAY_MS,
            max_clock_skew_ms=SKEW_MS, max_upload_ms=UPLOAD_MS,
            full_pass_interval_ms=POLICY.full_sweep_interval_ms, may_delete=lambda _key: True,
            window_keys=250,  # more than the overlap holds (2 hours of 60 keys), or no run gets further
        )  # fmt: skip
        return outcome.keys_listed

    sweep(first)
    # Cleanup stopped for two days while writers went on: 60 keys an hour, a third of them orphans.
    orphans: list[str] = []
    kept: list[str] = []
    for hour in range(48):
        for i in range(60):
            at = first - ORPHAN_DELAY_MS + hour * HOUR_MS + i * 1000
            (orphans if i % 3 == 0 else kept).append(write(h, blobs, table_id, named_at=at, modified=at))
    store.commit(AddFiles(tuple(ref(f) for f in kept)))

    now = first + 2 * DAY_MS + HOUR_MS
    watermarks: list[int] = []
    for _ in range(40):
        assert sweep(now) <= 250 + 60  # the budget, finishing the hour it reached
        watermark = load_progress(blobs, table_id).watermark
        assert watermark is not None
        watermarks.append(watermark)
        if watermark == now - ORPHAN_DELAY_MS:
            break
        now += 1  # the next run comes straight after
    assert watermarks[-1] == now - ORPHAN_DELAY_MS and len(watermarks) > 2
    assert watermarks == sorted(watermarks)
    left = set(blobs.list(layout.data_prefix(table_id)))
    assert not left & set(orphans) and set(kept) <= left


def test_a_window_cut_short_inside_its_overlap_never_moves_the_watermark_back() -> None:
    h, table_id, blobs = setup()
    store = h.store(table_id)
    first = START + DAY_MS

    def sweep(now: int) -> None:
        sweep_orphans(
            store, h.snapshot_metadata, blobs, now=now, cutoff=now - ORPHAN_DELAY_MS,
            max_clock_skew_ms=SKEW_MS, max_upload_ms=UPLOAD_MS,
            full_pass_interval_ms=POLICY.full_sweep_interval_ms, may_delete=lambda _key: True,
            window_keys=50,  # fewer than the overlap's 2 hours hold
        )  # fmt: skip

    sweep(first)
    before = load_progress(blobs, table_id).watermark
    assert before == first - ORPHAN_DELAY_MS
    for hour in range(-3, 3):
        for i in range(60):
            at = before + hour * HOUR_MS + i * 1000
            write(h, blobs, table_id, named_at=at, modified=at)
    for run in range(3):
        sweep(first + 6 * HOUR_MS + run)
        watermark = load_progress(blobs, table_id).watermark
        assert watermark is not None and watermark >= before
        before = watermark
