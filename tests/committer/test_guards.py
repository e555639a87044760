"""A table whose state the committer evicted keeps its guard (``statestore.state.file_guard``): a batch that
only adds new files is appended from it without loading the state, exactly as from the state; anything the
guard cannot decide loads the state and is decided there."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from statestore.codec.transaction_json import encode_transaction
from statestore.engine import guarded_commit
from statestore.engine.requests import CommitRequest
from statestore.services.committer import BatchCommitter, MessageOutcome
from statestore.sizing import WarmBudget, warm_state_bytes
from statestore.store.ports import CommitStatus, LogEntry
from statestore.transactions import AddFiles, DeleteFiles
from tests.builders import data_key, ref
from tests.committer.harness import Harness, add_files, message, outcomes, redelivered

FILES = 200  # each table's files, from its snapshot
TABLE_BYTES = warm_state_bytes(FILES, 3)


@pytest.fixture
def h() -> Harness:
    return Harness()


def tables(h: Harness, count: int) -> list[str]:
    """Tables of ``FILES`` files over two leaves (``p1`` split at 0), each loaded from a snapshot."""
    table_ids = []
    for i in range(count):
        table_id = h.create_table(f"t{i}", split_points=[0])
        h.store(table_id).commit(
            AddFiles(tuple(ref(data_key(table_id, f"seed-{n}"), "root") for n in range(FILES)))
        )
        h.store(table_id).create_snapshot()
        table_ids.append(table_id)
    return table_ids


def demoted(h: Harness, count: int = 2) -> tuple[BatchCommitter, list[str]]:
    """A committer whose budget holds one state: the tables but the last are kept as guards."""
    table_ids = tables(h, count)
    committer = h.committer(warm_budget=WarmBudget(TABLE_BYTES + TABLE_BYTES // 2))
    for table_id in table_ids:
        [result] = committer.process([message(add_files(table_id, "first", partition_id="root"))])
        assert result.outcome is MessageOutcome.COMMITTED, result.reason
    assert committer.guarded_tables == set(table_ids[:-1])
    return committer, table_ids


def names(h: Harness, table_id: str) -> set[str]:
    return {n.removeprefix(data_key(table_id, "")) for n in h.state(table_id).files_by_name}


def test_new_files_for_an_evicted_table_are_appended_from_its_guard_without_loading_it(h: Harness) -> None:
    committer, (table_id, _) = demoted(h)
    before = h.log_length(table_id)

    sent = message(add_files(table_id, "new", partition_id="root"))
    [result] = committer.process([sent])

    assert result.outcome is MessageOutcome.COMMITTED, result.reason
    assert result.transaction_number == before + 1 == h.log_length(table_id)
    batch = committer.last_batch
    assert (batch.guarded, batch.cold_loads, batch.warm_loads) == (1, 0, 0)
    assert committer.guarded_tables >= {table_id}  # still only its guard
    assert names(h, table_id) == {f"seed-{n}" for n in range(FILES)} | {"first", "new"}
    [size] = batch.table_sizes
    assert (size.references, size.partitions) == (FILES + 2, 3)
    # The status was written with the entry: a redelivery is a duplicate of it, whatever committer gets it.
    for again in (committer, h.committer()):
        [copy] = again.process([redelivered(sent)])
        assert (copy.outcome, copy.transaction_number) == (
            MessageOutcome.DUPLICATE,
            result.transaction_number,
        )
    assert h.log_length(table_id) == before + 1


def test_the_entry_from_a_guard_carries_what_it_adds_at_most_as_the_states_would(h: Harness) -> None:
    """A reader makes room for an entry from its counts before decoding it: the guard's batch writes them."""
    committer, (table_id, _) = demoted(h)

    requests = [add_files(table_id, "a", "b", "c"), add_files(table_id, "d")]
    results = committer.process([message(request) for request in requests])

    assert [r.outcome for r in results] == [MessageOutcome.COMMITTED] * 2
    assert committer.last_batch.guarded == 1  # the table's batch, appended from its guard
    number = results[0].transaction_number
    assert number is not None and results[1].transaction_number == number  # one entry for both
    [entry] = h.log.read(table_id, number, number)
    assert entry.most_added == (4, 0)


def test_the_entry_from_a_guard_lists_the_leaves_it_adds_to_as_the_states_would(h: Harness) -> None:
    committer, (table_id, _) = demoted(h)
    leaves = sorted(p.id for p in h.state(table_id).leaf_partitions())

    [result] = committer.process([message(add_files(table_id, "leafy", partition_id=leaves[0]))])

    assert result.outcome is MessageOutcome.COMMITTED and committer.last_batch.guarded == 1
    assert result.transaction_number is not None
    [entry] = h.log.read(table_id, result.transaction_number, result.transaction_number)
    assert entry.adds_to_leaves == frozenset({leaves[0]})
    [above] = committer.process([message(add_files(table_id, "above", partition_id="root"))])
    assert above.transaction_number is not None
    [entry] = h.log.read(table_id, above.transaction_number, above.transaction_number)
    assert entry.adds_to_leaves == frozenset()  # root is no leaf: the entry lists none


def test_a_file_the_table_holds_loads_the_state_which_rejects_it(h: Harness) -> None:
    committer, (table_id, _) = demoted(h)
    before = h.log_length(table_id)

    [result] = committer.process([message(add_files(table_id, "seed-3", partition_id="root"))])

    assert result.outcome is MessageOutcome.REJECTED
    assert "seed-3" in (result.reason or "")
    assert (committer.last_batch.guarded, committer.last_batch.cold_loads) == (0, 1)
    assert h.log_length(table_id) == before


def test_a_partition_the_table_lacks_is_rejected_against_the_loaded_state(h: Harness) -> None:
    committer, (table_id, _) = demoted(h)

    [result] = committer.process([message(add_files(table_id, "x", partition_id="no-such-partition"))])

    assert result.outcome is MessageOutcome.REJECTED
    assert "no-such-partition" in (result.reason or "")
    assert committer.last_batch.cold_loads == 1  # a rejection is made against a state read to the end


def test_another_writers_entry_refuses_the_guards_append_which_catches_up_and_lands_after_it(
    h: Harness,
) -> None:
    committer, (table_id, _) = demoted(h)
    h.store(table_id).commit(AddFiles((ref(data_key(table_id, "elsewhere"), "root"),)))
    taken = h.log_length(table_id)

    [result] = committer.process([message(add_files(table_id, "mine", partition_id="root"))])

    assert result.outcome is MessageOutcome.COMMITTED, result.reason
    assert result.transaction_number == taken + 1 == h.log_length(table_id)
    assert (committer.last_batch.guarded, committer.last_batch.cold_loads) == (1, 0)
    assert {"elsewhere", "mine"} <= names(h, table_id)
    # The guard took the other writer's file: a request adding it again is decided on the state.
    [again] = committer.process([message(add_files(table_id, "elsewhere", partition_id="root"))])
    assert again.outcome is MessageOutcome.REJECTED and committer.last_batch.cold_loads == 1
    assert h.log_length(table_id) == taken + 1


def test_a_group_naming_a_file_another_writer_added_since_the_eviction_is_decided_on_the_state(
    h: Harness,
) -> None:
    committer, (table_id, _) = demoted(h)
    h.store(table_id).commit(AddFiles((ref(data_key(table_id, "elsewhere"), "root"),)))
    taken = h.log_length(table_id)

    results = committer.process(
        [
            message(add_files(table_id, "mine", partition_id="root")),
            message(add_files(table_id, "elsewhere", partition_id="root")),
        ]
    )

    assert outcomes(results) == ["committed", "rejected"]  # the second was judged on the caught-up state
    assert results[0].transaction_number == taken + 1
    assert committer.last_batch.cold_loads == 1 and committer.last_batch.guarded == 0
    assert {"mine", "elsewhere"} <= names(h, table_id)


def test_a_group_whose_second_member_adds_a_file_the_first_adds_is_decided_on_the_state(h: Harness) -> None:
    committer, (table_id, _) = demoted(h)

    results = committer.process(
        [
            message(add_files(table_id, "twice", partition_id="root")),
            message(add_files(table_id, "twice", partition_id="root")),
            message(add_files(table_id, "once", partition_id="root")),
        ]
    )

    assert outcomes(results) == ["committed", "rejected", "committed"]
    assert committer.last_batch.cold_loads == 1
    assert {"twice", "once"} <= names(h, table_id)


def test_a_request_that_does_more_than_add_files_loads_the_state(h: Harness) -> None:
    committer, (table_id, _) = demoted(h)

    [result] = committer.process([message(CommitRequest.new(table_id, DeleteFiles(("seed-0",))))])

    assert result.outcome is MessageOutcome.REJECTED  # decided on the state: the file has references
    assert committer.last_batch.cold_loads == 1 and committer.last_batch.guarded == 0
    [again] = committer.process([message(add_files(table_id, "after", partition_id="root"))])
    assert again.outcome is MessageOutcome.COMMITTED and committer.last_batch.warm_loads == 1


def test_a_guard_past_the_unread_time_reads_the_log_after_it_first(h: Harness) -> None:
    committer, (table_id, _) = demoted(h)
    h.clock.advance(6 * 60_000)  # past the store's max_unread_ms (5 minutes)

    [result] = committer.process([message(add_files(table_id, "late", partition_id="root"))])
    assert (
        result.outcome is MessageOutcome.COMMITTED and committer.last_batch.guarded == 1
    )  # the log had not moved

    h.clock.advance(6 * 60_000)
    h.store(table_id).commit(AddFiles((ref(data_key(table_id, "meanwhile"), "root"),)))
    [result] = committer.process([message(add_files(table_id, "later", partition_id="root"))])
    assert result.outcome is MessageOutcome.COMMITTED and committer.last_batch.guarded == 1  # caught up
    assert result.transaction_number == h.log_length(table_id)
    assert {"late", "meanwhile", "later"} <= names(h, table_id)


def test_a_guard_behind_an_entry_that_does_more_than_add_files_loads_the_state(h: Harness) -> None:
    committer, (table_id, _) = demoted(h)
    other = h.store(table_id)
    other.commit(AddFiles((), unreferenced_files=(data_key(table_id, "loose"),)))  # taken by the guard
    other.commit(DeleteFiles((data_key(table_id, "loose"),)))  # not: a guard cannot drop a name
    taken = h.log_length(table_id)

    [result] = committer.process([message(add_files(table_id, "mine", partition_id="root"))])

    assert result.outcome is MessageOutcome.COMMITTED, result.reason
    assert (committer.last_batch.guarded, committer.last_batch.cold_loads) == (0, 1)
    assert result.transaction_number == taken + 1
    assert "loose" not in names(h, table_id) and "mine" in names(h, table_id)


def test_a_guard_further_behind_than_it_catches_up_loads_the_state(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(guarded_commit, "CATCH_UP_ENTRIES", 2)
    committer, (table_id, _) = demoted(h)
    for i in range(3):
        h.store(table_id).commit(AddFiles((ref(data_key(table_id, f"other-{i}"), "root"),)))

    [result] = committer.process([message(add_files(table_id, "mine", partition_id="root"))])

    assert result.outcome is MessageOutcome.COMMITTED and committer.last_batch.cold_loads == 1
    assert result.transaction_number == h.log_length(table_id)


def test_a_guard_whose_next_entries_cleanup_deleted_loads_the_state(h: Harness) -> None:
    committer, (table_id, _) = demoted(h)
    other = h.store(table_id)
    for i in range(3):
        other.commit(AddFiles((ref(data_key(table_id, f"other-{i}"), "root"),)))
    other.create_snapshot()
    # Cleanup deletes only entries older than the store's max_unread_ms: the guard is older than that too.
    h.clock.advance(6 * 60_000)
    h.log.delete_up_to(table_id, h.log_length(table_id) - 1)  # the entries after the guard, but the latest

    [result] = committer.process([message(add_files(table_id, "mine", partition_id="root"))])

    assert result.outcome is MessageOutcome.COMMITTED and committer.last_batch.cold_loads == 1
    assert {"other-0", "other-2", "mine"} <= names(h, table_id)


def test_a_guard_that_loses_its_number_twice_loads_the_state(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer's entry takes the number of each of the guard's puts: it catches up once, then the
    state is loaded and the commit lands after both."""
    committer, (table_id, _) = demoted(h)
    append, raced = h.log.append, list[int]()

    def racing(table: str, entry: LogEntry, statuses: Sequence[CommitStatus] = ()) -> None:
        if statuses and len(raced) < 2:  # the committer's puts (they carry statuses): the first two lose
            name = data_key(table, f"racer-{len(raced)}")
            body, compressed = encode_transaction(AddFiles((ref(name, "root"),)))
            raced.append(entry.transaction_number)
            append(
                table, LogEntry(entry.transaction_number, entry.update_time, AddFiles.TYPE, body, compressed)
            )
        append(table, entry, statuses)

    monkeypatch.setattr(h.log, "append", racing)

    [result] = committer.process([message(add_files(table_id, "mine", partition_id="root"))])

    assert result.outcome is MessageOutcome.COMMITTED, result.reason
    assert (committer.last_batch.guarded, committer.last_batch.cold_loads) == (0, 1)
    assert raced == [raced[0], raced[0] + 1]  # the second put was from the caught-up guard
    assert result.transaction_number == raced[1] + 1 == h.log_length(table_id)
    assert {"racer-0", "racer-1", "mine"} <= names(h, table_id)
