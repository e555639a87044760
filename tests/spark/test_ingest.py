"""Ingest writes one sorted file per leaf partition per task, commits them once, and refuses bad input."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from spark_client.committer import CommitReport
from spark_client.errors import CommitPendingError, CommitRejectedError, SchemaMismatchError
from spark_client.ingest import ingest, ingest_request_id
from statestore.transactions import Transaction
from tests.spark.conftest import KEY_SCHEMA, MakeTable, dataframe, key_rows

pytestmark = pytest.mark.spark

SPLITS = [1_000, 2_500, 5_000, 7_500]


def data_files(root: Path) -> list[str]:
    return [os.path.join(d, f) for d, _, files in os.walk(root) for f in files if f.endswith(".parquet")]


def test_ingest_commits_files_with_exact_row_counts_per_leaf(
    spark: SparkSession, make_table: MakeTable
) -> None:
    table = make_table(KEY_SCHEMA, SPLITS)
    rows = key_rows(5_000, seed=1)
    store = table.store()

    result = ingest(dataframe(spark, KEY_SCHEMA, rows), store, table.data, table.committer)

    state = table.store().state()
    tree = state.partition_tree
    expected = Counter(tree.leaf_for_key([key]).id for key, _, _ in rows)
    actual: Counter[str] = Counter()
    for ref in state.file_references():
        actual[ref.partition_id] += ref.number_of_rows
        assert not ref.count_approximate
        assert pq.read_metadata(table.data.path(ref.filename)).num_rows == ref.number_of_rows
    assert actual == expected
    assert result.rows == 5_000
    assert result.outcome is not None and result.outcome.transaction_number == state.transaction_number
    assert table.log_length() == 2  # the partitions, then ONE AddFiles
    # At most one file per leaf per task (the input has two Spark partitions).
    per_leaf = Counter(ref.partition_id for ref in state.file_references())
    assert all(count <= 2 for count in per_leaf.values())


def test_each_file_holds_one_leafs_rows_sorted_by_row_key_then_sort_key(
    spark: SparkSession, make_table: MakeTable
) -> None:
    table = make_table(KEY_SCHEMA, SPLITS)
    ingest(dataframe(spark, KEY_SCHEMA, key_rows(3_000, seed=2)), table.store(), table.data, table.committer)

    state = table.store().state()
    for ref in state.file_references():
        content = pq.read_table(table.data.path(ref.filename)).to_pylist()
        keys = [(r["key"], r["ts"]) for r in content]
        assert keys == sorted(keys)
        region = state.partition(ref.partition_id).region
        assert all(region.contains([r["key"]]) for r in content)


def test_ingest_with_tasks_writes_one_file_per_leaf(spark: SparkSession, make_table: MakeTable) -> None:
    table = make_table(KEY_SCHEMA, SPLITS)
    df = dataframe(spark, KEY_SCHEMA, key_rows(4_000, seed=3), partitions=4)

    result = ingest(df, table.store(), table.data, table.committer, tasks=2)

    per_leaf = Counter(ref.partition_id for ref in result.files)
    assert sorted(per_leaf) == sorted(p.id for p in table.store().state().leaf_partitions())
    assert set(per_leaf.values()) == {1}


def test_a_two_key_table_with_string_and_bytes_keys(spark: SparkSession, make_table: MakeTable) -> None:
    from statestore.model.schema import Schema

    schema = Schema.of({"name": "string", "blob": "bytes"}, values={"n": "int"})
    table = make_table(schema, ["g", "p"])
    rows = [(f"{chr(97 + i % 26)}{i}", bytes([i % 256, 7]), i) for i in range(2_000)]

    ingest(dataframe(spark, schema, rows), table.store(), table.data, table.committer)

    state = table.store().state()
    expected = Counter(state.partition_tree.leaf_for_key([name, blob]).id for name, blob, _ in rows)
    actual: Counter[str] = Counter()
    for ref in state.file_references():
        actual[ref.partition_id] += ref.number_of_rows
    assert actual == expected


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda df: df.withColumn("key", F.col("key").cast("string")), "column 'key' is string"),
        (lambda df: df.drop("value"), "missing column(s) ['value']"),
        (lambda df: df.withColumn("extra", F.lit(1)), "not in the table schema ['extra']"),
        (lambda df: df.withColumn("ts", F.col("ts").cast("int")), "column 'ts' is int"),
    ],
)
def test_a_dataframe_not_matching_the_schema_is_refused_before_anything_is_written(
    spark: SparkSession, make_table: MakeTable, change: object, message: str
) -> None:
    table = make_table(KEY_SCHEMA, SPLITS)
    df = change(dataframe(spark, KEY_SCHEMA, key_rows(100, seed=4)))  # type: ignore[operator]

    with pytest.raises(SchemaMismatchError, match="does not match the table schema") as raised:
        ingest(df, table.store(), table.data, table.committer)

    assert message in str(raised.value)
    assert data_files(Path(table.data.base)) == []
    assert table.log_length() == 1


def test_rows_with_null_row_keys_are_refused_before_anything_is_written(
    spark: SparkSession, make_table: MakeTable
) -> None:
    table = make_table(KEY_SCHEMA, SPLITS)
    rows = key_rows(100, seed=5)
    df = spark.createDataFrame(rows + [(None, 1, "x"), (None, 2, "y")], "key long, ts long, value string")

    with pytest.raises(SchemaMismatchError, match="2 row\\(s\\) with a null 'key'"):
        ingest(df, table.store(), table.data, table.committer)

    assert data_files(Path(table.data.base)) == []
    assert table.log_length() == 1


def test_a_rejected_commit_raises_and_leaves_nothing_in_the_state(
    spark: SparkSession, make_table: MakeTable
) -> None:
    table = make_table(KEY_SCHEMA, SPLITS)

    with pytest.raises(CommitRejectedError, match="read-only today"):
        ingest(
            dataframe(spark, KEY_SCHEMA, key_rows(100, seed=6)),
            table.store(),
            table.data,
            Answering(CommitReport(False, reason="the table is read-only today")),
        )

    assert not table.store().state().has_files()


class Answering:
    """A committer that answers every request with ``outcome`` and commits nothing."""

    def __init__(self, outcome: CommitReport) -> None:
        self.outcome = outcome
        self.requests: list[str | None] = []

    def commit(
        self, table_id: str, transaction: Transaction, wait: bool = True, request_id: str | None = None
    ) -> CommitReport:
        self.requests.append(request_id)
        return self.outcome

    def previous_outcome(self, table_id: str, request_id: str) -> CommitReport | None:
        return None


def test_an_outcome_still_pending_after_the_wait_raises_with_the_request_id(
    spark: SparkSession, make_table: MakeTable
) -> None:
    table = make_table(KEY_SCHEMA, SPLITS)
    pending = Answering(CommitReport(False, reason="no outcome after 1s", request_id="r-42", pending=True))

    with pytest.raises(CommitPendingError, match="no outcome yet") as raised:
        ingest(dataframe(spark, KEY_SCHEMA, key_rows(50, seed=7)), table.store(), table.data, pending)

    assert raised.value.request_id == "r-42"
    result = ingest(
        dataframe(spark, KEY_SCHEMA, key_rows(50, seed=7)), table.store(), table.data, pending, wait=False
    )
    assert not result.committed and result.outcome is not None and result.outcome.pending


def test_an_idempotency_key_derives_the_same_request_id_every_run_and_a_rerun_writes_nothing(
    spark: SparkSession, make_table: MakeTable
) -> None:
    table = make_table(KEY_SCHEMA, SPLITS)
    answering = Answering(CommitReport(True, transaction_number=2, request_id="x"))
    for _ in range(2):
        ingest(
            dataframe(spark, KEY_SCHEMA, key_rows(20, seed=8)),
            table.store(),
            table.data,
            answering,
            idempotency_key=("nightly-load", "2026-11-22"),
        )
    first, second = answering.requests
    assert first is not None and first == second
    assert first == ingest_request_id(table.table_id, "nightly-load", "2026-11-22")
    assert ingest_request_id(table.table_id, "nightly-load", "2026-11-23") != first
    assert ingest_request_id("another-table", "nightly-load", "2026-11-22") != first

    # A synchronous commit with a request id is idempotent too: its status is written with its entry.
    runs = [
        ingest(
            dataframe(spark, KEY_SCHEMA, key_rows(20, seed=8)),
            table.store(),
            table.data,
            table.committer,
            idempotency_key=("nightly-load", "2026-11-22"),
        )
        for _ in range(2)
    ]
    assert runs[0].committed and not runs[0].already_committed and runs[0].files
    assert runs[1].already_committed and runs[1].files == ()
    assert table.store().state().transaction_number == runs[0].outcome.transaction_number  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="batch id must be a string of 1-256"):
        ingest_request_id(table.table_id, "nightly-load", "")


def test_every_value_type_round_trips_exactly_including_awkward_values(
    spark: SparkSession, make_table: MakeTable
) -> None:
    from spark_client.query import query
    from statestore.model.schema import Schema

    schema = Schema.of(
        {"id": "int", "blob": "bytes"},
        sort_keys={"name": "string"},
        values={"d": "double", "f": "float", "flag": "boolean", "n": "long", "raw": "bytes"},
    )
    table = make_table(schema, [0])
    awkward_doubles = [
        float("nan"),
        float("inf"),
        float("-inf"),
        -0.0,
        5e-324,
        1.7976931348623157e308,
        0.1,
        None,
    ]
    rows = [
        (
            i - 4,
            bytes([i, 255 - i, 0]),
            ["", 'é\n"quoted"\t', "日本", None, "\\", "a" * 300, "x", "\u0000"][i],
            awkward_doubles[i],
            [0.5, float("nan"), None, -1.25, 3.0, 0.0, 1e10, -2.5][i],
            [True, False, None, True, False, True, None, False][i],
            [-(2**63), 2**63 - 1, None, 0, 1, -1, 42, 7][i],
            [b"", None, bytes(range(256)), b"\n", b"\x00", b"{}", b'"', b"z"][i],
        )
        for i in range(8)
    ]

    ingest(dataframe(spark, schema, rows), table.store(), table.data, table.committer)
    back = query(spark, table.store(), table.data).collect()

    def normalised(row: tuple[object, ...]) -> tuple[object, ...]:
        # NaN != NaN, so compare its text; bytearray vs bytes is only a container difference.
        return tuple(
            "NaN" if isinstance(v, float) and v != v else bytes(v) if isinstance(v, bytearray) else v
            for v in row
        )

    assert sorted(map(normalised, back), key=repr) == sorted(map(normalised, rows), key=repr)
    negative_zero = next(r for r in back if r[0] == -1)
    assert str(negative_zero[3]) == "-0.0"


def test_an_empty_dataframe_commits_nothing(spark: SparkSession, make_table: MakeTable) -> None:
    table = make_table(KEY_SCHEMA, SPLITS)

    result = ingest(dataframe(spark, KEY_SCHEMA, []), table.store(), table.data, table.committer)

    assert result.files == () and result.rows == 0 and result.outcome is None
    assert table.log_length() == 1
