"""``statestore committer pause|resume|status``: stop and restart the committer for maintenance.

On AWS the committer Lambda's SQS event source mapping is disabled and enabled again; with a local endpoint
(``--endpoint-url`` / ``AWS_ENDPOINT_URL``, i.e. ``statestore local``) the local runtime's poller is paused
through a tag on the commit queue. Commit requests sent meanwhile wait on the queue, in order.
Registered from :func:`statestore.cli.build_parser`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from statestore.cli import output as fmt
from statestore.committer_switch import CommitterState, CommitterSwitch

if TYPE_CHECKING:
    from statestore.cli.main import Session

Command = Callable[[Any, str, str, Callable[["Session"], int]], argparse.ArgumentParser]


def register(commands: Any, command: Command) -> None:
    """Add ``committer pause|resume|status`` to the CLI's subcommands."""
    from statestore.cli.main import _Parser

    committer = commands.add_parser(
        "committer", help="pause and resume the committer (for maintenance), or see whether it runs"
    )
    actions = committer.add_subparsers(
        dest="committer_command", metavar="ACTION", required=True, parser_class=_Parser
    )
    command(
        actions,
        "pause",
        "stop taking commit requests off the queue (they wait there, in order, until resume)",
        cmd_pause,
    )
    command(actions, "resume", "take commit requests off the queue again", cmd_resume)
    command(actions, "status", "whether the committer is paused, and the commit queue's depth", cmd_status)


def switch(s: Session) -> CommitterSwitch:
    """The committer switch: the local runtime's poller with a local endpoint, else the Lambda's mapping."""
    from statestore.aws.clients import make_client
    from statestore.aws.committer_switch import LambdaCommitterSwitch, LocalCommitterSwitch

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


def cmd_status(s: Session) -> int:
    state = switch(s).state()
    return _show(s, state, "paused" if state.paused else "running")
