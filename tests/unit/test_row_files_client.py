"""The client picks each table's store from its record: create per backend, the record's round trip,
delete, and what a postgres table cannot do (time travel, job history, incremental reads)."""

from __future__ import annotations

import pytest

from statestore.engine.log_store import TransactionLogStateStore
from statestore.engine.row_store import RowFilesStateStore
from statestore.errors import StateStoreError, UnsupportedByFileStoreError
from statestore.services.client import StateStoreClient
from statestore.store.ports import FileReferenceStore
from statestore.store.tables import TableInfo
from statestore.transactions import (
    AddFiles,
    AssignJobIdRequest,
    AssignJobIds,
    ReplaceFileReferences,
    ReplaceFileReferencesJob,
)
from tests.builders import INT_SCHEMA, data_key, ref
from tests.file_stores import file_store  # noqa: F401  (the fixture)


@pytest.fixture
def client(file_store: FileReferenceStore) -> StateStoreClient:  # noqa: F811
    return StateStoreClient.in_memory(file_store=file_store)


def test_each_table_opens_the_store_its_record_names(client: StateStoreClient) -> None:
    on_log = client.create_table("on-log", INT_SCHEMA, [10])
    in_rows = client.create_table("in-rows", INT_SCHEMA, [10], file_store="postgres")

    assert (on_log.file_store, in_rows.file_store) == ("log", "postgres")
    assert isinstance(client.state_store("on-log"), TransactionLogStateStore)
    assert isinstance(client.state_store("in-rows"), RowFilesStateStore)
    for name, info in (("on-log", on_log), ("in-rows", in_rows)):
        leaf = client.leaf_partitions(name)[0].id
        a = data_key(info.table_id, "a")
        client.commit(name, AddFiles((ref(a, leaf),)))
        assert [f.filename for f in client.files(name)] == [a]
        assert len(client.partitions(name)) == 3


def test_files_of_a_postgres_table_are_rows_of_the_file_store(
    client: StateStoreClient,
    file_store: FileReferenceStore,  # noqa: F811
) -> None:
    table = client.create_table("t", INT_SCHEMA, file_store="postgres")
    a = data_key(table.table_id, "a")
    client.commit("t", AddFiles((ref(a),)))
    assert sorted(file_store.files(table.table_id)) == [a]
    assert client.log.latest_number(table.table_id) == 1  # only the partitions


def test_the_record_round_trips_and_says_log_when_it_says_nothing() -> None:
    table = TableInfo.new("t", INT_SCHEMA, file_store="postgres")
    assert TableInfo.from_json(table.to_json()) == table
    old = table.to_json()
    del old["file_store"]
    assert TableInfo.from_json(old).file_store == "log"
    with pytest.raises(StateStoreError, match="unknown file store 'mysql'.*log, postgres"):
        TableInfo.from_json({**table.to_json(), "file_store": "mysql"})
    with pytest.raises(StateStoreError, match="unknown file store"):
        TableInfo.new("t", INT_SCHEMA, file_store="mysql")


def test_a_postgres_table_needs_a_client_with_a_file_store(
    file_store: FileReferenceStore,  # noqa: F811
) -> None:
    bare = StateStoreClient.in_memory()
    with pytest.raises(StateStoreError, match="no file store.*--postgres-url"):
        bare.create_table("t", INT_SCHEMA, file_store="postgres")
    assert bare.list_tables() == []  # nothing half made

    with_rows = StateStoreClient(
        bare.table_index, bare.log, bare.snapshots.metadata, bare.blobs, file_store=file_store
    )
    with_rows.create_table("t", INT_SCHEMA, file_store="postgres")
    with pytest.raises(StateStoreError, match="STATESTORE_POSTGRES_URL"):
        bare.state("t")


def test_deleting_a_postgres_table_deletes_its_file_rows(
    client: StateStoreClient,
    file_store: FileReferenceStore,  # noqa: F811
) -> None:
    table = client.create_table("t", INT_SCHEMA, file_store="postgres")
    client.commit("t", AddFiles((ref(data_key(table.table_id, "a")),)))
    client.delete_table("t")
    assert not file_store.has_files(table.table_id)
    assert client.list_tables() == []
    assert client.log.latest_number(table.table_id) == 0


def test_what_needs_file_history_is_refused_for_a_postgres_table(client: StateStoreClient) -> None:
    table = client.create_table("t", INT_SCHEMA, file_store="postgres")
    client.commit("t", AddFiles((ref(data_key(table.table_id, "a")),)))
    with pytest.raises(UnsupportedByFileStoreError, match="time travel"):
        client.state("t", as_of=1)
    with pytest.raises(UnsupportedByFileStoreError, match="job history"):
        client.jobs("t")
    with pytest.raises(UnsupportedByFileStoreError, match="job history"):
        client.job("t", "job-1")
    with pytest.raises(UnsupportedByFileStoreError, match="job history"):
        client.job_status_reader("t")


def test_an_incremental_read_is_refused_for_a_postgres_table(client: StateStoreClient) -> None:
    pytest.importorskip("pyspark")
    from spark_client.incremental import files_added_between

    table = client.create_table("t", INT_SCHEMA, file_store="postgres")
    client.commit("t", AddFiles((ref(data_key(table.table_id, "a")),)))
    with pytest.raises(UnsupportedByFileStoreError, match="incremental read"):
        files_added_between(client.state_store("t"), 0, 1)


def test_a_snapshot_of_a_postgres_table_holds_its_partitions_only(client: StateStoreClient) -> None:
    table = client.create_table("t", INT_SCHEMA, [10], file_store="postgres")
    a, b = data_key(table.table_id, "a"), data_key(table.table_id, "b")
    client.commit("t", AddFiles((ref(a),)))
    written = client.create_snapshot("t")
    assert written is not None and written.transaction_number == 1
    state = client.snapshots.read(written, INT_SCHEMA)
    assert len(state.partitions_by_id) == 3 and state.files_by_name == {}
    client.commit("t", AddFiles((ref(b),)))
    assert client.create_snapshot("t") is None  # files moved, the log did not: nothing to snapshot
    assert sorted(f.filename for f in client.files(table.table_id)) == [a, b]


def test_gc_candidates_of_a_postgres_table_count_from_when_cleanup_marked_them(
    client: StateStoreClient,
    file_store: FileReferenceStore,  # noqa: F811
) -> None:
    table = client.create_table("t", INT_SCHEMA, file_store="postgres")
    a, b, c = (data_key(table.table_id, name) for name in ("a", "b", "c"))
    client.commit("t", AddFiles((ref(a), ref(b))))
    client.commit("t", AssignJobIds((AssignJobIdRequest("job", "root", (a,)),)))
    client.commit("t", ReplaceFileReferences((ReplaceFileReferencesJob("job", "root", (a,), ref(c)),)))
    far_future = 2**62

    assert client.files_ready_for_gc("t", far_future).files == ()  # unreferenced, not marked yet
    file_store.mark_unreferenced(table.table_id, now=5_000)
    ready = client.files_ready_for_gc("t", far_future)
    assert [f.filename for f in ready.files] == [a] and ready.files[0].last_update_time == 5_000
    assert client.files_ready_for_gc("t", 5_000).files == ()
