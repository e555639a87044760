"""Commits appended from an evicted table's guard (``statestore.engine.guarded_commit``) on moto and on
DynamoDB Local, where the log's conditional put and the statuses written with the entry decide them."""

from __future__ import annotations

from typing import Any, cast

from statestore.adapters.aws.backend import AwsBackend
from statestore.model.clock import now_millis
from statestore.services.committer import MessageOutcome
from statestore.transactions import AddFiles
from tests.builders import data_key, ref
from tests.committer.harness import FakeClock, Harness, add_files, message, outcomes, redelivered
from tests.committer.test_guards import FILES, demoted, names, tables


def harness(aws: AwsBackend) -> Harness:
    """The committer harness on the adapters, its clock at the real time (statuses expire by it)."""
    return Harness(
        tables=aws.table_index,
        log=aws.log,
        snapshot_metadata=cast(Any, aws.snapshot_metadata),
        blobs=aws.blobs,
        clock=FakeClock(now_millis()),
    )


def test_a_guarded_commit_lands_once_with_its_status_and_a_resend_is_a_duplicate(aws: AwsBackend) -> None:
    h = harness(aws)
    committer, (table_id, _) = demoted(h)

    request = add_files(table_id, "new", partition_id="root")
    sent = message(request)
    [result] = committer.process([sent])

    assert result.outcome is MessageOutcome.COMMITTED and committer.last_batch.guarded == 1
    status = aws.commit_statuses.get(table_id, request.request_id)  # written with the entry
    assert status is not None and status.transaction_number == result.transaction_number
    [copy] = h.committer().process([redelivered(sent)])  # another committer, after a restart
    assert (copy.outcome, copy.transaction_number) == (MessageOutcome.DUPLICATE, result.transaction_number)
    assert h.log_length(table_id) == result.transaction_number
    assert "new" in names(h, table_id)


def test_another_writers_entry_refuses_the_guards_append_which_catches_up_and_lands_after_it(
    aws: AwsBackend,
) -> None:
    h = harness(aws)
    committer, (table_id, _) = demoted(h)
    h.store(table_id).commit(AddFiles((ref(data_key(table_id, "elsewhere"), "root"),)))
    taken = h.log_length(table_id)

    results = committer.process([message(add_files(table_id, "mine", partition_id="root"))])

    assert outcomes(results) == ["committed"]
    assert (committer.last_batch.guarded, committer.last_batch.cold_loads) == (1, 0)
    assert results[0].transaction_number == taken + 1 == h.log_length(table_id)
    assert {"elsewhere", "mine"} <= names(h, table_id)
    # The other writer's entry, now the guard's: its file is held, and adding it again loads the state.
    [again] = committer.process([message(add_files(table_id, "elsewhere", partition_id="root"))])
    assert again.outcome is MessageOutcome.REJECTED and committer.last_batch.cold_loads == 1


def test_a_guard_read_from_the_snapshot_in_the_bucket_commits_once_and_a_held_file_is_rejected(
    aws: AwsBackend,
) -> None:
    """The guard of a table no committer keeps, read from its snapshot's objects in S3 and the log's tail
    in DynamoDB after it: the entry lands with its status, a resend is its duplicate, and a file the table
    holds is rejected on the state loaded from those same reads."""
    h = harness(aws)
    [table_id] = tables(h, 1)
    h.store(table_id).commit(AddFiles((ref(data_key(table_id, "after-snapshot"), "root"),)))
    committer = h.committer(guard_first_references=FILES)

    request = add_files(table_id, "new", partition_id="root")
    sent = message(request)
    [result] = committer.process([sent])

    assert result.outcome is MessageOutcome.COMMITTED, result.reason
    assert (committer.last_batch.guarded_cold, committer.last_batch.cold_loads) == (1, 0)
    status = aws.commit_statuses.get(table_id, request.request_id)
    assert status is not None and status.transaction_number == result.transaction_number
    [copy] = h.committer(guard_first_references=FILES).process([redelivered(sent)])
    assert (copy.outcome, copy.transaction_number) == (MessageOutcome.DUPLICATE, result.transaction_number)
    fresh = h.committer(guard_first_references=FILES)
    [held] = fresh.process([message(add_files(table_id, "after-snapshot", partition_id="root"))])
    assert held.outcome is MessageOutcome.REJECTED and fresh.last_batch.cold_loads == 1
    assert h.log_length(table_id) == result.transaction_number
    assert {"after-snapshot", "new", "seed-0"} <= names(h, table_id)
