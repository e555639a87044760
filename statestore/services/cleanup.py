"""Scheduled cleanup of tables: old log entries, old snapshots, garbage files (the scheduled snapshots are
:mod:`statestore.services.snapshot_upkeep`).

What cleanup may delete, per table:

- **log entries** at or below the newest snapshot that is at least ``log_min_snapshot_age_ms`` old (the
  *base*). Every later point stays loadable from the base and the log after it; an entry no snapshot covers
  is never deleted. The age gives readers that started from an older snapshot time to finish.
- **snapshots** older than ``snapshot_retention_ms``, except the latest and the base.
- **claims** (references assigned to a compaction job) made more than ``claim_expiry_ms`` ago: their job is
  presumed dead (it failed after claiming, its driver crashed, or its claim's outcome was unknown to it), so
  one ``ReleaseClaims`` frees them for later compactions. Should the job still commit, its replacement is
  rejected: it loses its work, never a row.
- **data files** with no references whose last update is older than the garbage collection delay
  (``gc_delay_ms``, or the table's property :data:`GC_DELAY_PROPERTY`): their objects first, then a
  ``DeleteFiles`` commit per batch. Only objects under the table's own prefix, and never the store's own
  objects, are deleted; any other filename is refused and reported, and stays in the state.
- **orphan data files**: objects under the table's data prefix that neither the state nor the log since the
  latest snapshot names (a job wrote them, its commit was rejected or never sent), last modified longer ago
  than the garbage collection delay and than a commit request naming them can be in flight (the queue, its
  dead-letter queue and a redrive: :meth:`CleanupPolicy.orphan_delay_ms`; see
  :mod:`statestore.engine.orphans`). Only their objects are deleted. Each run lists the keys written since
  the last run's watermark and a bounded slice of a slow full pass, not the whole prefix
  (:mod:`statestore.engine.orphan_sweep`).
- **request bodies** (big commit requests stored aside) older than any message can still be on the queue.
  A committed one lives on as a copy under the log prefix (its log entry points at it), deleted with the
  entry.
- **orphan log bodies**: objects under the log prefix that no log entry holds, older than
  ``orphan_log_body_age_ms`` (a day: far beyond any commit in flight). A crash between a body's upload (or
  a request body's copy) and the entry's put leaves one, as does one between an entry's deletion and its
  bodies'.

The delay and the expiry are per instance (``gc_delay_minutes`` and ``claim_expiry_minutes`` in the CDK
config, which reach the cleanup Lambda as environment variables: :mod:`.cleanup_policy`). Both default to
hours, not minutes: a query reads the file list it planned with, so a file that leaves the state must outlive
the longest query; a claim must outlive the longest compaction, or a slow job's work is thrown away. Both
must exceed the clock skew assumed between any two clocks (``instance.MAX_CLOCK_SKEW_SECONDS``): cleanup
judges the log's times and the objects' ages by its own clock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from statestore import instance
from statestore.engine.log_store import TableStateStore
from statestore.engine.orphan_sweep import sweep_orphans
from statestore.engine.requests import body_key_time
from statestore.engine.row_store import RowFilesStateStore, open_state_store
from statestore.engine.snapshots import SnapshotStore
from statestore.errors import (
    SnapshotNotFoundError,
    StateStoreError,
    TableNotFoundError,
    TransactionValidationError,
    UnreadableSnapshotError,
)
from statestore.model import layout
from statestore.model.clock import now_millis
from statestore.model.schema import Schema
from statestore.services.cleanup_policy import (
    GC_DELAY_PROPERTY,
    CleanupPolicy,
    check_against_skew,
    gc_delay_ms,
)
from statestore.services.leftovers import LeftoversReport
from statestore.store.ports import BlobStore, FileReferenceStore, TableIndex, TransactionLogStore
from statestore.store.snapshot_ports import SnapshotInfo
from statestore.store.tables import TableInfo, deleted_meanwhile
from statestore.transactions import DeleteFiles, ReleaseClaims

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class CleanupReport:
    """What cleanup did to one table."""

    table_id: str
    log_entries_deleted: int = 0
    log_retained_from: int | None = None  # the base snapshot's number: entries up to it are gone
    snapshots_deleted: int = 0
    data_files_deleted: int = 0
    delete_files_commits: int = 0
    refused_files: tuple[str, ...] = ()  # unreferenced files whose names are not ours to delete
    request_bodies_deleted: int = 0
    claims_released: int = 0  # references whose expired claims were released
    released_jobs: tuple[str, ...] = ()  # the jobs that held them, presumed dead
    orphan_files_deleted: int = 0  # data objects nothing named, older than the GC delay
    orphan_log_bodies_deleted: int = 0  # objects under the log prefix no log entry holds
    files_marked_unreferenced: int = 0  # postgres tables: files found with no reference, marked for GC
    requests_forgotten: int = 0  # postgres tables: request ids older than any redelivery, forgotten


def may_delete_data_file(table_id: str, filename: str) -> bool:
    """Whether garbage collection may delete the object ``filename``: under the table's prefix, not one of
    the store's own objects (snapshots, log bodies, request bodies), no ``..`` segment."""
    own = (
        layout.snapshot_prefix(table_id),
        layout.log_body_prefix(table_id),
        layout.request_body_prefix(table_id),
        layout.upkeep_prefix(table_id),
    )
    return (
        layout.is_under_table(table_id, filename)
        and not filename.startswith(own)
        and ".." not in filename.split("/")
        and len(filename) > len(layout.table_prefix(table_id))
    )


def cleanup_table(
    store: TableStateStore,
    table: TableInfo,
    snapshots: SnapshotStore,
    blobs: BlobStore,
    *,
    policy: CleanupPolicy | None = None,
    now: int | None = None,
) -> CleanupReport:
    """Clean up one table (see the module's docstring). ``store`` commits the ``DeleteFiles`` transactions."""
    policy = policy or CleanupPolicy()
    now = now_millis() if now is None else now
    table_id = table.table_id
    log = store.log

    # Log and snapshots.
    recorded = snapshots.metadata.list(table_id)
    latest = snapshots.metadata.latest(table_id)
    old_enough = [s for s in recorded if s.created_time <= now - policy.log_min_snapshot_age_ms]
    base = _intact_base(snapshots, table.schema, old_enough)
    log_deleted = log.delete_up_to(table_id, base.transaction_number) if base is not None else 0
    keep = {s.transaction_number for s in (latest, base) if s is not None}
    # Without an intact base nothing older may go: it could be what a load falls back to.
    expired = [
        s
        for s in recorded
        if base is not None
        and s.transaction_number not in keep
        and s.created_time <= now - policy.snapshot_retention_ms
    ]
    for snapshot in expired:
        snapshots.delete(snapshot)

    released_jobs, claims_released = release_expired_claims(store, before=now - policy.claim_expiry_ms)

    # Data files. A table whose files are rows collects them in two phases: files that lost their last
    # reference are marked now, and those marked before the delay are deleted (the rows keep no history
    # of when a reference went, so the mark stands in for the log's update time).
    delay = gc_delay_ms(table, policy.gc_delay_ms)
    try:
        check_against_skew(
            f"table {table.table_name!r}'s {GC_DELAY_PROPERTY}", delay, policy.max_clock_skew_ms
        )
    except ValueError as e:
        raise StateStoreError(str(e)) from None
    gc_before = now - delay
    marked = forgotten = 0
    if isinstance(store, RowFilesStateStore):
        marked = store.file_store.mark_unreferenced(table_id, now)
        ready = sorted(store.file_store.files_ready_for_gc(table_id, before=gc_before))
        forgotten = store.file_store.forget_requests(
            table_id, before=now - instance.COMMIT_STATUS_RETENTION_SECONDS * 1000
        )
    else:
        ready = sorted(store.state().files_ready_for_gc(before=gc_before))
    refused = tuple(f for f in ready if not may_delete_data_file(table_id, f))
    if refused:
        logger.warning(
            "table %r: %d unreferenced file(s) not deleted: not data files under %r, e.g. %r",
            table_id, len(refused), layout.table_prefix(table_id), refused[0],
        )  # fmt: skip
    deletable = [f for f in ready if may_delete_data_file(table_id, f)]
    commits = 0
    for start in range(0, len(deletable), policy.delete_files_batch_size):
        batch = deletable[start : start + policy.delete_files_batch_size]
        blobs.delete(batch)
        commits += _commit_delete_files(store, batch)

    orphans_deleted = sweep_orphans(
        store,
        snapshots.metadata,
        blobs,
        now=now,
        cutoff=now - policy.orphan_delay_ms(delay),
        max_clock_skew_ms=policy.max_clock_skew_ms,
        max_upload_ms=policy.max_upload_ms,
        full_pass_interval_ms=policy.full_sweep_interval_ms,
        may_delete=lambda key: may_delete_data_file(table_id, key),
    ).deleted

    # Request bodies nobody can still be waiting to commit.
    old_bodies = [
        key
        for key in blobs.list(layout.request_body_prefix(table_id))
        if (made := body_key_time(key)) is not None and made <= now - policy.request_body_max_age_ms
    ]
    blobs.delete(old_bodies)

    # Log bodies no entry holds. Listed before the entries are read, so one whose entry is put in between is
    # seen as held; only old ones are candidates, so no commit can still be about to put an entry naming one.
    stale = [
        key
        for key, modified in blobs.list_modified(layout.log_body_prefix(table_id))
        if modified <= now - policy.orphan_log_body_age_ms
    ]
    orphan_bodies = []
    if stale:
        held = log.stored_body_keys(table_id)
        orphan_bodies = [key for key in stale if key not in held]
        blobs.delete(orphan_bodies)

    return CleanupReport(
        table_id=table_id,
        log_entries_deleted=log_deleted,
        log_retained_from=base.transaction_number if base is not None else None,
        snapshots_deleted=len(expired),
        data_files_deleted=len(deletable),
        delete_files_commits=commits,
        refused_files=refused,
        request_bodies_deleted=len(old_bodies),
        claims_released=claims_released,
        released_jobs=released_jobs,
        orphan_files_deleted=orphans_deleted,
        orphan_log_bodies_deleted=len(orphan_bodies),
        files_marked_unreferenced=marked,
        requests_forgotten=forgotten,
    )


def _intact_base(
    snapshots: SnapshotStore, schema: Schema, old_enough: list[SnapshotInfo]
) -> SnapshotInfo | None:
    """The newest of ``old_enough`` that can be read: the log up to it and the snapshots before it may go.
    A damaged one is passed over (with a warning naming it), so cleanup never deletes the last intact
    snapshot or the log entries after it."""
    for info in sorted(old_enough, key=lambda s: s.transaction_number, reverse=True):
        try:
            snapshots.verify(info, schema)
        except (SnapshotNotFoundError, UnreadableSnapshotError) as e:
            logger.warning("%s; cleanup keeps the log after an older, intact snapshot", e)
            continue
        return info
    return None


def release_expired_claims(store: TableStateStore, before: int) -> tuple[tuple[str, ...], int]:
    """Release every claim made before ``before`` (epoch ms) in one ``ReleaseClaims``; returns the jobs that
    held them and how many references were freed.

    The transaction carries ``before`` itself, so a claim made after the state was read (by a job reusing an
    id) is left alone however long the commit takes. It is never rejected for what the state holds (a job
    that committed meanwhile simply holds nothing), so there is nothing to retry.
    """
    expired = store.state().claimed_references(before)
    if not expired:
        return (), 0
    jobs = tuple(sorted(expired))
    store.commit(ReleaseClaims(jobs, claimed_before=before))
    count = sum(len(refs) for refs in expired.values())
    logger.warning(
        "table %r: released %d expired claim(s) of %d job(s) presumed dead, e.g. %r",
        store.table_id, count, len(jobs), jobs[0],
    )  # fmt: skip
    return jobs, count


def _commit_delete_files(store: TableStateStore, filenames: list[str]) -> int:
    """Commit ``DeleteFiles`` for those of ``filenames`` still in the state (another cleanup may have been
    first); returns how many commits were made (0 or 1)."""
    try:
        store.commit(DeleteFiles(tuple(filenames)))
        return 1
    except TransactionValidationError:
        state = store.state()
        remaining = [
            f for f in filenames if f in state.files_by_name and not state.files_by_name[f].references
        ]
        if not remaining:
            return 0
        store.commit(DeleteFiles(tuple(remaining)))
        return 1


# --- running over every table ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CleanupOutcome:
    table_id: str
    report: CleanupReport | None = None
    error: str | None = None
    skipped: str | None = None  # why the table was not cleaned up (its work was superseded, it was deleted)
    leftovers: LeftoversReport | None = None  # a deleted table's: what late writers left under its prefix


def cleanup_tables(
    tables: TableIndex,
    log: TransactionLogStore,
    snapshots: SnapshotStore,
    blobs: BlobStore,
    *,
    policy: CleanupPolicy | None = None,
    clock: Callable[[], int] = now_millis,
    file_store: FileReferenceStore | None = None,
) -> list[CleanupOutcome]:
    """Clean up every table, one after another (see :func:`cleanup_one`); a failing table is reported and the
    others go on."""
    clean = partial(cleanup_one, log=log, snapshots=snapshots, blobs=blobs, policy=policy, clock=clock)
    live = [table for table in tables.list() if not table.deleting]
    return [
        clean(table, file_store=file_store, table_check=partial(tables.check_live, table.table_id))
        for table in live
    ]


def cleanup_one(
    table: TableInfo,
    log: TransactionLogStore,
    snapshots: SnapshotStore,
    blobs: BlobStore,
    *,
    policy: CleanupPolicy | None = None,
    clock: Callable[[], int] = now_millis,
    file_store: FileReferenceStore | None = None,
    table_check: Callable[[], object] | None = None,
) -> CleanupOutcome:
    """Clean up ``table`` (see :func:`cleanup_table`); a failure of the store is reported, not raised.
    ``file_store`` holds the files of a table that keeps them as rows (without it such a table is reported
    as an error).

    ``table_check`` (``TableIndex.check_live``) runs after each load and at the end: a table whose delete
    began meanwhile is reported skipped, never cleaned up as the partly deleted table it became.
    """
    try:
        store = open_state_store(
            table,
            log,
            snapshots,
            file_store,
            missing_file_store="cleanup was given no file store (set STATESTORE_POSTGRES_URL)",
            clock=clock,
            table_check=table_check,
        )
        report = cleanup_table(store, table, snapshots, blobs, policy=policy, now=clock())
        deleted = overtaken_by_delete(table.table_id, blobs, table_check)
    except TableNotFoundError as e:
        deleted = overtaken_by_delete(table.table_id, blobs, table_check)
        if deleted is None:
            logger.exception("could not clean up table %r", table.table_id)
            return CleanupOutcome(table.table_id, error=str(e))
    except StateStoreError as e:
        logger.exception("could not clean up table %r", table.table_id)
        return CleanupOutcome(table.table_id, error=str(e))
    if deleted is None:
        return CleanupOutcome(table.table_id, report=report)
    return CleanupOutcome(table.table_id, skipped=deleted)


def overtaken_by_delete(
    table_id: str, blobs: BlobStore, table_check: Callable[[], object] | None
) -> str | None:
    """Why the table's delete overtook a cleanup of it, as ``table_check`` (``TableIndex.check_live``) says,
    or None. Overtaken, the orphan sweep's progress is deleted again: the cleanup may have saved it under the
    table's prefix after the delete's pass over it."""
    deleted = deleted_meanwhile(table_check)
    if deleted is not None:
        try:
            blobs.delete([layout.orphan_sweep_key(table_id)])
        except StateStoreError as e:
            logger.warning("table %r: could not delete its orphan sweep's progress: %s", table_id, e)
    return deleted
