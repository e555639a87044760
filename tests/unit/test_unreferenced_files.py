"""Files with no references: added that way, or left so when every reference was compacted away. They
stay in the state, counted ready for garbage collection, until DeleteFiles forgets them."""

from __future__ import annotations

import re

import pytest

from statestore.errors import (
    FileAlreadyExistsError,
    FileHasReferencesError,
    FilesPresentError,
    InvalidTransactionError,
)
from statestore.model.files import TableFile
from statestore.services.client import StateStoreClient
from statestore.state.table_state import TableState
from statestore.transactions import AddFiles, ClearFiles, DeleteFiles, InitialisePartitions
from tests.builders import STRING_SCHEMA, commit, data_key, new_state, ref, tree


def state_with_an_unreferenced_file() -> TableState:
    state = new_state(STRING_SCHEMA, ["m"], [ref("kept.parquet", "p1")], update_time=1_000)
    commit(state, AddFiles((), ("written.parquet",)), update_time=2_000)
    return state


def test_add_files_accepts_a_file_with_no_references() -> None:
    state = state_with_an_unreferenced_file()

    assert state.file("written.parquet") == TableFile("written.parquet", (), 2_000)
    assert state.file("kept.parquet").references[0].partition_id == "p1"


def test_add_files_adds_referenced_and_unreferenced_files_together() -> None:
    state = new_state(STRING_SCHEMA, ["m"])

    commit(state, AddFiles((ref("a", "p1"), ref("a", "p2")), ("b", "c")), update_time=5_000)

    assert sorted(state.files_by_name) == ["a", "b", "c"]
    assert len(state.file("a").references) == 2
    assert state.file("b") == TableFile("b", (), 5_000) and state.file("c").references == ()


@pytest.mark.parametrize(
    ("transaction", "error", "match"),
    [
        (AddFiles(()), InvalidTransactionError, "at least one file reference or unreferenced file"),
        (AddFiles((), ("",)), InvalidTransactionError, "non-empty filename"),
        (AddFiles((), ("written.parquet",)), FileAlreadyExistsError, "written.parquet"),
        (AddFiles((), ("kept.parquet",)), FileAlreadyExistsError, "kept.parquet"),
        (AddFiles((), ("new", "new")), FileAlreadyExistsError, "new"),
        (AddFiles((ref("new", "p1"),), ("new",)), InvalidTransactionError, "both with references and"),
        (AddFiles((), ("a/\udc80.parquet",)), InvalidTransactionError, "lone surrogate"),
    ],
    ids=["nothing", "empty-name", "exists-unreferenced", "exists-referenced", "twice", "both", "not-utf-8"],
)
def test_add_files_with_an_unreferenced_file_that_cannot_be_added_is_rejected(
    transaction: AddFiles, error: type[Exception], match: str
) -> None:
    state = state_with_an_unreferenced_file()
    before = state.copy()

    with pytest.raises(error, match=match):
        transaction.validate(state)
    assert state == before


def test_a_file_with_no_references_is_ready_for_gc() -> None:
    state = state_with_an_unreferenced_file()

    assert state.files_ready_for_gc(before=2_001) == ["written.parquet"]
    # Ready from the time it was added, not before.
    assert state.files_ready_for_gc(before=2_000) == []
    assert [f.filename for f in state.unreferenced_files()] == ["written.parquet"]


def test_initialising_partitions_fails_while_only_unreferenced_files_exist() -> None:
    state = new_state(STRING_SCHEMA, ["m"])
    commit(state, AddFiles((), ("written.parquet",)))

    with pytest.raises(FilesPresentError, match="1 file"):
        InitialisePartitions(tuple(tree(STRING_SCHEMA))).validate(state)

    commit(state, DeleteFiles(("written.parquet",)))
    commit(state, InitialisePartitions(tuple(tree(STRING_SCHEMA))))
    assert [p.id for p in state.partitions()] == ["root"]


def test_initialising_partitions_is_allowed_after_clearing_unreferenced_files() -> None:
    state = state_with_an_unreferenced_file()
    commit(state, ClearFiles())

    commit(state, InitialisePartitions(tuple(tree(STRING_SCHEMA))))

    assert not state.has_files()


def test_delete_files_of_a_referenced_file_among_unreferenced_ones_deletes_nothing() -> None:
    client = StateStoreClient.in_memory()
    table_id = client.create_table("t", STRING_SCHEMA, ["m"]).table_id
    kept, x, y = (data_key(table_id, name) for name in ("kept.parquet", "x", "y"))
    client.commit("t", AddFiles((ref(kept, client.leaf_partitions("t")[0].id),), (x, y)))
    number = client.state("t").transaction_number

    with pytest.raises(FileHasReferencesError, match=re.escape(f"'{kept}' still has 1 reference")):
        client.commit("t", DeleteFiles((x, kept, y)))

    state = client.state("t")
    assert sorted(state.files_by_name) == [kept, x, y]
    assert state.transaction_number == number  # nothing reached the log
    client.commit("t", DeleteFiles((x, y)))
    assert sorted(client.state("t").files_by_name) == [kept]


def test_an_unreferenced_file_survives_a_snapshot_and_a_fresh_load() -> None:
    client = StateStoreClient.in_memory()
    written = data_key(client.create_table("t", STRING_SCHEMA).table_id, "written.parquet")
    client.commit("t", AddFiles((), (written,)))
    expected = client.state("t")

    client.create_snapshot("t")

    assert client.state("t") == expected
    assert client.state("t").file(written).references == ()
