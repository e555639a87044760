"""The code layout's rules (docs/layout.md): folders are the layers, so what is left at the top of
``statestore/`` is few, and no module grows past what one reader takes in."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CODE = ("statestore", "lambdas", "infra", "spark_client", "app.py")
MAX_LINES = 500
MAX_TOP_MODULES = 8


def python_files() -> list[Path]:
    files: list[Path] = []
    for name in CODE:
        path = ROOT / name
        files.extend([path] if path.is_file() else sorted(path.rglob("*.py")))
    return files


def test_no_module_outside_tests_and_benchmarks_is_over_500_lines() -> None:
    files = python_files()
    assert len(files) > 100  # the walk found the code
    long = {str(f.relative_to(ROOT)): n for f in files if (n := len(f.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_at_most_eight_modules_sit_at_the_top_of_statestore() -> None:
    top = sorted(p.name for p in (ROOT / "statestore").glob("*.py"))
    assert "__init__.py" in top
    assert len(top) <= MAX_TOP_MODULES, top


def test_the_long_modules_run_first_are_test_modules_that_exist() -> None:
    from tests.conftest import LONG_MODULES

    assert [m for m in LONG_MODULES if not (ROOT / m).is_file()] == []
