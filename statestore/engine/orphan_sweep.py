"""The orphan sweep that costs what changed: each period lists the data keys written since the last period's
watermark, not the table's whole data prefix.

**Why a key layout, not S3 Inventory or a plain StartAfter.** New data keys carry the hour (UTC, by the
writer's clock) they were made in, right under the data prefix
(``tables/<id>/data/written/<YYYY-MM-DDTHH>/<uuid>.parquet``,
:func:`statestore.model.layout.new_data_key`). S3 lists keys in order, so the keys made since an hour are one
range of one prefix: a LIST from ``StartAfter`` reads exactly them, a page of 1,000 keys per call, and stops
at the window's end. ``StartAfter`` alone over the old keys (``data/<partition>/<uuid>``) would find nothing
in time order; S3 Inventory is daily at best, a further bucket configuration and a report to read, and does
not exist in the local runtime. The name rule of the transactions is unchanged (any key under the data
prefix), so keys a writer names itself, and every key written before this layout, stay valid: a slow *full
pass* (below) sweeps them.

**What one period does** (:func:`sweep_orphans`), with ``cutoff`` the time before which an object nothing
names is an orphan (now minus the orphan delay: the GC delay, and longer than any commit request naming the
object can be in flight, plus the clock skew ``S``):

1. *The window*: keys of the hours from ``min(watermark, cutoff) - overlap`` up to ``cutoff + S``, where
   ``overlap = S + U`` and ``U`` is the longest a writer may take from making a key to its object's last
   write (:attr:`~statestore.services.cleanup_policy.CleanupPolicy.max_upload_ms`). Those that no state
   and no log entry since the latest snapshot names and last modified before ``cutoff`` are deleted; then
   the watermark becomes ``cutoff``. A window of more than :data:`WINDOW_KEYS` keys stops at the end of an
   hour ``h`` instead, and the watermark becomes ``min(cutoff, h - S)``: every key made before ``h`` was
   judged, and a key made at or after it was last written at ``h - S`` or later. The next run goes on
   from there.
2. *The full pass*: while one is due (never done for this table, or the last one began
   ``full_pass_interval_ms`` ago) it goes on from its cursor for one slice of the whole data prefix, and
   the cursor is saved after the slice. Each period lists at most a slice, so a table of any size is
   covered in ``keys / slice`` periods without a run ever outgrowing the function's time or memory.

**Why no key escapes the window.** Let a key be made at ``k`` by its writer's clock, and its object last
written at ``m`` by the store's: with every two clocks within ``S`` and an upload within ``U``,
``m - S - U <= k <= m + S``. The invariant: after a sweep at cutoff ``c`` (the watermark then), every key
with ``m < c`` was judged by a sweep whose cutoff was past its ``m``, so an orphan among them is gone; any
other key has ``m >= c``, so ``k >= c - S - U``. The next sweep, at cutoff ``c'``, lists the hours from
``c - S - U`` up to ``c' + S``: a key not yet judged with ``m < c'`` has ``c - S - U <= k < c' + S``, so
it is listed and judged. A key whose object is not there yet when the window is listed is last written
after the listing, so after ``c'`` (the orphan delay exceeds ``S``). The invariant holds again for ``c'``.
On a table's first sweep (no watermark) the full pass, which begins then, covers the keys older than the
first window.
So the windows overlap by the skew and the upload allowance, which is where a key made "just before the
watermark moved" by a writer whose clock runs behind falls. A key whose writer broke the bounds (a clock
further off, an upload longer than ``U``) is found by the next full pass, as is every key outside the
layout.

**Crashes.** The progress object (:class:`SweepProgress`, one small JSON object under the table's
``upkeep/`` prefix, deleted with the table) is written only after the work it records: a crash before
leaves the old watermark or cursor, and the next period sweeps the same keys again (deleting an object
twice is harmless). An unreadable progress object is treated as absent (the window from the cutoff, and a
new full pass).

**Cost.** The window lists the keys made in ``period + overlap + 2 S`` plus up to two partial hours: its
LIST calls are that many keys / 1,000, whatever the table's size; the full pass adds at most a slice
(``slice_keys / 1,000`` calls) while it runs. Memory holds one slice of listed keys at most (the state is
loaded anyway): see :data:`statestore.sizing.ORPHAN_SWEEP_MB`.

The safety rules are those of :mod:`statestore.engine.orphans`: listed first, then the state read, so a file
committed in between is known; only objects last modified before ``cutoff``; only what ``may_delete``
allows (under the table's data prefix, none of the store's own objects).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from statestore.engine.log_store import TableStateStore
from statestore.engine.orphans import known_data_files
from statestore.errors import BlobNotFoundError
from statestore.model import layout
from statestore.sizing import ORPHAN_SWEEP_SLICE_KEYS
from statestore.store.ports import BlobStore
from statestore.store.snapshot_ports import SnapshotMetadataStore

logger = logging.getLogger(__name__)

# Keys judged together: listed, then checked against one read of the state. Bounds the sweep's memory, which
# the sizing rule counts.
SLICE_KEYS = ORPHAN_SWEEP_SLICE_KEYS
# The most keys one run's window lists (3,000 LIST calls, minutes within the cleanup function's timeout)
# before it stops at an hour's end and leaves the rest to the next run: a backlog (cleanup stopped for days)
# is then worked off over several runs instead of timing out again and again. Each run lists the overlap
# again, so a run makes headway while the overlap holds fewer keys than this.
WINDOW_KEYS = 30 * SLICE_KEYS


@dataclass(frozen=True)
class SweepProgress:
    """What the sweep remembers of a table between periods (all times epoch ms, by cleanup's clock).

    ``watermark``: the cutoff of the last window swept to the end (None: never). ``full_pass_started``:
    when the running or the last full pass began. ``full_pass_cursor``: the last key the running pass
    judged ("" at its start; None when no pass is running). ``full_pass_done``: when the last finished
    pass began (None: never).
    """

    watermark: int | None = None
    full_pass_started: int | None = None
    full_pass_cursor: str | None = None
    full_pass_done: int | None = None

    def to_json(self) -> bytes:
        return json.dumps(self.__dict__, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> SweepProgress:
        """Raises ValueError for anything that is not a progress object."""
        try:
            raw = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"not JSON: {e}") from None
        if not isinstance(raw, dict) or set(raw) - set(cls.__dataclass_fields__):
            raise ValueError(f"not a sweep progress object: {raw!r}")
        for name in ("watermark", "full_pass_started", "full_pass_done"):
            value = raw.get(name)
            if value is not None and (type(value) is not int):
                raise ValueError(f"{name} must be an integer, got {value!r}")
        cursor = raw.get("full_pass_cursor")
        if cursor is not None and not isinstance(cursor, str):
            raise ValueError(f"full_pass_cursor must be a string, got {cursor!r}")
        return cls(**raw)


def load_progress(blobs: BlobStore, table_id: str) -> SweepProgress:
    """The table's progress, or a fresh one if none was saved or it cannot be read (with a warning): the
    sweep then starts over, which re-sweeps and never skips."""
    key = layout.orphan_sweep_key(table_id)
    try:
        return SweepProgress.from_json(blobs.get(key))
    except BlobNotFoundError:
        return SweepProgress()
    except ValueError as e:
        logger.warning("table %r: orphan sweep progress %r unreadable (%s); starting over", table_id, key, e)
        return SweepProgress()


def save_progress(blobs: BlobStore, table_id: str, progress: SweepProgress) -> None:
    blobs.put(layout.orphan_sweep_key(table_id), progress.to_json())


@dataclass(frozen=True)
class SweepOutcome:
    # Orphan objects deleted: counted, not kept, so the thousands of a failed job stay out of memory.
    deleted: int = 0
    keys_listed: int = 0  # keys the window and the full pass listed together
    full_pass_finished: bool = False


def sweep_orphans(
    store: TableStateStore,
    snapshots: SnapshotMetadataStore,
    blobs: BlobStore,
    *,
    now: int,
    cutoff: int,
    max_clock_skew_ms: int,
    max_upload_ms: int,
    full_pass_interval_ms: int,
    may_delete: Callable[[str], bool],
    slice_keys: int = SLICE_KEYS,
    window_keys: int = WINDOW_KEYS,
) -> SweepOutcome:
    """One period's sweep of ``store``'s table (see the module's docstring): the window since the
    watermark, then a slice of the full pass if one is due. Deletes the orphans found; says how many, and
    how many keys it listed."""
    table_id = store.table_id
    progress = load_progress(blobs, table_id)
    judge = _Judge(store, snapshots, blobs, cutoff, may_delete)

    # The window.
    since = min(progress.watermark if progress.watermark is not None else cutoff, cutoff)
    start = since - max_clock_skew_ms - max_upload_ms
    end = cutoff + max_clock_skew_ms  # no key of a later hour can be last modified before the cutoff
    # The hour's prefix without its slash sorts before every key of that hour.
    start_after = layout.written_hour_prefix(table_id, start)[:-1]
    window = _Window(blobs, table_id, start_after, end, window_keys)
    for batch in _slices(iter(window), slice_keys):
        judge(batch)
    # A window cut short at hour h judged every key made before h, so every key last written before h - S;
    # and never less than it started from (it may stop inside the overlap, where everything was judged).
    reached = (
        cutoff
        if window.stopped_at is None
        else max(since, min(cutoff, window.stopped_at - max_clock_skew_ms))
    )
    progress = replace(progress, watermark=reached)
    save_progress(blobs, table_id, progress)

    # A slice of the full pass.
    finished = False
    running = progress.full_pass_cursor is not None
    due = progress.full_pass_started is None or now - progress.full_pass_started >= full_pass_interval_ms
    if running or due:
        if not running:
            progress = replace(progress, full_pass_started=now, full_pass_cursor="")
        cursor = progress.full_pass_cursor or ""
        pages = blobs.list_modified_pages(layout.data_prefix(table_id), cursor)
        batch = []
        for page in pages:
            batch.extend(page)
            if len(batch) >= slice_keys:
                del batch[slice_keys:]  # the rest of the page is listed again by the next slice
                break
        else:
            finished = True
        judge(batch)
        if finished:
            progress = replace(progress, full_pass_cursor=None, full_pass_done=progress.full_pass_started)
        else:
            progress = replace(progress, full_pass_cursor=batch[-1][0])
        save_progress(blobs, table_id, progress)
    return SweepOutcome(judge.deleted, judge.listed, finished)


class _Window:
    """The keys of the written hours after ``start_after`` whose hour began before ``end``, in order, a page
    at a time; stops listing at the first key of a later hour. Past ``budget`` keys it stops at the next
    hour's first key and says which hour that is (``stopped_at``): every key of an earlier hour was given."""

    def __init__(self, blobs: BlobStore, table_id: str, start_after: str, end: int, budget: int) -> None:
        self.blobs, self.table_id, self.start_after = blobs, table_id, start_after
        self.end, self.budget = end, budget
        self.stopped_at: int | None = None

    def __iter__(self) -> Iterator[tuple[str, int]]:
        given, current = 0, None
        for page in self.blobs.list_modified_pages(layout.written_prefix(self.table_id), self.start_after):
            for key, modified in page:
                hour = layout.written_hour(self.table_id, key)
                if hour is None:
                    continue  # not a key of the layout (a writer named it itself): the full pass's
                if hour >= self.end:
                    return
                if given >= self.budget and hour != current:
                    self.stopped_at = hour
                    return
                current = hour
                given += 1
                yield key, modified


def _slices(items: Iterator[tuple[str, int]], size: int) -> Iterator[list[tuple[str, int]]]:
    batch: list[tuple[str, int]] = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


class _Judge:
    """Judges listed keys a batch at a time: the state is read after each batch was listed, so a file
    committed while the batch was listed is known."""

    def __init__(
        self,
        store: TableStateStore,
        snapshots: SnapshotMetadataStore,
        blobs: BlobStore,
        cutoff: int,
        may_delete: Callable[[str], bool],
    ) -> None:
        self.store, self.snapshots, self.blobs = store, snapshots, blobs
        self.cutoff, self.may_delete = cutoff, may_delete
        self.deleted = 0
        self.listed = 0

    def __call__(self, batch: list[tuple[str, int]]) -> None:
        self.listed += len(batch)
        candidates = [key for key, modified in batch if modified < self.cutoff and not key.endswith("/")]
        if not candidates:
            return
        known = known_data_files(self.store, self.snapshots)
        orphans = [key for key in candidates if key not in known and self.may_delete(key)]
        self.blobs.delete(orphans)
        self.deleted += len(orphans)
