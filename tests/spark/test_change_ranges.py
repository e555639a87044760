"""Bounded incremental reads and time travel by timestamp through ``format("statestore-table")``, each result
compared with plain Spark over the same rows (counts, then the exact rows both ways), across a compaction and
a split inside the range.

One table is built for the module: four appends, with compactions and a split between them, so every range
below has transactions that add rows and transactions that add none.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_client.changes_reader import COMMIT_TIME_COLUMN, RANGE_METADATA, TRANSACTION_COLUMN
from spark_client.columns import spark_schema
from spark_client.committer import SyncCommitter
from spark_client.compaction import compact
from spark_client.data_store import DataStore
from spark_client.datasource import FORMAT
from spark_client.log_times import format_time
from spark_client.splitting import split_partitions
from statestore.codec.transaction_json import decode_entry
from tests.spark.conftest import KEY_SCHEMA, Instance, dataframe, key_rows

pytestmark = [pytest.mark.spark, pytest.mark.e2e]

Row = tuple[Any, ...]


@dataclass
class History:
    """The module's table: its options, each append's rows by the transaction that added them, and every
    transaction's type and time."""

    options: dict[str, str]
    batches: dict[int, list[Row]]
    types: dict[int, str]
    times: dict[int, int]

    def read(self, spark: SparkSession, **extra: Any) -> DataFrame:
        reader = spark.read.format(FORMAT).options(**self.options)
        return reader.options(**{k: str(v) for k, v in extra.items()}).load()

    def added(self, start: int, end: int) -> list[Row]:
        return [row for number, rows in self.batches.items() if start <= number <= end for row in rows]

    def number_of(self, kind: str) -> list[int]:
        return [n for n, t in self.types.items() if t == kind]


@pytest.fixture(scope="module")
def history(
    spark: SparkSession, source_instance: Instance, tmp_path_factory: pytest.TempPathFactory
) -> History:
    client = source_instance.client
    name = f"ranges-{tmp_path_factory.mktemp('ranges').name}"
    info = client.create_table(name, KEY_SCHEMA, [5_000])
    data_dir: Path = tmp_path_factory.mktemp("ranges-data")
    options = {
        "table": name,
        "resources": source_instance.resources.to_json(),
        "endpoint": source_instance.endpoint_url,
        "data": str(data_dir),
    }
    store = client.state_store(info.table_id)
    committer = SyncCommitter(client.state_store)
    data = DataStore.local(data_dir)
    batches: dict[int, list[Row]] = {}

    def append(seed: int) -> None:
        rows = key_rows(800, seed=seed)
        dataframe(spark, KEY_SCHEMA, rows).write.format(FORMAT).options(**options, committer="sync").mode(
            "append"
        ).save()
        batches[store.read_log_to_end()] = rows

    append(500)
    append(501)
    assert len(compact(spark, store, data, committer).committed) == 2
    split = split_partitions(spark, store, data, committer, max_rows=500)
    assert [d.outcome is not None and d.outcome.committed for d in split] == [True, True]
    append(502)  # into the four leaves the splits made
    client.create_snapshot(info.table_id)
    assert len(compact(spark, store, data, committer).committed) == 4  # splits the references down first
    append(503)
    entries = list(client.log.read(info.table_id, 1))
    types = {e.transaction_number: decode_entry(e).TYPE for e in entries}
    times = {e.transaction_number: e.update_time for e in entries}
    assert sorted(t for n, t in types.items() if n not in batches) == sorted(
        ["InitialisePartitions", "AssignJobIds", "ReplaceFileReferences", "SplitPartition", "SplitPartition"]
        + ["SplitFileReferences", "AssignJobIds", "ReplaceFileReferences"]
    )
    return History(options, batches, types, times)


def assert_same_rows(spark: SparkSession, actual: DataFrame, expected: Sequence[Row]) -> None:
    """``actual`` holds exactly ``expected``'s rows (as a multiset), as plain Spark counts and compares
    them: the counts first, then the rows of each that the other lacks."""
    plain = spark.createDataFrame(list(expected), spark_schema(KEY_SCHEMA))
    table_columns = actual.select(*plain.columns)
    assert table_columns.count() == plain.count() == len(expected)
    assert table_columns.exceptAll(plain).count() == 0
    assert plain.exceptAll(table_columns).count() == 0


def test_a_range_over_everything_returns_each_row_added_once_tagged_with_its_transaction(
    spark: SparkSession, history: History
) -> None:
    df = history.read(spark, startingTransaction=1)

    assert_same_rows(spark, df, history.added(1, max(history.types)))
    tagged = {
        r[TRANSACTION_COLUMN]: r["n"]
        for r in df.groupBy(TRANSACTION_COLUMN).agg(F.count("*").alias("n")).collect()
    }
    assert tagged == {number: len(rows) for number, rows in history.batches.items()}
    times = {
        r[0]: r[1]
        for r in df.select(TRANSACTION_COLUMN, F.unix_millis(COMMIT_TIME_COLUMN)).distinct().collect()
    }
    assert times == {number: history.times[number] for number in history.batches}


def test_a_range_across_a_compaction_and_a_split_returns_only_the_rows_its_appends_added(
    spark: SparkSession, history: History
) -> None:
    second, third = sorted(history.batches)[1:3]
    assert history.number_of("SplitPartition")[0] in range(second, third)  # the split is inside

    df = history.read(spark, startingTransaction=second, endingTransaction=third)

    assert_same_rows(spark, df, history.added(second, third))
    summary = df.schema[TRANSACTION_COLUMN].metadata[RANGE_METADATA]
    assert (summary["startingTransaction"], summary["endingTransaction"]) == (second, third)
    assert summary["rowsAdded"] == 1_600 and summary["transactionsByType"]["AddFiles"]["transactions"] == 2
    for kind in ("AssignJobIds", "ReplaceFileReferences", "SplitPartition"):
        assert summary["transactionsByType"][kind]["rowsAdded"] == 0
    assert "ReplaceFileReferences" in summary["note"] and "add none" in summary["note"]


def test_a_range_of_only_compactions_and_splits_is_empty_and_says_why(
    spark: SparkSession, history: History
) -> None:
    first, second, third = sorted(history.batches)[:3]
    start, end = second + 1, third - 1  # the compaction and the splits between the second and third appends

    df = history.read(spark, startingTransaction=start, endingTransaction=end)

    assert_same_rows(spark, df, [])
    summary = df.schema[TRANSACTION_COLUMN].metadata[RANGE_METADATA]
    assert summary["rowsAdded"] == 0 and summary["filesAdded"] == 0
    assert set(summary["transactionsByType"]) == {"AssignJobIds", "ReplaceFileReferences", "SplitPartition"}
    assert "a compaction or a split rewrites or moves rows already in the table" in summary["note"]


def test_consecutive_ranges_add_up_to_the_whole_table_as_a_plain_read_gives_it(
    spark: SparkSession, history: History
) -> None:
    latest = max(history.types)
    cuts = [
        1,
        history.number_of("SplitPartition")[0],
        history.number_of("SplitFileReferences")[0],
        latest + 1,
    ]
    pieces = [
        history.read(spark, startingTransaction=a, endingTransaction=b - 1)
        for a, b in itertools.pairwise(cuts)
    ]
    union = pieces[0].unionByName(pieces[1]).unionByName(pieces[2])
    whole = history.read(spark)

    assert_same_rows(spark, union, history.added(1, latest))
    assert_same_rows(spark, whole, history.added(1, latest))


def test_a_range_by_timestamps_is_the_range_of_the_transactions_committed_in_it(
    spark: SparkSession, history: History
) -> None:
    second, third = sorted(history.batches)[1:3]
    start_time = history.times[second - 1] + 1  # just after the transaction before the second append
    end_time = history.times[third]

    by_time = history.read(spark, startingTimestamp=format_time(start_time), endingTimestamp=str(end_time))

    assert_same_rows(spark, by_time, history.added(second, third))
    summary = by_time.schema[TRANSACTION_COLUMN].metadata[RANGE_METADATA]
    assert (summary["startingTransaction"], summary["endingTransaction"]) == (second, third)
    after_all = history.read(spark, startingTimestamp=str(history.times[max(history.types)] + 1))
    assert_same_rows(spark, after_all, [])


def test_a_range_with_a_region_returns_the_rows_added_in_the_range_within_the_region(
    spark: SparkSession, history: History
) -> None:
    second = sorted(history.batches)[1]
    latest = max(history.types)

    df = history.read(spark, startingTransaction=second, region=json.dumps({"key": [3_000, 7_000]}))

    assert_same_rows(spark, df, [r for r in history.added(second, latest) if 3_000 <= r[0] < 7_000])


def test_time_travel_by_timestamp_reads_the_table_as_it_was_then_as_by_transaction_number(
    spark: SparkSession, history: History
) -> None:
    first, second, third, fourth = sorted(history.batches)
    for moment, expected in [
        (history.times[first], history.added(1, first)),  # the first append's own time
        (history.times[second + 1], history.added(1, second)),  # mid-compaction: nothing more added
        (history.times[third] + 0, history.added(1, third)),
        (history.times[fourth] + 60_000, history.added(1, fourth)),  # after the latest: the latest
    ]:
        by_time = history.read(spark, timestampAsOf=format_time(moment))
        assert_same_rows(spark, by_time, expected)
    by_number = history.read(spark, asOf=second + 1)
    assert_same_rows(spark, by_number, history.added(1, second))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"endingTransaction": 3}, "need a start: add 'startingTransaction' or 'startingTimestamp'"),
        (
            {"startingTransaction": 5, "endingTransaction": 3},
            "'startingTransaction' (5) is after 'endingTransaction' (3)",
        ),
        (
            {"startingTransaction": 1, "endingTransaction": 999},
            "option 'endingTransaction' is 999, but table",
        ),
        ({"startingTransaction": 1, "asOf": 2}, "drop 'asOf' / 'timestampAsOf'"),
        ({"asOf": 2, "timestampAsOf": "0"}, "give one of the options 'asOf' and 'timestampAsOf'"),
        ({"timestampAsOf": "2026-01-01 10:00:00"}, "which has no time zone: add one"),
        ({"timestampAsOf": "yesterday"}, "give an ISO 8601 time with its zone"),
        ({"timestampAsOf": "2000-01-01T00:00:00Z"}, "did not exist yet at 2000-01-01T00:00:00.000Z"),
        ({"startingTransaction": 0}, "option 'startingTransaction' must be an integer >= 1"),
    ],
    ids=lambda v: "-".join(v) if isinstance(v, dict) else None,
)
def test_a_wrong_range_or_time_is_refused_naming_the_options(
    spark: SparkSession, history: History, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(Exception, match=message.replace("(", r"\(").replace(")", r"\)")):
        history.read(spark, **options).count()
