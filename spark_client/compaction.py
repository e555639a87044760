"""Compaction: merge each busy leaf partition's files into one sorted file.

One run:

1. **Split references down**: references on partitions that are no longer leaves (left there by a split,
   or by an ingest that raced one) are replaced by references on the leaves below them, with approximate
   row counts — one SplitFileReferences commit. Their rows are then compacted into the leaves.
2. **Plan**: a job per leaf with at least ``min_files`` unassigned references (up to ``max_files`` each).
3. **Claim**: AssignJobIds commits (all jobs at once, or one per job if that is rejected). The commit
   decides which job wins a file: a job whose claim is rejected (another compaction took a file first)
   stops here without writing anything.
4. **Merge**: one Spark task per claimed job streams its input files, restricted to the partition's
   region (a file referenced from several partitions holds rows of the others too), through a k-way merge
   by row and sort keys into one file with its exact row count. Each input is already sorted, so the task
   holds a batch per input, not the partition (:mod:`spark_client.merge`).
5. **Commit**: one ReplaceFileReferences for all finished jobs; each job is checked on its own.

A job whose replace is rejected leaves no trace in the state: its output file was never added, so nothing
references it. The job deletes it at once; if the job dies first (or its outcome is unknown because it did
not wait), the file is an orphan under the table's data prefix that
:func:`spark_client.gc.delete_orphan_files` finds — an object the state does not name, older than any job
can run — and deletes. Input files replaced by a compaction keep no references and are deleted by the
store's own garbage collection after its delay.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from pyspark.sql import SparkSession

from spark_client.committer import CommitOutcome, Committer
from spark_client.data_store import DataStore
from spark_client.file_io import merge_files
from statestore.engine import TransactionLogStateStore
from statestore.files import FileReference
from statestore.partitions import Region
from statestore.schema import Schema
from statestore.state import TableState
from statestore.transactions import (
    AssignJobIdRequest,
    AssignJobIds,
    ReplaceFileReferences,
    ReplaceFileReferencesJob,
    SplitFileReferenceRequest,
    SplitFileReferences,
)


@dataclass(frozen=True)
class CompactionJob:
    """Merge ``input_files`` (their references in ``partition_id``) into ``output_file``."""

    job_id: str
    partition_id: str
    region: Region
    input_files: tuple[str, ...]
    output_file: str


@dataclass(frozen=True)
class FinishedJob:
    job: CompactionJob
    rows: int


@dataclass(frozen=True)
class CompactionResult:
    """What a compaction run did: references split down, jobs committed, jobs that lost, time taken."""

    references_split: int
    committed: tuple[FinishedJob, ...]
    lost: tuple[tuple[CompactionJob, str], ...]  # (job, why) for jobs that stopped or were rejected
    seconds: float


# --- 1. split references down -----------------------------------------------------------------------


def plan_reference_splits(state: TableState) -> list[SplitFileReferenceRequest]:
    """Requests moving every unassigned reference on a non-leaf partition to the leaves below it.

    Row counts are shared out evenly and marked approximate (the exact count per leaf would need reading
    the file); compaction rewrites them exactly.
    """
    tree = state.partition_tree
    requests = []
    for ref in state.file_references():
        partition = state.partition(ref.partition_id)
        if partition.leaf or ref.job_id is not None:
            continue
        leaves = sorted(p.id for p in tree.overlapping(partition.region, leaves_only=True))
        table_file = state.file(ref.filename)
        leaves = [leaf for leaf in leaves if table_file.reference_in(leaf) is None]
        if not leaves:
            continue
        share, extra = divmod(ref.number_of_rows, len(leaves))
        new = tuple(
            FileReference(
                ref.filename,
                leaf,
                share + (1 if i < extra else 0),
                count_approximate=True,
                only_contains_data_for_this_partition=False,
            )
            for i, leaf in enumerate(leaves)
        )
        requests.append(SplitFileReferenceRequest(ref.filename, ref.partition_id, new))
    return requests


def split_references_down(store: TransactionLogStateStore, committer: Committer) -> int:
    """Commit :func:`plan_reference_splits`; returns how many references moved (0 if rejected or none)."""
    requests = plan_reference_splits(store.state())
    if not requests:
        return 0
    outcome = committer.commit(store.table_id, SplitFileReferences(tuple(requests)))
    return len(requests) if outcome.committed else 0


# --- 2. plan and 3. claim ---------------------------------------------------------------------------


def plan_compaction_jobs(
    state: TableState, data: DataStore, table_id: str, min_files: int = 2, max_files: int = 32
) -> list[CompactionJob]:
    """A job for each leaf with at least ``min_files`` unassigned references (its oldest ``max_files``)."""
    if min_files < 1 or max_files < min_files:
        raise ValueError(f"need 1 <= min_files <= max_files, got {min_files} and {max_files}")
    by_leaf: dict[str, list[FileReference]] = {}
    for ref in state.references_with_no_job():
        if state.partition(ref.partition_id).leaf:
            by_leaf.setdefault(ref.partition_id, []).append(ref)
    jobs = []
    for partition_id, refs in sorted(by_leaf.items()):
        if len(refs) < min_files:
            continue
        chosen = sorted(refs, key=lambda r: (r.last_update_time, r.filename))[:max_files]
        jobs.append(
            CompactionJob(
                job_id=str(uuid.uuid4()),
                partition_id=partition_id,
                region=state.partition(partition_id).region,
                input_files=tuple(r.filename for r in chosen),
                output_file=data.new_data_file(table_id, partition_id),
            )
        )
    return jobs


def claim_jobs(
    table_id: str, committer: Committer, jobs: Iterable[CompactionJob]
) -> tuple[list[CompactionJob], list[tuple[CompactionJob, str]]]:
    """Commit AssignJobIds for the jobs; returns ``(claimed, lost with the reason)``.

    All jobs are claimed in one commit first (the usual case: nobody else is compacting these files). An
    AssignJobIds fails whole if any file is taken, so if that one is rejected each job is claimed on its
    own, and only the jobs that lost a file stop.
    """
    jobs = list(jobs)
    if not jobs:
        return [], []
    requests = tuple(AssignJobIdRequest(job.job_id, job.partition_id, job.input_files) for job in jobs)
    if len(jobs) > 1 and committer.commit(table_id, AssignJobIds(requests), wait=True).committed:
        return jobs, []
    claimed, lost = [], []
    for job, request in zip(jobs, requests, strict=True):
        outcome = committer.commit(table_id, AssignJobIds((request,)), wait=True)
        if outcome.committed:
            claimed.append(job)
        else:
            lost.append((job, f"not claimed: {outcome.reason}"))
    return claimed, lost


# --- 4. merge ---------------------------------------------------------------------------------------


def merge_job(schema: Schema, data: DataStore, job: CompactionJob) -> FinishedJob:
    """Merge the job's inputs, within its partition's region, into its output file; count its rows exactly.

    A streaming merge of the sorted inputs (:func:`spark_client.file_io.merge_files`): a task's memory
    does not grow with the partition's size. If it fails, no output file is left behind.
    """
    parts = [(filename, job.region) for filename in job.input_files]
    rows = merge_files(data, schema, parts, job.output_file)
    return FinishedJob(job, rows)


def run_jobs(
    spark: SparkSession, schema: Schema, data: DataStore, jobs: list[CompactionJob]
) -> list[FinishedJob]:
    """Run claimed jobs in Spark, one task each."""
    if not jobs:
        return []

    def run(items: Iterable[CompactionJob]) -> Iterator[FinishedJob]:
        for job in items:
            yield merge_job(schema, data, job)

    return spark.sparkContext.parallelize(jobs, len(jobs)).mapPartitions(run).collect()


# --- 5. commit --------------------------------------------------------------------------------------


def commit_jobs(
    store: TransactionLogStateStore, data: DataStore, committer: Committer, finished: list[FinishedJob]
) -> tuple[list[FinishedJob], list[tuple[CompactionJob, str]], CommitOutcome | None]:
    """Commit finished jobs as one ReplaceFileReferences; returns ``(committed, lost, outcome)``.

    Which jobs went in is read back from the state (their output is referenced), so it is right whichever
    committer sent the request. The outputs of lost jobs are deleted (nothing references them).
    """
    if not finished:
        return [], [], None
    transaction = ReplaceFileReferences(
        tuple(
            ReplaceFileReferencesJob(
                f.job.job_id,
                f.job.partition_id,
                f.job.input_files,
                FileReference(f.job.output_file, f.job.partition_id, f.rows),
            )
            for f in finished
        )
    )
    outcome = committer.commit(store.table_id, transaction, wait=True)
    if outcome.pending:  # no outcome yet: we cannot tell; orphan cleanup handles a rejected one later
        return [], [], outcome
    files = store.state().files_by_name
    committed = [f for f in finished if outcome.committed and f.job.output_file in files]
    lost = [
        (f.job, f"not committed: {outcome.reason or dict(outcome.rejected_parts) or 'skipped by the store'}")
        for f in finished
        if f not in committed
    ]
    data.delete([job.output_file for job, _ in lost])
    return committed, lost, outcome


def compact(
    spark: SparkSession,
    store: TransactionLogStateStore,
    data: DataStore,
    committer: Committer,
    *,
    min_files: int = 2,
    max_files: int = 32,
) -> CompactionResult:
    """One compaction run over the table (see the module docstring for the steps)."""
    started = time.monotonic()
    moved = split_references_down(store, committer)
    jobs = plan_compaction_jobs(store.state(), data, store.table_id, min_files, max_files)
    claimed, lost = claim_jobs(store.table_id, committer, jobs)
    finished = run_jobs(spark, store.schema, data, claimed)
    committed, rejected, _ = commit_jobs(store, data, committer, finished)
    return CompactionResult(moved, tuple(committed), tuple(lost + rejected), time.monotonic() - started)
