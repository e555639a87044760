"""One table's fresh requests drafted into one group commit."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from statestore.engine.guarded_commit import adds_of
from statestore.engine.log_store import TableStateStore, TransactionLogStateStore
from statestore.engine.results import GroupCommitResult, GroupMember, skipped_note
from statestore.errors import BlobNotFoundError, CodecError, StateStoreError
from statestore.model import layout
from statestore.services.committer.decisions import (
    Committed,
    DeadLettered,
    Decision,
    FoundCommitted,
    Rejected,
    Retry,
    already_decided,
)
from statestore.services.committer.messages import CommitterStats
from statestore.services.committer.sorting import FreshRequest
from statestore.services.committer_stats import BatchStatsBuilder
from statestore.state.file_guard import FileGuard
from statestore.store.ports import BlobStore, CommitStatusStore
from statestore.store.snapshot_ports import SnapshotInfo
from statestore.store.tables import TableInfo

logger = logging.getLogger("statestore.committer")  # one logger for the whole committer, as before the split


@dataclass
class WarmTable:
    """A table the committer keeps between batches: loaded, or demoted to ``guard`` (what it keeps of its
    state once evicted, :mod:`statestore.state.file_guard`). ``snapshot``: the record of its latest snapshot
    its first reads found (None: not known), whose counts size the room its first load makes and decide
    whether its guard is read from that snapshot."""

    info: TableInfo
    store: TableStateStore
    checked_time: int
    snapshot: SnapshotInfo | None = None
    guard: FileGuard | None = None


def commit_fresh(
    table: WarmTable,
    requests: Sequence[FreshRequest],
    blobs: BlobStore,
    statuses: CommitStatusStore,
    clock: Callable[[], int],
    stats: CommitterStats,
    batch: BatchStatsBuilder,
    load: Callable[[], object],
    guard_from_snapshot: Callable[[], bool] = lambda: False,
) -> dict[str, Decision]:
    """Commit ``requests`` (one per request id, none with a final status when the batch was read) as one
    group through the engine, which validates each against the state as changed by the ones before it,
    redoes the group on a lost race, and writes each committed request's status with the entry. A request
    the log finds decided meanwhile (its status final) is a duplicate of that decision; one a table whose
    files are rows finds in its file store was committed before. Returns each request's decision by id.

    A table demoted to its guard is committed to from the guard when it can decide the group (only new
    files); else ``load()`` loads its state first, as it does for any table not loaded. A table neither
    loaded nor guarded, given a group that only adds files, first has ``guard_from_snapshot()`` make
    ``table.guard`` where it will (from its latest snapshot, without loading the state; True if it did).

    Raises StateStoreError when a store fails: nothing is decided then.
    """
    table_id = table.info.table_id
    decisions: dict[str, Decision] = {}
    members: list[GroupMember] = []
    bodies: dict[str, tuple[str, bytes]] = {}  # request id -> (body key, body) of bodies stored aside
    for request in requests:
        request_id, envelope = request.request_id, request.envelope
        try:
            body = envelope.read_body(blobs) if envelope.body_key is not None else None
            transaction = envelope.transaction(blobs, body)
        except CodecError as e:
            decisions[request_id] = DeadLettered(f"malformed commit request: {e}", time=clock())
            continue
        members.append(GroupMember(request_id, transaction))
        if envelope.body_key is not None and body is not None:
            bodies[request_id] = (envelope.body_key, body)
    if not members:
        return decisions
    members = _attach_stored_bodies(blobs, table_id, members, bodies)
    conflicts_before = table.store.retries
    cold = table.guard is None and table.store.loaded_state is None and adds_of(members) is not None
    try:
        outcome = None
        if cold:
            cold = guard_from_snapshot()
        if table.guard is not None:
            outcome = _commit_on_guard(table, members, batch)
            if outcome is not None and cold:
                batch.guarded_cold += 1
        if outcome is None:
            load()
            outcome = table.store.commit_group(members)
    finally:
        conflicts = table.store.retries - conflicts_before
        stats.log_append_conflicts += conflicts
        batch.log_append_conflicts += conflicts
        if cold and isinstance(table.store, TransactionLogStateStore):
            # What reading the guard from the snapshot kept for a load (its objects): a load took it, or
            # none is needed (the commit landed), or the batch failed: let go either way.
            table.store.use_first_reads(None)
    # Copies the entry does not point at (members rejected, or found committed). Had the commit raised,
    # the entry might point at any of them: they are left to the cleanup's sweep of the log prefix.
    unused = [
        m.stored_body[0] for m in members if m.stored_body is not None and m.key not in outcome.committed
    ]
    if unused:
        try:
            blobs.delete(unused)
        except StateStoreError as e:  # the outcome stands; the sweep collects them later
            logger.warning("could not delete %d unused request body copies: %s", len(unused), e)
    now = clock()
    for request_id, number in outcome.found.items():
        decisions[request_id] = FoundCommitted(number, now)
    for request_id, error in outcome.rejected.items():
        decisions[request_id] = Rejected(str(error), now)
    if outcome.decided:
        finals = statuses.get_many((table_id, request_id) for request_id in outcome.decided)
        for request_id in outcome.decided:
            final = finals.get((table_id, request_id))
            decisions[request_id] = (
                already_decided(final, f"already {final.outcome.value} (decided meanwhile)")
                if final is not None and final.is_final
                else Retry(f"request {request_id!r} was decided meanwhile, but its status could not be read")
            )
    # One group may land in several commits (a table whose files are rows): each member has its number.
    in_log: set[str] = set()
    for _, _, keys in outcome.written_log_entries():
        stats.log_appends += 1
        in_log.update(keys)
    records_statuses = table.store.log.request_statuses is not None
    for request_id in outcome.committed:
        skipped = outcome.skipped_parts.get(request_id, ())
        decisions[request_id] = Committed(
            outcome.number_of(request_id),
            outcome.update_time_of(request_id),
            skipped_note(skipped),
            status_written=records_statuses and request_id in in_log,
        )
    return decisions


def _commit_on_guard(
    table: WarmTable, members: Sequence[GroupMember], batch: BatchStatsBuilder
) -> GroupCommitResult | None:
    """The group committed from the table's guard, or None (nothing written; the guard, if any, dropped:
    it could not decide, so the state will be loaded)."""
    guard, store = table.guard, table.store
    if guard is None or not isinstance(store, TransactionLogStateStore) or store.loaded_state is not None:
        return None
    outcome = store.commit_on_guard(guard, members)
    if outcome is None:
        table.guard = None
        return None
    batch.guarded += 1
    return outcome


def _attach_stored_bodies(
    blobs: BlobStore, table_id: str, members: list[GroupMember], bodies: dict[str, tuple[str, bytes]]
) -> list[GroupMember]:
    """Members whose request body is in the bucket, pointing at a server-side copy of it under the log
    prefix: the log entry then names that copy instead of holding the transaction again, so a big
    request is uploaded once. The copy outlives the request body's lifecycle rule and is deleted with
    its entry."""
    out = []
    for member in members:
        stored = bodies.get(member.key)
        if stored is None:
            out.append(member)
            continue
        body_key, body = stored
        copy_key = layout.log_attachment_key(table_id, member.key)
        try:
            blobs.copy(body_key, copy_key)
        except BlobNotFoundError:
            out.append(member)  # gone since it was read (expired): the entry holds the transaction itself
            continue
        out.append(GroupMember(member.key, member.transaction, (copy_key, body)))
    return out
