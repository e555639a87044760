"""The README's code runs as written: each marked Python block in a new process whose environment holds the
``export`` lines ``statestore local`` prints, from a directory outside the checkout, against a runtime
started as ``statestore local`` starts it, and then its CLI lines, each as a shell would run it. Its links
lead to pages that exist."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from statestore.local.runtime import LocalRuntime
from tests.fixtures.aws_servers import dynamodb_local, moto_server, unique_resources  # noqa: F401
from tests.spark.embedded import shell_environment

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def block(marker: str) -> str:
    """The Python block right after ``<!-- example: marker -->``."""
    text = README.read_text(encoding="utf-8")
    found = re.search(re.escape(f"<!-- example: {marker} -->") + r"\s*```python\n(.*?)```", text, re.DOTALL)
    assert found is not None, f"README.md has no ```python block after the {marker!r} marker"
    return found.group(1)


def cli_lines() -> list[list[str]]:
    """The commands of the shell block right after ``<!-- example: cli -->``, split as a shell splits them."""
    text = README.read_text(encoding="utf-8")
    found = re.search(r"<!-- example: cli -->\s*```bash\n(.*?)```", text, re.DOTALL)
    assert found is not None, "README.md has no ```bash block after the 'cli' marker"
    return [shlex.split(line) for line in found.group(1).splitlines() if line.strip()]


def run_block(marker: str, runtime: LocalRuntime, cwd: Path) -> str:
    run = subprocess.run(
        [sys.executable, "-c", block(marker)],
        env=shell_environment(runtime),
        cwd=cwd,  # nothing from the checkout's working directory
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-4_000:]
    return run.stdout


@pytest.fixture
def statestore_local(moto_server: str, dynamodb_local: str) -> Iterator[LocalRuntime]:  # noqa: F811
    runtime = LocalRuntime.start(
        unique_resources("readme"),
        endpoint_url=moto_server,
        dynamodb_endpoint_url=dynamodb_local,
        snapshot_interval=None,
        cleanup_interval=None,
    )
    try:
        yield runtime
    finally:
        runtime.stop()


def test_the_readme_is_a_front_door_whose_links_lead_somewhere() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    assert "make demo" in text and "make test" in text
    targets = re.findall(r"\]\(((?!https?:)[^)#]+)(?:#[^)]*)?\)", text)
    assert targets, "the README links into docs/"
    missing = [target for target in targets if not (ROOT / target).exists()]
    assert not missing, f"README links to files that do not exist: {missing}"


@pytest.mark.e2e
@pytest.mark.dynamodb_local
def test_the_readmes_library_example_runs_as_written(statestore_local: LocalRuntime, tmp_path: Path) -> None:
    code = block("library")
    assert len(code.strip().splitlines()) <= 20  # the README promises a short example

    out = run_block("library", statestore_local, tmp_path)

    assert "committed at 2 - resend applied again: False" in out
    assert "files now: 2 - at transaction 1: 0" in out
    client = statestore_local.client()
    table = client.get_table("clicks")
    assert [f.name for f in table.schema.row_keys] == ["user_id"]
    assert client.snapshots.metadata.latest(table.table_id) is not None
    assert all(f.filename.startswith(table.data_prefix) for f in client.files("clicks"))


@pytest.mark.e2e
@pytest.mark.spark
@pytest.mark.dynamodb_local
def test_the_readmes_spark_example_then_its_cli_lines_run_as_written(
    statestore_local: LocalRuntime, tmp_path: Path
) -> None:
    """As a user reads it: the library example, the Spark one, then each CLI line, on the same instance."""
    assert len(block("spark").strip().splitlines()) <= 10
    run_block("library", statestore_local, tmp_path)

    out = run_block("spark", statestore_local, tmp_path)

    assert "rows with 100 <= id < 200: 100" in out
    files = statestore_local.client().files("events")
    assert files and sum(r.number_of_rows for f in files for r in f.references) == 1_000
    cli = Path(sys.executable).with_name("statestore")  # the console script the package installs
    outputs = []
    for command in cli_lines():
        assert command[0] == "statestore", command
        run = subprocess.run(
            [str(cli), *command[1:]],
            env=shell_environment(statestore_local),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert run.returncode == 0, f"{' '.join(command)}: {run.stderr[-4_000:]}"
        outputs.append(run.stdout)

    tables, clicks_files, events_log, report = outputs
    assert "clicks" in tables and "events" in tables
    client = statestore_local.client()
    assert all(f.filename in clicks_files for f in client.files("clicks"))
    assert "InitialisePartitions" in events_log and "1000 rows" in events_log  # the Spark write's commit
    assert "over the split threshold of 1000000 rows" in report and "1000" in report
