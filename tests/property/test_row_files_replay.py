"""A table whose files are rows and a table whose files are on the log, given the same random history
(the generators of ``test_log_replay``), end with the same partitions, files and references, and accept
and reject the same transactions."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statestore.engine.log_store import GroupMember, TransactionLogStateStore
from statestore.engine.row_store import RowFilesStateStore
from statestore.errors import TransactionValidationError
from statestore.state.table_state import TableState
from statestore.store.memory import InMemoryTransactionLog
from statestore.store.memory_files import InMemoryFileReferenceStore
from statestore.store.ports import FileReferenceStore
from statestore.transactions import InitialisePartitions, Transaction
from tests.builders import STRING_SCHEMA, tree
from tests.property.test_log_replay import SPLIT_POINTS, TABLE, Names, invalid, next_transaction

# The kinds of file store the invariant is checked on (the coordinator adds PostgreSQL).
FILE_STORES = {"memory": InMemoryFileReferenceStore}


class StepClock:
    """One time per step of the history, read as often as a store likes: both stores stamp a step's
    commit with the same update time, so claims and take-overs are decided alike."""

    def __init__(self) -> None:
        self.now = 1_000

    def __call__(self) -> int:
        return self.now


def files_and_references(state: TableState) -> tuple[set[str], set[tuple[object, ...]]]:
    """Filenames, and each reference with its fields (update times included: both stamp the same)."""
    references: set[tuple[object, ...]]
    references = {
        (r.filename, r.partition_id, r.number_of_rows, r.count_approximate,
         r.only_contains_data_for_this_partition, r.job_id, r.last_update_time)
        for r in state.file_references()
    }  # fmt: skip
    return set(state.files_by_name), references


def run_both(data: st.DataObject, files: FileReferenceStore) -> None:
    clock = StepClock()
    on_log = TransactionLogStateStore(TABLE, STRING_SCHEMA, InMemoryTransactionLog(), clock=clock)
    in_rows = RowFilesStateStore(TABLE, STRING_SCHEMA, InMemoryTransactionLog(), files, clock=clock)
    names = Names()
    names_used: list[int] = []

    def commit_both(transaction: Transaction) -> None:
        clock.now += 7
        outcomes = []
        for store in (on_log, in_rows):
            try:
                store.commit(transaction)
                outcomes.append("committed")
            except TransactionValidationError as e:
                outcomes.append(type(e).__name__)
        assert outcomes[0] == outcomes[1], f"{transaction.TYPE}: {outcomes}"

    commit_both(
        InitialisePartitions(tuple(tree(STRING_SCHEMA, sorted(data.draw(st.sets(SPLIT_POINTS, max_size=3))))))
    )
    for _ in range(data.draw(st.integers(1, 25))):
        state = on_log.state()
        if not state.partitions_by_id:
            points = sorted(data.draw(st.sets(SPLIT_POINTS, max_size=3)))
            commit_both(InitialisePartitions(tuple(tree(STRING_SCHEMA, points))))
            continue
        if data.draw(st.integers(0, 4)) == 0:
            # A group drawn from one state: later members may clash with earlier ones (rejected alike).
            members = []
            for position in range(data.draw(st.integers(2, 5))):
                chosen = next_transaction(data, state, names)
                if chosen is not None:
                    members.append(GroupMember(f"r{len(names_used)}-{position}", chosen))
            names_used.append(len(members))
            clock.now += 7
            on_log_outcome = on_log.commit_group(members)
            rows_outcome = in_rows.commit_group(members)
            assert set(rows_outcome.committed) == set(on_log_outcome.committed)
            assert {k: type(e) for k, e in rows_outcome.rejected.items()} == {
                k: type(e) for k, e in on_log_outcome.rejected.items()
            }
        elif data.draw(st.integers(0, 9)) == 0:
            transaction = invalid(data, state, names)
            assert transaction is not None
            commit_both(transaction)
            continue
        else:
            chosen = next_transaction(data, state, names)
            if chosen is not None:
                commit_both(chosen)
        log_state, rows_state = on_log.state(), in_rows.state()
        assert rows_state.partitions_by_id == log_state.partitions_by_id
        assert files_and_references(rows_state) == files_and_references(log_state)


@pytest.mark.parametrize("kind", sorted(FILE_STORES))
@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_rows_and_log_given_the_same_history_end_in_the_same_files_and_references(
    kind: str, data: st.DataObject
) -> None:
    run_both(data, FILE_STORES[kind]())
