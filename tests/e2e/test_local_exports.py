"""The ``export`` lines ``statestore local`` prints are what the CLI, the Spark jobs, the data source and
boto3 need, and they work pasted into a shell that has nothing else (no AWS configuration, no endpoints).

(The installed-package test also pastes them and runs a PySpark job through ``format("statestore-table")``.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.runtime_process import RuntimeProcess, statestore_command

pytestmark = [pytest.mark.e2e, pytest.mark.dynamodb_local]

# What a job in the pasted shell does: the jobs' way of finding the instance (spark_client.jobs, as
# `python -m spark_client.jobs ...` does), the data source's (its options parsed from the environment), and
# boto3's (the endpoints and credentials).
CHECKS = """
import json
import boto3
from spark_client.jobs import resolve_resources
from spark_client.source_options import SourceOptions

resources = resolve_resources(None, None, None)
options = SourceOptions.parse({"table": "events"})
print(json.dumps({
    "jobs_instance": resources.instance_id,
    "source_instance": options.connection.resources.instance_id,
    "source_endpoint": options.connection.endpoint_url,
    "dynamodb_tables": boto3.client("dynamodb").list_tables()["TableNames"],
    "queues": boto3.client("sqs").list_queues().get("QueueUrls", []),
}))
"""


def bare_environment(tmp_path: Path) -> dict[str, str]:
    """A shell's environment with this interpreter's tools and nothing about AWS or statestore."""
    return {
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"]),
        "HOME": str(tmp_path),  # no ~/.aws
        "LANG": "C.UTF-8",
    }


def test_the_printed_exports_pasted_into_a_bare_shell_reach_the_runtime_from_the_cli_jobs_source_and_boto3(
    tmp_path: Path,
) -> None:
    env = bare_environment(tmp_path)
    runtime = RuntimeProcess.start(
        statestore_command("local", "--port", "0", "--instance", "pasted", "--snapshot-interval", "0"),
        stderr=tmp_path / "runtime.err",
        env=env,
        cwd=tmp_path,
    )
    try:

        def pasted(command: str) -> str:
            script = "\n".join(["set -e", *runtime.exports, command])
            result = subprocess.run(
                ["bash", "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True
            )
            assert result.returncode == 0, result.stderr
            return result.stdout

        (tmp_path / "schema.json").write_text(json.dumps({"row_keys": [{"name": "key", "type": "long"}]}))
        pasted("statestore tables create events --schema schema.json")
        listed = json.loads(pasted("statestore tables list --json"))
        (tmp_path / "checks.py").write_text(CHECKS)
        seen = json.loads(pasted("python checks.py"))
    finally:
        assert runtime.stop() == 0

    assert [t["table_name"] for t in listed] == ["events"]
    assert seen["jobs_instance"] == seen["source_instance"] == "pasted"
    assert seen["source_endpoint"] == runtime.environment()["AWS_ENDPOINT_URL"]
    assert any("pasted" in name for name in seen["dynamodb_tables"])
    assert any("statestore-pasted-commits.fifo" in url for url in seen["queues"])


def test_the_json_output_holds_the_same_environment_as_the_export_lines(tmp_path: Path) -> None:
    env = bare_environment(tmp_path)
    with open(tmp_path / "out.json", "w") as out:
        process = subprocess.Popen(
            statestore_command("local", "--port", "0", "--json", "--quiet", "--snapshot-interval", "0"),
            stdout=out,
            env=env,
            cwd=tmp_path,
        )
    try:
        deadline = time.monotonic() + 300
        while not (tmp_path / "out.json").read_text().rstrip().endswith("}"):
            assert process.poll() is None and time.monotonic() < deadline, (tmp_path / "out.json").read_text()
            time.sleep(0.2)
    finally:
        process.terminate()
        assert process.wait(timeout=60) == 0
    result = json.loads((tmp_path / "out.json").read_text())

    environment = result["environment"]
    assert environment["AWS_ENDPOINT_URL"] == result["endpoint_url"]
    assert environment["AWS_ENDPOINT_URL_DYNAMODB"] == result["dynamodb_endpoint_url"]
    assert json.loads(environment["STATESTORE_RESOURCES"]) == result["resources"]
    assert environment["AWS_ACCESS_KEY_ID"] == "testing"  # none configured here: the runtime made them up
