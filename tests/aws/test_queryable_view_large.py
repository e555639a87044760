"""A file referenced in thousands of partitions, and a tree thousands deep, in the queryable view on each
store. DynamoDB holds at most 400 KB in an item: such a file's references are held in items of their own,
which every query and the upkeep read back whole, and a change to a few of them rewrites only the items
holding those; a partition's item lists only its nearest ancestors, and a query reads the rest from the
items of the partitions above."""

from __future__ import annotations

import math
from collections.abc import Collection

import pytest

from spark_client.view_plan import overlapping_partitions
from statestore.errors import DamagedViewItemError
from statestore.model.partitions import Range, Region
from statestore.store.memory_view import InMemoryQueryableViewStore
from statestore.store.view_ports import QueryableViewStore
from statestore.transactions import (
    AddFiles,
    AssignJobIdRequest,
    AssignJobIds,
    ClearFiles,
    ReleaseClaims,
    ReplaceFileReferences,
    ReplaceFileReferencesJob,
    SplitPartition,
)
from statestore.views.queryable_view import REFERENCES_PER_FILE_ITEM, ViewValue, file_key, file_part_key
from statestore.views.view_answers import references_in_region
from statestore.views.view_index import ANCESTORS_PER_ITEM, PlacedPartition
from tests.aws.test_queryable_view import TABLE, Table
from tests.builders import data_key, ref

PARTITIONS = 2_000  # ~600 KB of references as one item: past DynamoDB's 400 KB


def split_points(count: int) -> tuple[str, ...]:
    return tuple(f"k{i:05d}" for i in range(1, count))


def wide_table(store: QueryableViewStore) -> tuple[Table, list[str], str]:
    """A table of ``PARTITIONS`` leaves, with its view, holding one file referenced in every leaf (and one
    in a single leaf)."""
    table = Table(store, split_points(PARTITIONS))
    leaves = sorted(p.id for p in table.store.state().leaf_partitions())
    wide = data_key(TABLE, "w" * 200 + "-wide.parquet")
    narrow = ref(data_key(TABLE, "narrow.parquet"), leaves[0])
    table.store.commit(AddFiles((*(ref(wide, leaf, whole_file=False) for leaf in leaves), narrow)))
    table.update()
    return table, leaves, wide


def test_a_file_in_thousands_of_partitions_is_kept_and_answered_whole(view_store: QueryableViewStore) -> None:
    table, leaves, wide = wide_table(view_store)
    state = table.store.state()
    held = view_store.get(TABLE, [file_key(wide)])

    assert len(leaves) == PARTITIONS
    assert table.view.file(wide).value == state.file(wide)
    assert table.view.references_in_partition(leaves[-1]).value == state.references_in_partition(leaves[-1])
    assert file_key(wide) in held and len(held) == 1  # the parts are items of their own

    # A claim of a few references, merged from the log and then written by the upkeep.
    table.store.commit(AssignJobIds((AssignJobIdRequest("job-1", leaves[7], (wide,)),)))
    state = table.store.state()
    assert table.view.file(wide).value == state.file(wide)
    writes = table.update()
    assert table.view.file(wide).value == state.file(wide)
    assert table.view.claimed_references("job-1").value == [state.file(wide).reference_in(leaves[7])]
    # The file's item (its update time), the part holding the claimed reference, its r# and j# items: not
    # every part of the file.
    assert writes == 4 < PARTITIONS // REFERENCES_PER_FILE_ITEM

    table.store.commit(ReleaseClaims(("job-1",)))
    table.update()
    assert table.view.claimed_references("job-1").value == []
    assert table.view.file(wide).value == table.store.state().file(wide)


def test_a_clear_and_a_rebuild_leave_no_part_of_a_wide_file_behind(view_store: QueryableViewStore) -> None:
    table, leaves, wide = wide_table(view_store)
    table.store.commit(ClearFiles())
    table.update()

    assert table.view.file(wide).value is None
    assert list(view_store.with_prefix(TABLE, "f#")) == []

    table.store.commit(AddFiles(tuple(ref(wide, leaf, whole_file=False) for leaf in leaves[:500])))
    table.view.rebuild(table.store.load())
    assert table.view.file(wide).value == table.store.state().file(wide)
    parts = math.ceil(500 / REFERENCES_PER_FILE_ITEM)
    assert len(view_store.with_prefix(TABLE, "f#")) == 1 + parts  # the file's item and its parts


@pytest.mark.parametrize("references", [REFERENCES_PER_FILE_ITEM + 1, REFERENCES_PER_FILE_ITEM + 2])
def test_a_compaction_taking_a_reference_away_rewrites_the_parts(
    view_store: QueryableViewStore, references: int
) -> None:
    """One reference fewer makes a file of 101 one held in its own item, and shifts a file of 102's
    references between its parts."""
    table = Table(view_store, split_points(references))
    leaves = sorted(p.id for p in table.store.state().leaf_partitions())
    name = data_key(TABLE, "shrinks.parquet")
    table.store.commit(AddFiles(tuple(ref(name, leaf, whole_file=False) for leaf in leaves)))
    table.update()
    table.store.commit(AssignJobIds((AssignJobIdRequest("job-1", leaves[0], (name,)),)))
    output = ref(data_key(TABLE, "compacted.parquet"), leaves[0])
    table.store.commit(
        ReplaceFileReferences((ReplaceFileReferencesJob("job-1", leaves[0], (name,), output),))
    )

    table.update()

    state = table.store.state()
    assert len(state.file(name).references) == references - 1
    assert table.view.file(name).value == state.file(name)
    held = view_store.with_prefix(TABLE, "f#")
    parts = 0 if references - 1 <= REFERENCES_PER_FILE_ITEM else 2
    assert len(held) == 2 + parts  # the compacted file, the shrunk one and its parts, nothing left over
    assert table.view.rebuild(table.store.load()).writes == 0  # nothing the upkeep missed or left


DEPTH = 3 * ANCESTORS_PER_ITEM + 10


def test_a_tree_split_again_and_again_at_one_end_keeps_its_items_small(
    view_store: QueryableViewStore,
) -> None:
    """A row key that only grows, split at the newest leaf each time: a chain of leaves DEPTH deep."""
    table = Table(view_store, ())
    leaf = table.store.state().partition("root")
    chain = [leaf.id]
    for i in range(DEPTH):
        parent, left, right = leaf.split(0, f"k{i:05d}", f"left-{i}", f"right-{i}")
        table.store.commit(SplitPartition(parent, (left, right)))
        leaf = right
        chain.append(leaf.id)
    deep = ref(data_key(TABLE, "deep.parquet"), leaf.id)
    above = ref(data_key(TABLE, "above.parquet"), chain[100])  # not split down yet
    table.store.commit(AddFiles((deep, above)))
    table.update()
    later = ref(data_key(TABLE, "later.parquet"), leaf.id)
    table.store.commit(AddFiles((later,)))  # behind the view

    placed = [v for v in view_store.with_prefix(TABLE, "p#").values() if isinstance(v, PlacedPartition)]
    assert len(placed) == 2 * DEPTH + 1
    assert max(len(p.ancestor_ids) for p in placed) == ANCESTORS_PER_ITEM
    state = table.store.state()
    region = Region((Range(f"k{DEPTH:05d}", f"k{DEPTH:05d}x"),))  # in the deepest leaf only
    answer = table.view.references_in_region(region).value
    assert answer == references_in_region(state, region)
    assert list(answer) == chain  # every partition above, root first
    assert [r.filename for r in answer[leaf.id]] == sorted([deep.filename, later.filename])
    assert [r.filename for r in answer[chain[100]]] == [above.filename]
    assert overlapping_partitions(table.view, [region], 10) == {pid: state.partition(pid) for pid in chain}


def test_a_file_read_while_an_upkeep_rewrites_its_parts_is_read_again_and_a_lost_part_is_named() -> None:
    items = InMemoryQueryableViewStore()
    table = Table(items, split_points(2 * REFERENCES_PER_FILE_ITEM + 2))
    leaves = sorted(p.id for p in table.store.state().leaf_partitions())
    name = data_key(TABLE, "parts.parquet")
    table.store.commit(AddFiles(tuple(ref(name, leaf, whole_file=False) for leaf in leaves)))  # three parts
    table.update()
    # A compaction takes three references away (two parts then), applied between the reads of the file's
    # item and of its parts.
    requests = tuple(AssignJobIdRequest(f"job-{i}", leaf, (name,)) for i, leaf in enumerate(leaves[:3]))
    table.store.commit(AssignJobIds(requests))
    jobs = tuple(
        ReplaceFileReferencesJob(
            r.job_id, r.partition_id, (name,), ref(data_key(TABLE, f"{r.job_id}"), r.partition_id)
        )
        for r in requests
    )
    table.store.commit(ReplaceFileReferences(jobs))
    real_get = items.get
    reads: list[list[str]] = []

    def get(table_id: str, keys: Collection[str]) -> dict[str, ViewValue]:
        reads.append(list(keys))
        if len(reads) == 2:  # the parts, after the file's item
            table.update()
        return real_get(table_id, keys)

    items.get = get  # type: ignore[method-assign]
    answer = table.view.file(name)

    assert answer.value == table.store.state().file(name)
    assert len(reads) > 2  # read again after the view moved

    items.get = real_get  # type: ignore[method-assign]
    lost = file_part_key(name, 1)
    items.write(TABLE, {}, [lost])
    with pytest.raises(DamagedViewItemError, match=f"no item {lost!r}, which the item of file"):
        table.view.file(name)
