"""ClearTable forgets every file and partition so the table can be initialised again."""

from __future__ import annotations

import pytest

from statestore.errors import PartitionNotFoundError
from statestore.services.client import StateStoreClient
from statestore.transactions import (
    AddFiles,
    AssignJobIdRequest,
    AssignJobIds,
    ClearTable,
    InitialisePartitions,
)
from tests.builders import STRING_SCHEMA, commit, data_key, new_state, ref, tree


def test_clear_table_forgets_files_and_partitions() -> None:
    state = new_state(STRING_SCHEMA, ["m"], [ref("a", "p1"), ref("b", "p2")])
    commit(state, AddFiles((), ("unreferenced",)))
    commit(state, AssignJobIds((AssignJobIdRequest("job", "p1", ("a",)),)))

    commit(state, ClearTable())

    assert not state.has_files() and state.partitions_by_id == {}
    with pytest.raises(PartitionNotFoundError):
        AddFiles((ref("c", "p1"),)).validate(state)


def test_a_cleared_table_can_be_initialised_again_with_another_tree() -> None:
    client = StateStoreClient.in_memory()
    table_id = client.create_table("t", STRING_SCHEMA, ["m"]).table_id
    leaf = client.leaf_partitions("t")[0].id
    client.commit("t", AddFiles((ref(data_key(table_id, "a"), leaf),), (data_key(table_id, "b"),)))

    client.commit("t", ClearTable())
    client.commit("t", InitialisePartitions(tuple(tree(STRING_SCHEMA, ["d", "t"]))))

    state = client.state("t")
    assert not state.has_files()
    assert len(state.leaf_partitions()) == 3
    # A snapshot of the cleared and re-initialised table loads the same.
    client.create_snapshot("t")
    assert client.state("t") == state


def test_a_snapshot_of_a_cleared_table_loads_with_no_partitions() -> None:
    client = StateStoreClient.in_memory()
    client.create_table("t", STRING_SCHEMA, ["m"])
    client.commit("t", ClearTable())

    client.create_snapshot("t")

    state = client.state("t")
    assert state.partitions_by_id == {} and not state.has_files()
