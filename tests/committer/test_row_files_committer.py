"""The committer end to end in memory for a table whose files are rows: a mixed group of partition and
file requests, statuses with the right numbers, redeliveries applied once and never undecidable."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from statestore.engine.requests import CommitRequest
from statestore.engine.row_store import RowFilesStateStore
from statestore.errors import StoreUnavailableError
from statestore.store.memory import InMemoryCommitStatusStore
from statestore.store.ports import CommitOutcome, CommitStatus, FileReferenceStore
from statestore.store.tables import TableInfo
from statestore.transactions import InitialisePartitions, SplitPartition
from tests.builders import INT_SCHEMA, data_keys, tree
from tests.committer.harness import Harness, add_files, message, outcomes, redelivered
from tests.file_stores import file_store  # noqa: F401  (the fixture)


class FailingOnce(InMemoryCommitStatusStore):
    fail_next_record = False

    def record(self, statuses: Sequence[CommitStatus]) -> dict[tuple[str, str], CommitStatus]:
        if self.fail_next_record:
            self.fail_next_record = False
            raise StoreUnavailableError("status table throttled")
        return super().record(statuses)


def create_postgres_table(h: Harness, files: FileReferenceStore, name: str = "t") -> str:
    info = TableInfo.new(name, INT_SCHEMA, None, "postgres")
    h.tables.create(info)
    row_store(h, files, info.table_id).commit(InitialisePartitions(tuple(tree(INT_SCHEMA))))
    return info.table_id


def row_store(h: Harness, files: FileReferenceStore, table_id: str) -> RowFilesStateStore:
    return RowFilesStateStore(table_id, INT_SCHEMA, h.log, files, h.snapshots, clock=h.clock)


def split_root(h: Harness, files: FileReferenceStore, table_id: str) -> SplitPartition:
    parent, left, right = (
        row_store(h, files, table_id).state().partition("root").split(0, 10, "left", "right")
    )
    return SplitPartition(parent, (left, right))


def test_a_mixed_group_commits_in_order_with_each_request_s_own_number(
    file_store: FileReferenceStore,  # noqa: F811
) -> None:
    h = Harness()
    table = create_postgres_table(h, file_store)
    requests = [
        add_files(table, "a"),
        CommitRequest.new(table, split_root(h, file_store, table)),
        add_files(table, "b", partition_id="left"),  # needs the split before it
        add_files(table, "a", partition_id="right"),  # a is there already
    ]
    results = h.committer(file_store=file_store).process([message(r) for r in requests])

    assert outcomes(results) == ["committed", "committed", "committed", "rejected"]
    assert results[1].transaction_number == 2  # the split is the log's entry 2
    assert h.log_length(table) == 2  # the files never reach the log
    assert results[0].transaction_number != results[2].transaction_number  # two file-store commits
    for request, result in zip(requests[:3], results[:3], strict=True):
        status = h.statuses.get(table, request.request_id)
        assert status is not None and status.outcome is CommitOutcome.COMMITTED
        assert status.transaction_number == result.transaction_number
    assert sorted(file_store.files(table)) == data_keys(table, "a", "b")
    assert file_store.committed_requests(table, [r.request_id for r in requests]) == {
        requests[0].request_id: results[0].transaction_number,
        requests[2].request_id: results[2].transaction_number,
    }


@pytest.mark.parametrize("warm", [True, False], ids=["same-committer", "new-committer"])
def test_a_batch_redelivered_after_its_commits_is_applied_once(
    file_store: FileReferenceStore,  # noqa: F811
    warm: bool,
) -> None:
    h = Harness(statuses=FailingOnce())
    table = create_postgres_table(h, file_store)
    requests = [
        add_files(table, "a"),
        CommitRequest.new(table, split_root(h, file_store, table)),
        add_files(table, "b", partition_id="left"),
    ]
    messages = [message(r, sent=h.clock.now) for r in requests]
    first_committer = h.committer(file_store=file_store)
    h.statuses.fail_next_record = True  # type: ignore[attr-defined]
    first = first_committer.process(messages)
    assert outcomes(first) == ["retry"] * 3
    numbers = {
        r.request_id: number
        for r, number in zip(
            requests,
            [
                file_store.committed_requests(table, [requests[0].request_id])[requests[0].request_id],
                2,
                file_store.committed_requests(table, [requests[2].request_id])[requests[2].request_id],
            ],
            strict=True,
        )
    }

    h.clock.advance(30_000)
    committer = first_committer if warm else h.committer(file_store=file_store)
    again = committer.process([redelivered(m) for m in messages])

    assert outcomes(again) == ["duplicate"] * 3
    assert [r.transaction_number for r in again] == [numbers[r.request_id] for r in requests]
    assert h.log_length(table) == 2
    assert sorted(file_store.files(table)) == data_keys(table, "a", "b")
    for r in requests:
        status = h.statuses.get(table, r.request_id)
        assert status is not None and status.transaction_number == numbers[r.request_id]


def test_a_redelivered_file_request_is_found_even_when_the_log_was_cleaned_up(
    file_store: FileReferenceStore,  # noqa: F811
) -> None:
    h = Harness(statuses=FailingOnce())
    table = create_postgres_table(h, file_store)
    request = add_files(table, "a")
    m = message(request, sent=h.clock.now)
    h.statuses.fail_next_record = True  # type: ignore[attr-defined]
    assert outcomes(h.committer(file_store=file_store).process([m])) == ["retry"]
    # The log moves on and its early entries go behind a snapshot: the log alone could not decide.
    other = row_store(h, file_store, table)
    h.clock.advance(60_000)
    other.commit(split_root(h, file_store, table))
    other.create_snapshot()
    h.log.delete_up_to(table, 1)

    again = h.committer(file_store=file_store).process([redelivered(m)])

    assert outcomes(again) == ["duplicate"]
    assert sorted(file_store.files(table)) == data_keys(table, "a")
    status = h.statuses.get(table, request.request_id)
    assert status is not None and status.outcome is CommitOutcome.COMMITTED


def test_a_postgres_table_s_requests_wait_while_the_committer_has_no_file_store(
    file_store: FileReferenceStore,  # noqa: F811
) -> None:
    h = Harness()
    table = create_postgres_table(h, file_store)
    results = h.committer().process([message(add_files(table, "a"))])

    assert outcomes(results) == ["retry"]
    assert "STATESTORE_POSTGRES_URL" in (results[0].reason or "")
    assert not file_store.has_files(table)
    # Given one, the same message commits.
    assert outcomes(h.committer(file_store=file_store).process([message(add_files(table, "a"))])) == [
        "committed"
    ]
