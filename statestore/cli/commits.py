"""Commit requests and the committer: ``statestore commit``, ``status`` and ``committer pause|resume|status``.

``commit`` sends a transaction to the committer's queue (and with ``--wait`` waits for its outcome);
``status`` says what became of a request. ``committer pause|resume`` stop and restart the committer for
maintenance: on AWS the committer Lambda's SQS event source mapping is disabled and enabled again; with a
local endpoint (``--endpoint-url`` / ``AWS_ENDPOINT_URL``, i.e. ``statestore local``) the local runtime's
poller is paused through a tag on the commit queue. Commit requests sent meanwhile wait on the queue, in
order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from statestore.cli import output as fmt
from statestore.cli.errors import EXIT_FAILED, EXIT_NOT_FOUND, EXIT_OK, EXIT_PENDING, EXIT_USAGE, CliError
from statestore.cli.parser import Command, add_number
from statestore.cli.session import read_json
from statestore.errors import CodecError
from statestore.store.ports import CommitOutcome, CommitStatus
from statestore.store.switch_ports import CommitterState, CommitterSwitch

if TYPE_CHECKING:
    from statestore.cli.session import Session

DEFAULT_WAIT_SECONDS = 60.0
MAX_WAIT_SECONDS = 24 * 60 * 60


def register_commit_requests(commands: Any, command: Command) -> None:
    """Add ``commit`` and ``status``."""
    p = command(commands, "commit", "send a commit request to the committer's queue", cmd_commit)
    p.add_argument("table", metavar="TABLE")
    p.add_argument(
        "file", metavar="FILE|-", help="the transaction as JSON (as the codec writes it), or - for stdin"
    )
    add_number(
        p,
        "--wait",
        float,
        0,
        MAX_WAIT_SECONDS,
        " seconds",
        nargs="?",
        const=DEFAULT_WAIT_SECONDS,
        metavar="SECONDS",
        help=f"wait for the outcome (default {DEFAULT_WAIT_SECONDS:g}s)",
    )
    p.add_argument(
        "--request-id", metavar="ID", help="the request id (default: a new UUID); resending is safe"
    )

    p = command(commands, "status", "what became of a commit request", cmd_status)
    p.add_argument("table", metavar="TABLE", help="the table the request was sent to (ids are per table)")
    p.add_argument("request_id", metavar="REQUEST_ID")


def cmd_commit(s: Session) -> int:
    from statestore.codec.transaction_json import transaction_from_json
    from statestore.engine.requests import CommitRequest, check_request_id, new_request_id

    data = read_json(s.args.file, "transaction")
    try:
        transaction = transaction_from_json(data)
        request_id = check_request_id(s.args.request_id) if s.args.request_id else new_request_id()
    except CodecError as e:
        raise CliError(f"invalid transaction in {_source(s.args.file)}: {e}", EXIT_USAGE) from None
    table = s.table(s.args.table)
    try:
        CommitRequest(request_id, table.table_id, transaction)
    except CodecError as e:
        raise CliError(f"invalid transaction in {_source(s.args.file)}: {e}", EXIT_USAGE) from None

    s.sender.send(table.table_id, transaction, request_id)
    s.out.progress(f"sent {transaction.TYPE} request {request_id} for table {table.table_name!r}")
    if s.args.wait is None:
        s.out.result(
            {
                "request_id": request_id,
                "table_id": table.table_id,
                "table_name": table.table_name,
                "outcome": None,
            },
            lambda: request_id,
        )
        return EXIT_OK

    s.out.progress(f"waiting up to {s.args.wait:g}s for the committer...")
    status = s.sender.wait(table.table_id, request_id, timeout=s.args.wait)
    if status is None:
        s.out.result(
            {
                "request_id": request_id,
                "table_id": table.table_id,
                "table_name": table.table_name,
                "outcome": None,
            },
            lambda: f"{request_id} pending",
        )
        raise CliError(
            f"request {request_id} has no outcome after {s.args.wait:g}s: is the committer running? "
            f"Check later with `statestore status {table.table_name} {request_id}`",
            EXIT_PENDING,
        )
    s.out.result(
        {**fmt.status_json(status), "table_name": table.table_name},
        lambda: f"{request_id} {_outcome_text(status)}",
    )
    return _status_exit_code(status)


def _source(path: str) -> str:
    return "stdin" if path == "-" else repr(path)


def _outcome_text(status: CommitStatus) -> str:
    if status.outcome is CommitOutcome.COMMITTED:
        note = f" ({status.reason})" if status.reason else ""
        return f"committed at transaction {status.transaction_number}{note}"
    return f"{status.outcome.value.replace('_', '-')}: {status.reason or 'no reason given'}"


def _status_exit_code(status: CommitStatus) -> int:
    """0 for a committed request; a request not committed is a failure, said on stderr as every other."""
    if status.outcome is CommitOutcome.COMMITTED:
        return EXIT_OK
    raise CliError(f"request {status.request_id} {_outcome_text(status)}", EXIT_FAILED)


def cmd_status(s: Session) -> int:
    table = s.table(s.args.table)
    status = s.statuses.get(table.table_id, s.args.request_id)
    if status is None:
        raise CliError(
            f"no status for request {s.args.request_id!r} of table {table.table_name!r}: not processed yet, "
            "expired, or never sent to this table",
            EXIT_NOT_FOUND,
        )
    table_name: str | None = table.table_name
    s.out.result(
        {**fmt.status_json(status), "table_name": table_name},
        lambda: fmt.render_fields(
            [
                ("request", status.request_id),
                ("table", f"{table_name} ({status.table_id})" if table_name else status.table_id),
                ("outcome", status.outcome.value),
                ("transaction", status.transaction_number),
                ("recorded", fmt.format_time(status.recorded_time)),
                ("reason", status.reason),
            ]
        ),
    )
    return _status_exit_code(status)


# --- the committer ------------------------------------------------------------------------------------


def register_committer(commands: Any, command: Command) -> None:
    """Add ``committer pause|resume|status``."""
    committer = commands.add_parser(
        "committer", help="pause and resume the committer (for maintenance), or see whether it runs"
    )
    actions = committer.add_subparsers(
        dest="committer_command", metavar="ACTION", required=True, parser_class=type(committer)
    )
    command(
        actions,
        "pause",
        "stop taking commit requests off the queue (they wait there, in order, until resume)",
        cmd_pause,
    )
    command(actions, "resume", "take commit requests off the queue again", cmd_resume)
    command(
        actions,
        "status",
        "whether the committer is paused, and the commit queue's depth",
        cmd_committer_status,
    )


def switch(s: Session) -> CommitterSwitch:
    """The committer switch: the local runtime's poller with a local endpoint, else the Lambda's mapping."""
    from statestore.adapters.aws.clients import make_client
    from statestore.adapters.aws.committer_switch import LambdaCommitterSwitch, LocalCommitterSwitch

    s.backend  # noqa: B018 - checks the endpoints (and gives a local one credentials) before clients are made
    sqs = make_client("sqs", endpoint_url=s.endpoint_url, region=s.args.region)
    if s.endpoint_url is not None:
        return LocalCommitterSwitch(sqs, s.resources.commit_queue, s.backend.caller)
    lambda_client = make_client("lambda", region=s.args.region)
    return LambdaCommitterSwitch(
        lambda_client, sqs, s.resources.committer_function, s.resources.commit_queue, s.backend.caller
    )


def state_json(state: CommitterState) -> dict[str, Any]:
    return {
        "paused": state.paused,
        "state": state.state,
        "where": state.where,
        "queue": {
            "waiting": state.queue.waiting,
            "in_flight": state.queue.in_flight,
            "delayed": state.queue.delayed,
        },
    }


def _show(s: Session, state: CommitterState, headline: str) -> int:
    queue = state.queue
    s.out.result(
        state_json(state),
        lambda: fmt.render_fields(
            [
                ("committer", headline),
                ("state", f"{state.state} ({state.where})"),
                ("queue", f"{fmt.plural(queue.waiting, 'request')} waiting, {queue.in_flight} in flight"
                 + (f", {queue.delayed} delayed" if queue.delayed else "")),
            ]
        ),
    )  # fmt: skip
    return 0


def cmd_pause(s: Session) -> int:
    state = switch(s).set_paused(True)
    return _show(s, state, "paused: requests wait on the queue until `statestore committer resume`")


def cmd_resume(s: Session) -> int:
    state = switch(s).set_paused(False)
    return _show(s, state, "running" if not state.paused else "still pausing; run status again shortly")


def cmd_committer_status(s: Session) -> int:
    state = switch(s).state()
    return _show(s, state, "paused" if state.paused else "running")
