"""The job-status model: what became of every compaction job and every committed request, by folding the log.

A second model derived from the same transactions as the table state (design record 000, "parallel
models"), with no reporting store of its own. :func:`fold` applies one log entry to the model **and** to the
table state as it was before that entry: which of a ``ReplaceFileReferences``' jobs were skipped, whose
claim a take-over took and which claims a ``ReleaseClaims`` freed are all decided by the whole table state,
so the model asks the state (``rejected_parts``, the references' owners and claim times) instead of
re-deriving those rules from a second copy of them. A batch's requests are folded one by one, each against
the state as the requests before it changed it, exactly as ``TransactionBatch.apply`` does.

A run of a job is one claim and what became of it; a job id may be reused by a later claim (ids chosen by
other tools may repeat), which starts a new run once the previous one has ended.

The model is "carefully mutable": :func:`fold` changes it in place, but every value it holds (runs,
events, requests) is a frozen dataclass, so :meth:`JobsModel.copy` is a copy of two dictionaries.
It is saved as JSON (:func:`model_to_json`) beside the state snapshots by
:mod:`statestore.engine.jobs_reader`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from statestore.errors import CodecError, JobNotFoundError
from statestore.state.table_state import TableState
from statestore.transactions import (
    AddFiles,
    AssignJobIds,
    ClearFiles,
    ClearTable,
    ReleaseClaims,
    ReplaceFileReferences,
    ReplaceFileReferencesJob,
    Transaction,
    TransactionBatch,
)

MODEL_FORMAT = 1


class JobState(StrEnum):
    """Where a run of a compaction job stands."""

    CLAIMED = "claimed"  # holds its input references; no outcome yet
    COMMITTED = "committed"  # its ReplaceFileReferences was applied
    REJECTED = "rejected"  # its ReplaceFileReferences was skipped; it may still hold its claim
    RELEASED = "released"  # a ReleaseClaims freed its claim (the job gave up, e.g. after a failed merge)
    EXPIRED = "expired"  # the cleanup's sweep released its claim (a ReleaseClaims with claimed_before)
    TAKEN_OVER = "taken_over"  # a later job's AssignJobIds took its claim over (take_over_claimed_before)
    CLEARED = "cleared"  # the table's files were cleared while it held its claim

    @property
    def holds_claim(self) -> bool:
        """Whether a run in this state may still hold input references (and so can still commit)."""
        return self in (JobState.CLAIMED, JobState.REJECTED)


@dataclass(frozen=True)
class JobEvent:
    """One thing the log says happened to a run: ``kind`` is the state it led to, ``detail`` the specifics."""

    transaction_number: int
    time: int  # epoch ms, the log entry's update time
    kind: JobState
    detail: str


@dataclass(frozen=True)
class JobRun:
    """One claim of a compaction job and what became of it.

    ``claim_transaction`` is None for a run the log shows no claim of: a commit of a job that never claimed
    (rejected), or a claim already held when the model's history began (see :attr:`JobsModel.history_from`).
    """

    job_id: str
    state: JobState
    partition_id: str | None
    input_files: tuple[str, ...]
    claim_transaction: int | None
    claim_time: int | None
    output_file: str | None = None
    output_rows: int | None = None
    events: tuple[JobEvent, ...] = ()

    @property
    def last_event(self) -> JobEvent:
        return self.events[-1]

    def with_event(self, event: JobEvent, **changes: Any) -> JobRun:
        """This run after ``event``: its state becomes the event's kind unless ``changes`` says otherwise."""
        return replace(self, **{"state": event.kind, **changes}, events=(*self.events, event))


@dataclass(frozen=True)
class CommittedRequest:
    """A commit request the committer wrote to the log, and what it added."""

    request_id: str
    transaction_number: int
    time: int
    transaction_type: str
    files_added: tuple[str, ...]
    rows_added: int
    job_ids: tuple[str, ...]  # the compaction jobs it committed (ReplaceFileReferences) or claimed


@dataclass(eq=True)
class JobsModel:
    """Every run of every compaction job, and every committed request, as of ``transaction_number``.

    ``history_from`` is the first transaction whose events the model holds: 1 when it was folded from the
    start of the log, later when cleanup had deleted the start before any model snapshot was written.
    """

    transaction_number: int = 0
    history_from: int = 1
    runs: dict[str, tuple[JobRun, ...]] = field(default_factory=dict)
    requests: dict[str, CommittedRequest] = field(default_factory=dict)

    def copy(self) -> JobsModel:
        return JobsModel(self.transaction_number, self.history_from, dict(self.runs), dict(self.requests))

    # --- queries --------------------------------------------------------------------------------

    def job(self, job_id: str) -> tuple[JobRun, ...]:
        """Every run of ``job_id``, oldest first. Raises JobNotFoundError if the log never named it."""
        runs = self.runs.get(job_id)
        if not runs:
            raise JobNotFoundError(job_id, self.history_from)
        return runs

    def find_runs(
        self,
        *,
        states: Iterable[JobState] = (),
        job_id: str | None = None,
        since: int | None = None,
        until: int | None = None,
    ) -> list[JobRun]:
        """Runs in the given ``states`` (any if empty), of ``job_id`` (any if None), with an event at a time
        ``since <= t < until`` (epoch ms; unbounded if None), ordered by their first event."""
        wanted = frozenset(states)
        found = [
            run
            for runs in ([self.runs.get(job_id, ())] if job_id is not None else self.runs.values())
            for run in runs
            if (not wanted or run.state in wanted)
            and any(
                (since is None or e.time >= since) and (until is None or e.time < until) for e in run.events
            )
        ]
        return sorted(found, key=lambda r: (r.events[0].transaction_number, r.job_id))

    # --- changes, used by fold ------------------------------------------------------------------

    def _latest(self, job_id: str) -> JobRun | None:
        runs = self.runs.get(job_id)
        return runs[-1] if runs else None

    def _put_latest(self, run: JobRun) -> None:
        self.runs[run.job_id] = (*self.runs[run.job_id][:-1], run)

    def _add_run(self, run: JobRun) -> None:
        self.runs[run.job_id] = (*self.runs.get(run.job_id, ()), run)


def seeded_from(state: TableState) -> JobsModel:
    """A model whose history starts after ``state``: the claims held in it become runs with no claim entry.

    For a table whose log start cleanup deleted before any model snapshot was written: what the jobs did
    before ``state`` is gone, but the claims still held (and their claim times) are in the state.
    """
    model = JobsModel(state.transaction_number, state.transaction_number + 1)
    for job_id, refs in sorted(state.claimed_references().items()):
        time = max(r.last_update_time for r in refs)
        event = JobEvent(state.transaction_number, time, JobState.CLAIMED, "claim held when history begins")
        partitions = sorted({r.partition_id for r in refs})
        model._add_run(
            JobRun(
                job_id,
                JobState.CLAIMED,
                partitions[0] if len(partitions) == 1 else ",".join(partitions),
                tuple(sorted(r.filename for r in refs)),
                None,
                time,
                events=(event,),
            )
        )
    return model


# --- the fold -------------------------------------------------------------------------------------


def fold(
    model: JobsModel, state: TableState, transaction_number: int, update_time: int, transaction: Transaction
) -> None:
    """Apply log entry ``transaction_number`` to ``model`` and to ``state`` (the table state before it).

    Both must be at ``transaction_number - 1``; both are at ``transaction_number`` afterwards.
    """
    if (
        model.transaction_number != transaction_number - 1
        or state.transaction_number != transaction_number - 1
    ):
        raise ValueError(
            f"cannot fold entry {transaction_number} into a model at {model.transaction_number} and a state "
            f"at {state.transaction_number}: both must be at {transaction_number - 1}"
        )
    if isinstance(transaction, TransactionBatch):
        for item in transaction.items:
            added = _fold_one(model, state, transaction_number, update_time, item.transaction)
            model.requests.setdefault(
                item.request_id,
                CommittedRequest(
                    item.request_id, transaction_number, update_time, item.transaction.TYPE, *added
                ),
            )
            item.transaction.apply(state, update_time)
    else:
        _fold_one(model, state, transaction_number, update_time, transaction)
        transaction.apply(state, update_time)
    model.transaction_number = state.transaction_number = transaction_number


def _fold_one(
    model: JobsModel, state: TableState, number: int, time: int, transaction: Transaction
) -> tuple[tuple[str, ...], int, tuple[str, ...]]:
    """Fold one (non-batch) transaction, ``state`` being the state before it; returns what it added
    (files, rows) and the jobs it concerned, for the request that carried it."""
    if isinstance(transaction, AddFiles):
        files = tuple(
            dict.fromkeys([*(r.filename for r in transaction.references), *transaction.unreferenced_files])
        )
        return files, sum(r.number_of_rows for r in transaction.references), ()
    if isinstance(transaction, AssignJobIds):
        _fold_claims(model, state, number, time, transaction)
        return (), 0, tuple(dict.fromkeys(r.job_id for r in transaction.requests))
    if isinstance(transaction, ReleaseClaims):
        _fold_release(model, state, number, time, transaction)
        return (), 0, ()
    if isinstance(transaction, ReplaceFileReferences):
        committed = _fold_replace(model, state, number, time, transaction)
        return (
            tuple(j.new_reference.filename for j in committed),
            sum(j.new_reference.number_of_rows for j in committed),
            tuple(dict.fromkeys(j.job_id for j in committed)),
        )
    if isinstance(transaction, ClearFiles | ClearTable):
        for job_id in sorted(state.claimed_references()):
            _end(model, job_id, JobEvent(number, time, JobState.CLEARED, "the table's files were cleared"))
        return (), 0, ()
    # InitialisePartitions, SplitPartition, ExtendPartitionTree, SplitFileReferences and DeleteFiles do not
    # concern jobs: none of them can add, move or remove a claimed reference (each refuses one). A
    # transaction type this fold does not know is ignored too; one that removes claimed references must be
    # added here.
    return (), 0, ()


def _fold_claims(model: JobsModel, state: TableState, number: int, time: int, txn: AssignJobIds) -> None:
    for request in txn.requests:
        # A take-over: the reference's owner in the state before is another job, presumed dead.
        losers: dict[str, list[str]] = {}
        for filename in request.filenames:
            table_file = state.files_by_name.get(filename)
            ref = table_file.reference_in(request.partition_id) if table_file else None
            if ref is not None and ref.job_id is not None and ref.job_id != request.job_id:
                losers.setdefault(ref.job_id, []).append(filename)
        for loser, files in sorted(losers.items()):
            detail = f"job {request.job_id!r} took over {len(files)} of its input file(s), e.g. {files[0]!r}"
            _end(model, loser, JobEvent(number, time, JobState.TAKEN_OVER, detail))

        detail = f"claimed {len(request.filenames)} file(s) in partition {request.partition_id!r}"
        event = JobEvent(number, time, JobState.CLAIMED, detail)
        latest = model._latest(request.job_id)
        if latest is not None and latest.state.holds_claim:  # the same run claims more
            model._put_latest(
                latest.with_event(
                    event,
                    state=latest.state,
                    input_files=(*latest.input_files, *request.filenames),
                )
            )
        else:
            model._add_run(
                JobRun(
                    request.job_id,
                    JobState.CLAIMED,
                    request.partition_id,
                    request.filenames,
                    number,
                    time,
                    events=(event,),
                )
            )


def _fold_release(model: JobsModel, state: TableState, number: int, time: int, txn: ReleaseClaims) -> None:
    held = state.claimed_references(txn.claimed_before)
    if txn.claimed_before is None:
        kind, detail = JobState.RELEASED, "its claim was released"
    else:
        kind, detail = JobState.EXPIRED, f"its claim, made before {txn.claimed_before}, was swept as expired"
    # A listed job that holds nothing changes nothing (releasing is idempotent).
    for job_id in txn.job_ids:
        if job_id in held:
            _end(model, job_id, JobEvent(number, time, kind, detail))


def _fold_replace(
    model: JobsModel, state: TableState, number: int, time: int, txn: ReplaceFileReferences
) -> list[ReplaceFileReferencesJob]:
    """Record each job's commit or rejection; return the jobs that were applied."""
    # ``rejected_parts`` names rejected jobs by id, in order. A job listed twice (a redelivered commit) has
    # its later copy rejected, so the first copies of a job are taken as the applied ones.
    reasons: dict[str, list[str]] = {}
    for job_id, error in txn.rejected_parts(state):
        reasons.setdefault(job_id, []).append(str(error))
    copies = Counter(j.job_id for j in txn.jobs)
    applied_left = {job_id: n - len(reasons.get(job_id, ())) for job_id, n in copies.items()}
    committed = []
    for job in txn.jobs:
        latest = model._latest(job.job_id)
        if applied_left[job.job_id] > 0:
            applied_left[job.job_id] -= 1
            committed.append(job)
            new = job.new_reference
            event = JobEvent(
                number, time, JobState.COMMITTED, f"wrote {new.filename!r} ({new.number_of_rows} rows)"
            )
            changes = {"output_file": new.filename, "output_rows": new.number_of_rows}
            if latest is not None:
                model._put_latest(latest.with_event(event, **changes))
            else:  # cannot happen for a validated log (a commit needs a claim), but keep the record
                model._add_run(_unclaimed_run(job.job_id, job.partition_id, job.input_files, event, changes))
            continue
        event = JobEvent(number, time, JobState.REJECTED, f"commit rejected: {reasons[job.job_id].pop(0)}")
        if latest is None:
            model._add_run(_unclaimed_run(job.job_id, job.partition_id, job.input_files, event, {}))
        elif latest.state.holds_claim:
            model._put_latest(latest.with_event(event))
        else:  # e.g. a job whose claim was taken over commits late: it keeps that state, the event is noted
            model._put_latest(latest.with_event(event, state=latest.state))
    return committed


def _unclaimed_run(
    job_id: str, partition_id: str, inputs: tuple[str, ...], event: JobEvent, changes: dict[str, Any]
) -> JobRun:
    return JobRun(job_id, event.kind, partition_id, inputs, None, None, events=(event,), **changes)


def _end(model: JobsModel, job_id: str, event: JobEvent) -> None:
    """The job's current run lost its claim (``event`` says how)."""
    latest = model._latest(job_id)
    if latest is None:  # a claim older than the model's history that seeding did not see
        model._add_run(JobRun(job_id, event.kind, None, (), None, None, events=(event,)))
    elif latest.state.holds_claim:
        model._put_latest(latest.with_event(event))


# --- JSON -----------------------------------------------------------------------------------------


def model_to_json(model: JobsModel) -> dict[str, Any]:
    """The model as plain JSON values (the saved form; :func:`model_from_json` reads it back)."""
    return {
        "format": MODEL_FORMAT,
        "transaction_number": model.transaction_number,
        "history_from": model.history_from,
        "runs": [run_to_json(run) for runs in model.runs.values() for run in runs],
        "requests": [request_to_json(r) for r in model.requests.values()],
    }


def run_to_json(run: JobRun) -> dict[str, Any]:
    return {
        "job_id": run.job_id,
        "state": run.state.value,
        "partition_id": run.partition_id,
        "input_files": list(run.input_files),
        "claim_transaction": run.claim_transaction,
        "claim_time": run.claim_time,
        "output_file": run.output_file,
        "output_rows": run.output_rows,
        "events": [
            {
                "transaction_number": e.transaction_number,
                "time": e.time,
                "kind": e.kind.value,
                "detail": e.detail,
            }
            for e in run.events
        ],
    }


def request_to_json(request: CommittedRequest) -> dict[str, Any]:
    return {
        "request_id": request.request_id,
        "transaction_number": request.transaction_number,
        "time": request.time,
        "transaction_type": request.transaction_type,
        "files_added": list(request.files_added),
        "rows_added": request.rows_added,
        "job_ids": list(request.job_ids),
    }


def model_from_json(data: Any) -> JobsModel:
    """Read what :func:`model_to_json` wrote. Raises CodecError naming what is wrong."""
    try:
        if data.get("format") != MODEL_FORMAT:
            raise CodecError(f"job model format {data.get('format')!r} is not {MODEL_FORMAT}")
        model = JobsModel(int(data["transaction_number"]), int(data["history_from"]))
        for run in _runs_from_json(data["runs"]):
            model._add_run(run)
        for r in data["requests"]:
            model.requests[r["request_id"]] = CommittedRequest(
                r["request_id"],
                r["transaction_number"],
                r["time"],
                r["transaction_type"],
                tuple(r["files_added"]),
                r["rows_added"],
                tuple(r["job_ids"]),
            )
        return model
    except CodecError:
        raise
    except (AttributeError, KeyError, TypeError, ValueError) as e:
        raise CodecError(f"a saved job model is malformed: {type(e).__name__}: {e}") from None


def _runs_from_json(items: Any) -> Iterator[JobRun]:
    for r in items:
        yield JobRun(
            r["job_id"],
            JobState(r["state"]),
            r["partition_id"],
            tuple(r["input_files"]),
            r["claim_transaction"],
            r["claim_time"],
            r["output_file"],
            r["output_rows"],
            tuple(
                JobEvent(e["transaction_number"], e["time"], JobState(e["kind"]), e["detail"])
                for e in r["events"]
            ),
        )
