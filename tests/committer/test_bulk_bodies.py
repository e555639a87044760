"""A request whose body is in the bucket is uploaded once: its log entry points at a copy of that body.

The copy lives under the log prefix without the request body's lifecycle tag, so it outlives the request
body; it is deleted with its entry, and one no entry holds (a crash between the copy and the append, a
rejected request) is never left behind for ever.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from statestore.codec.transaction_json import decode_entry, transaction_to_json
from statestore.engine.requests import CommitRequest, body_key, encode_request
from statestore.model import layout
from statestore.services.cleanup import cleanup_table
from statestore.services.cleanup_policy import CleanupPolicy
from statestore.services.committer import ReceivedMessage
from statestore.store.memory import InMemoryBlobStore, InMemoryTransactionLog
from statestore.store.ports import CommitOutcome, CommitStatus, LogEntry
from statestore.transactions import AddFiles, TransactionBatch
from tests.builders import data_key, ref
from tests.committer.harness import FakeClock, Harness, add_files, message, outcomes, redelivered
from tests.invariants import check_exactly_once, replay_checking_each_entry

DAY_MS = 24 * 60 * 60_000


class Crash(BaseException):
    """The committer's process dies (not an error it could handle)."""


class CrashingLog(InMemoryTransactionLog):
    """The next append dies before it reaches the log."""

    crash_next = False

    def append(self, table_id: str, entry: LogEntry, outcomes: Sequence[CommitStatus] = ()) -> None:
        if self.crash_next:
            self.crash_next = False
            raise Crash()
        super().append(table_id, entry, outcomes)


def harness(log_class: type[InMemoryTransactionLog] = InMemoryTransactionLog) -> Harness:
    clock = FakeClock()
    blobs = InMemoryBlobStore(clock)
    return Harness(log=log_class(blobs), blobs=blobs, clock=clock)


def big_request(table_id: str, *names: str) -> CommitRequest:
    return CommitRequest.new(table_id, AddFiles(tuple(ref(data_key(table_id, n), "root") for n in names)))


def stored_aside(h: Harness, request: CommitRequest) -> tuple[ReceivedMessage, str]:
    """The message of ``request`` with its body in the bucket, as ``CommitSender`` sends a big one."""
    key = body_key(request.table_id, request.request_id, h.clock.now)
    h.blobs.put(
        key, json.dumps(transaction_to_json(request.transaction)).encode(), tags=layout.REQUEST_BODY_TAGS
    )
    return message(encode_request(request, key), group_id=request.table_id), key


def log_objects(h: Harness, table_id: str) -> list[str]:
    return h.blobs.list(layout.log_body_prefix(table_id))


def cleanup(h: Harness, table_id: str) -> int:
    report = cleanup_table(
        h.store(table_id),
        h.tables.get(table_id),
        h.snapshots,
        h.blobs,
        policy=CleanupPolicy(),
        now=h.clock.now,
    )
    return report.orphan_log_bodies_deleted


def test_the_entry_points_at_an_untagged_copy_of_the_request_body_instead_of_holding_it() -> None:
    h = harness()
    table = h.create_table("t")
    request = big_request(table, "a", "b", "c")
    m, request_key = stored_aside(h, request)

    results = h.committer().process([m])

    assert outcomes(results) == ["committed"]
    (entry,) = h.log.read(table, 2, 2)
    (copy_key,) = log_objects(h, table)
    assert [key for key, _ in entry.attachments] == [copy_key]
    assert b"data/a" not in entry.body  # the references are in the copy only
    assert h.blobs.get(copy_key) == h.blobs.get(request_key)
    assert isinstance(h.blobs, InMemoryBlobStore)
    assert h.blobs.tags[copy_key] == {}  # the request body's lifecycle rule does not reach it
    batch = decode_entry(entry)
    assert isinstance(batch, TransactionBatch)
    assert [(i.request_id, i.transaction) for i in batch.items] == [(request.request_id, request.transaction)]
    assert set(h.state(table).files_by_name) == {f"tables/{table}/data/{n}" for n in "abc"}


def test_the_log_still_replays_after_the_request_body_expired() -> None:
    h = harness()
    table = h.create_table("t")
    m, request_key = stored_aside(h, big_request(table, "a"))
    h.committer().process([m])

    h.blobs.delete([request_key])  # the lifecycle rule, or cleanup of old request bodies

    assert set(h.state(table).files_by_name) == {f"tables/{table}/data/a"}
    replay_checking_each_entry(h.log, table, h.tables.get(table).schema)


def test_a_group_mixing_inline_and_stored_requests_is_one_entry_in_request_order() -> None:
    h = harness()
    table = h.create_table("t")
    first, third = add_files(table, "x"), add_files(table, "z")
    second = big_request(table, "y")
    stored, _ = stored_aside(h, second)

    results = h.committer().process([message(first), stored, message(third)])

    assert outcomes(results) == ["committed"] * 3
    (entry,) = h.log.read(table, 2, 2)
    batch = decode_entry(entry)
    assert isinstance(batch, TransactionBatch)
    assert batch.request_ids == (first.request_id, second.request_id, third.request_id)
    assert len(entry.attachments) == 1
    replay_checking_each_entry(h.log, table, h.tables.get(table).schema)


def test_a_redelivered_request_whose_entry_points_at_its_body_is_a_duplicate() -> None:
    h = harness()
    table = h.create_table("t")
    request = big_request(table, "a")
    m, _ = stored_aside(h, request)
    h.committer().process([m])
    h.clock.advance(10 * 60_000)

    results = h.committer().process([redelivered(m)])  # a fresh committer: it learns from the log

    assert outcomes(results) == ["duplicate"]
    assert h.log.latest_number(table) == 2
    assert len(log_objects(h, table)) == 1  # the second look left no copy behind
    status = h.statuses.get(request.table_id, request.request_id)
    assert status is not None and status.outcome is CommitOutcome.COMMITTED and status.transaction_number == 2
    check_exactly_once(h.log, table, {request.request_id: status})


def test_a_rejected_request_leaves_no_copy_of_its_body() -> None:
    h = harness()
    table = h.create_table("t")
    request = CommitRequest.new(table, AddFiles((ref(data_key(table, "a"), "no-such-partition"),)))
    m, _ = stored_aside(h, request)

    results = h.committer().process([m])

    assert outcomes(results) == ["rejected"]
    assert log_objects(h, table) == []


def test_a_crash_between_the_copy_and_the_append_loses_nothing_and_cleanup_collects_the_copy() -> None:
    h = harness(CrashingLog)
    table = h.create_table("t")
    request = big_request(table, "a")
    m, _ = stored_aside(h, request)
    assert isinstance(h.log, CrashingLog)
    h.log.crash_next = True
    try:
        h.committer().process([m])
    except Crash:
        pass
    else:
        raise AssertionError("the committer should have crashed")
    assert h.log.latest_number(table) == 1 and len(log_objects(h, table)) == 1  # a copy nothing holds

    results = h.committer().process([redelivered(m)])  # the queue redelivers to a new process

    assert outcomes(results) == ["committed"]
    (entry,) = h.log.read(table, 2, 2)
    held = {key for key, _ in entry.attachments}
    assert len(log_objects(h, table)) == 2
    assert cleanup(h, table) == 0  # the orphan is too young: a commit could still be about to point at it

    h.clock.advance(DAY_MS + 1)

    assert cleanup(h, table) == 1
    assert set(log_objects(h, table)) == held
    assert set(h.state(table).files_by_name) == {f"tables/{table}/data/a"}
    replay_checking_each_entry(h.log, table, h.tables.get(table).schema)


def test_deleting_old_entries_deletes_the_bodies_they_point_at() -> None:
    h = harness()
    table = h.create_table("t")
    committer = h.committer()
    m, _ = stored_aside(h, big_request(table, "a"))
    committer.process([m])
    committer.process([message(add_files(table, "b"))])

    h.log.delete_up_to(table, 2)

    assert log_objects(h, table) == []
