"""Compaction claims do not stick: a failed merge releases them, an unknown outcome leaves them for the sweep,
a resumed compaction takes over expired ones, and concurrent resumed compactions never claim a file twice
nor lose a row."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from spark_client.committer import CommitReport, SyncCommitter
from spark_client.compaction import (
    CompactionJob,
    CompactionResult,
    claim_jobs,
    commit_jobs,
    compact,
    plan_compaction_jobs,
    run_jobs,
)
from spark_client.data_store import DataStore
from spark_client.errors import CompactionFailedError
from spark_client.query import query
from statestore.codec.transaction_json import decode_entry
from statestore.engine.log_store import TransactionLogStateStore
from statestore.model import layout
from statestore.model.clock import now_millis
from statestore.services.cleanup import cleanup_table
from statestore.transactions import ReleaseClaims, ReplaceFileReferences, Transaction
from tests.invariants import replay_checking_each_entry
from tests.spark.conftest import KEY_SCHEMA, MakeTable, SparkTable, as_tuples
from tests.spark.test_compaction import SPLITS, ingest_batches
from tests.spark.test_concurrency import run_in_threads

pytestmark = pytest.mark.spark

HOUR = 60 * 60_000


def later(hours: float) -> Callable[[], int]:
    """A clock ``hours`` ahead of now: claims made now look that old to it."""
    return lambda: now_millis() + int(hours * HOUR)


def claimed_in_hours(table: SparkTable, hours: float, jobs: list[CompactionJob]) -> list[CompactionJob]:
    """Claim ``jobs`` through a writer whose clock says ``hours`` from now (log times never run backwards, so
    a claim "hours ago" is one made now and looked at hours later)."""
    store = TransactionLogStateStore(
        table.table_id, KEY_SCHEMA, table.client.log, table.client.snapshots, clock=later(hours)
    )
    claimed, lost = claim_jobs(table.table_id, SyncCommitter.for_store(store), jobs)
    assert lost == []
    return claimed


def transactions(table: SparkTable) -> list[Transaction]:
    return [decode_entry(e) for e in table.client.log.read(table.table_id, 1)]


def rows_once(spark: SparkSession, table: SparkTable, expected: list[tuple]) -> None:
    """Every expected row is in the table exactly once, by query and by the references' row counts."""
    store = table.store()
    assert as_tuples(query(spark, store, table.data)) == expected
    assert sum(r.number_of_rows for r in store.state().file_references()) == len(expected)


@dataclass(frozen=True)
class BlockedOutputs(DataStore):
    """The table's data store, but every output goes under a path whose parent is a file: writes fail."""

    def new_data_file(self, table_id: str, partition_id: str) -> str:
        blocker = f"{layout.data_prefix(table_id)}blocker"
        Path(self.path(blocker)).parent.mkdir(parents=True, exist_ok=True)
        Path(self.path(blocker)).touch()
        return f"{blocker}/{partition_id}.parquet"


def hide_an_input(table: SparkTable) -> Callable[[], None]:
    """Make one referenced data file unreadable; returns how to put it back."""
    victim = table.data.path(sorted(table.store().state().files_by_name)[0])
    os.rename(victim, victim + ".hidden")
    return lambda: os.rename(victim + ".hidden", victim)


@pytest.mark.parametrize("failure", ["an input is unreadable", "outputs are unwritable"])
def test_a_failed_merge_releases_its_claims_commits_nothing_and_a_later_run_loses_no_row(
    spark: SparkSession, make_table: MakeTable, failure: str
) -> None:
    table = make_table(KEY_SCHEMA, SPLITS)
    expected = ingest_batches(spark, table, [40, 41])
    before = table.store().state().copy()
    data, repair = table.data, (lambda: None)
    if failure == "outputs are unwritable":
        data = BlockedOutputs(table.data.kind, table.data.base)
    else:
        repair = hide_an_input(table)

    with pytest.raises(CompactionFailedError, match="Nothing was committed, their claims were released") as e:
        compact(spark, table.store(), data, table.committer)

    assert "failed while merging 4 job(s)" in str(e.value)
    state = table.store().state()
    assert state.claimed_references() == {}
    assert {f: f_.references for f, f_ in state.files_by_name.items()}.keys() == before.files_by_name.keys()
    assert [type(t) for t in transactions(table)][-1] is ReleaseClaims
    assert not any(isinstance(t, ReplaceFileReferences) for t in transactions(table))
    repair()
    assert len(compact(spark, table.store(), table.data, table.committer).committed) == 4
    rows_once(spark, table, expected)


@dataclass
class ReplaceLeftPending:
    """A committer whose ReplaceFileReferences requests get no outcome in time (the queue is slow): they are
    held, as the queue would, and can be delivered later."""

    inner: SyncCommitter
    held: list[tuple[str, Transaction]] = field(default_factory=list)

    def commit(
        self, table_id: str, transaction: Transaction, wait: bool = True, request_id: str | None = None
    ) -> CommitReport:
        if isinstance(transaction, ReplaceFileReferences):
            self.held.append((table_id, transaction))
            return CommitReport(False, reason="no outcome after 120s", request_id="r", pending=True)
        return self.inner.commit(table_id, transaction, wait, request_id)

    def previous_outcome(self, table_id: str, request_id: str) -> CommitReport | None:
        return self.inner.previous_outcome(table_id, request_id)

    def deliver(self) -> list[CommitReport]:
        return [self.inner.commit(table_id, txn) for table_id, txn in self.held]


def test_an_unknown_outcome_keeps_claims_and_outputs_so_a_late_replace_still_lands(
    spark: SparkSession, make_table: MakeTable
) -> None:
    table = make_table(KEY_SCHEMA, SPLITS)
    expected = ingest_batches(spark, table, [42, 43])
    slow = ReplaceLeftPending(table.committer)

    result = compact(spark, table.store(), table.data, slow)

    assert (result.committed, result.lost, len(result.pending)) == ((), (), 4)
    claims = table.store().state().claimed_references()
    assert set(claims) == {job.job_id for job in result.pending}
    assert all(table.data.exists(job.output_file) for job in result.pending)
    assert not any(isinstance(t, ReleaseClaims) for t in transactions(table))
    # The replace lands after all: its claims were kept, so it commits.
    assert [o.committed and not o.rejected_parts for o in slow.deliver()] == [True]
    assert table.store().state().claimed_references() == {}
    rows_once(spark, table, expected)


def test_claims_whose_replace_never_lands_are_swept_once_expired_and_compacted_again(
    spark: SparkSession, make_table: MakeTable
) -> None:
    table = make_table(KEY_SCHEMA, SPLITS)
    expected = ingest_batches(spark, table, [44, 45])
    stuck = compact(spark, table.store(), table.data, ReplaceLeftPending(table.committer))
    info = table.client.get_table(table.table_id)

    young = cleanup_table(table.store(), info, table.client.snapshots, table.client.blobs, now=later(1)())
    nothing = compact(spark, table.store(), table.data, table.committer)  # the claims still hold the files
    expired = cleanup_table(table.store(), info, table.client.snapshots, table.client.blobs, now=later(14)())

    assert young.released_jobs == () and nothing.committed == ()
    assert set(expired.released_jobs) == {job.job_id for job in stuck.pending}
    assert len(compact(spark, table.store(), table.data, table.committer).committed) == 4
    rows_once(spark, table, expected)


def test_resume_takes_over_expired_claims_only_and_the_dead_jobs_late_replace_is_rejected(
    spark: SparkSession, make_table: MakeTable
) -> None:
    table = make_table(KEY_SCHEMA, SPLITS)
    expected = ingest_batches(spark, table, [46, 47])
    jobs = plan_compaction_jobs(table.store().state(), table.data, table.table_id)
    dead_jobs = claimed_in_hours(table, 0, jobs[:2])
    running_jobs = claimed_in_hours(table, 13, jobs[2:])
    dead_outputs = run_jobs(spark, KEY_SCHEMA, table.data, dead_jobs)  # ...and its driver dies here

    # 14 hours after the dead job claimed, one after the running one did (the expiry is 13 hours).
    plain = compact(spark, table.store(), table.data, table.committer, clock=later(14))
    resumed = compact(spark, table.store(), table.data, table.committer, resume=True, clock=later(14))

    assert plain.committed == ()
    assert {f.job.partition_id for f in resumed.committed} == {j.partition_id for j in dead_jobs}
    # The claims of the job that started an hour ago are not expired: it is left to run and commit.
    assert set(table.store().state().claimed_references()) == {j.job_id for j in running_jobs}
    finished = run_jobs(spark, KEY_SCHEMA, table.data, running_jobs)
    assert len(commit_jobs(table.store(), table.data, table.committer, finished)[0]) == 2
    # The dead job's replace, arriving after all, is refused: its inputs were taken over and compacted.
    committed, lost, _ = commit_jobs(table.store(), table.data, table.committer, dead_outputs)
    assert committed == [] and len(lost) == 2
    assert all(why.startswith("not committed: AllJobsRejectedError") for _, why in lost)
    assert not any(table.data.exists(f.job.output_file) for f in dead_outputs)
    rows_once(spark, table, expected)


def test_concurrent_resumed_compactions_never_claim_a_file_twice_nor_lose_a_row(
    spark: SparkSession, make_table: MakeTable
) -> None:
    table = make_table(KEY_SCHEMA, SPLITS)
    expected = ingest_batches(spark, table, [48, 49, 50])
    state = table.store().state()
    dead_jobs = plan_compaction_jobs(state, table.data, table.table_id, max_files=2)[:2]
    claimed_in_hours(table, 0, dead_jobs)  # two leaves hold claims of a job that died

    def resumed_compaction() -> CompactionResult:
        store = table.store()  # each its own store and committer: they meet only in the log
        return compact(
            spark,
            store,
            table.data,
            SyncCommitter.for_store(store),
            min_files=1,
            resume=True,
            clock=later(14),  # 14 hours later: the dead job's claims have expired
        )

    results = run_in_threads([resumed_compaction, resumed_compaction])

    committed = [f for r in results if isinstance(r, CompactionResult) for f in r.committed]
    inputs = Counter((name, f.job.partition_id) for f in committed for name in f.job.input_files)
    assert inputs and max(inputs.values()) == 1  # no reference was compacted by two jobs
    taken_over = {(n, j.partition_id) for j in dead_jobs for n in j.input_files}
    assert taken_over <= set(inputs)
    # Every log entry was valid against the state before it: no AssignJobIds took a live claim.
    final = replay_checking_each_entry(table.client.log, table.table_id, KEY_SCHEMA)
    assert final.claimed_references() == {}
    rows_once(spark, table, expected)
