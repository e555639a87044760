"""Partitions: the tree over the key space, building it from split points, finding leaves, and split rules."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statestore.errors import (
    InvalidKeyError,
    InvalidPartitionSplitError,
    InvalidPartitionTreeError,
    PartitionNotFoundError,
)
from statestore.model.partition_tree import (
    PartitionTree,
    check_split,
    partitions_from_split_points,
    validate_tree,
)
from statestore.model.partitions import Partition, Range, Region, root_partition
from statestore.model.schema import Key, Schema
from tests.builders import BYTES_SCHEMA, INT_SCHEMA, LONG_SCHEMA, STRING_SCHEMA, TWO_KEY_SCHEMA, tree

TWO_INT_SCHEMA = Schema.of({"x": "int", "y": "int"})


def by_id(partitions: list[Partition]) -> PartitionTree:
    return PartitionTree({p.id: p for p in partitions})


def leaf_ranges_in_order(partitions: list[Partition], dimension: int = 0) -> list[tuple[Key, Key | None]]:
    leaves = [p.region.ranges[dimension] for p in partitions if p.leaf]
    return [(r.min, r.max) for r in sorted(leaves, key=lambda r: r.min)]


# --- the root and trees from split points -------------------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "expected_mins"),
    [
        (INT_SCHEMA, (-(2**31),)),
        (LONG_SCHEMA, (-(2**63),)),
        (STRING_SCHEMA, ("",)),
        (BYTES_SCHEMA, (b"",)),
        (TWO_KEY_SCHEMA, ("", -(2**63))),
    ],
)
def test_root_partition_covers_the_whole_key_space_of_its_schema(
    schema: Schema, expected_mins: tuple[Key]
) -> None:
    root = root_partition(schema)

    assert root.leaf and root.parent_id is None and root.child_ids == () and root.dimension == -1
    assert tuple(r.min for r in root.region.ranges) == expected_mins
    assert all(r.max is None for r in root.region.ranges)
    validate_tree(schema, [root])


def test_no_split_points_gives_the_root_alone() -> None:
    partitions = partitions_from_split_points(STRING_SCHEMA, [])

    assert partitions == [root_partition(STRING_SCHEMA)]


def test_one_split_point_gives_a_root_with_two_leaves_meeting_at_it() -> None:
    partitions = tree(INT_SCHEMA, [10])

    tree_view = by_id(partitions)
    root = tree_view.root
    assert not root.leaf and root.dimension == 0 and len(root.child_ids) == 2
    left, right = (tree_view.get(c) for c in root.child_ids)
    assert left.region.ranges[0] == Range(-(2**31), 10)
    assert right.region.ranges[0] == Range(10, None)
    assert left.leaf and right.leaf and left.parent_id == right.parent_id == root.id
    validate_tree(INT_SCHEMA, partitions)


@pytest.mark.parametrize(
    ("schema", "points"),
    [
        (INT_SCHEMA, [-100, -5, 0, 7, 8, 1000, 2**31 - 1]),
        (LONG_SCHEMA, [2**40, 2**50, 2**62]),
        (STRING_SCHEMA, ["b", "d", "da", "m", "z"]),
        (BYTES_SCHEMA, [b"\x00", b"\x01", b"\x7f", b"\x80\x00", b"\xff"]),
    ],
    ids=["int", "long", "string", "bytes"],
)
def test_many_split_points_give_a_valid_tree_whose_leaves_are_cut_at_exactly_those_points(
    schema: Schema, points: list[Key]
) -> None:
    partitions = tree(schema, points)

    validate_tree(schema, partitions)
    minimum = schema.row_key_types[0].minimum
    bounds: list[Key | None] = [minimum, *points, None]
    assert leaf_ranges_in_order(partitions) == list(zip(bounds, bounds[1:], strict=False))
    assert len(partitions) == 2 * len(points) + 1


def test_trees_from_the_same_points_and_prefix_are_identical() -> None:
    assert tree(STRING_SCHEMA, ["c", "f", "k"]) == tree(STRING_SCHEMA, ["c", "f", "k"])


def test_without_a_prefix_each_partition_below_the_root_gets_a_fresh_id() -> None:
    first = partitions_from_split_points(STRING_SCHEMA, ["m"])
    second = partitions_from_split_points(STRING_SCHEMA, ["m"])

    assert {p.id for p in first} & {p.id for p in second} == {"root"}
    assert len({p.id for p in first}) == 3


@pytest.mark.parametrize(
    "points", [["m", "c"], ["c", "c"], ["a", "c", "b"]], ids=["unsorted", "duplicate", "unsorted3"]
)
def test_unsorted_or_duplicate_split_points_are_rejected(points: list[Key]) -> None:
    with pytest.raises(InvalidPartitionSplitError, match="sorted and distinct"):
        partitions_from_split_points(STRING_SCHEMA, points)


@pytest.mark.parametrize(
    ("schema", "point"), [(STRING_SCHEMA, ""), (INT_SCHEMA, -(2**31)), (BYTES_SCHEMA, b"")], ids=str
)
def test_a_split_point_at_the_type_minimum_is_rejected(schema: Schema, point: Key) -> None:
    with pytest.raises(InvalidPartitionSplitError, match="minimum"):
        partitions_from_split_points(schema, [point])


@pytest.mark.parametrize(("schema", "point"), [(INT_SCHEMA, "a"), (INT_SCHEMA, 2**31), (STRING_SCHEMA, b"a")])
def test_a_split_point_of_the_wrong_type_or_range_is_rejected(schema: Schema, point: Key) -> None:
    with pytest.raises(InvalidKeyError):
        partitions_from_split_points(schema, [point])


@pytest.mark.parametrize("dimension", [-1, 2])
def test_split_points_on_a_dimension_the_schema_lacks_are_rejected(dimension: int) -> None:
    with pytest.raises(InvalidPartitionSplitError, match="not a row key index"):
        partitions_from_split_points(TWO_KEY_SCHEMA, ["m"], dimension)


def test_split_points_on_the_second_row_key_cut_only_that_dimension() -> None:
    partitions = tree(TWO_KEY_SCHEMA, [0, 100], dimension=1)

    validate_tree(TWO_KEY_SCHEMA, partitions)
    assert leaf_ranges_in_order(partitions, dimension=1) == [(-(2**63), 0), (0, 100), (100, None)]
    assert all(p.region.ranges[0] == Range("") for p in partitions)


# --- finding partitions -------------------------------------------------------------------------------


def test_leaf_for_key_finds_the_leaf_containing_each_key() -> None:
    partitions = tree(STRING_SCHEMA, ["d", "m", "t"])
    tree_view = by_id(partitions)

    for key in ["", "a", "d", "dz", "m", "s", "t", "zzz"]:
        leaf = tree_view.leaf_for_key([key])
        assert leaf.leaf and leaf.region.contains([key])


def test_leaf_for_key_outside_the_key_space_is_rejected() -> None:
    tree_view = by_id(tree(INT_SCHEMA, [0]))

    with pytest.raises(InvalidPartitionTreeError, match="outside the table's key space"):
        tree_view.leaf_for_key([-(2**31) - 1])
    with pytest.raises(InvalidPartitionTreeError, match="outside the table's key space"):
        tree_view.leaf_for_key([1, 2])


def test_get_of_an_unknown_partition_raises_partition_not_found() -> None:
    with pytest.raises(PartitionNotFoundError, match="nope"):
        by_id(tree(INT_SCHEMA, [0])).get("nope")


def test_ancestors_walk_from_a_leaf_up_to_the_root() -> None:
    partitions = tree(INT_SCHEMA, [0, 10, 20])
    tree_view = by_id(partitions)
    leaf = tree_view.leaf_for_key([25])

    ancestors = list(tree_view.ancestors(leaf.id))

    assert ancestors[-1].id == "root"
    assert all(a.region.covers(leaf.region) and not a.leaf for a in ancestors)
    for child, parent in zip([leaf, *ancestors], ancestors, strict=False):
        assert child.id in parent.child_ids


# Random 2-D trees over a small integer space, to compare the tree walks with brute force.

SMALL = 20  # keys in [-2**31, ...) but the interesting splits are in [0, SMALL)


@st.composite
def random_tree(draw: st.DrawFn) -> list[Partition]:
    partitions = {"root": root_partition(TWO_INT_SCHEMA)}
    for n in range(draw(st.integers(0, 12))):
        leaf = draw(st.sampled_from(sorted(p.id for p in partitions.values() if p.leaf)))
        dimension = draw(st.integers(0, 1))
        current = partitions[leaf].region.ranges[dimension]
        assert isinstance(current.min, int) and isinstance(current.max, int | None)
        low = max(current.min, 0)
        high = SMALL if current.max is None else current.max
        if low + 1 >= high:
            continue
        point = draw(st.integers(low + 1, high - 1))
        parent, left, right = partitions[leaf].split(dimension, point, f"p{n}a", f"p{n}b")
        partitions.update({parent.id: parent, left.id: left, right.id: right})
    return list(partitions.values())


def small_range() -> st.SearchStrategy[Range]:
    def build(bounds: tuple[int, int | None]) -> Range:
        low, high = bounds
        return Range(low, high)

    return (
        st.tuples(st.integers(-1, SMALL), st.integers(1, SMALL + 2) | st.none())
        .filter(lambda b: b[1] is None or b[0] < b[1])
        .map(build)
    )


@settings(max_examples=100, deadline=None)
@given(random_tree(), st.integers(-1, SMALL + 1), st.integers(-1, SMALL + 1))
def test_leaf_for_key_matches_the_one_leaf_whose_region_contains_the_key(
    partitions: list[Partition], x: int, y: int
) -> None:
    validate_tree(TWO_INT_SCHEMA, partitions)
    containing = [p for p in partitions if p.leaf and p.region.contains([x, y])]

    assert len(containing) == 1
    assert by_id(partitions).leaf_for_key([x, y]) == containing[0]


@settings(max_examples=100, deadline=None)
@given(random_tree(), small_range(), small_range(), st.booleans())
def test_overlapping_matches_brute_force_over_every_partition(
    partitions: list[Partition], x_range: Range, y_range: Range, leaves_only: bool
) -> None:
    region = Region((x_range, y_range))

    found = by_id(partitions).overlapping(region, leaves_only=leaves_only)

    expected = {p.id for p in partitions if p.region.overlaps(region) and (p.leaf or not leaves_only)}
    assert sorted(p.id for p in found) == sorted(expected)
    # Brute force on keys too: a leaf overlaps the region iff some key lies in both.
    if leaves_only:
        for leaf in (p for p in partitions if p.leaf):
            shares_a_key = any(
                leaf.region.contains([x, y]) and region.contains([x, y])
                for x in range(-1, SMALL + 3)
                for y in range(-1, SMALL + 3)
            )
            assert shares_a_key == (leaf.id in expected)


# --- splitting ----------------------------------------------------------------------------------------


def split_of_root(
    schema: Schema = INT_SCHEMA, point: Key = 10
) -> tuple[Partition, Partition, Partition, Partition]:
    before = root_partition(schema)
    parent, left, right = before.split(0, point, "L", "R")
    return before, parent, left, right


def test_partition_split_gives_a_parent_and_two_leaves_meeting_at_the_point() -> None:
    before, parent, left, right = split_of_root()

    assert parent.id == before.id and parent.region == before.region
    assert not parent.leaf and parent.child_ids == ("L", "R") and parent.dimension == 0
    assert left.region.ranges[0] == Range(-(2**31), 10) and right.region.ranges[0] == Range(10)
    check_split(before, parent, [left, right])


def test_multi_dimensional_splits_keep_the_other_dimensions_and_form_a_valid_tree() -> None:
    root = root_partition(TWO_KEY_SCHEMA)
    root, left, right = root.split(0, "m", "L", "R")
    right_before = right
    right, right_low, right_high = right.split(1, 0, "RL", "RH")
    check_split(right_before, right, [right_low, right_high])
    partitions = [root, left, right, right_low, right_high]

    validate_tree(TWO_KEY_SCHEMA, partitions)
    assert right_low.region == Region((Range("m"), Range(-(2**63), 0)))
    assert right_high.region == Region((Range("m"), Range(0)))
    tree_view = by_id(partitions)
    assert tree_view.leaf_for_key(["a", 5]).id == "L"
    assert tree_view.leaf_for_key(["q", -5]).id == "RL"
    assert tree_view.leaf_for_key(["q", 5]).id == "RH"


@pytest.mark.parametrize("point", [-(2**31), -(2**31) - 5, "x"], ids=["at-min", "below-min", "wrong-type"])
def test_partition_split_at_a_point_not_strictly_inside_the_range_is_rejected(point: Key) -> None:
    with pytest.raises(InvalidPartitionSplitError, match="not strictly inside"):
        root_partition(INT_SCHEMA).split(0, point, "L", "R")


def test_partition_split_at_the_upper_bound_of_a_child_is_rejected() -> None:
    _, _, left, _ = split_of_root()

    with pytest.raises(InvalidPartitionSplitError, match="not strictly inside"):
        left.split(0, 10, "LL", "LR")


@pytest.mark.parametrize("dimension", [-1, 1])
def test_partition_split_on_a_dimension_the_schema_lacks_is_rejected(dimension: int) -> None:
    with pytest.raises(InvalidPartitionSplitError, match="row key field"):
        root_partition(INT_SCHEMA).split(dimension, 10, "L", "R")


def test_check_split_needs_exactly_two_children() -> None:
    before, parent, left, right = split_of_root()
    third = replace(right, id="X")

    with pytest.raises(InvalidPartitionSplitError, match="exactly two children, got 1"):
        check_split(before, replace(parent, child_ids=("L",)), [left])
    with pytest.raises(InvalidPartitionSplitError, match="exactly two children, got 3"):
        check_split(before, replace(parent, child_ids=("L", "R", "X")), [left, right, third])


def test_check_split_needs_children_that_meet_at_the_split_point() -> None:
    before, parent, left, right = split_of_root()
    gap_right = replace(right, region=Region((Range(12),)))
    overlap_right = replace(right, region=Region((Range(8),)))

    with pytest.raises(InvalidPartitionSplitError, match="do not meet at one split point"):
        check_split(before, parent, [left, gap_right])
    with pytest.raises(InvalidPartitionSplitError, match="do not meet at one split point"):
        check_split(before, parent, [left, overlap_right])


def test_check_split_needs_children_that_cover_the_parent() -> None:
    before, parent, left, right = split_of_root()
    short_right = replace(right, region=Region((Range(10, 50),)))
    high_left = replace(left, region=Region((Range(0, 10),)))

    with pytest.raises(InvalidPartitionSplitError, match="do not cover"):
        check_split(before, parent, [left, short_right])
    with pytest.raises(InvalidPartitionSplitError, match="do not cover"):
        check_split(before, parent, [high_left, right])


def test_check_split_needs_an_existing_dimension() -> None:
    before, parent, left, right = split_of_root()

    for dimension in (-1, 1):
        with pytest.raises(InvalidPartitionSplitError, match="not a row key index"):
            check_split(before, replace(parent, dimension=dimension), [left, right])


def test_check_split_rejects_a_child_that_differs_on_another_dimension() -> None:
    before = root_partition(TWO_KEY_SCHEMA)
    parent, left, right = before.split(0, "m", "L", "R")
    moved = replace(right, region=right.region.with_range(1, Range(0)))

    with pytest.raises(InvalidPartitionSplitError, match="differs .* on dimension 1, but the split is on 0"):
        check_split(before, parent, [left, moved])


def test_check_split_rejects_a_child_with_the_wrong_number_of_ranges() -> None:
    before, parent, left, right = split_of_root()
    two_ranges = replace(right, region=Region((Range(10), Range(0))))

    with pytest.raises(InvalidPartitionSplitError, match="has 2 range"):
        check_split(before, parent, [left, two_ranges])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda parent: replace(parent, id="other"), "keep the id and region"),
        (lambda parent: replace(parent, region=Region((Range(0),))), "keep the id and region"),
        (lambda parent: replace(parent, leaf=True), "must not be a leaf"),
        (lambda parent: replace(parent, child_ids=("L", "X")), "must list its children 'L' and 'R'"),
    ],
    ids=["new-id", "new-region", "still-leaf", "names-another-child"],
)
def test_check_split_rejects_a_malformed_parent(change: object, message: str) -> None:
    before, parent, left, right = split_of_root()

    with pytest.raises(InvalidPartitionSplitError, match=message):
        check_split(before, change(parent), [left, right])  # type: ignore[operator]


def test_check_split_rejects_malformed_children() -> None:
    before, parent, left, right = split_of_root()

    with pytest.raises(InvalidPartitionSplitError, match="both children"):
        check_split(before, replace(parent, child_ids=("L", "L")), [left, replace(right, id="L")])
    with pytest.raises(InvalidPartitionSplitError, match="must name 'root' as its parent"):
        check_split(before, parent, [left, replace(right, parent_id="elsewhere")])
    with pytest.raises(InvalidPartitionSplitError, match="must be a leaf"):
        check_split(before, parent, [left, replace(right, leaf=False)])
    with pytest.raises(InvalidPartitionSplitError, match="must be a leaf"):
        check_split(before, parent, [left, replace(right, child_ids=("x",))])


# --- whole-tree validation ----------------------------------------------------------------------------


def test_validate_tree_rejects_malformed_trees() -> None:
    good = tree(INT_SCHEMA, [0, 10])
    root, *rest = good
    leaf = next(p for p in good if p.leaf)

    cases: list[tuple[list[Partition], str]] = [
        ([], "at least one partition"),
        ([*good, good[1]], "used more than once"),
        ([Partition("root", Region((Range(-(2**31)), Range(0))))], "range"),
        ([Partition("root", Region((Range(0),)))], "whole key space"),
        ([*good, Partition("stray", Region((Range(0),)))], "exactly one root"),
        ([p for p in good if p.id != leaf.id], "missing child"),
        ([*good, Partition("orphan", Region((Range(0),)), parent_id="root")], "not reachable"),
        ([replace(root, dimension=0, leaf=True), *rest], "must have no children"),
    ]
    for partitions, message in cases:
        with pytest.raises(InvalidPartitionTreeError, match=message):
            validate_tree(INT_SCHEMA, partitions)


def test_validate_tree_reports_a_bad_split_as_a_tree_error() -> None:
    good = tree(INT_SCHEMA, [10])
    bad = [
        replace(p, region=Region((Range(-(2**31), 5),))) if p.region.ranges[0].max == 10 else p for p in good
    ]

    with pytest.raises(InvalidPartitionTreeError, match="do not meet"):
        validate_tree(INT_SCHEMA, bad)


def test_an_empty_range_cannot_be_built() -> None:
    with pytest.raises(InvalidPartitionTreeError, match="empty range"):
        Range(5, 5)
    with pytest.raises(InvalidPartitionTreeError, match="empty range"):
        Range("b", "a")


def test_a_range_whose_bounds_are_of_different_types_is_a_clear_tree_error() -> None:
    with pytest.raises(InvalidPartitionTreeError, match="different types"):
        Range("a", b"b")
