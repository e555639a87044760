"""Planning a read through the queryable view, on the in-memory twins: when the view is used, that it then
plans exactly the parts a full load does, and that every case where it cannot answer falls back to the
full load and says so in the log."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pytest
from pyspark.sql.types import StructType

from spark_client.datasource import StatestoreDataSource
from spark_client.errors import DataSourceOptionError
from spark_client.read_plan import plan_read, region_of
from spark_client.source_options import SourceOptions
from spark_client.view_plan import DEFAULT_VIEW_MAX_LEAVES, overlapping_partitions, plan_latest, table_view
from statestore.engine.log_store import TableStateStore
from statestore.engine.queryable_view import QueryableView
from statestore.errors import TableNotFoundError
from statestore.model.files import FileReference
from statestore.model.partitions import Region
from statestore.model.schema import Schema
from statestore.services.client import StateStoreClient
from statestore.store.memory_files import InMemoryFileReferenceStore
from statestore.store.memory_view import InMemoryQueryableViewStore
from statestore.transactions import (
    AddFiles,
    SplitFileReferenceRequest,
    SplitFileReferences,
    SplitPartition,
    TransactionBatch,
)
from statestore.transactions.batch import BatchItem
from statestore.views.queryable_view import ViewMeta
from tests.builders import data_key

SCHEMA = Schema.of({"key": "long"}, values={"value": "string"})
SPLIT_POINTS = [100 * i for i in range(1, 10)]  # ten leaves: [min, 100), [100, 200), ... [900, max)
LOGGER = "spark_client.view_plan"


class Table:
    """A table of ten leaves with a file on each, and one spanning them all held at the root."""

    def __init__(self) -> None:
        self.client = StateStoreClient.in_memory(InMemoryFileReferenceStore())
        self.info = self.client.create_table("t", SCHEMA, SPLIT_POINTS)
        self.items = InMemoryQueryableViewStore()
        self.view = QueryableView(
            self.info.table_id, SCHEMA, self.client.log, self.items, sleep=lambda _: None
        )
        self.counter = 0
        state = self.store().state()
        self.add(*[leaf.id for leaf in state.leaf_partitions()])
        self.add(state.partition_tree.root.id, whole_file=False)

    def store(self) -> TableStateStore:
        return self.client.state_store(self.info.table_id)

    def add(self, *partition_ids: str, whole_file: bool = True) -> None:
        refs = []
        for partition_id in partition_ids:
            self.counter += 1
            name = data_key(self.info.table_id, f"f{self.counter}.parquet")
            refs.append(FileReference(name, partition_id, 10 * self.counter, False, whole_file))
        self.store().commit(AddFiles(tuple(refs)))

    def update_view(self) -> None:
        self.view.update(self.store().state)

    def leaf_at(self, key: int) -> str:
        return self.store().state().partition_tree.leaf_for_key([key]).id

    def split_leaf_at(self, key: int, point: int) -> None:
        store = self.store()
        leaf = store.state().partition_tree.leaf_for_key([key])
        parent, low, high = leaf.split(0, point, f"{leaf.id}-low", f"{leaf.id}-high")
        store.commit(SplitPartition(parent, (low, high)))
        requests = tuple(
            SplitFileReferenceRequest(
                r.filename,
                leaf.id,
                (
                    FileReference(r.filename, low.id, r.number_of_rows // 2, True, False),
                    FileReference(r.filename, high.id, r.number_of_rows // 2, True, False),
                ),
            )
            for r in store.state().references_in_partition(leaf.id)
        )
        store.commit(SplitFileReferences(requests))

    def plan(self, regions: Sequence[Region], max_leaves: int = 100) -> tuple[bool, list[object]]:
        """``(planned through the view, parts)``, checking the parts are a full load's."""
        planned = plan_latest(self.store(), self.view, regions, max_leaves)
        state = self.store().state()
        assert planned.transaction_number == state.transaction_number
        assert planned.parts == plan_read(state, regions)
        return planned.through_view, list(planned.parts)

    def region(self, low: int | None, high: int | None) -> Region:
        return region_of(SCHEMA, {"key": (low, high)})


@pytest.fixture
def table() -> Table:
    return Table()


def test_a_table_with_no_view_plans_by_a_full_load_and_writes_no_view(table: Table) -> None:
    through_view, parts = table.plan([table.region(150, 160)])

    assert not through_view
    assert len(parts) == 2  # the leaf's file and the root's, restricted to the region
    assert table.items.meta(table.info.table_id) is None


def test_a_one_leaf_region_is_planned_through_the_view_with_the_full_loads_parts(table: Table) -> None:
    table.update_view()
    read_before = table.items.items_read

    through_view, parts = table.plan([table.region(150, 160)])

    assert through_view
    assert len(parts) == 2
    # The view read the leaf, its ancestors and their references, not the table.
    assert table.items.items_read - read_before < len(table.items.with_prefix(table.info.table_id, ""))


def test_a_read_planned_through_the_view_the_delete_overtook_says_the_table_is_gone(
    table: Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    table.update_view()
    store = table.store()  # found before the delete began
    read_meta = table.items.meta
    deletes = [lambda: table.client.delete_table("t")]

    def meta_then_delete(table_id: str) -> object:
        meta = read_meta(table_id)
        while deletes:  # once, after the plan read the view's meta
            deletes.pop()()
        return meta

    monkeypatch.setattr(table.items, "meta", meta_then_delete)

    with pytest.raises(TableNotFoundError):  # before: parts of a table that no longer exists
        plan_latest(store, table.view, [table.region(150, 160)])


def test_several_regions_are_planned_at_one_transaction(table: Table) -> None:
    table.update_view()

    through_view, parts = table.plan(
        [table.region(150, 160), table.region(720, 730), table.region(990, None)]
    )

    assert through_view
    assert len(parts) == 4  # three leaves' files and the root's


def test_the_leaf_limit_is_where_the_view_stops_being_used(table: Table) -> None:
    table.update_view()
    three_leaves = table.region(150, 350)

    assert table.plan([three_leaves], max_leaves=3)[0]
    assert not table.plan([three_leaves], max_leaves=2)[0]
    assert not table.plan([three_leaves], max_leaves=0)[0]
    assert not table.plan([table.region(None, None)], max_leaves=9)[0]
    assert table.plan([table.region(None, None)], max_leaves=10)[0]


def test_a_region_past_the_leaf_limit_reads_only_the_index(table: Table) -> None:
    table.update_view()
    read_before = table.items.items_read

    assert overlapping_partitions(table.view, [table.region(None, None)], 1) is None

    # The ten leaves' index items: no partition item, no reference.
    assert table.items.items_read - read_before == 10


def test_the_partitions_of_a_region_are_its_leaves_and_those_above_them(table: Table) -> None:
    table.update_view()
    region = table.region(150, 350)

    found = overlapping_partitions(table.view, [region], 3)

    full = table.store().state().partitions_by_id
    assert found is not None
    assert set(found) == {pid for pid, p in full.items() if p.region.overlaps(region)}
    assert sum(1 for p in found.values() if p.leaf) == 3


def test_commits_behind_the_view_are_in_the_plan(table: Table) -> None:
    table.update_view()
    table.add(table.leaf_at(155), table.leaf_at(720))
    table.add(table.leaf_at(160))

    through_view, parts = table.plan([table.region(150, 160)])

    assert through_view
    assert len(parts) == 4  # the two files added after the view's number are in it


def test_a_split_applied_by_the_view_is_planned_through_it(table: Table) -> None:
    table.split_leaf_at(155, 150)
    table.update_view()

    through_view, parts = table.plan([table.region(140, 160)])

    assert through_view
    assert len(parts) == 3  # the split file's two halves, each restricted to its leaf, and the root's


def test_a_split_behind_the_view_falls_back_to_a_full_load_and_says_so(
    table: Table, caplog: pytest.LogCaptureFixture
) -> None:
    table.update_view()
    table.split_leaf_at(155, 150)

    with caplog.at_level(logging.INFO, logger=LOGGER):
        through_view, _ = table.plan([table.region(140, 160)])

    assert not through_view
    assert "changes the partitions" in caplog.text
    assert all(r.levelno == logging.WARNING for r in caplog.records)


def test_a_split_in_a_group_commit_behind_the_view_falls_back(
    table: Table, caplog: pytest.LogCaptureFixture
) -> None:
    table.update_view()
    leaf = table.store().state().partition_tree.leaf_for_key([155])
    parent, low, high = leaf.split(0, 150, "low", "high")
    batch = TransactionBatch((BatchItem("r1", SplitPartition(parent, (low, high))),))
    table.store().commit(batch)

    with caplog.at_level(logging.WARNING, logger=LOGGER):
        through_view, _ = table.plan([table.region(140, 160)])

    assert not through_view
    assert "changes the partitions" in caplog.text


def test_a_busy_view_falls_back_to_a_full_load_and_says_so(
    table: Table, caplog: pytest.LogCaptureFixture
) -> None:
    table.update_view()
    table.add(table.leaf_at(155))
    meta = table.items.meta(table.info.table_id)
    assert meta is not None
    # An upkeep that stopped half way: the meta says "writing" until the next upkeep rebuilds the view.
    table.items.replace_meta(table.info.table_id, ViewMeta(meta.transaction_number, writing_to=99), meta)

    with caplog.at_level(logging.WARNING, logger=LOGGER):
        through_view, parts = table.plan([table.region(150, 160)])

    assert not through_view
    assert len(parts) == 3
    assert "cannot answer" in caplog.text and "being written" in caplog.text


def test_a_view_behind_the_trimmed_log_falls_back_to_a_full_load_and_says_so(
    table: Table, caplog: pytest.LogCaptureFixture
) -> None:
    table.update_view()
    table.add(table.leaf_at(155))
    table.add(table.leaf_at(155))
    store = table.store()
    table.client.snapshots.write(table.info.table_id, store.state(), created_time=1)
    table.client.log.delete_up_to(table.info.table_id, store.state().transaction_number - 1)

    with caplog.at_level(logging.WARNING, logger=LOGGER):
        through_view, parts = table.plan([table.region(150, 160)])

    assert not through_view
    assert len(parts) == 4
    assert "cannot answer" in caplog.text


def test_a_table_whose_files_are_rows_has_no_view_to_plan_through() -> None:
    client = StateStoreClient.in_memory(InMemoryFileReferenceStore())
    info = client.create_table("rows", SCHEMA, SPLIT_POINTS, file_store="postgres")

    assert table_view(info, client.log, InMemoryQueryableViewStore()) is None
    assert table_view(client.get_table("rows"), client.log, None) is None


def test_the_view_leaf_limit_option_is_parsed_and_checked() -> None:
    def parse(**options: str) -> SourceOptions:
        return SourceOptions.parse({"table": "t", **options}, environ={})

    assert parse().view_max_leaves == DEFAULT_VIEW_MAX_LEAVES
    assert parse(viewMaxLeaves="0").view_max_leaves == 0  # never through the view, not the default
    assert parse(VIEWMAXLEAVES="7").view_max_leaves == 7
    for bad in ("-1", "ten", "1.5"):
        with pytest.raises(DataSourceOptionError, match="option 'viewMaxLeaves' must be an integer >= 0"):
            parse(viewMaxLeaves=bad)


def test_a_write_refuses_the_view_leaf_limit() -> None:
    source = StatestoreDataSource({"table": "t", "viewMaxLeaves": "3"})

    with pytest.raises(DataSourceOptionError, match=r"\['viewMaxLeaves'\] do not apply to writes"):
        source.writer(StructType([]), overwrite=False)
