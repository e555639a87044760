"""A table between its record and its first transaction: while it is being created (the record is written
first) or deleted (the log and snapshots go before the record), a writer that is not creating it writes
nothing to it and judges nothing against it."""

from __future__ import annotations

import pytest

from statestore.engine.log_store import GroupMember
from statestore.errors import TableNotFoundError, TableNotInitialisedError
from statestore.services.client import StateStoreClient
from statestore.store.memory_files import InMemoryFileReferenceStore
from statestore.store.tables import TableInfo
from statestore.transactions import AddFiles, InitialisePartitions
from tests.builders import INT_SCHEMA, data_key, ref, tree


def half_deleted(client: StateStoreClient, name: str) -> str:
    """A table whose deletion got as far as its log and snapshots: its record is still there."""
    table = client.create_table(name, INT_SCHEMA)
    client.commit(name, AddFiles((ref(data_key(table.table_id, "a")),)))
    client.create_snapshot(name)
    client.log.delete_table(table.table_id)
    client.snapshots.delete_table(table.table_id)
    return table.table_id


def test_a_commit_to_a_table_being_deleted_writes_no_first_transaction() -> None:
    client = StateStoreClient.in_memory()
    table_id = half_deleted(client, "orders")

    with pytest.raises(TableNotInitialisedError, match="holds no transaction") as raised:
        client.commit("orders", InitialisePartitions(tuple(tree(INT_SCHEMA, ()))))  # before: entry 1
    assert isinstance(raised.value, TableNotFoundError)  # the CLI's "not found"
    with pytest.raises(TableNotInitialisedError):  # before: "partition not found", judged against nothing
        client.commit("orders", AddFiles((ref(data_key(table_id, "b")),)), request_id="r-1")

    assert list(client.log.read(table_id, 1)) == []
    assert client.log.request_statuses is not None
    assert client.log.request_statuses.get(table_id, "r-1") is None  # not recorded as rejected either


def test_a_commit_to_a_table_whose_first_transaction_is_not_written_yet_writes_nothing() -> None:
    client = StateStoreClient.in_memory()
    info = TableInfo.new("orders", INT_SCHEMA)
    client.table_index.create(info)  # as create_table does first

    with pytest.raises(TableNotInitialisedError):
        client.commit("orders", AddFiles((ref(data_key(info.table_id, "a")),)))
    assert list(client.log.read(info.table_id, 1)) == []


def test_a_table_is_still_created_and_committed_to() -> None:
    client = StateStoreClient.in_memory()
    table = client.create_table("orders", INT_SCHEMA, [10])
    result = client.commit("orders", AddFiles((ref(data_key(table.table_id, "a"), "root"),)))

    assert result.transaction_number == 2
    assert [len(client.leaf_partitions("orders")), len(client.files("orders"))] == [2, 1]


def test_rows_committed_to_a_postgres_table_being_deleted_are_refused_not_judged() -> None:
    memory = StateStoreClient.in_memory()
    files = InMemoryFileReferenceStore()
    client = StateStoreClient(
        memory.table_index, memory.log, memory.snapshots.metadata, memory.blobs, file_store=files
    )
    table = client.create_table("orders", INT_SCHEMA, file_store="postgres")
    client.log.delete_table(table.table_id)

    with pytest.raises(TableNotInitialisedError):
        client.commit("orders", AddFiles((ref(data_key(table.table_id, "a")),)))
    assert not files.files(table.table_id)


def test_a_store_opened_before_the_first_transaction_commits_once_it_is_written() -> None:
    client = StateStoreClient.in_memory()
    info = TableInfo.new("orders", INT_SCHEMA)
    client.table_index.create(info)
    early = client.state_store("orders")
    assert early.cached_state().transaction_number == 0  # loaded while the table was being created

    creating = client._open(info, creating=True)
    creating.commit(InitialisePartitions(tuple(tree(INT_SCHEMA, ()))))
    # A group commit starts from the state it has (optimistic): it reads on before it refuses.
    result = early.commit_group([GroupMember("r-1", AddFiles((ref(data_key(info.table_id, "a")),)))])

    assert result.transaction_number == 2
