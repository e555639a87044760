"""Every CLI line the docs and the README show as a whole command parses with the CLI's own parser: a
command or an option renamed in the code fails here, not for a reader who types it.

A line written in shorthand (``[optional]``, ``a | b``, ``...``, ``<placeholder>``) stands for several
commands and is not one to type, so it is left out; a comment after two spaces is dropped.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from statestore.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHORTHAND = ("[", "|", "...", "<")


def documented_commands() -> list[tuple[str, str]]:
    """``(page, command)`` for each whole ``statestore`` command in the pages' shell blocks."""
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for block in re.findall(r"```(?:bash|sh|shell|console)\n(.*?)```", text, re.DOTALL):
            for line in block.splitlines():
                command = re.split(r"\s{2,}#", line.strip())[0].strip()
                if command.startswith("statestore ") and not any(mark in command for mark in SHORTHAND):
                    found.append((page.name, command))
    return found


COMMANDS = documented_commands()


def test_the_pages_show_many_whole_commands() -> None:
    assert len(COMMANDS) >= 20, COMMANDS  # else the reading above broke, and the test below checks nothing


@pytest.mark.parametrize(("page", "command"), COMMANDS, ids=[f"{p}: {c}" for p, c in COMMANDS])
def test_a_documented_command_parses(page: str, command: str) -> None:
    words = shlex.split(command)[1:]
    if words == ["--version"]:
        with pytest.raises(SystemExit) as printed:  # argparse prints the version and exits 0
            build_parser().parse_args(words)
        assert printed.value.code == 0
        return
    args = build_parser().parse_args(words)  # a usage error exits with EXIT_USAGE
    assert callable(getattr(args, "run", None)), f"{page}: {command!r} names no command to run"
