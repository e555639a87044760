"""Reading a few partitions of a table held as columns: the root, the partitions a region overlaps and their
references are found without making an object of every partition or every file (a query of one leaf of a
million-reference table took 10 s to plan when it did)."""

from __future__ import annotations

import numpy as np
import pytest

from spark_client.read_plan import plan_read
from statestore.codec.parquet import state_from_parquet, state_to_parquet
from statestore.model.files import FileReference, TableFile
from statestore.model.partition_tree import PartitionTree, partitions_from_split_points
from statestore.model.partitions import Partition, Range, Region
from statestore.model.schema import Schema
from statestore.state.file_columns import FileColumns
from statestore.state.partition_columns import PartitionColumns
from statestore.state.table_queries import PartitionTotals
from statestore.state.table_state import TableState
from statestore.transactions import AddFiles, AssignJobIdRequest, AssignJobIds, SplitPartition
from tests.builders import commit, count_files_made, ref

SCHEMA = Schema.of({"key": "string"})


def loaded_state(split_points: list[str]) -> TableState:
    """Partitions and files in columns (loaded from a snapshot) and changes since in the overlay: a leaf
    split, files added on the new leaves and on an old one, a claim on a loaded file; claims loaded too."""
    partitions = partitions_from_split_points(SCHEMA, split_points)
    leaves = [p for p in partitions if p.leaf]
    # f36-f39, one on each leaf, were claimed by "base-job" before the load.
    files = {
        f"f{i}.parquet": TableFile(
            f"f{i}.parquet",
            (
                ref(
                    f"f{i}.parquet",
                    leaves[i % len(leaves)].id,
                    10 + i,
                    job_id="base-job" if i >= 36 else None,
                ),
            ),
            1,
        )
        for i in range(40)
    }
    state = TableState(SCHEMA, {p.id: p for p in partitions}, files, transaction_number=5)
    state = state_from_parquet(SCHEMA, *state_to_parquet(state), 5)
    lowest = min(leaves, key=lambda p: p.region.ranges[0].min)
    parent, low, high = lowest.split(0, "a", "low", "high")
    commit(state, SplitPartition(parent, (low, high)), 2_000)
    old_leaf = state.partition_tree.leaf_for_key(["h"])
    commit(
        state, AddFiles((ref("new-low", "low"), ref("new-high", "high"), ref("new-old", old_leaf.id))), 2_000
    )
    if old_leaf.id != "high":  # (with no split points, "h" falls in a new leaf)
        claimed = next(r.filename for r in state.references_in_partition(old_leaf.id) if r.job_id is None)
        commit(state, AssignJobIds((AssignJobIdRequest("job", old_leaf.id, (claimed,)),)), 3_000)
    return state


def forbid_whole_table_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Make every partition's object from the columns an error, and count the files made from them."""

    def every_partition(self: PartitionColumns, rows: np.ndarray | None = None) -> list[Partition]:
        raise AssertionError("every partition of the table was made to read a few")

    monkeypatch.setattr(PartitionColumns, "partitions", every_partition)
    return count_files_made(monkeypatch)


@pytest.mark.parametrize("split_points", [[], ["g", "m", "t"]], ids=["root-only", "seven-partitions"])
def test_the_root_and_a_regions_partitions_are_found_without_reading_every_partition(
    split_points: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    state = loaded_state(split_points)  # with no split points, the root itself was split since the load
    scanned = PartitionTree(dict(state.partitions_by_id))  # the same tree as a plain dictionary
    regions = [Region((Range("", None),)), Region((Range("0", "b"),)), Region((Range("h", "n"),))]
    expected = [sorted(p.id for p in scanned.overlapping(region)) for region in regions]
    forbid_whole_table_reads(monkeypatch)

    tree = state.partition_tree

    assert tree.root == scanned.root
    assert [sorted(p.id for p in tree.overlapping(region)) for region in regions] == expected
    assert tree.leaf_for_key(["0"]).id == "low" and tree.leaf_for_key(["a"]).id == "high"


@pytest.mark.parametrize(
    "partition_ids",
    [["low"], ["high", "low", "unknown"], ["leaf-of-h"], ["leaf-of-h", "high"], []],
    ids=["one-new-leaf", "new-leaves-and-unknown", "an-old-leaf", "old-and-new", "none"],
)
def test_references_in_partitions_are_those_of_all_references_in_them(partition_ids: list[str]) -> None:
    state = loaded_state(["g", "m", "t"])
    old_leaf = state.partition_tree.leaf_for_key(["h"]).id  # in the columns, with files there and since
    partition_ids = [old_leaf if p == "leaf-of-h" else p for p in partition_ids]
    everything = state.references_by_partition()
    assert sum(map(len, everything.values())) == state.reference_count()

    found = state.references_in_partitions(partition_ids)

    assert {p: sorted(refs) for p, refs in found.items()} == {
        p: sorted(everything[p]) for p in partition_ids if p in everything
    }
    for p in partition_ids:
        assert state.references_in_partition(p) == found.get(p, [])


def test_a_query_of_one_leaf_makes_objects_for_that_leafs_references_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state = loaded_state(["g", "m", "t"])
    leaf = state.partition_tree.leaf_for_key(["h"])
    everything = state.references_by_partition()
    expected = sorted(r.filename for r in everything[leaf.id])
    assert len(expected) == 11 and state.reference_count() == 43  # 10 loaded, 1 added since
    made = forbid_whole_table_reads(monkeypatch)
    references_made = 0
    references_at = FileColumns.references_at

    def counting_references(self: FileColumns, rows: np.ndarray) -> list[FileReference]:
        nonlocal references_made
        found = references_at(self, rows)
        references_made += len(found)
        return found

    monkeypatch.setattr(FileColumns, "references_at", counting_references)

    parts = plan_read(state, [leaf.region])

    assert sorted(part.filename for part in parts) == expected
    # No file made from the columns; a reference made for each of the leaf's there: all but the file added
    # since and the one claimed since, which the overlay holds as objects already.
    assert made == [] and references_made == len(expected) - 2


@pytest.mark.parametrize("split_points", [[], ["g", "m", "t"]], ids=["root-only", "seven-partitions"])
def test_leaf_ids_and_leaf_partitions_are_the_leaves_of_all_partitions(split_points: list[str]) -> None:
    state = loaded_state(split_points)  # "low" and "high" are new leaves; the leaf they split is not one
    leaves = [p for p in state.partitions_by_id.values() if p.leaf]

    assert state.leaf_partitions() == leaves
    assert state.leaf_ids() == [p.id for p in leaves]
    assert {"low", "high"} <= set(state.leaf_ids()) and state.partition_tree.root.id not in state.leaf_ids()


@pytest.mark.parametrize("claimed_before", [None, 2_999, 3_001])
def test_unassigned_references_in_partitions_leave_out_claims_unless_older_than_a_time(
    claimed_before: int | None,
) -> None:
    state = loaded_state(["g", "m", "t"])
    commit(state, AssignJobIds((AssignJobIdRequest("old-job", "low", ("new-low",)),)), 2_500)
    everything = state.references_by_partition()
    ids = state.leaf_ids()

    def free(r: FileReference) -> bool:
        return r.job_id is None or (claimed_before is not None and r.last_update_time < claimed_before)

    found = state.references_in_partitions(ids, unassigned=True, claimed_before=claimed_before)

    expected = {p: sorted(filter(free, everything[p])) for p in ids if any(map(free, everything.get(p, ())))}
    assert {p: sorted(refs) for p, refs in found.items()} == expected
    claims = {r.job_id for refs in found.values() for r in refs} - {None}
    assert (
        claims
        == {None: set(), 2_999: {"old-job", "base-job"}, 3_001: {"old-job", "job", "base-job"}}[
            claimed_before
        ]
    )


def test_a_claim_time_without_unassigned_is_refused() -> None:
    with pytest.raises(ValueError, match="claimed_before selects among unassigned references"):
        loaded_state([]).references_in_partitions(["low"], claimed_before=5)


def totals_by_scan(state: TableState) -> dict[str, PartitionTotals]:
    return {
        partition_id: PartitionTotals(
            len(refs),
            sum(r.job_id is not None for r in refs),
            sum(r.number_of_rows for r in refs),
            any(r.count_approximate for r in refs),
        )
        for partition_id, refs in state.references_by_partition().items()
    }


def test_reference_totals_are_those_of_all_references() -> None:
    state = loaded_state(["g", "m", "t"])  # claims and row counts in the columns and since
    approximate = FileReference("approx", "low", 7, count_approximate=True)
    commit(state, AddFiles((approximate, ref("exact", "high", 5))), 4_000)
    assert state._base.file_count and state._overlay

    totals = state.reference_totals()

    assert totals == totals_by_scan(state)
    assert totals["low"].rows_approximate and not totals["high"].rows_approximate
    assert sum(t.assigned_to_jobs for t in totals.values()) == 5  # base-job's 4 and job's 1
    # Only the overlay (no columns yet), and only the columns (all folded):
    fresh = TableState(SCHEMA)
    assert fresh.reference_totals() == {}
    state.file_columns()
    assert not state._overlay and state.reference_totals() == totals


def test_reference_totals_sum_row_counts_near_the_int64_limit_exactly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    big = 2**63 - 1  # the largest count a codec stores: two of them overflow an int64 sum
    partitions = partitions_from_split_points(SCHEMA, [])
    files = {name: TableFile(name, (ref(name, "root", big),), 1) for name in ("a", "b", "c")}
    state = state_from_parquet(
        SCHEMA, *state_to_parquet(TableState(SCHEMA, {p.id: p for p in partitions}, files)), 0
    )

    assert state.reference_totals() == {"root": PartitionTotals(3, 0, 3 * big, False)}
