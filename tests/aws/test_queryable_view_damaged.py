"""A damaged item of the queryable view (one whose value no longer decodes), on moto and DynamoDB Local: a
query names it and says what to do, the next upkeep rebuilds the view from the state, a rebuild and a
table's deletion get past it, and Spark plans its read by a full load meanwhile. The view is derived from
the log, so no damage to it costs a commit or a read."""

from __future__ import annotations

import logging

import pytest

from spark_client.view_plan import plan_latest
from statestore.adapters.aws.backend import AwsBackend
from statestore.adapters.aws.dynamodb_view import ITEM_PREFIX, META_KEY
from statestore.errors import DamagedViewItemError, QueryableViewConflictError
from statestore.model.partitions import Range, Region
from statestore.services.view_upkeep import view_behind
from statestore.store.tables import TableInfo
from statestore.transactions import AddFiles, AssignJobIdRequest, AssignJobIds
from statestore.views.queryable_view import ViewMeta, file_key, references_prefix
from statestore.views.view_index import INDEX_PREFIX
from statestore.views.view_keys import sized
from tests.aws.test_queryable_view import TABLE, Table
from tests.builders import STRING_SCHEMA, data_key, ref


def damage(aws: AwsBackend, key: str, value: str = '{"r": {"filename": ') -> None:
    """Overwrite the view's item at ``key`` with a value that does not decode."""
    store = aws.queryable_view
    store.dynamodb.put_item(
        TableName=store.table_name,
        Item={"table_id": {"S": TABLE}, "snapshot_key": {"S": ITEM_PREFIX + key}, "view_value": {"S": value}},
    )


def viewed_table(aws: AwsBackend) -> tuple[Table, str, str]:
    """A table split at "m" with a file in its left leaf, its view current; returns the leaf and the file's
    reference key."""
    table = Table(aws.queryable_view)
    leaf = min(table.store.state().leaf_partitions(), key=lambda p: p.region.ranges[0].max or "\uffff").id
    name = data_key(TABLE, "a.parquet")
    table.store.commit(AddFiles((ref(name, leaf),)))
    table.update()
    return table, leaf, references_prefix(leaf) + sized(name)


def test_a_query_names_the_damaged_item_and_a_rebuild_repairs_it(aws: AwsBackend) -> None:
    table, leaf, key = viewed_table(aws)
    damage(aws, key)

    with pytest.raises(DamagedViewItemError, match=f"item {key!r} cannot be read: .*--rebuild"):
        table.view.references_in_partition(leaf)
    # Commits go on (the view is not on their path); an upkeep that reads nothing damaged moves the view.
    table.store.commit(AddFiles((ref(data_key(TABLE, "b.parquet"), leaf),)))
    assert not table.view.update(table.store.load).rebuilt

    assert table.view.rebuild(table.store.load()).rebuilt
    assert table.view.references_in_partition(leaf).value == sorted(
        table.store.state().references_in_partition(leaf)
    )


def test_an_upkeep_whose_reads_meet_a_damaged_item_rebuilds_the_view(aws: AwsBackend) -> None:
    table, leaf, _ = viewed_table(aws)
    name = data_key(TABLE, "a.parquet")
    damage(aws, file_key(name), "{")
    table.store.commit(AssignJobIds((AssignJobIdRequest("job-1", leaf, (name,)),)))  # reads the file's item

    result = table.view.update(table.store.load)

    assert result.rebuilt
    state = table.store.state()
    assert table.view.file(name).value == state.file(name)
    assert table.view.claimed_references("job-1").value == state.claimed_references()["job-1"]


def test_a_rebuild_writes_every_item_again_and_drops_a_damaged_one_it_does_not_want(aws: AwsBackend) -> None:
    table, leaf, key = viewed_table(aws)
    damage(aws, key)
    stray = file_key(data_key(TABLE, "never-added.parquet"))
    damage(aws, stray, "not json")

    result = table.view.rebuild(table.store.load())

    assert result.rebuilt and result.writes == len(aws.queryable_view.keys(TABLE)) + 1  # and the stray
    assert stray not in aws.queryable_view.keys(TABLE)
    assert table.view.references_in_partition(leaf).value == sorted(
        table.store.state().references_in_partition(leaf)
    )


def test_a_table_with_a_damaged_item_is_deleted_whole(aws: AwsBackend) -> None:
    table, _, key = viewed_table(aws)
    damage(aws, key)

    aws.queryable_view.delete_table(TABLE)

    assert aws.queryable_view.keys(TABLE) == [] and aws.queryable_view.meta(TABLE) is None


def test_spark_plans_a_read_by_a_full_load_while_an_index_item_is_damaged(
    aws: AwsBackend, caplog: pytest.LogCaptureFixture
) -> None:
    table, _, _ = viewed_table(aws)
    index_key = min(k for k in aws.queryable_view.keys(TABLE) if k.startswith(INDEX_PREFIX))  # the left leaf
    damage(aws, index_key)
    region = Region((Range("a", "b"),))

    with caplog.at_level(logging.WARNING, logger="spark_client.view_plan"):
        planned = plan_latest(table.store, table.view, [region])

    assert not planned.through_view
    assert planned.transaction_number == table.store.state().transaction_number
    assert [p.filename for p in planned.parts] == [data_key(TABLE, "a.parquet")]
    assert f"item {index_key!r} cannot be read" in caplog.text


# --- a damaged meta -----------------------------------------------------------------------------------


def damage_meta(aws: AwsBackend, **attributes: dict[str, str]) -> None:
    """Overwrite the view's meta with ``attributes`` (DynamoDB values) beside its key."""
    store = aws.queryable_view
    store.dynamodb.put_item(
        TableName=store.table_name,
        Item={"table_id": {"S": TABLE}, "snapshot_key": {"S": META_KEY}, **attributes},
    )


DAMAGED_METAS = {
    "no number": {"view_format": {"N": "2"}},
    "a string": {"transaction_number": {"S": "seven"}},
    "a fraction": {"transaction_number": {"N": "2.5"}},
    "negative": {"transaction_number": {"N": "3"}, "writing_to": {"N": "-1"}},
}


@pytest.mark.parametrize("damaged", DAMAGED_METAS.values(), ids=DAMAGED_METAS.keys())
def test_a_damaged_meta_is_named_by_queries_and_the_next_upkeep_rebuilds_the_view(
    aws: AwsBackend, damaged: dict[str, dict[str, str]], caplog: pytest.LogCaptureFixture
) -> None:
    table, leaf, _ = viewed_table(aws)
    damage_meta(aws, **damaged)
    table.store.commit(AddFiles((ref(data_key(TABLE, "b.parquet"), leaf),)))

    with pytest.raises(DamagedViewItemError, match=f"item {META_KEY!r} cannot be read: .*--rebuild"):
        table.view.references_in_partition(leaf)
    with caplog.at_level(logging.WARNING, logger="spark_client.view_plan"):
        planned = plan_latest(table.store, table.view, [Region((Range("a", "b"),))])
    assert not planned.through_view and f"item {META_KEY!r} cannot be read" in caplog.text
    info = TableInfo(TABLE, "t", STRING_SCHEMA, {"queryable_view": "true"})
    head = table.log.latest_number(TABLE)
    assert view_behind(info, head, aws.queryable_view)  # so the upkeep is planned for it

    result = table.view.update(table.store.load)

    assert result.rebuilt and result.to_number == head
    assert aws.queryable_view.meta(TABLE) == ViewMeta(head)
    assert not view_behind(info, head, aws.queryable_view)
    assert table.view.references_in_partition(leaf).value == sorted(
        table.store.state().references_in_partition(leaf)
    )


def test_the_repair_of_a_damaged_meta_changes_nothing_if_the_meta_moved_meanwhile(
    aws: AwsBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    viewed_table(aws)
    store = aws.queryable_view
    with pytest.raises(QueryableViewConflictError, match="no longer damaged"):
        store.replace_damaged_meta(TABLE, ViewMeta(0, writing_to=9))  # it was never damaged
    damage_meta(aws, transaction_number={"S": "seven"})
    real_get = store.dynamodb.get_item

    def read_then_damaged_again(**kwargs: object) -> object:  # another writer, between the read and the put
        read = real_get(**kwargs)
        damage_meta(aws, transaction_number={"S": "eight"})
        return read

    monkeypatch.setattr(store.dynamodb, "get_item", read_then_damaged_again)
    with pytest.raises(QueryableViewConflictError, match="changed while it was repaired"):
        store.replace_damaged_meta(TABLE, ViewMeta(0, writing_to=9))
    monkeypatch.setattr(store.dynamodb, "get_item", real_get)
    with pytest.raises(DamagedViewItemError, match="'eight'"):
        store.meta(TABLE)

    store.replace_damaged_meta(TABLE, ViewMeta(0, writing_to=9))

    assert store.meta(TABLE) == ViewMeta(0, writing_to=9)
