"""is_assigned: whether a compaction job still holds its claim on its input files in one partition."""

from __future__ import annotations

import pytest

from statestore.errors import (
    FileNotFoundInStateError,
    FileReferenceAssignedToJobError,
    FileReferenceNotFoundError,
    InvalidQueryError,
)
from statestore.services.client import StateStoreClient
from statestore.state.table_state import TableState
from statestore.transactions import (
    AddFiles,
    AssignJobIdRequest,
    AssignJobIds,
    ReleaseClaims,
    ReplaceFileReferences,
    ReplaceFileReferencesJob,
)
from tests.builders import STRING_SCHEMA, commit, data_key, new_state, ref


def claimed_state() -> TableState:
    """job1 holds a and b in p1; c in p1 is free; b also has a free reference in p2."""
    state = new_state(STRING_SCHEMA, ["m"], [ref("a", "p1"), ref("b", "p1"), ref("b", "p2"), ref("c", "p1")])
    commit(state, AssignJobIds((AssignJobIdRequest("job1", "p1", ("a", "b")),)))
    return state


def test_is_assigned_is_true_when_every_file_is_referenced_on_the_partition_with_the_job() -> None:
    assert claimed_state().is_assigned("job1", "p1", ["a", "b"])
    assert claimed_state().is_assigned("job1", "p1", ["b"])


def test_is_assigned_is_false_while_a_reference_is_not_assigned_to_any_job() -> None:
    state = claimed_state()

    assert not state.is_assigned("job1", "p1", ["a", "c"])
    assert not state.is_assigned("job1", "p2", ["b"])
    commit(state, ReleaseClaims(("job1",)))
    assert not state.is_assigned("job1", "p1", ["a", "b"])


def test_is_assigned_names_the_file_held_by_another_job() -> None:
    with pytest.raises(FileReferenceAssignedToJobError, match="'b' in partition 'p1' .* job 'job1'"):
        claimed_state().is_assigned("job2", "p1", ["c", "b"])


def test_is_assigned_names_the_file_whose_reference_is_missing() -> None:
    state = claimed_state()

    with pytest.raises(FileReferenceNotFoundError, match="'a' in partition 'p2'"):
        state.is_assigned("job1", "p2", ["b", "a"])
    with pytest.raises(FileNotFoundInStateError, match="'nope'"):
        state.is_assigned("job1", "p1", ["a", "nope"])


def test_is_assigned_after_the_jobs_commit_reports_the_replaced_input_as_missing() -> None:
    state = claimed_state()
    commit(
        state, ReplaceFileReferences((ReplaceFileReferencesJob("job1", "p1", ("a", "b"), ref("out", "p1")),))
    )

    with pytest.raises(FileReferenceNotFoundError, match="'a' in partition 'p1'"):
        state.is_assigned("job1", "p1", ["a", "b"])


def test_is_assigned_needs_at_least_one_file() -> None:
    with pytest.raises(InvalidQueryError, match="job 'job1' needs at least one filename"):
        claimed_state().is_assigned("job1", "p1", [])


def test_the_client_answers_is_assigned_from_the_tables_latest_state() -> None:
    client = StateStoreClient.in_memory()
    a = data_key(client.create_table("t", STRING_SCHEMA).table_id, "a")
    client.commit("t", AddFiles((ref(a, "root"),)))
    assert not client.is_assigned("t", "job1", "root", [a])

    client.commit("t", AssignJobIds((AssignJobIdRequest("job1", "root", (a,)),)))

    assert client.is_assigned("t", "job1", "root", [a])
