"""Random histories: the files a compaction job takes in (``TableState.oldest_unassigned_files``: a leaf's
oldest unassigned references, by name among equals) are always those a sort of every reference finds. The
state answers from its columns, sorted in Arrow, and from the files changed since; filenames here have
directories, some not ASCII, so names compare across directories as whole strings."""

from __future__ import annotations

import itertools
from operator import attrgetter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statestore.model.files import FileReference
from statestore.state.table_state import TableState
from statestore.transactions import AssignJobIdRequest, AssignJobIds
from tests.builders import commit, new_state, ref
from tests.property.histories import STEPS, run_checked_history
from tests.property.test_log_replay import Names

_OLDEST_FIRST = attrgetter("last_update_time", "filename")


class NamesWithDirectories(Names):
    """Files in a few directories: "t/a9" sorts before "t/d/a1" as a whole name, after it by directory."""

    DIRECTORIES = ["", "t/", "t/d/", "t/d/x/", "\u00e9t\u00e9/", "\U0001f5c2/", "T/"]

    def __init__(self) -> None:
        super().__init__()
        self._directory = itertools.cycle(self.DIRECTORIES)

    def __call__(self, prefix: str) -> str:
        name = super().__call__(prefix)
        return next(self._directory) + name if prefix in ("file", "unreferenced") else name


def by_sort(
    state: TableState, partition_ids: set[str], at_least: int, at_most: int, before: int | None
) -> dict[str, list[str]]:
    found: dict[str, list[FileReference]] = {}
    for r in state.file_references():
        if r.partition_id in partition_ids and (
            r.job_id is None or (before is not None and r.last_update_time < before)
        ):
            found.setdefault(r.partition_id, []).append(r)
    return {
        partition_id: [r.filename for r in sorted(refs, key=_OLDEST_FIRST)[:at_most]]
        for partition_id, refs in found.items()
        if len(refs) >= at_least
    }


def check(state: TableState) -> None:
    references = list(state.file_references())
    leaves = set(state.leaf_ids())
    claim_times = sorted({r.last_update_time + 1 for r in references if r.job_id is not None})
    for partition_ids in (leaves, set(state.partitions_by_id), {*sorted(leaves)[:1], "no-such-partition"}):
        for before in (None, *claim_times[:3]):
            for at_least, at_most in ((1, 1), (1, 3), (2, 2), (3, 32)):
                found = state.oldest_unassigned_files(
                    partition_ids, at_least=at_least, at_most=at_most, claimed_before=before
                )
                expected = by_sort(state, partition_ids, at_least, at_most, before)
                assert found == expected, (partition_ids, before, at_least, at_most)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_jobs_inputs_are_the_oldest_unassigned_references_a_sort_finds_through_any_history(
    data: st.DataObject,
) -> None:
    run_checked_history(data, check, NamesWithDirectories(), [*STEPS, "reload"])


def test_equal_times_are_ordered_by_the_whole_name_not_by_directory_then_base_name() -> None:
    # One transaction: every reference has the same time. By (directory, base name) "t/d/a1" would come
    # after "t/a9" ("t/" < "t/d/"); as whole names it comes first ("t/a9" > "t/d/a1" as "a" < "d").
    names = ["t/d/a1", "t/a9", "t/b", "\u00e9/a", "T/z"]
    state = new_state(references=[ref(name, "root") for name in names])
    state.file_columns()  # folded: the columns answer
    assert state.oldest_unassigned_files(["root"], at_least=1, at_most=4) == {
        "root": sorted(names)[:4]  # "T/z", "t/a9", "t/b", "t/d/a1": "é" sorts last, as in Python
    }


def test_a_partition_with_fewer_unassigned_references_than_asked_for_has_no_entry() -> None:
    state = new_state(references=[ref("a", "root"), ref("b", "root")])
    state = commit(state, AssignJobIds((AssignJobIdRequest("job-1", "root", ("b",)),)))
    state.file_columns()
    assert state.oldest_unassigned_files(["root"], at_least=2, at_most=5) == {}
    assert state.oldest_unassigned_files(["root"], at_least=1, at_most=5) == {"root": ["a"]}


@pytest.mark.parametrize(("at_least", "at_most"), [(0, 3), (2, 0)])
def test_asking_for_no_references_is_refused_by_name(at_least: int, at_most: int) -> None:
    with pytest.raises(ValueError, match="at_least >= 1 and at_most >= 1"):
        new_state().oldest_unassigned_files(["root"], at_least=at_least, at_most=at_most)
