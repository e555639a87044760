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

from statestore.cli import commits, contents, dead_letters, jobs, local, maintenance, reports, tables
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
        dead_letters.register_dead_letters,
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
    except CliError as e:  # a numeric or time option out of range (raised by its type while parsing)
        return fail(sys.stderr, str(e), e.exit_code)
    for name in ("endpoint_url", "dynamodb_endpoint_url", "instance", "resources_json", "region"):
        setattr(args, name, getattr(args, name, None))
    args.json = getattr(args, "json", False)
    args.quiet = getattr(args, "quiet", False)
    out = Output(json_mode=args.json, quiet=args.quiet)
    session = Session(args, out)
    try:
        session.postgres_url  # noqa: B018  (refuses a password given on the command line, whatever the command)
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


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
