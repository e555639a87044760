"""The client facade over every implementation: tables, their state, deletion, crash points, big bodies."""

from __future__ import annotations

import uuid

import pytest

from statestore.codec.parquet import state_to_parquet
from statestore.engine.log_store import TransactionLogStateStore
from statestore.errors import (
    InvalidPartitionSplitError,
    InvalidSchemaError,
    TableAlreadyExistsError,
    TableNotFoundError,
)
from statestore.model import layout
from statestore.model.files import FileReference
from statestore.model.schema import Schema
from statestore.services.client import StateStoreClient
from statestore.transactions import AddFiles
from tests.aws.backends import Ports
from tests.builders import data_key, data_keys

SCHEMA = Schema.of({"key": "long"}, values={"value": "string"})


@pytest.fixture
def client(ports: Ports) -> StateStoreClient:
    return StateStoreClient(ports.table_index, ports.log, ports.snapshot_metadata, ports.blobs)


def add_files(table_id: str, *names: str, partition_id: str = "root") -> AddFiles:
    """Add the data files ``names``: their keys under the table's data prefix."""
    return AddFiles(tuple(FileReference(data_key(table_id, name), partition_id, 10) for name in names))


def test_a_new_table_has_partitions_cut_at_its_split_points(client: StateStoreClient) -> None:
    table = client.create_table("orders", SCHEMA, split_points=[100, 200], properties={"owner": "a"})

    leaves = client.leaf_partitions("orders")
    assert sorted(p.region.ranges[0].min for p in leaves) == [SCHEMA.row_key_types[0].minimum, 100, 200]
    assert client.get_table(table.table_id) == client.get_table("orders") == table
    assert client.list_tables() == [table]
    assert client.state("orders").transaction_number == 1


def test_a_schema_given_as_json_is_validated(client: StateStoreClient) -> None:
    table = client.create_table("t", {"row_keys": [{"name": "id", "type": "string"}]})
    assert table.schema == Schema.of({"id": "string"})

    with pytest.raises(InvalidSchemaError):
        client.create_table("bad", {"row_keys": []})
    with pytest.raises(InvalidSchemaError):
        client.create_table("bad", {"row_keys": [{"name": "id", "type": "double"}]})
    assert [t.table_name for t in client.list_tables()] == ["t"]


def test_bad_split_points_create_nothing(client: StateStoreClient) -> None:
    with pytest.raises(InvalidPartitionSplitError):
        client.create_table("orders", SCHEMA, split_points=[200, 100])

    assert client.list_tables() == []


def test_a_duplicate_name_is_refused_and_the_first_table_kept(client: StateStoreClient) -> None:
    first = client.create_table("orders", SCHEMA)
    client.commit("orders", add_files(first.table_id, "a.parquet"))

    with pytest.raises(TableAlreadyExistsError):
        client.create_table("orders", SCHEMA, split_points=[5])

    assert client.list_tables() == [first]
    assert [f.filename for f in client.files("orders")] == [data_key(first.table_id, "a.parquet")]


def test_a_missing_table_is_reported_by_name(client: StateStoreClient) -> None:
    for action in (client.get_table, client.state_store, client.delete_table, client.state):
        with pytest.raises(TableNotFoundError, match="nope"):
            action("nope")


def test_a_renamed_table_keeps_its_state(client: StateStoreClient) -> None:
    table = client.create_table("orders", SCHEMA)
    client.commit("orders", add_files(table.table_id, "a.parquet"))

    client.rename_table("orders", "orders-2024")

    assert client.get_table("orders-2024").table_id == table.table_id
    assert [f.filename for f in client.files("orders-2024")] == [data_key(table.table_id, "a.parquet")]
    with pytest.raises(TableNotFoundError):
        client.get_table("orders")


def test_deleting_a_table_removes_its_log_snapshots_and_objects_but_no_other_tables(
    client: StateStoreClient, ports: Ports
) -> None:
    doomed = client.create_table("doomed", SCHEMA)
    kept = client.create_table("kept", SCHEMA)
    for table in (doomed, kept):
        names = (f"{uuid.uuid4()}.parquet" for _ in range(16_000))
        client.commit(table.table_name, add_files(table.table_id, *names))
        assert client.create_snapshot(table.table_name) is not None
        ports.blobs.put(layout.data_prefix(table.table_id) + "part-0.parquet", b"rows")
    kept_state = client.state("kept")
    if ports.backend is not None:  # the big AddFiles body is in the bucket, so deletion must remove it
        assert ports.blobs.list(layout.log_body_prefix(doomed.table_id)) != []

    client.delete_table("doomed")

    assert ports.blobs.list(layout.table_prefix(doomed.table_id)) == []
    assert ports.log.latest_number(doomed.table_id) == 0
    assert ports.snapshot_metadata.list(doomed.table_id) == []
    assert ports.snapshot_metadata.latest(doomed.table_id) is None
    with pytest.raises(TableNotFoundError):
        client.get_table(doomed.table_id)
    assert client.state("kept") == kept_state
    assert ports.blobs.list(layout.data_prefix(kept.table_id)) != []
    client.create_table("doomed", SCHEMA)  # the name is free again, with a fresh log
    assert client.state("doomed").files() == []


def test_a_snapshot_without_its_pointer_is_ignored(client: StateStoreClient, ports: Ports) -> None:
    table_id = client.create_table("t", SCHEMA, split_points=[0]).table_id
    leaf = client.leaf_partitions("t")[0].id
    client.commit("t", add_files(table_id, "a", partition_id=leaf))
    recorded = client.create_snapshot("t")
    client.commit("t", add_files(table_id, "b", partition_id=leaf))
    # The snapshot job wrote its Parquet files for transaction 3, then died before recording them.
    crashed_state = client.state("t")
    partitions_key, files_key = layout.snapshot_keys(recorded.table_id, 3)  # type: ignore[union-attr]
    for key, data in zip((partitions_key, files_key), state_to_parquet(crashed_state), strict=True):
        ports.blobs.put(key, data)
    client.commit("t", add_files(table_id, "c", partition_id=leaf))

    table = client.get_table("t")
    replayed = TransactionLogStateStore(table.table_id, SCHEMA, ports.log).load()  # log only, no snapshots
    assert ports.snapshot_metadata.latest(table.table_id) == recorded
    assert client.state("t") == replayed
    assert sorted(f.filename for f in replayed.files()) == data_keys(table_id, "a", "b", "c")
    assert client.state("t", as_of=3) == crashed_state


def test_50000_files_commit_through_the_bucket_and_reload_identically(
    client: StateStoreClient, ports: Ports
) -> None:
    table = client.create_table("big", SCHEMA)
    writer = client.state_store("big")
    names = [data_key(table.table_id, f"{uuid.uuid4()}.parquet") for _ in range(50_000)]

    result = writer.commit(AddFiles(tuple(FileReference(name, "root", i) for i, name in enumerate(names))))

    if ports.backend is not None:
        assert len(ports.blobs.list(layout.log_body_prefix(table.table_id))) == 1  # the body went to S3
    reloaded = client.state_store("big").load()
    assert reloaded.transaction_number == result.transaction_number
    assert reloaded == writer.state()
    assert len(reloaded.files()) == 50_000
