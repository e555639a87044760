"""Random histories of row transactions give the same files, references and decisions in a file-reference
store (the twin and PostgreSQL) as the same transactions validated and applied to a full TableState.

The histories come from the log-replay property test's generators. Partition transactions (splits, tree
extensions) change only the full state, whose partition tree is handed to each commit, as the log backend
would; ClearTable clears the store. Some steps commit two or three transactions as one group.

File ``last_update_time`` is left out of the comparison by design: a TableState stamps a file with the
time of its last change, while a row store keeps the file row unchanged (a compaction must not write its
inputs' rows, or compactions of the same files would contend) and shows its add time, or the time garbage
collection marked it once it has no reference. The behaviour suite checks those times.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Mapping

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statestore.errors import TransactionValidationError
from statestore.model.files import FileReference, TableFile
from statestore.state.table_state import TableState
from statestore.store.ports import FileCommitMember, FileReferenceStore
from statestore.transactions import ClearTable, InitialisePartitions, Transaction
from statestore.views.row_decisions import is_row_transaction
from tests.builders import STRING_SCHEMA, tree
from tests.property.test_log_replay import SPLIT_POINTS, VALID_OPERATIONS, Names, invalid


def _references(files: Mapping[str, TableFile]) -> dict[str, list[FileReference]]:
    return {name: sorted(f.references) for name, f in files.items()}


def _apply_to_state(state: TableState, transaction: Transaction, update_time: int) -> str | None:
    """Validate and apply like the log does; the rejection's error type name, or None if applied."""
    try:
        transaction.validate(state)
    except TransactionValidationError as e:
        return type(e).__name__
    transaction.apply(state, update_time)
    return None


def run_history(data: st.DataObject, store: FileReferenceStore) -> None:
    table_id = f"table-{uuid.uuid4().hex[:12]}"
    clock = itertools.count(1_000, 7)
    names = Names(table_id)
    state = TableState(STRING_SCHEMA)
    _apply_to_state(
        state,
        InitialisePartitions(
            tuple(tree(STRING_SCHEMA, sorted(data.draw(st.sets(SPLIT_POINTS, max_size=3)))))
        ),
        1,
    )
    for _ in range(data.draw(st.integers(1, 25))):
        if not state.partitions_by_id:  # cleared: initialise again before anything else
            points = sorted(data.draw(st.sets(SPLIT_POINTS, max_size=3)))
            assert (
                _apply_to_state(state, InitialisePartitions(tuple(tree(STRING_SCHEMA, points))), next(clock))
                is None
            )
            continue
        group: list[Transaction] = []
        for _ in range(data.draw(st.sampled_from([1, 1, 1, 2, 3]))):
            if data.draw(st.integers(0, 9)) == 0:
                transaction = invalid(data, state, names)
            else:
                transaction = next(
                    (
                        t
                        for op in data.draw(st.permutations(VALID_OPERATIONS))
                        if (t := op(data, state, names))
                    ),
                    None,
                )
            if transaction is None:
                continue
            if not is_row_transaction(transaction):
                break  # a partition change or ClearTable ends the group: it goes to the log, not the store
            group.append(transaction)
        else:
            transaction = None
        if group:
            update_time = next(clock)
            partitions = dict(state.partitions_by_id)
            members = [FileCommitMember(t, f"req-{names('r')}") for t in group]
            outcome = store.commit(table_id, STRING_SCHEMA, partitions, members, update_time)
            expected = [_apply_to_state(state, t, update_time) for t in group]
            decided = [
                type(outcome.rejected[i]).__name__ if i in outcome.rejected else None
                for i in range(len(group))
            ]
            assert decided == expected
            assert outcome.committed == tuple(i for i, e in enumerate(expected) if e is None)
            assert (outcome.commit_number is None) == (not outcome.committed)
            assert _references(store.files(table_id)) == _references(state.files_by_name)
        if transaction is not None and not is_row_transaction(transaction):
            assert _apply_to_state(state, transaction, next(clock)) is None
            if isinstance(transaction, ClearTable):
                store.clear(table_id)
            assert _references(store.files(table_id)) == _references(state.files_by_name)
    # Garbage collection finds exactly the files the full state holds with no reference.
    store.mark_unreferenced(table_id, now=next(clock))
    ready = store.files_ready_for_gc(table_id, before=next(clock))
    assert sorted(ready) == sorted(f.filename for f in state.unreferenced_files())
    store.delete_table(table_id)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(st.data())
def test_a_random_history_gives_the_same_references_and_decisions_as_the_full_state(
    file_store: FileReferenceStore, data: st.DataObject
) -> None:
    run_history(data, file_store)
