"""The client's queries through a table's queryable view, and its setting, in memory: the same answers as a
full load, a clear refusal for a table without the setting, and a full load only when asked for."""

from __future__ import annotations

import pytest

from statestore.errors import (
    InvalidKeyError,
    InvalidPartitionTreeError,
    QueryableViewOffError,
    StateStoreError,
    TableNotFoundError,
    TransactionNotRetainedError,
)
from statestore.model.partitions import Range, Region
from statestore.services.client import StateStoreClient
from statestore.store.memory_files import InMemoryFileReferenceStore
from statestore.transactions import (
    AddFiles,
    AssignJobIdRequest,
    AssignJobIds,
    SplitFileReferenceRequest,
    SplitFileReferences,
)
from statestore.views import view_answers
from tests.builders import INT_SCHEMA, data_key, ref


@pytest.fixture
def client() -> StateStoreClient:
    return StateStoreClient.in_memory()


def fill(client: StateStoreClient, name: str) -> str:
    """Files in both leaves (split at 10) and one above them, one claimed by a job; returns the table id."""
    table = client.get_table(name)
    left, right = (p.id for p in sorted(client.leaf_partitions(name), key=lambda p: p.region.ranges[0].min))
    a, b, c = (data_key(table.table_id, n) for n in ("a", "b", "c"))
    client.commit(name, AddFiles((ref(a, left), ref(b, right), ref(c, "root"))))
    client.commit(name, AssignJobIds((AssignJobIdRequest("job-1", left, (a,)),)))
    return table.table_id


def test_every_query_answers_as_a_full_load_at_the_logs_latest_entry(client: StateStoreClient) -> None:
    client.create_table("orders", INT_SCHEMA, [10], {"queryable_view": "true"})
    table_id = fill(client, "orders")
    client.update_queryable_view("orders")
    # Entries after the view's number are merged into every answer.
    d = data_key(table_id, "d")
    left, right = sorted(
        (p.id for p in client.leaf_partitions("orders")),
        key=lambda i: client.state("orders").partitions_by_id[i].region.ranges[0].min,
    )
    client.commit("orders", AddFiles((ref(d, "root"),)))
    split = SplitFileReferenceRequest(d, "root", (ref(d, left, 50), ref(d, right, 50)))
    client.commit("orders", SplitFileReferences((split,)))
    state = client.state("orders")
    number = state.transaction_number

    for partition in state.partitions():
        answer = client.references_in_partition("orders", partition.id)
        assert (answer.transaction_number, answer.value) == (
            number,
            view_answers.references_in_partition(state, partition.id),
        )
    for bounds in ({"key": (0, 5)}, {"key": (None, 10)}, {"key": (10, None)}, {}):
        region = Region.of(INT_SCHEMA, bounds)
        expected = view_answers.references_in_region(state, region)
        assert client.references_in_region("orders", bounds).value == expected
        assert client.references_in_region("orders", region).value == expected
    assert client.claimed_references("orders", "job-1").value == view_answers.claimed_references(
        state, "job-1"
    )
    for filename in [*state.files_by_name, "no-such-file"]:
        assert client.file("orders", filename).value == view_answers.file(state, filename)


def test_a_table_without_the_setting_is_refused_saying_how_to_switch_it_on(client: StateStoreClient) -> None:
    client.create_table("plain", INT_SCHEMA, [10])
    fill(client, "plain")

    with pytest.raises(QueryableViewOffError, match="tables view plain --on"):
        client.references_in_partition("plain", "root")
    with pytest.raises(QueryableViewOffError, match="allow_full_load"):
        client.file("plain", "x")
    assert client.queryable_view_store is not None
    assert client.queryable_view_store.with_prefix(client.get_table("plain").table_id, "") == {}


def test_a_full_load_answers_a_table_without_the_setting_when_asked_for(client: StateStoreClient) -> None:
    client.create_table("plain", INT_SCHEMA, [10])
    fill(client, "plain")
    state = client.state("plain")

    answer = client.references_in_region("plain", {"key": (0, 5)}, allow_full_load=True)

    region = Region((Range(0, 5),))
    assert answer.transaction_number == state.transaction_number
    assert answer.value == view_answers.references_in_region(state, region)
    assert client.claimed_references("plain", "job-1", allow_full_load=True).value == (
        view_answers.claimed_references(state, "job-1")
    )


def test_the_setting_is_switched_on_and_off_for_an_existing_table(client: StateStoreClient) -> None:
    client.create_table("orders", INT_SCHEMA, [10], {"owner": "team-a"})
    fill(client, "orders")

    assert client.set_queryable_view("orders", True).properties == {
        "owner": "team-a",
        "queryable_view": "true",
    }
    status = client.queryable_view_status("orders")
    assert status.enabled and status.transaction_number is None and status.log_head == 3
    assert client.references_in_partition("orders", "root").transaction_number == 3
    client.update_queryable_view("orders")
    assert client.queryable_view_status("orders").behind == 0

    assert not client.set_queryable_view("orders", False).queryable_view
    with pytest.raises(QueryableViewOffError):
        client.references_in_partition("orders", "root")


def test_a_bad_setting_is_refused_naming_the_value_and_nothing_is_created(client: StateStoreClient) -> None:
    with pytest.raises(StateStoreError, match="queryable_view='yes' must be true or false"):
        client.create_table("orders", INT_SCHEMA, properties={"queryable_view": "yes"})
    rows = StateStoreClient.in_memory(file_store=InMemoryFileReferenceStore())
    with pytest.raises(StateStoreError, match="cannot have a queryable view"):
        rows.create_table("rows", INT_SCHEMA, properties={"queryable_view": "true"}, file_store="postgres")
    rows.create_table("rows", INT_SCHEMA, file_store="postgres")
    with pytest.raises(StateStoreError, match="cannot have a queryable view"):
        rows.set_queryable_view("rows", True)

    assert client.list_tables() == [] and [t.table_name for t in rows.list_tables()] == ["rows"]


def test_a_region_not_of_the_schema_is_refused_naming_what_is_wrong(client: StateStoreClient) -> None:
    client.create_table("orders", INT_SCHEMA, [10], {"queryable_view": "true"})

    with pytest.raises(InvalidKeyError, match="not row keys of the table: \\['nope'\\]"):
        client.references_in_region("orders", {"nope": (0, 5)})
    with pytest.raises(InvalidKeyError, match="'key'"):
        client.references_in_region("orders", {"key": ("a", "b")})
    with pytest.raises(InvalidPartitionTreeError, match="empty range"):
        client.references_in_region("orders", {"key": (5, 5)})


def test_a_view_behind_what_the_log_keeps_says_how_to_bring_it_current(client: StateStoreClient) -> None:
    client.create_table("orders", INT_SCHEMA, [10], {"queryable_view": "true"})
    table_id = fill(client, "orders")
    client.create_snapshot("orders")
    client.log.delete_up_to(table_id, 2)  # cleanup trimmed the log the view (never built) needs

    with pytest.raises(TransactionNotRetainedError, match="tables view orders --update"):
        client.references_in_partition("orders", "root")
    assert client.update_queryable_view("orders").rebuilt
    assert client.references_in_partition("orders", "root").transaction_number == 3


def test_deleting_a_table_deletes_its_view(client: StateStoreClient) -> None:
    client.create_table("orders", INT_SCHEMA, [10], {"queryable_view": "true"})
    table_id = fill(client, "orders")
    client.update_queryable_view("orders")
    views = client.queryable_view_store
    assert views is not None and views.meta(table_id) is not None

    client.delete_table("orders")

    assert views.meta(table_id) is None and views.with_prefix(table_id, "") == {}


def test_a_query_the_delete_of_its_table_overtook_says_the_table_is_gone(
    client: StateStoreClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    client.create_table("orders", INT_SCHEMA, [10], {"queryable_view": "true"})
    fill(client, "orders")
    client.update_queryable_view("orders")
    views = client.queryable_view_store
    assert views is not None
    read_meta = views.meta
    deletes = [lambda: client.delete_table("orders")]

    def meta_then_delete(table_id: str) -> object:
        meta = read_meta(table_id)
        while deletes:  # once, after the query read the view's meta
            deletes.pop()()
        return meta

    monkeypatch.setattr(views, "meta", meta_then_delete)

    with pytest.raises(TableNotFoundError):  # before: an answer from what the delete left
        client.references_in_partition("orders", "root")


def test_a_client_without_a_view_store_says_so() -> None:
    memory = StateStoreClient.in_memory()
    bare = StateStoreClient(memory.table_index, memory.log, memory.snapshots.metadata, memory.blobs)
    bare.create_table("orders", INT_SCHEMA, properties={"queryable_view": "true"})

    with pytest.raises(StateStoreError, match="no queryable view store"):
        bare.file("orders", "x")
