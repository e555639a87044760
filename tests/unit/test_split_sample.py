"""Split points from a bounded sample: exact for small leaves, near the median for big ones, always valid.

The split task's body runs here without a Spark session, over local files."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_client.columns import arrow_schema
from spark_client.data_store import DataStore
from spark_client.splitting import MOST_DISTINCT, ROTATE, KeySample, SplitDecision, decide_split
from statestore.model.partitions import Range, Region
from statestore.model.schema import Schema

SCHEMA = Schema.of({"key": "long"})
TWO_KEYS = Schema.of({"a": "string", "b": "long"})


def write_keys(data: DataStore, filename: str, schema: Schema, columns: dict[str, list[Any]]) -> str:
    table = pa.table(columns, schema=arrow_schema(schema))
    table = table.take(pc.sort_indices(table, sort_keys=[(f.name, "ascending") for f in schema.row_keys]))
    data.ensure_parent(filename)
    pq.write_table(table, data.path(filename), row_group_size=10_000)
    return filename


def decide(
    data: DataStore,
    schema: Schema,
    files: list[str],
    region: Region | None = None,
    *,
    sample_rows: int,
    strategy: str = ROTATE,
) -> SplitDecision:
    return decide_split(
        schema,
        data,
        "leaf",
        region or Region.whole(schema),
        files,
        0,
        0,
        strategy,
        sample_rows=sample_rows,
    )


def test_a_leaf_smaller_than_the_sample_is_split_at_its_exact_median(tmp_path: Path) -> None:
    data = DataStore.local(tmp_path)
    rng = random.Random(1)
    values = [rng.randrange(10**6) for _ in range(999)]
    files = [
        write_keys(data, "a.parquet", SCHEMA, {"key": values[:500]}),
        write_keys(data, "b.parquet", SCHEMA, {"key": values[500:]}),
    ]

    decision = decide(data, SCHEMA, files, sample_rows=1_000)

    assert decision.split_point == sorted(values)[len(values) // 2]


def test_a_leaf_far_bigger_than_the_sample_is_split_within_the_stated_bound(tmp_path: Path) -> None:
    rng = random.Random(2)
    data = DataStore.local(tmp_path)
    values = [int(rng.paretovariate(1.5) * 1_000) for _ in range(200_000)]  # skewed, many duplicates
    files = [write_keys(data, f"{i}.parquet", SCHEMA, {"key": values[i::4]}) for i in range(4)]

    decision = decide(data, SCHEMA, files, sample_rows=10_000)

    # DKW: |rank - 1/2| <= sqrt(ln(2 / 1e-6) / (2 x 10,000)) = 0.027 except with probability 1e-6; a
    # median inside a run of equal values may sit anywhere in that run, so the run is allowed for.
    point = decision.split_point
    assert isinstance(point, int)
    below = sum(v < point for v in values) / len(values)
    at_or_below = sum(v <= point for v in values) / len(values)
    assert below - 0.027 <= 0.5 <= at_or_below + 0.027


def test_the_sample_holds_at_most_twice_its_capacity_whatever_it_has_seen() -> None:
    sample = KeySample(["key"], capacity=1_000, seed=3)
    for start in range(0, 100_000, 4_096):
        sample.add(pa.record_batch({"key": pa.array(range(start, start + 4_096), pa.int64())}))
        assert sample.held_rows <= 2_000

    assert sample.rows == 102_400 and len(sample.column(0)) == 1_000
    assert sample.second_smallest(0) == 1
    with pytest.raises(ValueError, match="capacity of at least 2 rows, got 1"):
        KeySample(["key"], capacity=1)


def test_a_rare_second_value_missed_by_the_sample_still_gives_a_split_point(tmp_path: Path) -> None:
    data = DataStore.local(tmp_path)
    files = [write_keys(data, "a.parquet", SCHEMA, {"key": [5] * 50_000 + [9]})]

    decision = decide(data, SCHEMA, files, sample_rows=10)

    assert decision.split_point == 9  # rows on both sides: 50,000 at 5, one at 9


def test_only_rows_inside_the_region_are_sampled(tmp_path: Path) -> None:
    data = DataStore.local(tmp_path)
    files = [write_keys(data, "a.parquet", SCHEMA, {"key": list(range(1_000))})]

    decision = decide(data, SCHEMA, files, Region((Range(100, 200),)), sample_rows=10_000)

    assert decision.split_point == 150


def test_most_distinct_picks_the_dimension_with_more_distinct_sampled_values(tmp_path: Path) -> None:
    data = DataStore.local(tmp_path)
    a = [f"k{i % 3}" for i in range(3_000)]
    b = [i * 7 % 3_001 for i in range(3_000)]
    files = [write_keys(data, "a.parquet", TWO_KEYS, {"a": a, "b": b})]

    decision = decide(data, TWO_KEYS, files, sample_rows=500, strategy=MOST_DISTINCT)

    assert decision.dimension == 1


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.integers(-5, 5) | st.integers(-(2**63), 2**63 - 1), min_size=0, max_size=300),
    st.integers(2, 40),
    st.integers(-(2**63), 5),
)
def test_a_split_point_is_strictly_inside_the_region_with_rows_on_both_sides(
    tmp_path_factory: pytest.TempPathFactory, values: list[int], capacity: int, region_min: int
) -> None:
    data = DataStore.local(tmp_path_factory.mktemp("split"))
    inside = [v for v in values if v >= region_min]
    files = [write_keys(data, "a.parquet", SCHEMA, {"key": values})]

    decision = decide(data, SCHEMA, files, Region((Range(region_min, None),)), sample_rows=capacity)

    if len(set(inside)) < 2:
        assert decision.split_point is None
    else:
        point = decision.split_point
        assert isinstance(point, int) and point > region_min
        assert any(v < point for v in inside) and any(v >= point for v in inside)
