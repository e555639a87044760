"""``statestore``: tables, partitions, files, the log, commit requests, snapshots, cleanup, the local runtime.

Human-readable tables by default, ``--json`` for scripts. Results go to stdout, progress and errors to
stderr; the exit code says what happened (see :data:`statestore.cli.parser.EPILOG`). Expected errors print
one line saying what was wrong and what to do; only a bug prints a traceback.

This module assembles the parser from the command groups (each registers its own sub-commands) and runs the
command chosen.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Sequence

from statestore.cli import commits, contents, jobs, local, maintenance, reports, tables
from statestore.cli.errors import (
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    describe,
    fail,
)
from statestore.cli.output import Output
from statestore.cli.parser import EPILOG, CliParser, command_factory, global_options
from statestore.cli.session import Session
from statestore.errors import StateStoreError


def build_parser() -> argparse.ArgumentParser:
    """The whole parser: the global options, then each command group's sub-commands, in ``--help``'s order."""
    parser = CliParser(
        prog="statestore",
        description="The state store of sorted data-lake tables: tables, partitions, files, the transaction "
        "log, asynchronous commits, snapshots, cleanup, and a local runtime.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    global_options(parser, suppress=False)
    parser.add_argument("--version", action="version", version=f"statestore {maintenance.version()}")
    common = CliParser(add_help=False)
    global_options(common, suppress=True)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=CliParser)
    command = command_factory(common)
    for register in (
        tables.register,
        contents.register_partitions,
        reports.register,
        contents.register_files_and_log,
        jobs.register,
        commits.register_commit_requests,
        maintenance.register_upkeep,
        local.register,
        maintenance.register_dead_letters,
        commits.register_committer,
    ):
        register(commands, command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (see :data:`EPILOG`)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, or a usage error argparse already printed
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    for name in ("endpoint_url", "dynamodb_endpoint_url", "instance", "resources_json", "region"):
        setattr(args, name, getattr(args, name, None))
    args.json = getattr(args, "json", False)
    args.quiet = getattr(args, "quiet", False)
    out = Output(json_mode=args.json, quiet=args.quiet)
    session = Session(args, out)
    try:
        _check_options(args)
        code: int = args.run(session)
        return code
    except CliError as e:
        return fail(out.stderr, str(e), e.exit_code)
    except StateStoreError as e:
        return fail(out.stderr, *describe(e, session))
    except KeyboardInterrupt:
        return fail(out.stderr, "interrupted", EXIT_INTERRUPTED)
    except BrokenPipeError:  # e.g. `statestore log t | head`
        return EXIT_OK
    except Exception:
        traceback.print_exc(file=out.stderr)
        return fail(
            out.stderr, "internal error (a bug); please report it with the traceback above", EXIT_INTERNAL
        )


# Numeric options and what each must be: checked before a command sends, reads or starts anything
# (``commit --wait -5`` used to send its request and only then give up waiting at once).
_NUMERIC_OPTIONS: tuple[tuple[str, str, float, float | None, str], ...] = (
    # (attribute, option, lowest, highest or None, what it counts)
    ("wait", "--wait", 0, None, " seconds"),
    ("limit", "--limit", 1, None, " entries"),
    ("from_number", "--from", 1, None, ""),
    ("log_min_snapshot_age", "--log-min-snapshot-age", 0, None, " minutes"),
    ("snapshot_retention", "--snapshot-retention", 0, None, " minutes"),
    ("gc_delay", "--gc-delay", 0, 30 * 24 * 60, " minutes"),
    ("claim_expiry", "--claim-expiry", 0, 30 * 24 * 60, " minutes"),
    ("max_clock_skew", "--max-clock-skew", 0, 24 * 60, " minutes"),
    ("port", "--port", 0, 65535, ""),
    ("poll_interval", "--poll-interval", 0, 20, " seconds (SQS's long-poll limit)"),
    ("snapshot_interval", "--snapshot-interval", 0, None, " seconds"),
    ("cleanup_interval", "--cleanup-interval", 0, None, " seconds"),
    ("max_receive_count", "--max-receive-count", 1, 1000, " receives (SQS's limit)"),
)


def _check_options(args: argparse.Namespace) -> None:
    """Raise CliError (exit 2) naming the first numeric option out of its range, NaN or infinite."""
    for attribute, option, lowest, highest, unit in _NUMERIC_OPTIONS:
        value = getattr(args, attribute, None)
        if value is None:
            continue
        finite = value == value and value not in (float("inf"), float("-inf"))
        if not finite or value < lowest or (highest is not None and value > highest):
            allowed = f"from {lowest:g} to {highest:g}" if highest is not None else f"{lowest:g} or more"
            shown = f"{value:g}" if isinstance(value, float) else str(value)
            raise CliError(f"{option} must be {allowed}{unit}, got {shown}", EXIT_USAGE)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
