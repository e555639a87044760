"""``make demo`` on a fresh clone builds everything the demo needs before running it.

The demo runs on the embedded default, whose DynamoDB Local comes from ``node_modules``: a ``demo`` target
that builds only the venv works in a clone where ``make test`` ran first and nowhere else. This asks make
what it would do in a directory holding the Makefile and its inputs but no ``.venv`` and no
``node_modules`` (``.ci/run`` runs the real ``make demo`` on its clean clone, before the tests).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[2]
INPUTS = ["Makefile", "pyproject.toml", "requirements.lock", "package.json", "package-lock.json"]


def test_make_demo_on_a_fresh_clone_builds_the_venv_and_node_modules_first(tmp_path: Path) -> None:
    for name in INPUTS:
        shutil.copy(CHECKOUT / name, tmp_path / name)

    planned = subprocess.run(
        ["make", "--dry-run", "demo"], cwd=tmp_path, capture_output=True, text=True, check=True
    ).stdout.splitlines()

    def step(fragment: str) -> int:
        matches = [i for i, line in enumerate(planned) if fragment in line]
        assert matches, f"`make demo` would not run {fragment!r}:\n" + "\n".join(planned)
        return matches[0]

    demo = step("-m statestore.local.demo")
    assert step("-m venv .venv") < demo
    assert step("npm ci") < demo


def test_ci_runs_the_demo_on_its_clean_clone_before_the_tests() -> None:
    commands = [line.strip() for line in (CHECKOUT / ".ci" / "run").read_text().splitlines()]

    assert "make demo" in commands and "make test" in commands
    assert commands.index("make demo") < commands.index("make test")
