"""The benchmarks' latest figures as data, for the docs site's benchmarks page.

Each ``benchmarks/bench_*.py`` script still prints its figures; it also calls :func:`record` once with the
figures it judges or headlines, which writes ``benchmarks/results/<script>.json`` (the latest run only: a
run overwrites the file, so no history accumulates). ``docs/hooks/benchmarks.py`` reads these files with
:func:`read` and renders one table per script into ``docs/benchmarks.md``.

A figure carries what a reader needs to judge it: its value and unit, the target it is held to (if any),
PASS, FAIL or not judged, and what bounds it (the emulator, the CPU, round trips). The run carries the
arguments it was given (a ``--quick`` run is not judged), the date, and the machine: its core count and its
load averages when the script started and when it recorded, since figures measured on shared cores move
with what else runs there.
"""

from __future__ import annotations

import json
import math
import os
import platform
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

# Where runs are recorded. A test that runs a script to see that it still runs points this elsewhere
# (``STATESTORE_BENCHMARK_RESULTS``): its small run must not replace the recorded one.
RESULTS_DIR_ENV = "STATESTORE_BENCHMARK_RESULTS"
RESULTS_DIR = Path(os.environ.get(RESULTS_DIR_ENV) or Path(__file__).resolve().parent / "results")
FORMAT = 1

# This module is imported at a script's start: the machine's load before the script's own work.
_LOAD_AT_START: tuple[float, float, float] = os.getloadavg()


class Verdict(StrEnum):
    PASS = "PASS"
    FAIL = "FAIL"
    NOT_JUDGED = "not judged"


@dataclass(frozen=True)
class Figure:
    """One measured figure. ``target`` is written for a reader (``"<= 0.2 s"``); a figure with a verdict of
    PASS or FAIL must name its target."""

    name: str
    value: float
    unit: str
    bound_by: str
    target: str | None = None
    verdict: Verdict = Verdict.NOT_JUDGED

    def __post_init__(self) -> None:
        if not self.name.strip():
            raise ValueError("a benchmark figure needs a name")
        if not isinstance(self.value, int | float) or isinstance(self.value, bool):
            raise ValueError(f"figure {self.name!r}: value must be a number, got {self.value!r}")
        if not math.isfinite(self.value):
            raise ValueError(f"figure {self.name!r}: value must be finite, got {self.value!r}")
        if self.verdict is not Verdict.NOT_JUDGED and not self.target:
            raise ValueError(f"figure {self.name!r}: a {self.verdict} verdict needs the target judged by")

    @classmethod
    def judged(
        cls,
        name: str,
        value: float,
        unit: str,
        *,
        bound_by: str,
        at_most: float | None = None,
        at_least: float | None = None,
        judge: bool = True,
    ) -> Figure:
        """A figure held to ``at_most`` or ``at_least`` (in its own unit); ``judge=False`` (a quick run)
        keeps the target beside it but gives no verdict."""
        if (at_most is None) == (at_least is None):
            raise ValueError(f"figure {name!r}: give exactly one of at_most and at_least")
        if at_most is not None:
            target, ok = f"<= {at_most:,} {unit}".rstrip(), value <= at_most
        else:
            assert at_least is not None
            target, ok = f">= {at_least:,} {unit}".rstrip(), value >= at_least
        verdict = (Verdict.PASS if ok else Verdict.FAIL) if judge else Verdict.NOT_JUDGED
        return cls(name, value, unit, bound_by, target, verdict)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "value": self.value,
            "unit": self.unit,
            "target": self.target,
            "verdict": self.verdict.value,
            "bound_by": self.bound_by,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Figure:
        return cls(
            name=data["name"],
            value=data["value"],
            unit=data["unit"],
            bound_by=data["bound_by"],
            target=data.get("target"),
            verdict=Verdict(data["verdict"]),
        )


@dataclass(frozen=True)
class Run:
    """The figures of one run of one script, and the machine they were measured on."""

    script: str  # the script's file name without ".py"
    # A second kind of run of the same script, named after the option that selects it ("five-million" for
    # bench_model's --five-million), or None.
    variant: str | None
    arguments: tuple[str, ...]
    recorded_at: str  # ISO 8601, UTC
    cores: int
    load_at_start: tuple[float, float, float]  # 1, 5 and 15-minute load averages
    load_at_end: tuple[float, float, float]
    python: str
    figures: tuple[Figure, ...]

    @property
    def key(self) -> str:
        """The run's name on the page and its file's stem: ``bench_model`` or ``bench_model.five-million``."""
        return self.script if self.variant is None else f"{self.script}.{self.variant}"

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "script": self.script,
            "variant": self.variant,
            "arguments": list(self.arguments),
            "recorded_at": self.recorded_at,
            "cores": self.cores,
            "load_at_start": list(self.load_at_start),
            "load_at_end": list(self.load_at_end),
            "python": self.python,
            "figures": [f.to_json() for f in self.figures],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Run:
        if data.get("format") != FORMAT:
            raise ValueError(f"results of format {data.get('format')!r}; this reader knows format {FORMAT}")
        return cls(
            script=data["script"],
            variant=data.get("variant"),
            arguments=tuple(data["arguments"]),
            recorded_at=data["recorded_at"],
            cores=data["cores"],
            load_at_start=_three(data["load_at_start"]),
            load_at_end=_three(data["load_at_end"]),
            python=data["python"],
            figures=tuple(Figure.from_json(f) for f in data["figures"]),
        )


def _three(values: Sequence[float]) -> tuple[float, float, float]:
    a, b, c = values
    return (a, b, c)


def record(
    script_file: str,
    figures: Sequence[Figure],
    *,
    variant: str | None = None,
    arguments: Sequence[str] | None = None,
    directory: Path | None = None,
    now: datetime | None = None,
) -> Path:
    """Write ``figures`` as the latest run of the script ``script_file`` (pass ``__file__``) to
    ``<directory>/<script>.json`` (``<script>.<variant>.json`` for a variant), replacing the previous run's,
    and return the path.

    ``arguments`` defaults to the script's command line (``sys.argv[1:]``). Nothing is written for a run
    with no figures: the page would show an empty table as if the script had run.
    """
    if not figures:
        raise ValueError(f"{script_file}: no figures to record")
    script = Path(script_file).stem
    if variant is not None and not variant.replace("-", "").isalnum():
        raise ValueError(f"variant {variant!r}: letters, digits and hyphens only")
    run = Run(
        script=script,
        variant=variant,
        arguments=tuple(sys.argv[1:] if arguments is None else arguments),
        recorded_at=(now or datetime.now(UTC)).astimezone(UTC).isoformat(timespec="seconds"),
        cores=os.cpu_count() or 1,
        load_at_start=_LOAD_AT_START,
        load_at_end=os.getloadavg(),
        python=platform.python_version(),
        figures=tuple(figures),
    )
    target_dir = directory or RESULTS_DIR
    target_dir.mkdir(parents=True, exist_ok=True)
    path = target_dir / f"{run.key}.json"
    partial = path.with_suffix(".json.partial")
    partial.write_text(json.dumps(run.to_json(), indent=2) + "\n", encoding="utf-8")
    partial.replace(path)  # a reader never sees half a file
    print(f"(figures recorded in {path})", flush=True)
    return path


def read(path: Path) -> Run:
    """The run recorded in ``path``; ValueError naming the file if it is not one."""
    try:
        return Run.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{path}: not a benchmark result ({type(e).__name__}: {e})") from e
