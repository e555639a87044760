"""``statestore jobs TABLE`` and ``statestore job TABLE JOB_ID``: the job-status model folded from the log."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from statestore.cli import output as fmt
from statestore.cli.errors import EXIT_NOT_FOUND, EXIT_OK, EXIT_USAGE, CliError
from statestore.cli.parser import Command, add_time
from statestore.errors import JobNotFoundError
from statestore.views.jobs_model import JobRun, JobState, run_to_json

if TYPE_CHECKING:
    from statestore.cli.session import Session


def register(commands: Any, command: Command) -> None:
    """Add ``jobs`` and ``job``."""
    p = command(commands, "jobs", "a table's compaction jobs and what became of them, from its log", cmd_jobs)
    p.add_argument("table", metavar="TABLE")
    p.add_argument(
        "--state",
        action="append",
        choices=[s.value for s in JobState],
        help="only runs in this state (repeat for several)",
    )
    p.add_argument("--job", metavar="JOB_ID", help="only runs of this job id")
    add_time(p, "--since", help="only runs with an event at or after TIME (ISO 8601 or epoch ms)")
    add_time(p, "--until", help="only runs with an event before TIME (ISO 8601 or epoch ms)")
    p = command(commands, "job", "one compaction job: its claim, its outcome and every event", cmd_job)
    p.add_argument("table", metavar="TABLE")
    p.add_argument("job_id", metavar="JOB_ID")


def cmd_jobs(s: Session) -> int:

    since, until = s.args.since, s.args.until  # epoch ms, parsed by the options' type
    if since is not None and until is not None and until <= since:
        raise CliError(
            f"--until ({fmt.iso_time(until)}) must be after --since ({fmt.iso_time(since)})", EXIT_USAGE
        )
    table = s.table(s.args.table)
    model = s.client.job_status_reader(table.table_id).model()
    runs = model.find_runs(
        states=[JobState(v) for v in s.args.state or ()], job_id=s.args.job, since=since, until=until
    )

    def human() -> str:
        if not runs:
            return "no jobs match" if (s.args.state or s.args.job or since or until) else "no compaction jobs"
        rows = [
            [
                r.job_id,
                r.state.value,
                r.partition_id,
                len(r.input_files),
                r.claim_transaction,
                fmt.format_time(r.claim_time),
                r.last_event.transaction_number,
                fmt.format_time(r.last_event.time),
                r.output_file,
            ]
            for r in runs
        ]
        headers = [
            "JOB",
            "STATE",
            "PARTITION",
            "INPUTS",
            "CLAIM TX",
            "CLAIMED",
            "LAST TX",
            "LAST EVENT",
            "OUTPUT",
        ]
        return fmt.render_table(headers, rows)

    s.out.result([run_to_json(r) for r in runs], human)
    return EXIT_OK


def cmd_job(s: Session) -> int:

    table = s.table(s.args.table)
    try:
        runs = s.client.job_status_reader(table.table_id).model().job(s.args.job_id)
    except JobNotFoundError as e:
        raise CliError(
            f"{e}; list the table's jobs with `statestore jobs {s.args.table}`", EXIT_NOT_FOUND
        ) from None

    def human() -> str:
        return "\n\n".join(_run_text(r, i, len(runs)) for i, r in enumerate(runs, 1))

    s.out.result([run_to_json(r) for r in runs], human)
    return EXIT_OK


def _run_text(run: JobRun, index: int, count: int) -> str:
    title = f"job {run.job_id!r}" + (f" (run {index} of {count})" if count > 1 else "")
    fields = fmt.render_fields(
        [
            ("state", run.state.value),
            ("partition", run.partition_id),
            ("claimed in", run.claim_transaction),
            ("claimed at", fmt.format_time(run.claim_time)),
            ("input files", len(run.input_files)),
            ("output file", run.output_file),
            ("output rows", run.output_rows),
        ]
    )
    events = fmt.render_table(
        ["TX", "TIME", "EVENT", "DETAIL"],
        [[e.transaction_number, fmt.format_time(e.time), e.kind.value, e.detail] for e in run.events],
    )
    inputs = "\n".join(f"  {f}" for f in run.input_files)
    return f"{title}\n{fields}\ninputs:\n{inputs or '  -'}\n{events}"
