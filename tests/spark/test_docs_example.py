"""The Spark guide's first example (``docs/spark.md``) runs as written: in a new Python process whose
environment holds the ``export`` lines ``statestore local`` prints, against a runtime started as
``statestore local`` starts it — snapshots on, so the example's append lands on a table that has one."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from statestore.local.runtime import LocalRuntime
from tests.fixtures.aws_servers import dynamodb_local, moto_server, unique_resources  # noqa: F401
from tests.spark.embedded import shell_environment

pytestmark = [pytest.mark.spark, pytest.mark.e2e, pytest.mark.dynamodb_local]

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "spark.md"
MARKER = "<!-- example: first-job -->"


def example(marker: str = MARKER) -> str:
    """The Python block right after ``marker`` in the guide."""
    text = GUIDE.read_text(encoding="utf-8")
    found = re.search(re.escape(marker) + r"\s*```python\n(.*?)```", text, re.DOTALL)
    assert found is not None, f"no ```python block after {marker} in {GUIDE}"
    return found.group(1)


@pytest.fixture
def statestore_local(moto_server: str, dynamodb_local: str) -> Iterator[LocalRuntime]:  # noqa: F811
    runtime = LocalRuntime.start(
        unique_resources("doc"),
        endpoint_url=moto_server,
        dynamodb_endpoint_url=dynamodb_local,
        snapshot_interval=1.0,  # statestore local takes one a minute; here, during the example
        cleanup_interval=None,
    )
    try:
        yield runtime
    finally:
        runtime.stop()


def test_the_guides_first_example_runs_as_written_against_the_embedded_default(
    statestore_local: LocalRuntime, tmp_path: Path
) -> None:
    code = example()
    assert 8 <= len(code.strip().splitlines()) <= 14  # about ten lines, as the guide promises

    run = subprocess.run(
        [sys.executable, "-c", code],
        env=shell_environment(statestore_local),
        cwd=tmp_path,  # nothing from the checkout's working directory
        capture_output=True,
        text=True,
        timeout=600,
    )

    assert run.returncode == 0, run.stderr[-4_000:]
    assert "rows in [100, 200): 100 - rows at transaction 1: 0" in run.stdout
    counts = dict(re.findall(r"^\|\s*(\d)\|\s*(\d+)\|$", run.stdout, re.MULTILINE))
    assert counts == {str(kind): str(len(range(kind, 1_000, 7))) for kind in range(7)}
    client = statestore_local.client()
    table = client.get_table("events")
    assert [f.name for f in table.schema.row_keys] == ["id"] and [f.name for f in table.schema.sort_keys] == [
        "kind"
    ]
    assert (
        client.snapshots.metadata.latest(table.table_id) is not None
    )  # the runtime took snapshots meanwhile
