"""The Spark jobs find the instance as the CLI and the data source do: ``python -m spark_client.jobs`` in a
shell holding the ``export`` lines ``statestore local`` prints needs no ``--resources``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from spark_client.jobs import EXIT_FAILED, EXIT_OK, main
from statestore.local.runtime import LocalRuntime
from tests.fixtures.aws_servers import dynamodb_local, moto_server  # noqa: F401  (session fixtures)
from tests.spark.conftest import KEY_SCHEMA, key_rows
from tests.spark.embedded import embedded, shell_environment, user_shell  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.spark, pytest.mark.e2e, pytest.mark.dynamodb_local]

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_a_job_run_in_a_shell_with_statestore_locals_exports_ingests_into_that_instance(
    spark: SparkSession,
    embedded: LocalRuntime,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = embedded.client()
    client.create_table("events", KEY_SCHEMA, [5_000])
    rows = key_rows(2_000, seed=400)
    (tmp_path / "input").mkdir()
    columns = list(zip(*rows, strict=True))
    pq.write_table(
        pa.table({"key": columns[0], "ts": columns[1], "value": columns[2]}),
        tmp_path / "input" / "part-0.parquet",
    )

    # As a user runs it: a new process, the exports in its environment, no --resources or --instance.
    job = subprocess.run(
        [
            sys.executable,
            "-m",
            "spark_client.jobs",
            "ingest",
            "--table",
            "events",
            "--input",
            str(tmp_path / "input"),
        ],
        env=shell_environment(embedded),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )

    assert job.returncode == EXIT_OK, job.stderr[-3_000:]
    printed = json.loads(job.stdout.strip().splitlines()[-1])
    assert printed["rows"] == 2_000 and printed["outcome"]["committed"] is True
    assert sum(f.references[0].number_of_rows for f in client.files("events")) == 2_000

    # The query job, in this process, from the same environment (the exports monkeypatched in).
    for name, value in shell_environment(embedded).items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("STATESTORE_RESOURCES", raising=False)
    capsys.readouterr()
    output = tmp_path / "out"
    assert (
        main(["query", "--table", "events", "--key-range", "key=1000:6000", "--output", str(output)], spark)
        == 0
    )
    assert json.loads(capsys.readouterr().out)["rows"] == sum(1 for r in rows if 1_000 <= r[0] < 6_000)
    back = pq.read_table(output)
    assert sorted(zip(*(back.column(n).to_pylist() for n in ("key", "ts", "value")), strict=True)) == sorted(
        r for r in rows if 1_000 <= r[0] < 6_000
    )


def test_a_job_naming_an_instance_that_has_no_such_table_says_which_instance_it_looked_in(
    spark: SparkSession,
    user_shell: dict[str, str],  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["compact", "--table", "no-such-table"], spark) == EXIT_FAILED
    err = capsys.readouterr().err
    instance = user_shell["STATESTORE_INSTANCE_ID"]
    assert (
        f"table not found: 'no-such-table' (instance {instance!r} at {user_shell['AWS_ENDPOINT_URL']})" in err
    )
    assert "--instance or $STATESTORE_INSTANCE_ID" in err
