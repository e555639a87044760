"""The pieces of the data source that need no Spark session: which filters are taken and what they become,
the regions of key space they allow, leaf assignment in Arrow, and cutting a read into tasks."""

from __future__ import annotations

import importlib
from typing import Any

import pyarrow as pa
import pyspark
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_client.leaves import rows_by_leaf
from spark_client.pushdown import MAX_REGIONS, Predicate, key_regions, predicate_of, predicates_expression
from spark_client.read_plan import ReadPart, group_parts
from statestore.model.partition_tree import PartitionTree, partitions_from_split_points
from statestore.model.partitions import Range, Region
from statestore.model.schema import INT64_MAX, Schema

pytestmark = pytest.mark.spark

SPARK_VERSION = tuple(int(p) for p in pyspark.__version__.split(".")[:2])
needs_filter_classes = pytest.mark.skipif(
    SPARK_VERSION < (4, 1),
    reason=f"PySpark {pyspark.__version__} has no data source filter classes (they came with filter "
    "pushdown in Spark 4.1; EMR 8.0.0 runs 4.0); `make test-spark-latest` runs this on 4.3",
)

SCHEMA = Schema.of({"k": "long", "s": "string"}, values={"d": "double", "flag": "boolean", "b": "bytes"})
WHOLE = Region.whole(SCHEMA)


def region(k: tuple[Any, Any], s: tuple[Any, Any] = ("", None)) -> Region:
    return Region((Range(*k), Range(*s)))


# --- regions of key space -------------------------------------------------------------------------


def test_a_range_of_one_row_key_is_one_box() -> None:
    predicates = [Predicate("k", "ge", 10), Predicate("k", "lt", 20), Predicate("s", "le", "m")]

    assert key_regions(predicates, SCHEMA, WHOLE) == [region((10, 20), ("", "m\0"))]


def test_an_in_list_is_one_box_per_value_and_adjacent_values_merge() -> None:
    regions = key_regions([Predicate("k", "in", (1, 2, 7))], SCHEMA, WHOLE)

    assert regions == [region((1, 3)), region((7, 8))]


def test_too_many_boxes_fall_back_to_the_hull() -> None:
    values = tuple(range(0, 2 * (MAX_REGIONS + 1), 2))

    assert key_regions([Predicate("k", "in", values)], SCHEMA, WHOLE) == [region((0, values[-1] + 1))]


def test_contradictions_and_null_row_keys_match_nothing() -> None:
    assert key_regions([Predicate("k", "gt", 5), Predicate("k", "lt", 3)], SCHEMA, WHOLE) == []
    assert key_regions([Predicate("k", "gt", INT64_MAX)], SCHEMA, WHOLE) == []
    assert key_regions([Predicate("s", "null")], SCHEMA, WHOLE) == []
    assert key_regions([Predicate("k", "eq", 1)], SCHEMA, region((5, 9))) == []


def test_a_prefix_is_the_range_of_strings_starting_with_it() -> None:
    assert key_regions([Predicate("s", "starts_with", "ab")], SCHEMA, WHOLE) == [
        region((WHOLE.ranges[0].min, None), ("ab", "ac"))
    ]
    top = chr(0x10FFFF)
    assert key_regions([Predicate("s", "starts_with", "a" + top)], SCHEMA, WHOLE)[0].ranges[1] == Range(
        "a" + top, "b"
    )
    assert key_regions([Predicate("s", "starts_with", top)], SCHEMA, WHOLE)[0].ranges[1] == Range(top, None)


keys = st.integers(-20, 20)
strings = st.text(alphabet="abc", max_size=3)
key_predicates = st.one_of(
    st.builds(Predicate, st.just("k"), st.sampled_from(["eq", "lt", "le", "gt", "ge"]), keys),
    st.builds(
        Predicate,
        st.just("k"),
        st.just("in"),
        st.lists(keys, max_size=4).map(lambda v: tuple(sorted(set(v)))),
    ),
    st.builds(
        Predicate, st.just("s"), st.sampled_from(["eq", "lt", "le", "gt", "ge", "starts_with"]), strings
    ),
    st.builds(Predicate, st.just("s"), st.just("not_null")),
)


def holds(p: Predicate, row: dict[str, Any]) -> bool:
    value = row[p.column]
    if p.op == "not_null":
        return value is not None
    if p.op == "in":
        return value in p.value
    if p.op == "starts_with":
        return bool(value.startswith(p.value))
    compare = {
        "eq": lambda: value == p.value,
        "lt": lambda: value < p.value,
        "le": lambda: value <= p.value,
        "gt": lambda: value > p.value,
        "ge": lambda: value >= p.value,
    }
    return bool(compare[p.op]())


@settings(max_examples=300, deadline=None)
@given(st.lists(key_predicates, max_size=4), st.lists(st.tuples(keys, strings), max_size=30))
def test_the_regions_hold_every_row_that_passes_and_never_overlap(
    predicates: list[Predicate], rows: list[tuple[int, str]]
) -> None:
    regions = key_regions(predicates, SCHEMA, WHOLE)

    for k, s in rows:
        if all(holds(p, {"k": k, "s": s}) for p in predicates):
            assert sum(r.contains([k, s]) for r in regions) == 1, (k, s)
    for i, a in enumerate(regions):
        assert not any(a.overlaps(b) for b in regions[i + 1 :])


# --- evaluation -----------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    st.lists(key_predicates, max_size=3),
    st.lists(st.tuples(keys, st.none() | strings), max_size=30),
)
def test_the_arrow_expression_keeps_exactly_the_rows_that_pass(
    predicates: list[Predicate], rows: list[tuple[int, str | None]]
) -> None:
    table = pa.table(
        {
            "k": pa.array([k for k, _ in rows], pa.int64()),
            "s": pa.array([s for _, s in rows], pa.string()),
            "d": pa.array([0.0] * len(rows)),
            "flag": pa.array([True] * len(rows)),
            "b": pa.array([b""] * len(rows)),
        }
    )
    expression = predicates_expression(predicates, SCHEMA)

    kept = table.filter(expression).to_pylist() if expression is not None else table.to_pylist()

    # A comparison with null (s is None) never holds, as in Spark.
    expected = [
        row
        for row in table.to_pylist()
        if all(row[p.column] is not None and holds(p, row) for p in predicates)
    ]
    assert kept == expected


@needs_filter_classes
def test_spark_filters_are_taken_only_where_pyarrow_matches_spark() -> None:
    # The filter classes exist from Spark 4.1; mypy checks against the pinned 4.0, hence Any.
    ds: Any = importlib.import_module("pyspark.sql.datasource")

    taken = [
        (ds.EqualTo(("k",), 3), Predicate("k", "eq", 3)),
        (ds.In(("k",), (3, None, 1)), Predicate("k", "in", (1, 3))),
        (ds.EqualNullSafe(("s",), None), Predicate("s", "null")),
        (ds.StringStartsWith(("s",), "ab"), Predicate("s", "starts_with", "ab")),
        (ds.EqualTo(("b",), bytearray(b"x")), Predicate("b", "eq", b"x")),
        (ds.LessThan(("flag",), True), Predicate("flag", "lt", True)),
        (ds.IsNull(("d",)), Predicate("d", "null")),
    ]
    for spark_filter, predicate in taken:
        assert predicate_of(spark_filter, SCHEMA) == predicate, spark_filter
    left = [
        ds.GreaterThan(("d",), 1.0),  # doubles: NaN orders differently
        ds.Not(ds.EqualTo(("k",), 1)),
        ds.EqualTo(("k", "nested"), 1),
        ds.EqualTo(("nope",), 1),
        ds.EqualTo(("k",), "1"),  # not a long
        ds.EqualTo(("k",), 2**63),  # out of range
        ds.EqualTo(("k",), None),
        ds.StringContains(("s",), "b"),
    ]
    for spark_filter in left:
        assert predicate_of(spark_filter, SCHEMA) is None, spark_filter


# --- leaves and tasks -----------------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(keys, strings), min_size=1, max_size=60))
def test_rows_go_to_the_leaf_whose_region_holds_them(rows: list[tuple[int, str]]) -> None:
    schema = Schema.of({"k": "long", "s": "string"})
    tree_parts = {p.id: p for p in partitions_from_split_points(schema, [-5, 0, 9], id_prefix="p")}
    tree = PartitionTree(tree_parts)
    leaf = next(p for p in tree.leaves() if p.region.contains([0, ""]))
    parent, left, right = leaf.split(1, "b", "left", "right")
    tree = PartitionTree({**tree_parts, parent.id: parent, left.id: left, right.id: right})
    table = pa.table({"k": pa.array([k for k, _ in rows], pa.int64()), "s": [s for _, s in rows]})

    split = list(rows_by_leaf(table, schema, tree))

    assert len({leaf_id for leaf_id, _ in split}) == len(split)
    assert sorted(
        r for _, t in split for r in zip(t.column("k").to_pylist(), t.column("s").to_pylist(), strict=True)
    ) == sorted(rows)
    for leaf_id, leaf_rows in split:
        for k, s in zip(leaf_rows.column("k").to_pylist(), leaf_rows.column("s").to_pylist(), strict=True):
            assert tree.leaf_for_key([k, s]).id == leaf_id


def test_a_read_is_cut_in_order_into_tasks_of_similar_row_counts() -> None:
    parts = [ReadPart(f"f{i}", None, rows) for i, rows in enumerate([100, 300, 100, 100, 400, 200])]

    groups = group_parts(parts, rows_per_task=400)

    assert [sum(p.rows for p in g) for g in groups] == [400, 200, 600]  # 3 tasks, parts kept whole
    assert [p for g in groups for p in g] == parts
    assert 3 < len(group_parts(parts, rows_per_task=10)) <= len(parts)  # never more tasks than parts
    assert len(group_parts(parts, rows_per_task=10, max_tasks=2)) == 2
    assert group_parts([], rows_per_task=10) == []
    assert len(group_parts([ReadPart("a", None, 0), ReadPart("b", None, 0)], rows_per_task=10)) == 1
