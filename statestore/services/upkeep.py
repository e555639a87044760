"""Scheduled upkeep fanned out one table at a time: a *plan* lists the tables and queues one unit of work
per table that needs it; a *worker* does one table's work (a snapshot, or a cleanup) per message.

Why a queue between them: one invocation walking every table in turn runs out of time with many tables, and
one slow table holds up the rest. With one message per table each table gets its own invocation, timeout
and memory, tables run in parallel, and a failing table is retried (then dead-lettered) on its own.

The work queue is FIFO with ``MessageGroupId = table_id``: a table's work is never done by two workers at
once (the guarantee one run at a time used to give, now per table). Its deduplication id names the kind, the
table and the schedule's period, so a plan that runs twice in a period (a retried schedule) queues the
table once.

A table whose work takes longer than the period: the next plan queues another message behind the one being
worked on. A message that waited longer than a period before its first delivery has been *superseded* by
a newer one for the same table, so the worker drops it without loading the table; work never piles up
behind a slow table, and a slow table is worked on back to back. When all the tables' work together outlasts
a period (too little ``upkeep_max_concurrency``), the messages at the back of the queue are the ones
superseded: each plan queues the tables in a new random order, so that is not the same tables every time.

Snapshots: the plan skips a table whose log has not moved enough since its latest snapshot without
loading it (two reads), so an unmoved table costs no message; the worker checks again (another snapshot
may have been written meanwhile). Where the deployment keeps queryable views, the worker then updates the
view of a table that asks for one, and the plan also queues a table whose view is behind its log
(:mod:`statestore.services.view_upkeep`). Cleanup: every table is queued (orphans and expired claims
need no new transaction to appear), and every deleted table whose tombstone is there: its worker deletes
what late writers put under its prefix (:mod:`statestore.services.leftovers`).
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import partial

from statestore.engine.log_store import TransactionLogStateStore
from statestore.engine.snapshots import SnapshotStore
from statestore.errors import StateStoreError, TableBeingDeletedError, TableNotFoundError
from statestore.model.clock import now_millis
from statestore.services.cleanup import CleanupOutcome, cleanup_one
from statestore.services.cleanup_policy import CleanupPolicy
from statestore.services.leftovers import delete_leftovers, deleted_tables
from statestore.services.snapshot_upkeep import SnapshotOutcome, snapshot_table
from statestore.services.view_upkeep import ViewOutcome, update_view, view_behind
from statestore.state.table_state import TableState
from statestore.store.ports import (
    BlobStore,
    CommitQueue,
    FileReferenceStore,
    QueueMessage,
    TableIndex,
    TransactionLogStore,
)
from statestore.store.tables import TableInfo, deleted_meanwhile
from statestore.store.view_ports import QueryableViewStore

logger = logging.getLogger(__name__)

WORK_FORMAT_VERSION = 1
_DELETED = "the table was deleted after the plan"
_BEING_DELETED = "the table is being deleted"
_LEFTOVERS = "the table was deleted: only what was left under its prefix was cleaned up"
_MINUTE_MS = 60_000


class UpkeepKind(StrEnum):
    SNAPSHOT = "snapshot"
    CLEANUP = "cleanup"


class MalformedWorkError(StateStoreError):
    """A work message that is not one a plan writes (a bug, or a message sent by hand)."""


@dataclass(frozen=True)
class UpkeepWork:
    """One table's work of one kind, planned at ``planned_at`` (epoch ms) by a schedule of ``period_ms``."""

    kind: UpkeepKind
    table_id: str
    planned_at: int
    period_ms: int

    def to_message(self) -> QueueMessage:
        body = {
            "version": WORK_FORMAT_VERSION,
            "kind": self.kind.value,
            "table_id": self.table_id,
            "planned_at": self.planned_at,
            "period_ms": self.period_ms,
        }
        period = self.planned_at // self.period_ms
        return QueueMessage(
            json.dumps(body, sort_keys=True), self.table_id, f"{self.kind.value}-{self.table_id}-{period}"
        )

    @classmethod
    def from_body(cls, body: str) -> UpkeepWork:
        """Parse a work message's body; raises MalformedWorkError saying what is wrong."""
        try:
            data = json.loads(body)
            if data.get("version") != WORK_FORMAT_VERSION:
                raise ValueError(f"version {data.get('version')!r} is not {WORK_FORMAT_VERSION}")
            work = cls(
                UpkeepKind(data["kind"]),
                str(data["table_id"]),
                int(data["planned_at"]),
                int(data["period_ms"]),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise MalformedWorkError(f"not an upkeep work message ({e}): {body[:200]!r}") from None
        if work.period_ms < 1 or not work.table_id:
            raise MalformedWorkError(f"not an upkeep work message (no table or period): {body[:200]!r}")
        return work

    def superseded(self, first_received_at: int) -> bool:
        """Whether the message waited more than a period before it was first delivered: the plan of a later
        period has queued a newer one for the table behind it."""
        return first_received_at - self.planned_at > self.period_ms


# The schedule's period of each kind of upkeep, set by the stack from the instance's config (and by the local
# runtime from its intervals): a plan's work is superseded by the next plan's after one period.
UPKEEP_PERIOD_ENV = {
    UpkeepKind.SNAPSHOT: "STATESTORE_SNAPSHOT_PERIOD_MINUTES",
    UpkeepKind.CLEANUP: "STATESTORE_CLEANUP_PERIOD_MINUTES",
}
DEFAULT_UPKEEP_PERIOD_MINUTES = {UpkeepKind.SNAPSHOT: 15.0, UpkeepKind.CLEANUP: 60.0}


def period_ms_from_minutes(minutes: float) -> int:
    if minutes <= 0:
        raise ValueError(f"an upkeep period must be positive, got {minutes} minutes")
    return max(1, int(minutes * _MINUTE_MS))


# --- planning ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class UpkeepPlan:
    """What a plan queued: the tables given work, those that needed none, and those it could not check."""

    kind: UpkeepKind
    planned: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()
    errors: dict[str, str] = field(default_factory=dict)
    leftovers: tuple[str, ...] = ()  # deleted tables (by their tombstones) queued to delete what is left


def plan_snapshots(
    tables: TableIndex,
    log: TransactionLogStore,
    snapshots: SnapshotStore,
    queue: CommitQueue,
    *,
    period_ms: int,
    min_transactions: int = 1,
    now: int | None = None,
    rng: random.Random | None = None,
    views: QueryableViewStore | None = None,
) -> UpkeepPlan:
    """Queue a snapshot of every table whose log moved at least ``min_transactions`` since its latest
    snapshot, checked without loading it. With ``views`` (the deployment keeps queryable views), also every
    table whose property asks for a view that is behind its log (:func:`view_behind`: one more read), so a
    view whose update failed is retried, and a view switched on is built, without waiting for a commit.
    A table that cannot be checked is reported; the others go on.
    Raises what ``queue.send`` raises (sending the plan again is safe: it is deduplicated per period)."""
    now = now_millis() if now is None else now
    planned: list[str] = []
    skipped: list[str] = []
    errors: dict[str, str] = {}
    for table in tables.list():
        if table.deleting:
            continue
        try:
            head = log.latest_number(table.table_id)
            latest = snapshots.metadata.latest(table.table_id)
            due = head - (latest.transaction_number if latest else 0) >= min_transactions
        except StateStoreError as e:
            logger.exception("could not check whether table %r moved", table.table_id)
            errors[table.table_id] = str(e)
            continue
        if not due and views is not None:
            try:
                due = view_behind(table, head, views)
            except StateStoreError as e:  # its view setting or meta: its snapshots are planned regardless
                logger.exception("could not check the queryable view of table %r", table.table_id)
                errors[table.table_id] = str(e)
        (planned if due else skipped).append(table.table_id)
    _send(queue, UpkeepKind.SNAPSHOT, planned, now, period_ms, rng)
    return UpkeepPlan(UpkeepKind.SNAPSHOT, tuple(planned), tuple(skipped), errors)


def plan_cleanup(
    tables: TableIndex,
    queue: CommitQueue,
    *,
    period_ms: int,
    now: int | None = None,
    rng: random.Random | None = None,
    blobs: BlobStore | None = None,
) -> UpkeepPlan:
    """Queue a cleanup of every table; with ``blobs``, also of every deleted table whose tombstone is
    there (:mod:`statestore.services.leftovers`: what late writers put under its prefix is deleted)."""
    now = now_millis() if now is None else now
    listed = tables.list()
    planned = [table.table_id for table in listed if not table.deleting]
    gone = [] if blobs is None else deleted_tables(blobs, listed)
    _send(queue, UpkeepKind.CLEANUP, planned + gone, now, period_ms, rng)
    return UpkeepPlan(UpkeepKind.CLEANUP, tuple(planned), leftovers=tuple(gone))


def _send(
    queue: CommitQueue,
    kind: UpkeepKind,
    table_ids: list[str],
    now: int,
    period_ms: int,
    rng: random.Random | None,
) -> None:
    """Send one message per table, in a random order (see the module's docstring)."""
    ordered = list(table_ids)
    (rng or random.Random()).shuffle(ordered)
    queue.send([UpkeepWork(kind, table_id, now, period_ms).to_message() for table_id in ordered])


# --- working -------------------------------------------------------------------------------------------


def _table_for(work: UpkeepWork, tables: TableIndex, first_received_at: int) -> TableInfo | str:
    """The work's table, or why there is nothing to do."""
    if work.superseded(first_received_at):
        return (
            f"superseded: first delivered {first_received_at - work.planned_at} ms after its plan, over "
            f"the {work.period_ms} ms period; a newer plan queued the table again"
        )
    try:
        return tables.get(work.table_id).live()
    except TableBeingDeletedError:
        return _BEING_DELETED
    except TableNotFoundError:
        return _DELETED


def run_snapshot_work(
    work: UpkeepWork,
    tables: TableIndex,
    log: TransactionLogStore,
    snapshots: SnapshotStore,
    *,
    first_received_at: int,
    min_transactions: int = 1,
    clock: Callable[[], int] = now_millis,
    stores: MutableMapping[str, TransactionLogStateStore] | None = None,
    views: QueryableViewStore | None = None,
) -> SnapshotOutcome:
    """Snapshot the work's table if it still needs one (see
    :func:`statestore.services.snapshot_upkeep.snapshot_table`); then, with ``views`` (the deployment keeps
    queryable views) and a table whose property asks for one, bring its view to the log's latest entry
    (:func:`statestore.services.view_upkeep.update_view`, reported in the outcome's ``view``, never raised),
    rebuilding it if need be from the state the snapshot loaded."""
    if work.kind is not UpkeepKind.SNAPSHOT:
        raise MalformedWorkError(f"{work.kind.value} work on the snapshot queue, for table {work.table_id!r}")
    table = _table_for(work, tables, first_received_at)
    if isinstance(table, str):
        if table in (_DELETED, _BEING_DELETED):
            # A worker that wrote a snapshot (or view items) after the delete's pass, and crashed before its
            # check, left them: this redelivery of its work deletes them again.
            snapshots.delete_table(work.table_id)
            if views is not None:
                views.delete_table(work.table_id)
        return SnapshotOutcome(work.table_id, skipped=table)
    stores = {} if stores is None else stores
    check = partial(tables.check_live, table.table_id)
    outcome = snapshot_table(
        table, log, snapshots, min_transactions=min_transactions, clock=clock, stores=stores,
        table_check=check,
    )  # fmt: skip
    if views is None:
        return outcome
    try:
        keeps_view = table.queryable_view
    except StateStoreError as e:
        logger.error("table %r: %s", table.table_id, e)
        return replace(outcome, view=ViewOutcome(table.table_id, error=str(e)))
    if not keeps_view:
        return outcome
    info = table

    def load_state() -> TableState:
        # The snapshot step's store (kept in ``stores``), whose state is loaded already: it only reads the
        # entries committed since. A new one only when the snapshot step failed or evicted it.
        store = stores.get(info.table_id)
        if store is None or store.schema != info.schema:
            store = TransactionLogStateStore(info.table_id, info.schema, log, snapshots, clock=clock)
        store.table_check = check
        return store.state()

    view = update_view(table, log, views, load_state)
    deleted = deleted_meanwhile(check)
    if deleted is not None:  # the delete's own pass over the view may have run before this update wrote
        try:
            views.delete_table(table.table_id)
        except StateStoreError as e:
            logger.exception("table %r: could not delete its view again", table.table_id)
            return replace(outcome, view=ViewOutcome(table.table_id, error=f"{deleted}: {e}"))
        return replace(outcome, view=ViewOutcome(table.table_id, skipped=deleted))
    return replace(outcome, view=view)


def run_cleanup_work(
    work: UpkeepWork,
    tables: TableIndex,
    log: TransactionLogStore,
    snapshots: SnapshotStore,
    blobs: BlobStore,
    *,
    first_received_at: int,
    policy: CleanupPolicy | None = None,
    clock: Callable[[], int] = now_millis,
    file_store: FileReferenceStore | None = None,
) -> CleanupOutcome:
    """Clean up the work's table (see :func:`statestore.services.cleanup.cleanup_table`); ``file_store``
    holds the files of tables that keep them as rows."""
    if work.kind is not UpkeepKind.CLEANUP:
        raise MalformedWorkError(f"{work.kind.value} work on the cleanup queue, for table {work.table_id!r}")
    table = _table_for(work, tables, first_received_at)
    if table == _DELETED:  # what late writers left under its prefix, if a tombstone says it was deleted
        try:
            leftovers = delete_leftovers(work.table_id, blobs, now=clock(), policy=policy)
        except StateStoreError as e:
            logger.exception("could not delete what is left of deleted table %r", work.table_id)
            return CleanupOutcome(
                work.table_id, error=f"could not delete what is left of the deleted table: {e}"
            )
        skipped = _DELETED if leftovers is None else _LEFTOVERS
        return CleanupOutcome(work.table_id, skipped=skipped, leftovers=leftovers)
    if isinstance(table, str):
        return CleanupOutcome(work.table_id, skipped=table)
    return cleanup_one(
        table, log, snapshots, blobs, policy=policy, clock=clock, file_store=file_store,
        table_check=partial(tables.check_live, table.table_id),
    )  # fmt: skip
