"""A table the committer does not keep at all has its guard read from its latest snapshot, not its state
loaded, for a group that only adds files (``GuardedCommits.guard_from_snapshot``): the commit lands as from
the state, exactly once; whatever the guard cannot decide loads the state, from the bytes already read."""

from __future__ import annotations

import pytest

from statestore.engine.requests import CommitRequest
from statestore.model import layout
from statestore.services.committer import BatchCommitter, MessageOutcome
from statestore.transactions import AddFiles, DeleteFiles
from tests.builders import data_key, ref
from tests.committer.harness import Harness, add_files, message, redelivered
from tests.committer.test_guards import FILES, names, tables


@pytest.fixture
def h() -> Harness:
    return Harness()


def cold(h: Harness, **kwargs: object) -> BatchCommitter:
    """A committer that has seen no table, reading the guard of any table whose snapshot counts ``FILES``."""
    return h.committer(guard_first_references=FILES, **kwargs)


def snapshot_reads(h: Harness, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The keys of the snapshot objects read from now on, each time one is read (the in-memory store's
    ``get_at_most`` reads through ``get``)."""
    read: list[str] = []
    get = h.blobs.get

    def counted_get(key: str) -> bytes:
        if "/snapshots/" in key:
            read.append(key)
        return get(key)

    monkeypatch.setattr(h.blobs, "get", counted_get)
    return read


def test_new_files_for_a_table_not_kept_are_appended_from_a_guard_read_from_its_snapshot(h: Harness) -> None:
    [table_id] = tables(h, 1)
    h.store(table_id).commit(AddFiles((ref(data_key(table_id, "after-snapshot"), "root"),)))
    before = h.log_length(table_id)
    committer = cold(h)

    sent = message(add_files(table_id, "new", partition_id="root"))
    [result] = committer.process([sent])

    assert result.outcome is MessageOutcome.COMMITTED, result.reason
    assert result.transaction_number == before + 1 == h.log_length(table_id)
    batch = committer.last_batch
    assert (batch.guarded, batch.guarded_cold, batch.cold_loads, len(batch.cold_guard_ms)) == (1, 1, 0, 1)
    assert committer.guarded_tables == {table_id}  # its state was never loaded
    [size] = batch.table_sizes
    assert size.references == FILES + 2  # the snapshot's, the log's after it, the new one
    assert names(h, table_id) == {f"seed-{n}" for n in range(FILES)} | {"after-snapshot", "new"}
    # The status was written with the entry: a redelivery is a duplicate, to this committer and a new one.
    for again in (committer, cold(h)):
        [copy] = again.process([redelivered(sent)])
        assert (copy.outcome, copy.transaction_number) == (
            MessageOutcome.DUPLICATE,
            result.transaction_number,
        )
    # The next batch appends from the same guard, read no more.
    [next_one] = committer.process([message(add_files(table_id, "next", partition_id="root"))])
    assert next_one.outcome is MessageOutcome.COMMITTED
    assert (committer.last_batch.guarded, committer.last_batch.guarded_cold) == (1, 0)
    assert h.log_length(table_id) == before + 2


@pytest.mark.parametrize("held", ["seed-3", "after-snapshot"], ids=["in-the-snapshot", "in-the-log-after-it"])
def test_a_file_the_table_holds_is_rejected_on_its_state_loaded_from_the_bytes_the_guard_read(
    h: Harness, monkeypatch: pytest.MonkeyPatch, held: str
) -> None:
    [table_id] = tables(h, 1)
    h.store(table_id).commit(AddFiles((ref(data_key(table_id, "after-snapshot"), "root"),)))
    before = h.log_length(table_id)
    committer = cold(h)
    read = snapshot_reads(h, monkeypatch)

    [result] = committer.process([message(add_files(table_id, held, partition_id="root"))])

    assert result.outcome is MessageOutcome.REJECTED
    assert held in (result.reason or "")
    batch = committer.last_batch
    assert (batch.guarded, batch.guarded_cold, batch.cold_loads, len(batch.cold_guard_ms)) == (0, 0, 1, 1)
    assert h.log_length(table_id) == before
    # Each object read once (at the latest copy's keys, with the first reads): the load took the guard's.
    assert sorted(read) == sorted(layout.latest_snapshot_keys(table_id))


def test_an_entry_after_the_snapshot_that_does_more_than_add_files_loads_the_state(h: Harness) -> None:
    [table_id] = tables(h, 1)
    other = h.store(table_id)
    other.commit(AddFiles((), unreferenced_files=(data_key(table_id, "loose"),)))
    other.commit(DeleteFiles((data_key(table_id, "loose"),)))  # a guard cannot drop a name
    committer = cold(h)

    [result] = committer.process([message(add_files(table_id, "mine", partition_id="root"))])

    assert result.outcome is MessageOutcome.COMMITTED, result.reason
    batch = committer.last_batch
    assert (batch.guarded, batch.cold_loads, len(batch.cold_guard_ms)) == (0, 1, 1)
    assert result.transaction_number == h.log_length(table_id)
    assert "loose" not in names(h, table_id) and "mine" in names(h, table_id)


def test_a_table_whose_snapshot_counts_fewer_references_than_the_setting_is_loaded(h: Harness) -> None:
    [table_id] = tables(h, 1)
    committer = h.committer(guard_first_references=FILES + 2)  # the snapshot counts FILES + 1

    [result] = committer.process([message(add_files(table_id, "new", partition_id="root"))])

    assert result.outcome is MessageOutcome.COMMITTED
    assert (committer.last_batch.cold_loads, committer.last_batch.cold_guard_ms) == (1, ())


def test_a_group_that_does_more_than_add_files_is_decided_on_the_loaded_state(h: Harness) -> None:
    [table_id] = tables(h, 1)
    committer = cold(h)

    [result] = committer.process([message(CommitRequest.new(table_id, DeleteFiles(("seed-0",))))])

    assert result.outcome is MessageOutcome.REJECTED  # the file has references
    assert (committer.last_batch.cold_loads, committer.last_batch.cold_guard_ms) == (1, ())


def test_a_damaged_snapshot_gives_no_guard_and_the_state_loads_from_the_one_before(h: Harness) -> None:
    [table_id] = tables(h, 1)
    store = h.store(table_id)
    store.commit(AddFiles((ref(data_key(table_id, "between"), "root"),)))
    latest = store.create_snapshot()
    assert latest is not None
    for key in (latest.files_key, layout.latest_snapshot_keys(table_id)[1]):
        h.blobs.put(key, b"not parquet")
    committer = cold(h)

    [result] = committer.process([message(add_files(table_id, "new", partition_id="root"))])

    assert result.outcome is MessageOutcome.COMMITTED, result.reason
    batch = committer.last_batch
    assert (batch.guarded, batch.cold_loads, len(batch.cold_guard_ms)) == (0, 1, 1)
    assert {"between", "new", "seed-0"} <= names(h, table_id)
