"""The parser's shared pieces: the global options, the parser class every (sub)command uses, and the
``command`` helper each command group registers its leaf commands with (``main.build_parser`` assembles
the groups)."""

from __future__ import annotations

import argparse
import datetime
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

from statestore.cli.errors import EXIT_USAGE, CliError

if TYPE_CHECKING:
    from statestore.cli.session import Session

EPILOG = """\
exit codes:
  0    ok
  1    the operation was refused or failed: a commit rejected or dead-lettered, a name already taken,
       a transaction that does not apply to the table
  2    bad usage or input: unknown option, missing or unreadable file, invalid schema, split points or
       transaction JSON
  3    not found: no such table, no status for the request id, log entries deleted by cleanup
  4    backend unavailable: nothing listens at the endpoint, the instance's resources do not exist,
       no credentials, access denied (IAM), the service kept failing or throttling, or it holds a
       damaged object (a snapshot or log entry that cannot be read back; the error names it)
  5    commit --wait: no outcome within the time given (the request may still be committed)
  70   internal error (a bug: please report it with the traceback)
  130  interrupted (Ctrl-C)

environment:
  AWS_ENDPOINT_URL           default for --endpoint-url (e.g. http://127.0.0.1:4566 from `statestore local`)
  AWS_ENDPOINT_URL_DYNAMODB  default for --dynamodb-endpoint-url (:4567 from `statestore local`)
  STATESTORE_INSTANCE_ID     default for --instance (else "local")
  STATESTORE_RESOURCES       default for --resources-json (the stack's output)
  STATESTORE_POSTGRES_URL    default for --postgres-url (where postgres tables keep their file references)
"""

# ``command(subparsers, name, help, run)``: a leaf command taking the global options, run with a Session.
Command = Callable[[Any, str, str, Callable[["Session"], int]], argparse.ArgumentParser]


def global_options(parser: argparse.ArgumentParser, suppress: bool) -> None:
    """The options every command takes, before or after the command name."""
    default: Any = argparse.SUPPRESS if suppress else None
    group = parser.add_argument_group("connection and output")
    group.add_argument(
        "--endpoint-url",
        metavar="URL",
        default=default,
        help="a local endpoint such as http://127.0.0.1:4566 (default: $AWS_ENDPOINT_URL, else AWS itself "
        "through the standard AWS configuration)",
    )
    group.add_argument(
        "--dynamodb-endpoint-url",
        metavar="URL",
        default=default,
        help="DynamoDB's own endpoint, such as the local runtime's DynamoDB Local at http://127.0.0.1:4567 "
        "(default: $AWS_ENDPOINT_URL_DYNAMODB, else --endpoint-url)",
    )
    group.add_argument(
        "--instance",
        metavar="ID",
        default=default,
        help="the instance whose resources to use (default: $STATESTORE_INSTANCE_ID, else 'local')",
    )
    group.add_argument(
        "--resources-json",
        metavar="JSON|FILE",
        default=default,
        help="the stack's STATESTORE_RESOURCES output, or a file holding it (default: $STATESTORE_RESOURCES)",
    )
    group.add_argument("--region", metavar="REGION", default=default, help="AWS region (default: AWS config)")
    group.add_argument(
        "--postgres-url",
        metavar="URL",
        default=default,
        help="the PostgreSQL database that tables created with --file-store postgres keep their file "
        "references in (default: $STATESTORE_POSTGRES_URL)",
    )
    group.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS if suppress else False, help="JSON output"
    )
    group.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        default=argparse.SUPPRESS if suppress else False,
        help="no progress messages on stderr",
    )


class CliParser(argparse.ArgumentParser):
    """An argparse parser whose usage errors name the subcommand and exit with EXIT_USAGE."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        where = self.prog.removeprefix("statestore").strip()  # the subcommand, e.g. "tables create"
        self.exit(EXIT_USAGE, f"statestore: error: {where + ': ' if where else ''}{message} (see --help)\n")


def command_factory(common: argparse.ArgumentParser) -> Command:
    """The ``command`` helper: adds a leaf command that also takes ``common``'s options after its name and
    runs ``run`` with the session."""

    def command(sub: Any, name: str, help_: str, run: Callable[[Session], int]) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = sub.add_parser(
            name,
            help=help_,
            description=help_,
            parents=[common],
            epilog=EPILOG,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        p.set_defaults(run=run)
        return p

    return command


# --- numeric options ------------------------------------------------------------------------------------

# The largest transaction number, row count or epoch millisecond a table can hold (DynamoDB and Parquet keep
# them as int64).
INT64_MAX = 2**63 - 1
# The most entries or files a listing shows at once (DynamoDB's query limit is a 32-bit integer).
MAX_LIMIT = 2**31 - 1
# Epoch milliseconds of 9999-12-31T23:59:59.999Z, the last moment ISO 8601 and Python's datetime can name.
LAST_TIME_MS = 253_402_300_799_999


@dataclass(frozen=True)
class NumberOption:
    """The ``type`` of a numeric option: parses an int (or a float) and checks it lies in
    [``lowest``, ``highest``], so a value out of range is refused while the command line is parsed, before
    the command sends, reads or starts anything.

    It raises :class:`CliError` (exit 2) with one line naming the option and its range: argparse lets that
    through (it converts only ``ArgumentTypeError``, ``TypeError`` and ``ValueError``), and ``main`` prints it
    like every other usage error. Every numeric option has both bounds: an unbounded one would let a value
    through that fails later, deep in a timer or a codec, as an internal error.
    """

    option: str
    kind: type[int] | type[float]
    lowest: float
    highest: float
    unit: str = ""

    def __call__(self, text: str) -> int | float:
        value: float
        try:
            value = int(text) if self.kind is int else float(text)
        except ValueError:
            what = "an integer" if self.kind is int else "a number"
            raise self._error(f"{what} {self._range()}", repr(text)) from None
        if not (math.isfinite(value) and self.lowest <= value <= self.highest):
            raise self._error(self._range(), _show(value))
        return value

    def _range(self) -> str:
        return f"from {_show(self.lowest)} to {_show(self.highest)}{self.unit}"

    def _error(self, expected: str, got: str) -> CliError:
        return CliError(f"{self.option} must be {expected}, got {got}", EXIT_USAGE)


def _show(number: float) -> str:
    """An int in full (a bound such as 2**63 - 1 must read exactly), a float in its shortest form."""
    return str(number) if isinstance(number, int) else f"{number:g}"


@dataclass(frozen=True)
class TimeOption:
    """The ``type`` of a ``TIME`` option: epoch milliseconds or ISO 8601 (UTC unless it names a zone), as
    epoch milliseconds from 1970 to the year 9999. Raises :class:`CliError` (exit 2) naming the option."""

    option: str

    def __call__(self, text: str) -> int:
        if text.lstrip("-").isdigit():
            millis = int(text)
        else:
            try:
                moment = datetime.datetime.fromisoformat(text)
            except ValueError:
                raise CliError(
                    f"{self.option} {text!r} is not a time; give ISO 8601 (2024-05-01T12:00:00Z) or epoch "
                    "milliseconds",
                    EXIT_USAGE,
                ) from None
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=datetime.UTC)
            millis = int(moment.timestamp() * 1000)
        if not 0 <= millis <= LAST_TIME_MS:
            raise CliError(
                f"{self.option} must be a time from 1970-01-01 to 9999-12-31 (epoch milliseconds 0 to "
                f"{LAST_TIME_MS}), got {text}",
                EXIT_USAGE,
            )
        return millis


def add_number(
    parser: argparse.ArgumentParser,
    option: str,
    kind: type[int] | type[float],
    lowest: float,
    highest: float,
    unit: str = "",
    **options: Any,
) -> None:
    """Add ``option``, a number of ``kind`` from ``lowest`` to ``highest`` (see :class:`NumberOption`)."""
    parser.add_argument(option, type=NumberOption(option, kind, lowest, highest, unit), **options)


def add_time(parser: argparse.ArgumentParser, option: str, **options: Any) -> None:
    """Add ``option``, a ``TIME`` (see :class:`TimeOption`)."""
    parser.add_argument(option, type=TimeOption(option), metavar="TIME", **options)
