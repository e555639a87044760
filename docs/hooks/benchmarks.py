"""mkdocs hook: fills the benchmarks page with the latest figures the benchmark scripts recorded.

``docs/benchmarks.md`` holds a marker ``<!-- benchmark-results: SCRIPT -->`` (or ``SCRIPT.VARIANT``) where
each script's table goes. Each is replaced by the run in ``benchmarks/results/<key>.json`` (written by
``benchmarks/results.py``): when and how it ran, on how many cores at what load, then one row per figure
with its target, verdict and what bounds it. A script that has not recorded a run yet gets a line saying
so. A ``benchmarks/bench_*.py`` script with no marker, a marker naming no script, or a results file that does
not read is a warning, so ``mkdocs build --strict`` fails until the page covers every benchmark.
"""

from __future__ import annotations

import importlib.util
import logging
import re
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

PAGE = "benchmarks.md"
MARKER = re.compile(r"<!-- benchmark-results: ([A-Za-z0-9_]+)(?:\.([A-Za-z0-9-]+))? -->")

log = logging.getLogger("mkdocs.hooks.benchmarks")


def _results_module(benchmarks_dir: Path) -> ModuleType:
    """``benchmarks/results.py``, which defines the files' format (the benchmarks folder is no package)."""
    name = "statestore_benchmark_results"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, benchmarks_dir / "results.py")
    assert spec is not None and spec.loader is not None, f"no results.py in {benchmarks_dir}"
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def format_value(value: float) -> str:
    """A figure as a reader wants it: thousands separated, about three significant digits."""
    if float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    magnitude = abs(value)
    if magnitude >= 1000:
        return f"{value:,.0f}"
    if magnitude >= 100:
        return f"{value:.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_run(run: Any) -> str:
    """One run of one script: a line saying how it ran, then its figures as a table."""
    command = " ".join(["python", f"benchmarks/{run.script}.py", *run.arguments])
    quick = "--quick" in run.arguments
    when = run.recorded_at.replace("T", " ").replace("+00:00", " UTC")
    lines = [
        f"Recorded {when} by `{command}`"
        + (" (a quick run: it checks the code paths; its targets are shown, not judged)" if quick else "")
        + f". {run.cores} cores, load average {run.load_at_start[0]:.1f} when it started and "
        f"{run.load_at_end[0]:.1f} when it finished (1-minute); Python {run.python}.",
        "",
        "| figure | measured | target | verdict | bounded by |",
        "|---|---:|---|---|---|",
    ]
    for f in run.figures:
        measured = f"{format_value(f.value)} {f.unit}".strip()
        verdict = f"**{f.verdict.value}**" if f.verdict.value != "not judged" else "not judged"
        cells = (f.name, measured, f.target or "", verdict, f.bound_by)
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines)


def render_page(
    markdown: str,
    benchmarks_dir: Path,
    results_dir: Path | None = None,
    warn: Callable[[str], None] = log.warning,
) -> str:
    """``markdown`` with every marker replaced by its script's latest run (or "Not run yet")."""
    results = _results_module(benchmarks_dir)
    results_dir = results_dir or benchmarks_dir / "results"
    scripts = {p.stem for p in benchmarks_dir.glob("bench_*.py")}
    marked = {m.group(1) for m in MARKER.finditer(markdown)}
    for script in sorted(scripts - marked):
        warn(f"{PAGE}: benchmarks/{script}.py has no '<!-- benchmark-results: {script} -->' section")

    def table(match: re.Match[str]) -> str:
        script, variant = match.group(1), match.group(2)
        key = script if variant is None else f"{script}.{variant}"
        if script not in scripts:
            warn(f"{PAGE}: a section names benchmarks/{script}.py, which does not exist")
            return f"*No script benchmarks/{script}.py.*"
        path = results_dir / f"{key}.json"
        if not path.exists():
            command = " ".join(["python", f"benchmarks/{script}.py", *([f"--{variant}"] if variant else [])])
            return f"*Not run yet: `{command}` records its figures in `{path.name}`.*"
        try:
            return str(render_run(results.read(path)))
        except ValueError as e:
            warn(f"{PAGE}: {e}")
            return f"*The recorded figures in `{path.name}` cannot be read.*"

    return MARKER.sub(table, markdown)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any, **kwargs: Any) -> str:
    if page.file.src_uri != PAGE:
        return markdown
    root = Path(config.config_file_path).resolve().parent
    return render_page(markdown, root / "benchmarks")
