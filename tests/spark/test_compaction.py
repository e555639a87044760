"""Compaction keeps every row exactly, leaves one file per compacted leaf; a losing job leaves no trace."""

from __future__ import annotations

from collections import Counter

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from spark_client.compaction import (
    claim_jobs,
    commit_jobs,
    compact,
    plan_compaction_jobs,
    run_jobs,
)
from spark_client.gc import find_orphan_files
from spark_client.ingest import ingest
from spark_client.query import query
from spark_client.splitting import split_partitions
from statestore.transactions import AddFiles, AssignJobIdRequest, AssignJobIds
from tests.builders import STRING_SCHEMA, commit, new_state, ref
from tests.spark.conftest import KEY_SCHEMA, MakeTable, SparkTable, as_tuples, dataframe, key_rows

pytestmark = pytest.mark.spark

SPLITS = [2_500, 5_000, 7_500]


def ingest_batches(
    spark: SparkSession, table: SparkTable, seeds: list[int], rows: int = 1_500
) -> list[tuple]:
    everything: list[tuple] = []
    for seed in seeds:
        batch = key_rows(rows, seed=seed)
        everything.extend(batch)
        ingest(dataframe(spark, KEY_SCHEMA, batch), table.store(), table.data, table.committer)
    return sorted(everything)


def test_compaction_preserves_every_row_and_leaves_one_sorted_file_per_leaf(
    spark: SparkSession, make_table: MakeTable
) -> None:
    table = make_table(KEY_SCHEMA, SPLITS)
    expected = ingest_batches(spark, table, [20, 21, 22])
    store = table.store()
    leaves = {p.id for p in store.state().leaf_partitions()}

    result = compact(spark, store, table.data, table.committer)

    state = table.store().state()
    assert {f.job.partition_id for f in result.committed} == leaves
    assert result.lost == ()
    by_leaf = state.references_by_partition()
    assert set(by_leaf) == leaves and all(len(refs) == 1 for refs in by_leaf.values())
    for refs in by_leaf.values():
        content = pq.read_table(table.data.path(refs[0].filename)).to_pylist()
        assert len(content) == refs[0].number_of_rows and not refs[0].count_approximate
        keys = [(r["key"], r["ts"]) for r in content]
        assert keys == sorted(keys)
    assert as_tuples(query(spark, store, table.data)) == expected
    # The replaced inputs stay in the state without references until garbage collection.
    assert len(state.unreferenced_files()) == sum(len(f.job.input_files) for f in result.committed)


def test_a_job_that_loses_the_claim_writes_nothing(spark: SparkSession, make_table: MakeTable) -> None:
    table = make_table(KEY_SCHEMA, SPLITS)
    ingest_batches(spark, table, [23, 24])
    store = table.store()
    state = store.state()
    first = plan_compaction_jobs(state, table.data, table.table_id)
    second = plan_compaction_jobs(state, table.data, table.table_id)  # a racing run, same view of the state

    won, _ = claim_jobs(table.table_id, table.committer, first)
    claimed, lost = claim_jobs(table.table_id, table.committer, second)

    assert len(won) == len(first) and claimed == []
    assert len(lost) == len(second) and all("already assigned to job" in why for _, why in lost)
    assert run_jobs(spark, KEY_SCHEMA, table.data, claimed) == []
    assert not any(table.data.exists(job.output_file) for job, _ in lost)


def test_a_rejected_replace_leaves_its_output_unreferenced_and_deleted(
    spark: SparkSession, make_table: MakeTable
) -> None:
    table = make_table(KEY_SCHEMA, SPLITS)
    expected = ingest_batches(spark, table, [25, 26])
    store = table.store()
    jobs = plan_compaction_jobs(store.state(), table.data, table.table_id)
    claimed, _ = claim_jobs(table.table_id, table.committer, jobs)
    finished = run_jobs(spark, KEY_SCHEMA, table.data, claimed)
    # Another compaction commits the first job's replacement first (same job id, another output).
    twin = type(finished[0])(
        type(finished[0].job)(
            **{**finished[0].job.__dict__, "output_file": finished[0].job.output_file + ".twin"}
        ),
        finished[0].rows,
    )
    pq.write_table(
        pq.read_table(table.data.path(finished[0].job.output_file)), table.data.path(twin.job.output_file)
    )
    commit_jobs(table.store(), table.data, table.committer, [twin])

    committed, lost, _ = commit_jobs(store, table.data, table.committer, finished)

    assert [job.job_id for job, _ in lost] == [finished[0].job.job_id]
    assert len(committed) == len(finished) - 1
    state = table.store().state()
    assert finished[0].job.output_file not in state.files_by_name
    assert not table.data.exists(finished[0].job.output_file)
    assert as_tuples(query(spark, store, table.data)) == expected


def test_orphans_of_a_job_that_died_are_found_by_listing_against_the_state(
    spark: SparkSession, make_table: MakeTable
) -> None:
    table = make_table(KEY_SCHEMA, SPLITS)
    ingest_batches(spark, table, [27, 28])
    store = table.store()
    jobs = plan_compaction_jobs(store.state(), table.data, table.table_id)
    claimed, _ = claim_jobs(table.table_id, table.committer, jobs)
    finished = run_jobs(spark, KEY_SCHEMA, table.data, claimed)  # ...and the job dies before committing

    assert find_orphan_files(store, table.data, min_age_ms=10**9) == []  # too young to be sure
    assert sorted(find_orphan_files(store, table.data, min_age_ms=0)) == sorted(
        f.job.output_file for f in finished
    )


def test_after_a_split_compaction_moves_references_down_and_queries_see_every_row(
    spark: SparkSession, make_table: MakeTable
) -> None:
    table = make_table(KEY_SCHEMA, [5_000])
    expected = ingest_batches(spark, table, [29, 30], rows=2_000)
    store = table.store()

    decisions = split_partitions(spark, store, table.data, table.committer, max_rows=1_000)

    assert len(decisions) == 2 and all(d.outcome is not None and d.outcome.committed for d in decisions)
    state = table.store().state()
    assert len(state.leaf_partitions()) == 4
    assert as_tuples(query(spark, store, table.data)) == expected
    # Every reference still sits on a partition that is no longer a leaf.
    references_before = list(state.file_references())
    assert all(not state.partition(r.partition_id).leaf for r in references_before)

    result = compact(spark, store, table.data, table.committer, min_files=1)

    state = table.store().state()
    assert result.references_split == len(references_before)
    assert all(state.partition(r.partition_id).leaf for r in state.file_references())
    assert Counter(r.partition_id for r in state.file_references()) == Counter(
        {p.id: 1 for p in state.leaf_partitions()}
    )
    assert sum(r.number_of_rows for r in state.file_references()) == len(expected)
    assert as_tuples(query(spark, store, table.data)) == expected


def test_split_points_are_medians_so_both_children_get_rows(
    spark: SparkSession, make_table: MakeTable
) -> None:
    table = make_table(KEY_SCHEMA)
    rows = [(k, 0, "x") for k in [5] * 50 + list(range(100, 150))]
    ingest(dataframe(spark, KEY_SCHEMA, rows), table.store(), table.data, table.committer)

    (decision,) = split_partitions(spark, table.store(), table.data, table.committer, max_rows=10)

    assert decision.split_point == 100  # the median is 5, the smallest value: nudged to the next one up
    constant = make_table(KEY_SCHEMA)
    ingest(
        dataframe(spark, KEY_SCHEMA, [(7, i, "x") for i in range(20)]),
        constant.store(),
        constant.data,
        constant.committer,
    )
    (unsplittable,) = split_partitions(
        spark, constant.store(), constant.data, constant.committer, max_rows=10
    )
    assert unsplittable.split_point is None and unsplittable.outcome is None


def test_only_the_jobs_that_lost_a_file_stop_when_claims_race(
    spark: SparkSession, make_table: MakeTable
) -> None:
    table = make_table(KEY_SCHEMA, SPLITS)
    expected = ingest_batches(spark, table, [31, 32])
    state = table.store().state()
    other_run = plan_compaction_jobs(state, table.data, table.table_id)[:1]
    this_run = plan_compaction_jobs(state, table.data, table.table_id)
    claim_jobs(table.table_id, table.committer, other_run)

    claimed, lost = claim_jobs(table.table_id, table.committer, this_run)

    assert [job.partition_id for job, _ in lost] == [other_run[0].partition_id]
    assert len(claimed) == len(this_run) - 1
    finished = run_jobs(spark, KEY_SCHEMA, table.data, claimed)
    committed, rejected, _ = commit_jobs(table.store(), table.data, table.committer, finished)
    assert len(committed) == len(claimed) and rejected == []
    assert as_tuples(query(spark, table.store(), table.data)) == expected


class NamedOutputs:
    """The one thing the planner asks of a data store: a new output file's name."""

    def new_data_file(self, table_id: str, partition_id: str) -> str:
        return f"tables/{table_id}/data/{partition_id}/out.parquet"


def test_a_job_takes_a_leafs_oldest_unassigned_files_first_then_by_name() -> None:
    state = new_state(STRING_SCHEMA, ["m"])
    # p1: the oldest file is claimed; of the others two share the oldest time, and the newest has the name
    # that sorts first.
    commit(state, AddFiles((ref("p1-x", "p1"),)), update_time=500)
    commit(state, AddFiles((ref("p1-z", "p1"), ref("p1-b", "p1"))), update_time=1_000)
    commit(state, AddFiles((ref("p1-c", "p1"),)), update_time=2_000)
    commit(state, AddFiles((ref("p1-a", "p1"),)), update_time=3_000)
    commit(state, AssignJobIds((AssignJobIdRequest("other", "p1", ("p1-x",)),)), update_time=4_000)
    commit(state, AddFiles((ref("p2-only", "p2"),)), update_time=1_000)  # too few files for a job

    [job] = plan_compaction_jobs(state, NamedOutputs(), "t", min_files=2, max_files=3)  # type: ignore[arg-type]

    assert job.partition_id == "p1" and job.region == state.partition("p1").region
    assert job.input_files == ("p1-b", "p1-z", "p1-c")
    assert job.output_file == "tables/t/data/p1/out.parquet"
