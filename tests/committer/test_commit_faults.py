"""Regression tests for the commit path under faults: each broke a promise before it was fixed.

- a group validated against a stale warm state must never be appended after entries it did not see;
- a final status never changes, and a stray copy of a decided request (in another message group, or
  naming no table) changes nothing: the request is never applied again, even by a restarted committer;
- a rejection is final only once checked against a state read to the end of the log;
- a lost response to a log put that landed is a success, never a validation error (and never unknown).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

import pytest

from statestore.codec.transaction_json import transaction_to_json
from statestore.engine.log_store import RetryPolicy, TransactionLogStateStore
from statestore.engine.requests import CommitRequest, body_key, encode_request
from statestore.errors import StoreUnavailableError, TransactionNumberTakenError
from statestore.services.committer import ReceivedMessage
from statestore.store.memory import (
    InMemoryBlobStore,
    InMemoryCommitQueue,
    InMemoryCommitStatusStore,
    InMemoryTransactionLog,
)
from statestore.store.ports import CommitOutcome, CommitStatus, LogEntry
from statestore.transactions import (
    AddFiles,
    AssignJobIdRequest,
    AssignJobIds,
    ClearFiles,
    DeleteFiles,
    ReplaceFileReferences,
    ReplaceFileReferencesJob,
)
from tests.builders import data_key, data_keys, ref
from tests.committer.harness import Harness, add_files, message, outcomes, redelivered
from tests.invariants import check_exactly_once, replay_checking_each_entry


def replay(h: Harness, table_id: str) -> None:
    replay_checking_each_entry(h.log, table_id, h.tables.get(table_id).schema)


# --- a group commit is validated against the state it is appended after -------------------------------


class SlowBlobStore(InMemoryBlobStore):
    """Runs ``during_get`` inside the next ``get`` (a slow fetch of a request body, while others write)."""

    def __init__(self) -> None:
        super().__init__()
        self.during_get: Callable[[], None] | None = None

    def get(self, key: str) -> bytes:
        hook, self.during_get = self.during_get, None
        if hook is not None:
            hook()
        return super().get(key)


def stored_aside(h: Harness, request: CommitRequest) -> ReceivedMessage:
    """A message whose request body is in the bucket, as a big request's is."""
    key = body_key(request.table_id, request.request_id, h.clock.now)
    h.blobs.put(key, json.dumps(transaction_to_json(request.transaction)).encode())
    return message(encode_request(request, key), group_id=request.table_id)


def while_fetching_the_body_another_writer_adds_x_and_time_passes(h: Harness, table: str) -> None:
    def meanwhile() -> None:
        h.store(table).commit(AddFiles((ref(data_key(table, "x"), "root"),)))
        h.clock.advance(6 * 60_000)  # past the engine's 5-minute unread limit

    assert isinstance(h.blobs, SlowBlobStore)
    h.blobs.during_get = meanwhile


def test_a_group_is_never_appended_after_entries_it_was_not_validated_against() -> None:
    h = Harness(blobs=SlowBlobStore())
    table = h.create_table("t")
    committer = h.committer()
    assert outcomes(committer.process([message(add_files(table, "warm"))])) == ["committed"]
    while_fetching_the_body_another_writer_adds_x_and_time_passes(h, table)

    results = committer.process([stored_aside(h, add_files(table, "x"))])

    assert outcomes(results) == ["rejected"]
    assert "already exists" in (results[0].reason or "")
    replay(h, table)  # every entry is valid against the state just before it


def test_the_warm_state_after_a_lost_race_equals_a_fresh_load() -> None:
    h = Harness(blobs=SlowBlobStore())
    table = h.create_table("t")
    committer = h.committer()
    committer.process([message(add_files(table, "warm"))])
    while_fetching_the_body_another_writer_adds_x_and_time_passes(h, table)
    committer.process([stored_aside(h, add_files(table, "y"))])

    # Valid only if the warm state knows "x" (a warm state that lacked it would commit a second "x").
    results = committer.process([message(add_files(table, "x")), message(add_files(table, "z"))])

    assert outcomes(results) == ["rejected", "committed"]
    state = replay_checking_each_entry(h.log, table, h.tables.get(table).schema)
    assert sorted(state.files_by_name) == data_keys(table, "warm", "x", "y", "z")


def test_a_rejection_made_on_a_cached_state_is_checked_against_the_log_before_it_is_final() -> None:
    h = Harness()
    table = h.create_table("t")
    committer = h.committer()
    committer.process([message(add_files(table, "warm"))])
    # Another writer adds the file the request claims: the warm state lacks it, and rejecting the claim as
    # "file not found" on that stale state would be a false rejection.
    late = data_key(table, "late")
    h.store(table).commit(AddFiles((ref(late, "root"),)))
    claim = CommitRequest.new(table, AssignJobIds((AssignJobIdRequest("job", "root", (late,)),)))

    results = committer.process([message(claim)])

    assert outcomes(results) == ["committed"]
    state = h.state(table)
    assert state.files_by_name[late].references[0].job_id == "job"


# --- a final status never changes, and a decided request is never applied again -----------------------


def clear_files(table_id: str) -> CommitRequest:
    return CommitRequest.new(table_id, ClearFiles())


@pytest.mark.parametrize("stray_group", ["another-table", "no-such-table"])
def test_a_stray_copy_of_a_committed_request_changes_nothing_even_after_a_restart(stray_group: str) -> None:
    h = Harness()
    table = h.create_table("t")
    h.create_table("another")
    groups = {"another-table": h.tables.get_by_name("another").table_id, "no-such-table": "no-such-table"}
    clear = clear_files(table)
    assert outcomes(h.committer().process([message(clear)])) == ["committed"]
    committed = h.statuses.get(table, clear.request_id)
    assert committed is not None
    assert outcomes(h.committer().process([message(add_files(table, "newer"))])) == ["committed"]

    stray = h.committer().process([message(clear, group_id=groups[stray_group])])
    resent = h.committer().process([message(clear)])  # a new committer: nothing warm

    assert outcomes(stray) == ["duplicate"] and outcomes(resent) == ["duplicate"]
    assert h.statuses.get(table, clear.request_id) == committed
    assert dead_letter_count(h) == 0
    assert sorted(h.state(table).files_by_name) == [
        data_key(table, "newer")
    ]  # ClearFiles was not applied a second time
    check_exactly_once(h.log, table, {clear.request_id: committed})


def test_a_stray_copy_in_the_same_batch_as_its_request_is_a_duplicate_of_it() -> None:
    h = Harness()
    table = h.create_table("t")
    other = h.create_table("other")
    request = add_files(table, "a")

    results = h.committer().process([message(request), message(request, group_id=other)])

    assert outcomes(results) == ["committed", "duplicate"]
    status = h.statuses.get(table, request.request_id)
    assert status is not None and (status.outcome, status.transaction_number) == (CommitOutcome.COMMITTED, 2)
    assert dead_letter_count(h) == 0


def test_a_stray_copy_of_an_undecided_request_is_dead_lettered_and_the_request_still_commits() -> None:
    h = Harness()
    table = h.create_table("t")
    request = add_files(table, "a")

    stray = h.committer().process([message(request, group_id="elsewhere")])
    real = h.committer().process([message(request)])

    assert outcomes(stray) == ["dead_lettered"] and outcomes(real) == ["committed"]
    status = h.statuses.get(table, request.request_id)
    assert status is not None and status.outcome is CommitOutcome.COMMITTED
    assert dead_letter_count(h) == 1


def test_a_redelivered_request_is_found_after_the_warm_state_jumped_to_a_newer_snapshot() -> None:
    h = Harness()
    table = h.create_table("t")
    warm = h.committer()
    warm.process([message(add_files(table, "warm-up"))])  # warm at transaction 2
    writer = h.store(table)
    for name in ("b", "c", "d"):
        writer.commit(AddFiles((ref(data_key(table, name), "root"),)))
    h.snapshots.write(table, writer.state(), h.clock.now)  # snapshot at 5 ...
    h.log.delete_up_to(table, 5)  # ... and cleanup deleted the entries the warm committer has not read
    request = add_files(table, "a")
    sent = message(request, sent=h.clock.now)
    assert outcomes(h.committer().process([sent])) == ["committed"]  # at 6, then died before acknowledging
    writer.commit(AddFiles((ref(data_key(table, "e"), "root"),)))
    h.snapshots.write(table, writer.state(), h.clock.now)  # the warm committer will reload from 7

    results = warm.process([redelivered(sent)])

    assert outcomes(results) == ["duplicate"] and results[0].transaction_number == 6
    status = h.statuses.get(table, request.request_id)
    assert status is not None and (status.outcome, status.transaction_number) == (CommitOutcome.COMMITTED, 6)


def test_a_request_redelivered_or_resent_after_cleanup_deleted_its_entry_is_never_applied_again() -> None:
    h = Harness()
    table = h.create_table("t")
    request = add_files(table, "a")
    sent = message(request, sent=h.clock.now)
    assert outcomes(h.committer().process([sent])) == ["committed"]  # at 2, then died before acknowledging
    # "a" is compacted into "b" and collected: a second AddFiles of "a" would now be valid.
    writer = h.store(table)
    a, b = data_keys(table, "a", "b")
    writer.commit(AssignJobIds((AssignJobIdRequest("job", "root", (a,)),)))
    writer.commit(ReplaceFileReferences((ReplaceFileReferencesJob("job", "root", (a,), ref(b, "root")),)))
    writer.commit(DeleteFiles((a,)))
    h.snapshots.write(table, writer.state(), h.clock.now)
    h.log.delete_up_to(table, 5)  # cleanup: the entry holding the request is gone
    h.clock.advance(10 * 60_000)

    results = h.committer().process([redelivered(sent)])
    h.clock.advance(10 * 24 * 3600_000)  # redriven from the dead-letter queue, or resent, days later
    resent = h.committer().process([message(request)])

    assert outcomes(results) == ["duplicate"] and outcomes(resent) == ["duplicate"]
    assert [r.transaction_number for r in results + resent] == [2, 2]
    status = h.statuses.get(table, request.request_id)
    assert status is not None and (status.outcome, status.transaction_number) == (CommitOutcome.COMMITTED, 2)
    assert sorted(h.state(table).files_by_name) == [b]  # not applied a second time
    assert dead_letter_count(h) == 0


def dead_letter_count(h: Harness) -> int:
    assert isinstance(h.dead_letters, InMemoryCommitQueue)
    return len(h.dead_letters.messages)


# --- lost responses -----------------------------------------------------------------------------------


class LostResponseLog(InMemoryTransactionLog):
    """The next append lands, then its caller sees ``failure`` (a lost response) instead of success."""

    def __init__(self) -> None:
        super().__init__(None, InMemoryCommitStatusStore())
        self.failure: Callable[[str, LogEntry], Exception] | None = None

    def append(self, table_id: str, entry: LogEntry, outcomes: Sequence[CommitStatus] = ()) -> None:
        super().append(table_id, entry, outcomes)
        failure, self.failure = self.failure, None
        if failure is not None:
            raise failure(table_id, entry)


LOST = {
    # botocore retried the put; the retry failed the condition on the item the first try wrote
    "retry-fails-condition": lambda table_id, entry: TransactionNumberTakenError(
        table_id, entry.transaction_number
    ),
    # the connection dropped after DynamoDB wrote the item
    "connection-lost": lambda table_id, entry: StoreUnavailableError("connection reset by peer"),
}


@pytest.mark.parametrize("lost", LOST.values(), ids=LOST.keys())
def test_a_synchronous_commit_whose_response_was_lost_is_reported_committed(
    lost: Callable[[str, LogEntry], Exception],
) -> None:
    h = Harness(log=LostResponseLog())
    table = h.create_table("t")
    store = TransactionLogStateStore(
        table, h.tables.get(table).schema, h.log, retry=RetryPolicy(base_delay=0.0), sleep=lambda _: None
    )
    assert isinstance(h.log, LostResponseLog)
    h.log.failure = lost

    result = store.commit(AddFiles((ref(data_key(table, "a"), "root"),)))

    assert result.transaction_number == 2
    assert h.log.latest_number(table) == 2
    assert data_key(table, "a") in store.state().files_by_name
    replay(h, table)


@pytest.mark.parametrize("lost", LOST.values(), ids=LOST.keys())
def test_a_queued_commit_whose_response_was_lost_is_reported_committed_not_rejected(
    lost: Callable[[str, LogEntry], Exception],
) -> None:
    h = Harness(log=LostResponseLog())
    table = h.create_table("t")
    committer = h.committer()
    assert isinstance(h.log, LostResponseLog)
    h.log.failure = lost
    request = add_files(table, "a")

    results = committer.process([message(request)])

    assert outcomes(results) == ["committed"]
    assert results[0].transaction_number == 2
    status = h.statuses.get(table, request.request_id)
    assert status is not None and status.outcome is CommitOutcome.COMMITTED
    check_exactly_once(h.log, table, {request.request_id: status})
    replay(h, table)


# --- a damaged snapshot -----------------------------------------------------------------------------------


def test_a_cold_committer_commits_to_a_table_whose_latest_snapshot_is_damaged() -> None:
    h = Harness()
    table = h.create_table("t")
    writer = h.store(table)
    writer.commit(AddFiles((ref(data_key(table, "a"), "root"),)))
    writer.create_snapshot()
    writer.commit(AddFiles((ref(data_key(table, "b"), "root"),)))
    latest = writer.create_snapshot()
    assert latest is not None
    h.blobs.put(latest.files_key, h.blobs.get(latest.files_key)[:100])  # truncated

    results = h.committer().process([message(add_files(table, "c")), message(add_files(table, "a"))])

    assert outcomes(results) == ["committed", "rejected"]  # decided against the state the log holds
    assert sorted(h.state(table).files_by_name) == data_keys(table, "a", "b", "c")
