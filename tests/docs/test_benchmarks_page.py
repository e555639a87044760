"""The benchmarks page shows what the scripts recorded: a figure with its target and verdict, the machine it
ran on, and "Not run yet" for a script that has recorded nothing; a script the page forgets is a warning,
which fails ``mkdocs build --strict``."""

from __future__ import annotations

import importlib.util
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


hook = load(ROOT / "docs" / "hooks" / "benchmarks.py", "docs_hook_benchmarks")
results = load(ROOT / "benchmarks" / "results.py", "benchmark_results_under_test")


def scripts(tmp_path: Path, *names: str) -> Path:
    """A benchmarks folder holding ``names`` as scripts and the real results module."""
    folder = tmp_path / "benchmarks"
    folder.mkdir()
    (folder / "results.py").write_text((ROOT / "benchmarks" / "results.py").read_text())
    for name in names:
        (folder / f"{name}.py").write_text("")
    return folder


def test_the_page_shows_a_recorded_figure_and_says_which_scripts_have_not_run(tmp_path: Path) -> None:
    folder = scripts(tmp_path, "bench_model", "bench_spark")
    figure = results.Figure.judged(
        "load seconds (wall clock)", 0.52, "s", bound_by="CPU: Parquet decoding", at_most=1
    )
    results.record(
        str(folder / "bench_model.py"),
        [figure, results.Figure("Parquet bytes, files", 37.7, "MB", "the snapshot format")],
        arguments=[],
        directory=folder / "results",
        now=datetime(2026, 11, 26, 8, 45, tzinfo=UTC),
    )
    page = (
        "# Benchmarks\n<!-- benchmark-results: bench_model -->\n\n<!-- benchmark-results: bench_spark -->\n"
    )
    warnings: list[str] = []

    html = hook.render_page(page, folder, warn=warnings.append)

    assert "| load seconds (wall clock) | 0.52 s | <= 1 s | **PASS** | CPU: Parquet decoding |" in html
    assert "| Parquet bytes, files | 37.7 MB |  | not judged | the snapshot format |" in html
    assert "Recorded 2026-11-26 08:45:00 UTC by `python benchmarks/bench_model.py`" in html
    assert "Not run yet: `python benchmarks/bench_spark.py`" in html
    assert warnings == []


def test_a_quick_run_is_shown_as_not_judged(tmp_path: Path) -> None:
    folder = scripts(tmp_path, "bench_model")
    figure = results.Figure.judged("write seconds", 5.0, "s", bound_by="CPU", at_most=3, judge=False)
    results.record(
        str(folder / "bench_model.py"), [figure], arguments=["--quick"], directory=folder / "results"
    )

    html = hook.render_page("<!-- benchmark-results: bench_model -->", folder, warn=print)

    assert "| write seconds | 5 s | <= 3 s | not judged | CPU |" in html
    assert "a quick run" in html


def test_a_script_without_a_section_or_a_section_without_a_script_is_a_warning(tmp_path: Path) -> None:
    folder = scripts(tmp_path, "bench_model", "bench_new")
    warnings: list[str] = []

    hook.render_page("<!-- benchmark-results: bench_model -->\n<!-- benchmark-results: bench_gone -->",
                     folder, warn=warnings.append)  # fmt: skip

    assert any("bench_new.py has no" in w for w in warnings)
    assert any("bench_gone.py, which does not exist" in w for w in warnings)


def test_a_damaged_results_file_is_a_warning_naming_it(tmp_path: Path) -> None:
    folder = scripts(tmp_path, "bench_model")
    (folder / "results").mkdir()
    (folder / "results" / "bench_model.json").write_text(json.dumps({"format": 1, "script": "bench_model"}))
    warnings: list[str] = []

    html = hook.render_page("<!-- benchmark-results: bench_model -->", folder, warn=warnings.append)

    assert "cannot be read" in html
    assert len(warnings) == 1 and "bench_model.json: not a benchmark result" in warnings[0]


def test_a_run_overwrites_the_previous_one_and_keeps_no_history(tmp_path: Path) -> None:
    for value in (1.0, 2.0):
        path = results.record("bench_x.py", [results.Figure("f", value, "s", "CPU")], directory=tmp_path)

    assert [f.value for f in results.read(path).figures] == [2.0]
    assert [p.name for p in tmp_path.iterdir()] == ["bench_x.json"]


def test_a_figure_without_what_it_needs_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="'x': value must be finite"):
        results.Figure("x", float("nan"), "s", "CPU")
    with pytest.raises(ValueError, match="'y': a PASS verdict needs the target"):
        results.Figure("y", 1.0, "s", "CPU", verdict=results.Verdict.PASS)
    with pytest.raises(ValueError, match="no figures"):
        results.record("bench_x.py", [])
