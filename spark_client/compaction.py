"""Compaction: merge each busy leaf partition's files into one sorted file.

One run:

1. **Split references down**: references on partitions that are no longer leaves (left there by a split,
   or by an ingest that raced one) are replaced by references on the leaves below them, with approximate
   row counts — one SplitFileReferences commit. Their rows are then compacted into the leaves.
2. **Plan**: a job per leaf with at least ``min_files`` unassigned references (up to ``max_files`` each).
   With ``resume``, references whose claim is older than ``claim_expiry_ms`` count as unassigned: their
   job is presumed dead.
3. **Claim**: AssignJobIds commits (all jobs at once, or one per job if that is rejected). The commit
   decides which job wins a file: a job whose claim is rejected (another compaction took a file first)
   stops here without writing anything. A resumed claim takes the expired claims over in the same
   transaction (``take_over_claimed_before``), so no file is ever claimed by two jobs, and the dead job's
   replace, should it arrive after all, is rejected.
4. **Merge**: one Spark task per claimed job streams its input files, restricted to the partition's
   region (a file referenced from several partitions holds rows of the others too), through a k-way merge
   by row and sort keys into one file with its exact row count. Each input is already sorted, so the task
   holds a batch per input, not the partition (:mod:`spark_client.merge`).
5. **Commit**: one ReplaceFileReferences for all finished jobs; each job is checked on its own.

Claims never stick. When a job's outcome is known to be final it releases its claims (ReleaseClaims): its
merge failed (nothing was committed: the run raises :class:`CompactionFailedError` after releasing every
claim it made), or its replace was rejected. When the outcome is unknown (a commit left pending, a store
error while committing, the driver dying) nothing is released, since the replace may still land: the
cleanup's sweep releases the claims once they are older than its expiry, or ``compact(resume=True)`` takes
them over. Claims left on partitions split since (no longer leaves) are for the sweep only; the split-down
step then moves their references.

A job whose replace is rejected leaves no trace in the state: its output file was never added, so nothing
references it. The job deletes it at once; if the job dies first (or its outcome is unknown because it did
not wait), the file is an orphan under the table's data prefix that
:func:`spark_client.gc.delete_orphan_files` finds — an object the state does not name, older than any job
can run — and deletes. Input files replaced by a compaction keep no references and are deleted by the
store's own garbage collection after its delay.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain

from pyspark.sql import SparkSession

from spark_client.committer import CommitReport, JobCommitter
from spark_client.data_store import DataStore
from spark_client.errors import CompactionFailedError
from spark_client.file_io import merge_files
from spark_client.progress import context_of, report, spark_stage
from statestore.engine.log_store import TableStateStore
from statestore.errors import StateStoreError
from statestore.model.clock import now_millis
from statestore.model.files import FileReference
from statestore.model.partitions import Region
from statestore.model.schema import Schema
from statestore.services.cleanup_policy import DEFAULT_CLAIM_EXPIRY_MS
from statestore.state.cycle_collector import collector_paused
from statestore.state.table_state import TableState
from statestore.transactions import (
    AssignJobIdRequest,
    AssignJobIds,
    ReleaseClaims,
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


logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class CompactionResult:
    """What a compaction run did: references split down, jobs committed, jobs that lost, time taken, and
    jobs whose commit has no outcome yet (``pending``: their claims stay until the replace lands or the
    cleanup's sweep releases them)."""

    references_split: int
    committed: tuple[FinishedJob, ...]
    lost: tuple[tuple[CompactionJob, str], ...]  # (job, why) for jobs that stopped or were rejected
    seconds: float
    pending: tuple[CompactionJob, ...] = ()


# --- 1. split references down -----------------------------------------------------------------------


def plan_reference_splits(state: TableState) -> list[SplitFileReferenceRequest]:
    """Requests moving every unassigned reference on a non-leaf partition to the leaves below it.

    Row counts are shared out evenly and marked approximate (the exact count per leaf would need reading
    the file); compaction rewrites them exactly.
    """
    tree = state.partition_tree
    requests = []
    leaf_ids = set(state.leaf_ids())
    above_leaves = [p for p in state.partitions_by_id if p not in leaf_ids]
    found = state.references_in_partitions(above_leaves, unassigned=True)
    for ref in sorted(chain.from_iterable(found.values()), key=lambda r: (r.filename, r.partition_id)):
        partition = state.partition(ref.partition_id)
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


def split_references_down(store: TableStateStore, committer: JobCommitter) -> int:
    """Commit :func:`plan_reference_splits`; returns how many references moved (0 if rejected or none)."""
    requests = plan_reference_splits(store.state())
    if not requests:
        return 0
    outcome = committer.commit(store.table_id, SplitFileReferences(tuple(requests)))
    return len(requests) if outcome.committed else 0


# --- 2. plan and 3. claim ---------------------------------------------------------------------------


def plan_compaction_jobs(
    state: TableState,
    data: DataStore,
    table_id: str,
    min_files: int = 2,
    max_files: int = 32,
    *,
    take_over_claimed_before: int | None = None,
) -> list[CompactionJob]:
    """A job for each leaf with at least ``min_files`` unassigned references (its oldest ``max_files``,
    oldest first, by name among equals).

    With ``take_over_claimed_before`` (epoch ms) references claimed before that time count as unassigned.
    """
    if min_files < 1 or max_files < min_files:
        raise ValueError(f"need 1 <= min_files <= max_files, got {min_files} and {max_files}")
    chosen = state.oldest_unassigned_files(
        state.leaf_ids(), at_least=min_files, at_most=max_files, claimed_before=take_over_claimed_before
    )
    # A job per leaf of the table: its partition and region objects, none of them garbage.
    with collector_paused():
        return [
            CompactionJob(
                job_id=str(uuid.uuid4()),
                partition_id=partition_id,
                region=state.partition(partition_id).region,
                input_files=tuple(filenames),
                output_file=data.new_data_file(table_id, partition_id),
            )
            for partition_id, filenames in sorted(chosen.items())
        ]


def claim_jobs(
    table_id: str,
    committer: JobCommitter,
    jobs: Iterable[CompactionJob],
    *,
    take_over_claimed_before: int | None = None,
) -> tuple[list[CompactionJob], list[tuple[CompactionJob, str]]]:
    """Commit AssignJobIds for the jobs; returns ``(claimed, lost with the reason)``.

    All jobs are claimed in one commit first (the usual case: nobody else is compacting these files). An
    AssignJobIds fails whole if any file is taken, so if that one is rejected each job is claimed on its
    own, and only the jobs that lost a file stop. ``take_over_claimed_before`` lets the claims take over
    claims made before that time (see :class:`AssignJobIds`). A claim left pending is reported lost; should
    it land later, the cleanup's sweep releases it.
    """
    jobs = list(jobs)
    if not jobs:
        return [], []
    requests = tuple(AssignJobIdRequest(job.job_id, job.partition_id, job.input_files) for job in jobs)

    def assign(chosen: tuple[AssignJobIdRequest, ...]) -> CommitReport:
        return committer.commit(table_id, AssignJobIds(chosen, take_over_claimed_before), wait=True)

    if len(jobs) > 1 and assign(requests).committed:
        return jobs, []
    claimed, lost = [], []
    for job, request in zip(jobs, requests, strict=True):
        outcome = assign((request,))
        if outcome.committed:
            claimed.append(job)
        else:
            lost.append((job, f"not claimed: {outcome.reason}"))
    return claimed, lost


def release_claims(table_id: str, committer: JobCommitter, jobs: Sequence[CompactionJob]) -> str | None:
    """Release the claims of ``jobs``, whose outcome is final (nothing of theirs was or ever will be
    committed). Returns None once released, else why not (the cleanup's sweep releases them later).

    Only for final outcomes: releasing a job whose replace may still land could let another job claim its
    inputs, and the replace would then be rejected, wasting its work.
    """
    job_ids = tuple(dict.fromkeys(job.job_id for job in jobs))
    if not job_ids:
        return None
    try:
        outcome = committer.commit(table_id, ReleaseClaims(job_ids), wait=True)
    except StateStoreError as e:
        problem = f"{type(e).__name__}: {e}"
    else:
        if outcome.committed:
            return None
        problem = outcome.reason or "no outcome"
    logger.warning(
        "table %r: could not release the claims of %d job(s), the cleanup will once they expire: %s",
        table_id, len(job_ids), problem,
    )  # fmt: skip
    return problem


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
    store: TableStateStore, data: DataStore, committer: JobCommitter, finished: list[FinishedJob]
) -> tuple[list[FinishedJob], list[tuple[CompactionJob, str]], CommitReport | None]:
    """Commit finished jobs as one ReplaceFileReferences; returns ``(committed, lost, outcome)``.

    Which jobs went in is read back from the state (their output is referenced), so it is right whichever
    committer sent the request. The outputs of lost jobs are deleted (nothing references them) and their
    claims released. A pending outcome changes nothing: the replace may still land.
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
    problem = release_claims(store.table_id, committer, [job for job, _ in lost])
    note = "claims released" if problem is None else f"claims left for the cleanup's sweep ({problem})"
    return committed, [(job, f"{why}; {note}") for job, why in lost], outcome


def compact(
    spark: SparkSession,
    store: TableStateStore,
    data: DataStore,
    committer: JobCommitter,
    *,
    min_files: int = 2,
    max_files: int = 32,
    resume: bool = False,
    claim_expiry_ms: int = DEFAULT_CLAIM_EXPIRY_MS,
    clock: Callable[[], int] = now_millis,
) -> CompactionResult:
    """One compaction run over the table (see the module docstring for the steps).

    ``resume`` also compacts references whose claim is older than ``claim_expiry_ms`` (by ``clock``, epoch
    ms), taking the claim over: use the instance's claim expiry, longer than any compaction runs. Raises
    :class:`CompactionFailedError` if merging fails, after releasing the run's claims; nothing is committed.
    """
    if claim_expiry_ms < 0:
        raise ValueError(f"claim_expiry_ms must not be negative, got {claim_expiry_ms}")
    started = time.monotonic()
    what = f"compaction of table {store.table_id!r}"
    take_over = clock() - claim_expiry_ms if resume else None
    moved = split_references_down(store, committer)
    if moved:
        report(what, "moved %d reference(s) down from partitions split since", moved)
    jobs = plan_compaction_jobs(
        store.state(), data, store.table_id, min_files, max_files, take_over_claimed_before=take_over
    )
    claimed, lost = claim_jobs(store.table_id, committer, jobs, take_over_claimed_before=take_over)
    inputs = sum(len(job.input_files) for job in claimed)
    report(
        what,
        "merging %d job(s) of %d file(s) (%d job(s) taken by another run)",
        len(claimed),
        inputs,
        len(lost),
    )
    try:
        with spark_stage(what, context_of(spark)):
            finished = run_jobs(spark, store.schema, data, claimed)
    except Exception as e:
        raise _abandon(store.table_id, data, committer, claimed, e) from e
    rows = sum(f.rows for f in finished)
    report(
        what,
        "merged %d file(s) into %d, %s rows in %.1f s",
        inputs,
        len(finished),
        f"{rows:,}",
        time.monotonic() - started,
    )
    committed, rejected, outcome = commit_jobs(store, data, committer, finished)
    pending = tuple(f.job for f in finished) if outcome is not None and outcome.pending else ()
    if finished:
        report(
            what,
            "committed %d job(s), %d lost, %d pending; %.1f s in all",
            len(committed),
            len(lost) + len(rejected),
            len(pending),
            time.monotonic() - started,
        )
    return CompactionResult(
        moved, tuple(committed), tuple(lost + rejected), time.monotonic() - started, pending
    )


def _abandon(
    table_id: str, data: DataStore, committer: JobCommitter, jobs: list[CompactionJob], cause: Exception
) -> CompactionFailedError:
    """After a failed merge: release the jobs' claims and delete what they wrote; the error to raise."""
    problem = release_claims(table_id, committer, jobs)
    claims = "their claims were released"
    if problem is not None:
        claims = f"their claims could not be released ({problem}); the cleanup releases them once they expire"
    # A task Spark is still stopping may write its output after this: find_orphan_files finds such files.
    try:
        data.delete([job.output_file for job in jobs])
        outputs = "the outputs written so far deleted"
    except Exception as e:  # the data store that failed the merge may fail this too
        outputs = f"their outputs not deleted ({e}); find_orphan_files finds them"
    return CompactionFailedError(
        f"compaction of table {table_id!r} failed while merging {len(jobs)} job(s): {_what_failed(cause)}. "
        f"Nothing was committed, {claims} and {outputs}. Fix the cause and run the compaction again"
    )


def _what_failed(error: Exception) -> str:
    """The line of an error that says what went wrong. Spark hands a task's Python exception to the driver
    inside a Java one, as text: the traceback's ``module.SomeError: message`` line, among Java's."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    named = [line for line in lines if line.split(":", 1)[0].endswith(("Error", "Exception"))]
    return (named[-1] if named else lines[0] if lines else type(error).__name__)[:1000]
