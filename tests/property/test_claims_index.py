"""Random histories: the files a release of claims reads (``TableState.files_claimed_by``) are always those a
scan of every file finds. The state answers from an index of the overlay's claims made on the first release
and kept as the overlay changes, and from the columns' claims by job: both are checked after every change,
including changes undone under a mark (as a group commit does), folds into the columns and copies."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statestore.model.files import TableFile
from statestore.state.table_state import TableState
from tests.property.histories import run_checked_history


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
    run_checked_history(data, check)
