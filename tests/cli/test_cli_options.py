"""Every numeric option of the CLI, found by walking the parser, refuses a value out of its range before the
command touches anything: exit 2, nothing on stdout, one line naming the option, no traceback.

The options are collected from the parser itself (every option whose ``type`` converts to a number, and the
``TIME`` options, which take epoch milliseconds), so an option added later is checked without being listed
here. Nothing listens at the endpoints given: a command that got past its options would fail with another
exit code (4, unavailable) instead of 2.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterator

import pytest

from statestore.cli import main
from statestore.cli.errors import EXIT_USAGE
from statestore.cli.main import build_parser
from statestore.cli.parser import NumberOption

NOWHERE = ["--endpoint-url", "http://127.0.0.1:9", "--dynamodb-endpoint-url", "http://127.0.0.1:9"]

# Out of range for every numeric option: beyond any port, count, number of seconds or minutes, transaction
# number (int64) and epoch millisecond a command could use; not a number; infinite. Given as ``--opt=VALUE``:
# argparse takes ``--opt -inf`` for two options, and says so naming the option (see the test of the spaced
# form below).
ALWAYS_OUT_OF_RANGE = [
    "-99999999999999999999",
    "99999999999999999999",
    "1e400",
    "-1e400",
    "nan",
    "inf",
    "-inf",
]


def leaf_commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """(the words naming a command, its parser) for every command that runs something."""
    subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subparsers:
        yield path, parser
    for action in subparsers:
        for name, sub in action.choices.items():
            yield from leaf_commands(sub, (*path, name))


def is_numeric(action: argparse.Action) -> bool:
    return bool(action.option_strings) and (
        action.type in (int, float) or isinstance(action.type, NumberOption) or action.metavar == "TIME"
    )


def positionals(parser: argparse.ArgumentParser) -> list[str]:
    """Placeholder values for a command's required positional arguments."""
    values = []
    for action in parser._actions:
        if action.option_strings or action.nargs in ("?", "*") or action.dest == argparse.SUPPRESS:
            continue
        values.append(f"x-{action.dest}")
    return values


def numeric_options() -> list[tuple[tuple[str, ...], str, argparse.Action, list[str]]]:
    found = []
    for path, parser in leaf_commands(build_parser()):
        for action in parser._actions:
            if is_numeric(action):
                found.append((path, action.option_strings[-1], action, positionals(parser)))
    return found


NUMERIC = numeric_options()


def boundary_values(action: argparse.Action) -> list[str]:
    """Just outside the option's own range, where it declares one."""
    number = action.type
    if not isinstance(number, NumberOption):
        return []
    values = []
    step = 1 if number.kind is int else 0.5
    if math.isfinite(number.lowest):
        values.append(repr(number.kind(number.lowest - step)))
    if math.isfinite(number.highest):
        values.append(repr(number.kind(number.highest + step)))
    return values


CASES = [
    pytest.param([*path, *args, f"{option}={value}"], option, id=f"{' '.join(path)} {option}={value}")
    for path, option, action, args in NUMERIC
    for value in [*ALWAYS_OUT_OF_RANGE, *boundary_values(action)]
]


def test_the_parser_has_the_numeric_options_this_test_expects_to_walk() -> None:
    names = {(" ".join(path), option) for path, option, _, _ in NUMERIC}
    for expected in [
        ("report gc", "--before"),
        ("jobs", "--since"),
        ("jobs", "--until"),
        ("local", "--port"),
        ("local", "--dynamodb-port"),
        ("report partitions", "--split-threshold"),
        ("commit", "--wait"),
        ("log", "--from"),
        ("cleanup", "--gc-delay"),
    ]:
        assert expected in names


@pytest.mark.parametrize(("argv", "option"), CASES)
def test_a_numeric_option_out_of_range_exits_2_with_one_line_naming_the_option(
    capsys: pytest.CaptureFixture[str], argv: list[str], option: str
) -> None:
    code = main([*argv, *NOWHERE])

    captured = capsys.readouterr()
    assert code == EXIT_USAGE, captured.err
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("statestore: error: ") and option in lines[0], lines


@pytest.mark.parametrize(("path", "option", "args"), [(p, o, a) for p, o, _, a in NUMERIC])
def test_a_value_given_after_a_space_is_checked_the_same_way(
    capsys: pytest.CaptureFixture[str], path: tuple[str, ...], option: str, args: list[str]
) -> None:
    for value in ["99999999999999999999", "-99999999999999999999", "nan"]:
        code = main([*path, *args, option, value, *NOWHERE])

        captured = capsys.readouterr()
        assert code == EXIT_USAGE, captured.err
        assert captured.out == "" and "Traceback" not in captured.err
        assert captured.err.splitlines()[-1].startswith("statestore: error: ") and option in captured.err


def test_a_number_option_names_its_range_and_accepts_its_bounds() -> None:
    port = NumberOption("--port", int, 0, 65535)
    assert port("0") == 0 and port("65535") == 65535
    with pytest.raises(Exception, match=r"^--port must be from 0 to 65535, got 65536$"):
        port("65536")
    with pytest.raises(Exception, match=r"^--port must be an integer from 0 to 65535, got 'x'$"):
        port("x")
    wait = NumberOption("--wait", float, 0, 86400, " seconds")
    assert wait("0.5") == 0.5
    with pytest.raises(Exception, match=r"^--wait must be from 0 to 86400 seconds, got nan$"):
        wait("nan")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--port", "65535"], "--port 65535 leaves no port for DynamoDB Local (--port + 1)"),
        (["--port", "5000", "--dynamodb-port", "5000"], "--dynamodb-port must differ from --port"),
    ],
)
def test_local_refuses_ports_it_could_not_use_before_starting_anything(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code = main(["local", *argv, "--quiet"])

    captured = capsys.readouterr()
    assert code == EXIT_USAGE and captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"statestore: error: {message}")
