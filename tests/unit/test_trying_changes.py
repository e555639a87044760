"""Trying changes on the live state: an undo journal puts back exactly what a tried batch changed."""

from __future__ import annotations

import pytest

from statestore.engine.log_store import GroupMember
from statestore.errors import CommitOutcomeUnknownError, FileAlreadyExistsError, FileNotFoundInStateError
from statestore.model.files import TableFile
from statestore.state.table_state import TableState
from statestore.store.memory import InMemoryTransactionLog
from statestore.transactions import (
    AddFiles,
    AssignJobIdRequest,
    AssignJobIds,
    BatchItem,
    ClearTable,
    DeleteFiles,
    ReplaceFileReferences,
    ReplaceFileReferencesJob,
    SplitPartition,
    TransactionBatch,
)
from tests.builders import new_state, ref
from tests.unit.test_engine import TABLE, FailingLog, RacingLog, add, initialise, key, make_store


def two_leaf_state() -> TableState:
    return new_state(
        split_points=["m"],
        references=[ref("a", "p1"), ref("b", "p2"), ref("c", "p1"), ref("c", "p2", whole_file=False)],
    )


def changes_of_every_kind(state: TableState) -> None:
    state.put_file(TableFile("new", (ref("new", "p1"),), 5_000))
    state.put_file(TableFile("a", (), 5_000))
    state.remove_file("b")
    state.put_file(TableFile("b", (ref("b", "p1"), ref("b", "p2")), 6_000))
    p1 = state.partitions_by_id["p1"]
    state.put_partitions(p1.split(0, "f", "p1a", "p1b"))  # p1 changed, two partitions new
    state.clear_files()
    state.put_file(TableFile("after-clear", (ref("after-clear", "p2"),), 7_000))
    state.replace_partitions([])
    state.put_partitions([p1])


def test_undo_puts_back_files_partitions_and_the_reference_count_after_changes_of_every_kind() -> None:
    state = two_leaf_state()
    before = state.copy()

    mark = state.begin_changes()
    changes_of_every_kind(state)
    assert state != before
    state.undo_changes(mark)

    assert state == before
    assert state.reference_count() == before.reference_count() == 4
    assert state.files_by_name == before.files_by_name  # as values; file order carries no meaning


def test_kept_changes_stay_and_the_reference_count_follows_them() -> None:
    state = two_leaf_state()
    expected = state.copy()
    changes_of_every_kind(expected)

    mark = state.begin_changes()
    changes_of_every_kind(state)
    state.keep_changes(mark)

    assert state == expected
    assert state.reference_count() == sum(len(f.references) for f in expected.files_by_name.values()) == 1
    # The journal is closed: a later undo has nothing to go back to.
    with pytest.raises(RuntimeError):
        state.undo_changes(0)


def test_an_inner_mark_undoes_only_its_own_changes_and_the_outer_undo_still_reverts_everything() -> None:
    state = two_leaf_state()
    before = state.copy()

    outer = state.begin_changes()
    state.remove_file("a")
    after_outer_change = state.copy()
    inner = state.begin_changes()
    state.put_file(TableFile("x", (ref("x", "p2"),), 9_000))
    state.undo_changes(inner)
    assert state == after_outer_change
    inner = state.begin_changes()
    state.put_file(TableFile("y", (ref("y", "p2"),), 9_000))
    state.keep_changes(inner)
    assert "y" in state.files_by_name
    state.undo_changes(outer)

    assert state == before and state.reference_count() == 4


def test_the_whole_file_map_cannot_be_replaced_while_changes_are_being_tried() -> None:
    state = two_leaf_state()
    mark = state.begin_changes()
    with pytest.raises(RuntimeError, match="undo journal"):
        state.files_by_name = {}
    state.undo_changes(mark)
    state.files_by_name = {}
    assert state.reference_count() == 0 and not state.has_files()


@pytest.mark.parametrize("last_valid", [True, False])
def test_validating_a_batch_leaves_the_state_exactly_as_it_was_whether_accepted_or_rejected(
    last_valid: bool,
) -> None:
    state = two_leaf_state()
    before = state.copy()
    assign = AssignJobIds((AssignJobIdRequest("job-1", "p1", ("a",)),))
    replace = ReplaceFileReferences((ReplaceFileReferencesJob("job-1", "p1", ("a",), ref("a2", "p1")),))
    # The batch clears the table half way: the last item sees no files.
    last = AddFiles((ref("late", "root"),)) if last_valid else DeleteFiles(("a2",))
    batch = TransactionBatch(
        (
            BatchItem("r1", assign),
            BatchItem("r2", replace),
            BatchItem("r3", ClearTable()),
            BatchItem("r4", last),
        )
    )
    if last_valid:
        with pytest.raises(Exception, match="root"):  # ClearTable removed every partition
            batch.validate(state)
    else:
        with pytest.raises(FileNotFoundInStateError):
            batch.validate(state)

    assert state == before and state.reference_count() == 4


def test_a_valid_batch_validates_and_then_applies_as_its_items_would_one_by_one() -> None:
    state = two_leaf_state()
    batch = TransactionBatch(
        (
            BatchItem("r1", AssignJobIds((AssignJobIdRequest("job-1", "p1", ("a", "c")),))),
            BatchItem(
                "r2",
                ReplaceFileReferences(
                    (ReplaceFileReferencesJob("job-1", "p1", ("a", "c"), ref("ac", "p1")),)
                ),
            ),
            BatchItem("r3", DeleteFiles(("a",))),
        )
    )
    one_by_one = state.copy()
    for item in batch.items:
        item.transaction.validate(one_by_one)
        item.transaction.apply(one_by_one, 2_000)

    batch.validate(state)
    batch.apply(state, 2_000)

    assert state == one_by_one and state.reference_count() == 3


# --- the engine's group commit -------------------------------------------------------------------------


def test_a_group_validates_each_member_after_the_ones_before_it_and_a_rejected_one_leaves_no_trace() -> None:
    log = InMemoryTransactionLog()
    store = make_store(log)
    initialise(store)

    result = store.commit_group(
        [
            GroupMember("m1", add("x")),
            GroupMember("m2", add("x", "p2")),  # x exists after m1
            GroupMember("m3", AddFiles((ref(key("y"), "p1"), ref(key("nowhere"), "p9")))),  # no partition p9
            GroupMember("m4", add("z", "p2")),
        ]
    )

    assert result.committed == ("m1", "m4")
    assert isinstance(result.rejected["m2"], FileAlreadyExistsError)
    state = store.state()
    assert set(state.files_by_name) == {key("x"), key("z")} and state.reference_count() == 2
    assert make_store(log).state() == state


def test_a_group_that_loses_the_race_is_undone_and_redone_on_the_caught_up_state() -> None:
    log = RacingLog()
    store = make_store(log)
    initialise(store)
    log.race(1, file_for_rival="b")

    result = store.commit_group([GroupMember("m1", add("a")), GroupMember("m2", add("b", "p2"))])

    # Redone after the rival's "b": only "a" is written, at the number after the rival's entry.
    assert result.committed == ("m1",) and result.transaction_number == 3 and result.attempts == 2
    state = store.state()
    assert [r.partition_id for r in state.file(key("b")).references] == ["p1"]
    assert make_store(log).state() == state


def test_a_group_whose_append_fails_leaves_the_cached_state_as_the_log_was_last_read() -> None:
    log = FailingLog(ok=1)
    store = make_store(log)
    initialise(store)
    before = store.state().copy()

    with pytest.raises(CommitOutcomeUnknownError):
        store.commit_group([GroupMember("m1", add("a")), GroupMember("m2", add("b", "p2"))])

    assert store.cached_state() == before and store.cached_state().reference_count() == 0
    assert log.latest_number(TABLE) == 1


def test_a_group_member_that_raises_unexpectedly_leaves_the_state_as_it_was() -> None:
    class Exploding(AddFiles):
        def apply(self, state: TableState, update_time: int) -> None:
            super().apply(state, update_time)
            raise ZeroDivisionError("a bug in apply")

    log = InMemoryTransactionLog()
    store = make_store(log)
    initialise(store)
    store.commit(add("a"))
    before = store.state().copy()

    with pytest.raises(ZeroDivisionError):
        store.commit_group(
            [GroupMember("m1", add("b")), GroupMember("m2", Exploding((ref(key("c"), "p2"),)))]
        )

    assert store.cached_state() == before and store.cached_state().reference_count() == 1
    assert log.latest_number(TABLE) == 2


def test_a_partition_split_tried_in_a_group_is_undone_when_the_append_fails() -> None:
    log = FailingLog(ok=2)
    store = make_store(log)
    initialise(store)
    store.commit(add("a"))
    before = store.state().copy()
    parent, left, right = before.partitions_by_id["p2"].split(0, "t", "p2a", "p2b")

    with pytest.raises(CommitOutcomeUnknownError):
        store.commit_group(
            [
                GroupMember("m1", SplitPartition(parent, (left, right))),
                GroupMember("m2", add("b", "p2a")),  # valid only after the split before it
            ]
        )

    assert store.cached_state() == before
    assert set(store.cached_state().partitions_by_id) == {"root", "p1", "p2"}
