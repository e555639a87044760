"""One table's fresh requests drafted into one group commit; the search of its log for redelivered ones."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from statestore import layout
from statestore.catalog import TableInfo
from statestore.codec.transaction_json import decode_entry
from statestore.committer.decisions import Committed, DeadLettered, Decision, FoundInLog, Rejected
from statestore.committer.followed import FollowedRequests
from statestore.committer.messages import CommitterStats
from statestore.committer.sorting import FreshRequest
from statestore.committer_stats import BatchStatsBuilder
from statestore.engine import GroupMember, TableStateStore
from statestore.errors import BlobNotFoundError, CodecError, StateStoreError
from statestore.ports import BlobStore, TransactionLogStore
from statestore.transactions import request_ids_of

logger = logging.getLogger("statestore.committer")  # one logger for the whole committer, as before the split

_LOG_SCAN_CHUNK = 32


@dataclass
class WarmTable:
    """A table the committer keeps loaded between batches, with the request ids of its newest entries."""

    info: TableInfo
    store: TableStateStore
    followed: FollowedRequests
    checked_time: int


def find_in_log(
    log: TransactionLogStore,
    table: WarmTable,
    since: int,
    request_ids: set[str],
    max_scan_entries: int,
) -> set[str]:
    """Make sure ``table.followed`` knows which of ``request_ids`` are in log entries written since
    ``since`` (epoch ms): catch up with the log, then read back over entries not followed yet.

    Returns the request ids it could not decide: not found, but the search could not reach back to
    ``since`` (cleanup deleted the entries, or the scan limit was reached).
    """
    last_number = table.store.read_log_to_end()
    table.followed.follow_to(last_number)
    missing = {r for r in request_ids if table.followed.number_of(r) is None}
    if not missing or table.followed.covers_since(since):
        return set()
    first = table.followed.first_number
    high = (first - 1) if first is not None else last_number
    lowest = max(1, high - max_scan_entries + 1)
    reached_since = high < 1  # nothing before the followed entries: the whole log was seen
    while high >= lowest and missing:
        low = max(lowest, high - _LOG_SCAN_CHUNK + 1)
        entries = list(log.read(table.info.table_id, low, high))
        for entry in entries:
            for request_id in request_ids_of(decode_entry(entry)):
                if request_id in missing:
                    table.followed.remember(request_id, entry.transaction_number)
                    missing.discard(request_id)
        if entries and entries[0].update_time < since:
            reached_since = True
            break
        if not entries or entries[0].transaction_number != low:
            break  # cleanup deleted what came before
        if low == 1:
            reached_since = True
        high = low - 1
    return set() if reached_since else missing


def commit_fresh(
    table: WarmTable,
    requests: Sequence[FreshRequest],
    blobs: BlobStore,
    clock: Callable[[], int],
    stats: CommitterStats,
    batch: BatchStatsBuilder,
) -> dict[str, Decision]:
    """Commit ``requests`` (one per request id) as one group through the engine, which validates each
    against the state as changed by the ones before it and redoes the group on a lost race; requests found
    in the log (or, for a table whose files are rows, in the file store's request rows) are duplicates.
    Returns each request's decision by request id.

    Raises StateStoreError when a store fails: nothing is decided then.
    """
    table_id = table.info.table_id
    decisions: dict[str, Decision] = {}
    members: list[GroupMember] = []
    bodies: dict[str, tuple[str, bytes]] = {}  # request id -> (body key, body) of bodies stored aside
    for request in requests:
        request_id, envelope = request.request_id, request.envelope
        number = table.followed.number_of(request_id)
        if number is not None:
            decisions[request_id] = FoundInLog(number, clock())
            continue
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
    try:
        outcome = table.store.commit_group(members, already_committed=table.followed.number_of)
    finally:
        conflicts = table.store.retries - conflicts_before
        stats.log_append_conflicts += conflicts
        batch.log_append_conflicts += conflicts
    # Copies the entry does not point at (members rejected, or found in the log). Had the commit raised,
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
        decisions[request_id] = FoundInLog(number, clock())
    for request_id, error in outcome.rejected.items():
        decisions[request_id] = Rejected(str(error), now)
    # One group may land in several commits (a table whose files are rows): each member has its number.
    for number, update_time, keys in outcome.written_log_entries():
        stats.log_appends += 1
        table.followed.add(number, update_time, keys)
    for request_id in outcome.committed:
        skipped = outcome.skipped_parts.get(request_id, ())
        note = "; ".join(f"skipped {part}: {error}" for part, error in skipped) or None
        decisions[request_id] = Committed(
            outcome.number_of(request_id), outcome.update_time_of(request_id), note
        )
    return decisions


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
