"""Jobs running at once on one table, each with its own state store, end with every row present once."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from pyspark.sql import SparkSession

from spark_client.committer import SyncCommitter
from spark_client.compaction import compact
from spark_client.ingest import ingest
from spark_client.query import query
from tests.spark.conftest import KEY_SCHEMA, MakeTable, as_tuples, dataframe, key_rows

pytestmark = pytest.mark.spark


def run_in_threads(jobs: list[Callable[[], object]]) -> list[object]:
    """Run ``jobs`` at once (released together by a barrier); re-raise the first failure."""
    barrier = threading.Barrier(len(jobs))
    results: list[object] = [None] * len(jobs)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        barrier.wait()
        try:
            results[i] = jobs[i]()
        except BaseException as e:  # noqa: B036 - reported to the main thread below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    if errors:
        raise errors[0]
    return results


def test_two_ingests_and_a_compaction_at_once_keep_every_row_once(
    spark: SparkSession, make_table: MakeTable
) -> None:
    table = make_table(KEY_SCHEMA, [2_500, 5_000, 7_500])
    before = key_rows(2_000, seed=200) + key_rows(2_000, seed=201)
    for rows in (before[:2_000], before[2_000:]):
        ingest(dataframe(spark, KEY_SCHEMA, rows), table.store(), table.data, table.committer)
    first, second = key_rows(3_000, seed=202), key_rows(3_000, seed=203)

    def ingest_job(rows: list[tuple[object, ...]]) -> Callable[[], object]:
        def job() -> object:
            store = table.store()  # each job its own store and committer: they meet only in the log
            return ingest(
                dataframe(spark, KEY_SCHEMA, rows), store, table.data, SyncCommitter.for_store(store)
            )

        return job

    def compaction_job() -> object:
        store = table.store()
        return compact(spark, store, table.data, SyncCommitter.for_store(store))

    run_in_threads([ingest_job(first), ingest_job(second), compaction_job])

    expected = sorted(before + first + second)
    assert as_tuples(query(spark, table.store(), table.data)) == expected
    # And a compaction afterwards still loses nothing and duplicates nothing.
    compact(spark, table.store(), table.data, table.committer)
    state = table.store().state()
    assert sum(r.number_of_rows for r in state.file_references()) == len(expected)
    assert as_tuples(query(spark, table.store(), table.data)) == expected
