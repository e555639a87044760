"""Random histories of one state, with a check after every change: what the column-wise queries of a state
are tested through (changes kept or undone under a mark, as a group commit makes them, folds of the changes
into the columns, copies, and reloads from a snapshot)."""

from __future__ import annotations

import itertools
from collections.abc import Callable

from hypothesis import strategies as st

from statestore.codec.parquet import state_from_parquet, state_to_parquet
from statestore.errors import TransactionValidationError
from statestore.state.table_state import TableState
from statestore.transactions import ClearTable
from tests.builders import STRING_SCHEMA, tree
from tests.property.test_log_replay import VALID_OPERATIONS, Names, clear_table, next_transaction

# Every valid operation but clearing the table, which would leave no partition to add files to (the history
# here does not initialise it again); a clear is tried, and undone, under a mark.
OPERATIONS = [operation for operation in VALID_OPERATIONS if operation is not clear_table]
STEPS = ["commit", "commit", "commit", "tried", "fold", "copy"]


def run_checked_history(
    data: st.DataObject,
    check: Callable[[TableState], None],
    names: Names | None = None,
    steps: list[str] = STEPS,
) -> None:
    """Up to 30 random steps on a new state, calling ``check(state)`` after each change. ``steps`` are drawn
    from: ``commit``, ``tried`` (under a mark), ``fold``, ``copy``, ``reload`` (from a snapshot)."""
    clock = itertools.count(1_000, 7)
    names = names or Names()
    points = sorted(data.draw(st.sets(st.sampled_from("bdfhkmpt"), max_size=3)))
    state = TableState(STRING_SCHEMA, {p.id: p for p in tree(STRING_SCHEMA, points)})
    for _ in range(data.draw(st.integers(1, 30))):
        step = data.draw(st.sampled_from(steps))
        if step == "fold":
            state.file_columns()  # the overlay folded into new columns
        elif step == "copy":
            state = state.copy()
        elif step == "reload":  # the columns and the partitions as a snapshot holds them
            state = state_from_parquet(state.schema, *state_to_parquet(state), state.transaction_number)
        elif step == "commit":
            transaction = next_transaction(data, state, names, OPERATIONS)
            if transaction is not None:
                transaction.validate(state)
                transaction.apply(state, next(clock))
        else:  # several transactions applied under a mark, then kept or undone
            before = state.copy()
            mark = state.begin_changes()
            for _ in range(data.draw(st.integers(1, 3))):
                transaction = next_transaction(data, state, names, OPERATIONS)
                if transaction is None:
                    break
                try:
                    transaction.validate(state)
                except TransactionValidationError:
                    continue
                transaction.apply(state, next(clock))
                check(state)
            cleared = data.draw(st.integers(0, 3)) == 0
            if cleared:  # the whole file set replaced: undone as one record
                ClearTable().apply(state, next(clock))
                check(state)
            if cleared or data.draw(st.booleans()):
                state.undo_changes(mark)
                assert state == before
            else:
                state.keep_changes(mark)
        check(state)
