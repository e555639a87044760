"""Random histories: the files a release of claims reads (``TableState.files_claimed_by``) are always those a
scan of every file finds. The state answers from an index of the overlay's claims made on the first release
and kept as the overlay changes, and from the columns' claims by job: both are checked after every change,
including changes undone under a mark (as a group commit does), folds into the columns and copies."""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statestore.errors import TransactionValidationError
from statestore.files import TableFile
from statestore.state import TableState
from statestore.transactions import ClearTable
from tests.builders import STRING_SCHEMA, tree
from tests.property.test_log_replay import VALID_OPERATIONS, Names, clear_table, next_transaction

# Every valid operation but clearing the table, which would leave no partition to add files to (the history
# here does not initialise it again); a clear is tried, and undone, under a mark below.
OPERATIONS = [operation for operation in VALID_OPERATIONS if operation is not clear_table]


def by_scan(state: TableState, jobs: set[str], before: int | None) -> dict[str, TableFile]:
    return {
        f.filename: f
        for f in state.files_by_name.values()
        if any(r.job_id in jobs and (before is None or r.last_update_time < before) for r in f.references)
    }


def check(state: TableState) -> None:
    references = list(state.file_references())
    jobs = sorted({r.job_id for r in references if r.job_id is not None})
    # Between every two claim times: each splits the claims into those made before it and the rest.
    claim_times = sorted({r.last_update_time + 1 for r in references if r.job_id is not None})
    for chosen in [*([job] for job in jobs), jobs, [*jobs[:2], "no-such-job"]]:
        for before in (None, *claim_times):
            found = state.files_claimed_by(chosen, before)
            assert len(found) == len({f.filename for f in found}), "a file found twice"
            assert {f.filename: f for f in found} == by_scan(state, set(chosen), before), (chosen, before)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_the_files_a_release_reads_are_those_a_scan_finds_through_any_history(data: st.DataObject) -> None:
    clock = itertools.count(1_000, 7)
    names = Names()
    points = sorted(data.draw(st.sets(st.sampled_from("bdfhkmpt"), max_size=3)))
    state = TableState(STRING_SCHEMA, {p.id: p for p in tree(STRING_SCHEMA, points)})
    for _ in range(data.draw(st.integers(1, 30))):
        step = data.draw(st.sampled_from(["commit", "commit", "commit", "tried", "fold", "copy"]))
        if step == "fold":
            state.file_columns()  # the overlay folded into new columns
        elif step == "copy":
            state = state.copy()
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
