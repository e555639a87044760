"""``statestore local``: the local runtime in the foreground, until Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import json
import shlex
import signal
import threading
from types import FrameType
from typing import TYPE_CHECKING, Any

from statestore.cli.errors import EXIT_OK, EXIT_USAGE, CliError
from statestore.cli.parser import Command, add_number

if TYPE_CHECKING:
    from statestore.cli.session import Session

# The schedules' longest period: a month (a timer longer than the platform's limit would fail to start).
MAX_INTERVAL_SECONDS = 30 * 24 * 60 * 60


def register(commands: Any, command: Command) -> None:
    """Add ``local``."""
    p = command(
        commands,
        "local",
        "run the local runtime in the foreground: DynamoDB Local for the tables, a moto endpoint for the "
        "bucket and queues, the instance's resources, the committer and the schedules",
        cmd_local,
    )
    add_number(
        p,
        "--port",
        int,
        0,
        65535,
        default=4566,
        help="port of the S3/SQS endpoint (default 4566; 0 = any free)",
    )
    add_number(
        p,
        "--dynamodb-port",
        int,
        0,
        65535,
        metavar="PORT",
        help="port of DynamoDB Local (default: --port + 1, any free one when --port is 0)",
    )
    p.add_argument(
        "--data-dir",
        metavar="DIR",
        help="keep tables, log, snapshots and data files in DIR across restarts (default: in memory only, "
        "deleted on stop)",
    )
    p.add_argument("--host", default="127.0.0.1", help=argparse.SUPPRESS)
    add_number(
        p,
        "--poll-interval",
        int,
        0,
        20,
        " seconds (SQS's long-poll limit)",
        default=1,
        metavar="S",
        help="long-poll wait of the commit queue poller, 0-20 seconds (default 1)",
    )
    add_number(
        p,
        "--snapshot-interval",
        float,
        0,
        MAX_INTERVAL_SECONDS,
        " seconds",
        default=60.0,
        metavar="S",
        help="snapshot every S seconds (0 = off)",
    )
    add_number(
        p,
        "--cleanup-interval",
        float,
        0,
        MAX_INTERVAL_SECONDS,
        " seconds",
        default=300.0,
        metavar="S",
        help="clean up every S seconds (0 = off)",
    )
    add_number(
        p,
        "--max-receive-count",
        int,
        1,
        1000,
        " receives (SQS's limit)",
        default=5,
        metavar="N",
        help="receives before the queue moves a message to the dead-letter queue (default 5)",
    )


def cmd_local(s: Session) -> int:
    import logging

    from statestore.local.runtime import LocalRuntime

    args = s.args
    if not args.quiet:
        handler = logging.StreamHandler(s.out.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
        runtime_logger = logging.getLogger("statestore.local")  # the runtime, its pollers and schedules
        runtime_logger.addHandler(handler)
        runtime_logger.setLevel(logging.INFO)
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # moto's per-request lines

    if args.dynamodb_port is None and args.port == 65535:
        raise CliError(
            "--port 65535 leaves no port for DynamoDB Local (--port + 1): give --dynamodb-port", EXIT_USAGE
        )
    if args.dynamodb_port and args.dynamodb_port == args.port:
        raise CliError(f"--dynamodb-port must differ from --port, both are {args.port}", EXIT_USAGE)

    # Attach only to endpoints named on the command line: AWS_ENDPOINT_URL(_DYNAMODB) are often left over
    # from the last run, printed by this very command.
    where = args.endpoint_url or f"{args.host}:{args.port}"
    s.out.progress(f"starting the local runtime for instance {s.resources.instance_id!r} at {where}...")
    if args.data_dir is None:
        s.out.progress(
            "no --data-dir: tables, log, snapshots and data live in memory and are DELETED when it stops; "
            "give --data-dir DIR to keep them across restarts"
        )
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        try:
            runtime = LocalRuntime.start(
                s.resources,
                endpoint_url=args.endpoint_url,
                dynamodb_endpoint_url=args.dynamodb_endpoint_url,
                port=args.port,
                dynamodb_port=args.dynamodb_port,
                host=args.host,
                data_dir=args.data_dir,
                region=args.region,
                max_receive_count=args.max_receive_count,
                poll_wait_seconds=args.poll_interval,
                snapshot_interval=args.snapshot_interval or None,
                cleanup_interval=args.cleanup_interval or None,
            )
        except ValueError as e:
            raise CliError(str(e), EXIT_USAGE) from None
        with runtime as rt:
            exports = rt.client_environment()
            s.out.result(
                {
                    "endpoint_url": rt.endpoint_url,
                    "dynamodb_endpoint_url": rt.dynamodb_endpoint_url,
                    "data_dir": str(rt.data_dir) if rt.data_dir is not None else None,
                    "instance_id": rt.resources.instance_id,
                    "region": rt.region,
                    "resources": json.loads(rt.resources.to_json()),
                    "environment": exports,
                },
                lambda: "\n".join(
                    [
                        f"statestore local runtime: instance {rt.resources.instance_id!r}: S3 and SQS at "
                        f"{rt.endpoint_url}, DynamoDB at {rt.dynamodb_endpoint_url}",
                        f"  state kept in {rt.data_dir} across restarts (queued commit requests are not)"
                        if rt.data_dir is not None
                        else "  state in memory only: everything is deleted when it stops (no --data-dir)",
                        f"  commit queue {rt.resources.commit_queue}, "
                        f"dead letters {rt.resources.dead_letter_queue}",
                        "  snapshots "
                        + (f"every {args.snapshot_interval:g}s" if args.snapshot_interval else "off")
                        + ", cleanup "
                        + (f"every {args.cleanup_interval:g}s" if args.cleanup_interval else "off"),
                        "Use it from another shell (the CLI, Spark jobs, the data source, boto3) with:",
                        *(f"  export {name}={shlex.quote(value)}" for name, value in exports.items()),
                        "Press Ctrl-C to stop.",
                    ]
                ),
            )
            while not stop.wait(0.5):
                pass
            s.out.progress("stopping...")
    finally:
        for sig, handler_ in previous.items():
            signal.signal(sig, handler_)
    s.out.progress("stopped")
    return EXIT_OK
