"""The jobs on a real multi-process Spark cluster, shipped as `make spark-package` ships them.

A Spark standalone master and two workers run from the pip package on loopback, with an environment that
has neither this checkout nor its virtual environment in it. Jobs go in through ``spark-submit`` with the
package's code zip (``--py-files``), Python environment (``--archives ...#environment``) and entry point,
as on EMR Serverless, against the embedded endpoint (DynamoDB Local, moto's S3 and SQS, the local
committer). Their results are checked row for row against plain Spark over the same input. A region read
planned through the queryable view is checked here too, on the same cluster (one cluster per module).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tarfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pyspark
import pytest
from pyspark.sql import SparkSession

from infra.asset import REPO_ROOT
from infra.spark_package import build_package
from spark_client.data_store import DataStore
from spark_client.datasource import FORMAT, register
from spark_client.source_options import SourceOptions
from statestore.engine.queryable_view import QueryableView
from statestore.local.runtime import LocalRuntime
from statestore.model import layout
from statestore.model.schema import Schema
from statestore.services.client import StateStoreClient
from tests.fixtures.aws_servers import unique_resources
from tests.spark.conftest import KEY_SCHEMA, dataframe, key_rows

pytestmark = [pytest.mark.spark, pytest.mark.e2e]

SPARK_HOME = Path(pyspark.__file__).parent
SCHEMA = Schema.of({"key": "long"}, sort_keys={"ts": "long"}, values={"value": "string"})
ARROW_SCHEMA = pa.schema(
    [pa.field("key", pa.int64(), nullable=False), pa.field("ts", pa.int64()), pa.field("value", pa.string())]
)


FAKE_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _clean_environment(**extra: str) -> dict[str, str]:
    """What a cluster host has: no PYTHONPATH, no virtual environment, not this checkout."""
    keep = ("PATH", "HOME", "JAVA_HOME", "LANG", "TMPDIR")
    env = {name: os.environ[name] for name in keep if name in os.environ}
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "/usr/bin:/bin").split(os.pathsep) if p != venv_bin
    )
    env.update(SPARK_HOME=str(SPARK_HOME), SPARK_LOCAL_IP="127.0.0.1", **extra)
    return env


@dataclass
class Cluster:
    master_url: str
    ui_url: str
    work_dir: Path

    def alive_workers(self) -> int:
        with urllib.request.urlopen(f"{self.ui_url}/json/", timeout=5) as response:
            state = json.load(response)
        return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    work = tmp_path_factory.mktemp("spark-cluster")
    port, ui_port = _free_port(), _free_port()
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    # The hosts' own credentials, as an instance role gives them on EMR: executors do not inherit the
    # driver's environment.
    env = _clean_environment(**FAKE_CREDENTIALS)
    logs = []
    processes = []

    def start(name: str, *args: str) -> None:
        log = (work / f"{name}.log").open("wb")
        logs.append(log)
        processes.append(
            subprocess.Popen([spark_class, *args], env=env, cwd=work, stdout=log, stderr=subprocess.STDOUT)
        )

    start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
          "--webui-port", str(ui_port))  # fmt: skip
    found = Cluster(f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{ui_port}", work)
    try:
        _wait_for(lambda: _answers(found.ui_url), 60, "the master's UI", work / "master.log")
        for i in (1, 2):
            worker = ["--host", "127.0.0.1", "--cores", "1", "--memory", "1g", "--webui-port", "0"]
            worker += ["--work-dir", str(work / f"w{i}")]
            start(f"worker-{i}", "org.apache.spark.deploy.worker.Worker", found.master_url, *worker)
        _wait_for(lambda: found.alive_workers() == 2, 90, "two workers", work / "worker-1.log")
        yield found
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
        for log in logs:
            log.close()
        # Each executor unpacked the environment archive (~270 MB); its logs beside it stay.
        for unpacked in work.glob("w*/app-*/*/environment"):
            shutil.rmtree(unpacked, ignore_errors=True)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except OSError:
        return False


def _wait_for(check: Any, seconds: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.5)
    tail = log.read_text(errors="replace")[-3000:] if log.exists() else "(no log)"
    raise AssertionError(f"{what} did not come up in {seconds:g}s; log:\n{tail}")


@pytest.fixture(scope="module")
def package() -> Path:
    """`make spark-package`'s output (built here if it is not up to date)."""
    out = REPO_ROOT / "build" / "spark"
    build_package(out)
    return out


@pytest.fixture(scope="module")
def runtime() -> Iterator[LocalRuntime]:
    with LocalRuntime.start(
        unique_resources("cluster"), port=0, snapshot_interval=None, cleanup_interval=None
    ) as rt:
        yield rt


def submit(cluster: Cluster, package: Path, script: Path, *args: str) -> list[dict[str, Any]]:
    """Run ``script`` through spark-submit on the cluster, from a directory with nothing of ours in it."""
    env = _clean_environment(**FAKE_CREDENTIALS)
    run_dir = cluster.work_dir / f"submit-{uuid.uuid4().hex[:8]}"
    run_dir.mkdir()
    # The driver's working directory holds the unpacked environment, as on EMR Serverless (and YARN or
    # Kubernetes in cluster mode), where spark.archives are unpacked for the driver too. The Python data
    # source's planning runs in a Python worker on the driver started with spark.pyspark.python
    # (./environment/bin/python), not spark.pyspark.driver.python.
    (run_dir / "environment").symlink_to(_driver_environment(package), target_is_directory=True)
    command = [
        str(SPARK_HOME / "bin" / "spark-submit"),
        "--master", cluster.master_url,
        "--py-files", str(package / layout.SPARK_CODE_ARCHIVE),
        "--archives", f"{package / layout.SPARK_ENVIRONMENT_ARCHIVE}#environment",
        "--conf", "spark.pyspark.python=./environment/bin/python",
        "--conf", "spark.pyspark.driver.python=./environment/bin/python",
        "--conf", "spark.executor.memory=512m",
        "--conf", "spark.executor.cores=1",
        "--conf", "spark.cores.max=2",
        "--conf", "spark.ui.enabled=false",
        "--conf", "spark.sql.shuffle.partitions=4",
        str(script),
        *args,
    ]  # fmt: skip
    result = subprocess.run(command, env=env, cwd=run_dir, capture_output=True, text=True, timeout=600)
    (run_dir / "stdout.log").write_text(result.stdout)
    (run_dir / "stderr.log").write_text(result.stderr)
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if result.returncode != 0 or not lines:
        errors = [line for line in result.stdout.splitlines() if "Error" in line or "error" in line]
        raise AssertionError(
            f"spark-submit {args[0][:40]!r} exited {result.returncode}; full output in {run_dir}\n"
            f"errors on stdout:\n" + "\n".join(errors[:20]) + f"\nstderr:\n{result.stderr[-4000:]}"
        )
    return [json.loads(line) for line in lines]


def _driver_environment(package: Path) -> Path:
    """The package's environment unpacked for the driver: it runs from the package too."""
    unpacked = package.parent / "spark-driver-environment"
    marker = unpacked / ".archive-sha256"
    digest = json.loads((package / "spark-package.json").read_text())["files"][
        layout.SPARK_ENVIRONMENT_ARCHIVE
    ]
    if not marker.is_file() or marker.read_text() != digest["sha256"]:
        shutil.rmtree(unpacked, ignore_errors=True)
        with tarfile.open(package / layout.SPARK_ENVIRONMENT_ARCHIVE) as tar:
            tar.extractall(unpacked, filter="tar")
        marker.write_text(digest["sha256"])
    return unpacked


# The end of the pipeline below, on the cluster's driver: plan the view table's region read as the data
# source does (printing which way), then read it through the data source with the view allowed and with it
# ruled out, each copied to a local directory.
VIEW_READ = """
from spark_client.read_plan import region_of
from spark_client.source_options import SourceOptions
from spark_client.view_plan import plan_latest, table_view

source = json.loads(sys.argv[3])
options = {"table": source["table"], **source["options"]}
parsed = SourceOptions.parse(options)
client = parsed.connection.client()
info = client.get_table(source["table"])
region = region_of(info.schema, {"key": tuple(source["region"])})
view = table_view(info, client.log, parsed.connection.view_store())
planned = plan_latest(client.state_store(info.table_id), view, [region])
print(json.dumps({"through_view": planned.through_view, "parts": len(planned.parts)}))

read = spark.read.format("statestore-table").options(**options)
read = read.option("region", json.dumps({"key": source["region"]}))
read.load().write.parquet(source["through_view"])
read.option("viewMaxLeaves", "0").load().write.parquet(source["full_load"])
print(json.dumps({"read": "done"}))
"""

# One application for the jobs after the first (each application starts its own executors, which is most
# of a small job's time): it checks where the executors import from, then runs each job's entry point
# (the same main() statestore_job.py runs) in turn on one session. Then it reads the table through the
# data source (whose reader is pickled to the executors' Python workers) and appends through it; VIEW_READ,
# run after it, reads another table's region through the queryable view.
PIPELINE = """
import json, sys
from pyspark.sql import SparkSession
from spark_client import register
from spark_client.jobs import main

def where(_):
    import pyarrow, spark_client, statestore
    yield {"executable": sys.executable, "prefix": sys.prefix, "spark_client": spark_client.__file__,
           "statestore": statestore.__file__, "pyarrow": pyarrow.__file__, "path": sys.path}

spark = SparkSession.builder.getOrCreate()
print(json.dumps({"executors": spark.sparkContext.parallelize(range(2), 2).mapPartitions(where).collect()}))
for job in json.loads(sys.argv[1]):
    if main(job, spark=spark) != 0:
        sys.exit(f"job {job[0]} failed")

source = json.loads(sys.argv[2])
register(spark)
read = spark.read.format("statestore-table").options(**source["options"])
read.option("region", json.dumps({"key": [20000, 70000]})).load(source["table"]).write.parquet(source["copy"])
appended = spark.read.parquet(source["append"])
appended.write.format("statestore-table").options(**source["options"]).mode("append").save(source["table"])
print(json.dumps({"source": "done"}))
"""


def check_executors(seen: list[dict[str, Any]]) -> None:
    assert len(seen) == 2
    for executor in seen:
        assert layout.SPARK_CODE_ARCHIVE in executor["spark_client"], executor
        assert layout.SPARK_CODE_ARCHIVE in executor["statestore"], executor
        assert "/environment/lib/python3.11/site-packages/pyarrow" in executor["pyarrow"], executor
        assert executor["prefix"].endswith("/environment"), executor
        # Besides the package, only the Spark installation's own Python libraries (pyspark.zip, py4j):
        # nothing from this checkout or from the virtual environment's site-packages.
        ours = [
            p for p in executor["path"] if p.startswith(str(REPO_ROOT)) and not p.startswith(str(SPARK_HOME))
        ]
        assert ours == [], executor


def _rows(seed: int, n: int) -> pa.Table:
    rng = random.Random(seed)
    keys = [rng.randrange(0, 100_000) for _ in range(n)]
    return pa.table(
        {
            "key": keys,
            "ts": [seed * 1_000_000 + i for i in range(n)],
            "value": [f"v{seed}-{i}" for i in range(n)],
        },
        schema=ARROW_SCHEMA,
    )


def _read_output(data: DataStore, prefix: str) -> list[tuple[Any, ...]]:
    fs = data.filesystem()
    from pyarrow import fs as pafs

    files = [
        i.path
        for i in fs.get_file_info(pafs.FileSelector(data.path(prefix), recursive=True))
        if i.is_file and i.path.endswith(".parquet")  # not Spark's _SUCCESS or .crc files
    ]
    tables = [pq.read_table(f, filesystem=fs) for f in files]
    return sorted(tuple(r.values()) for t in tables for r in t.to_pylist())


VIEW_SPLITS = [1_000 * i for i in range(1, 10)]
VIEW_REGION = [3_200, 3_700]


@dataclass
class ViewTable:
    """A table with a queryable view and a commit after the view's number, for the pipeline's VIEW_READ."""

    source: dict[str, Any]
    rows: list[tuple[Any, ...]]


def _view_table(runtime: LocalRuntime, spark: SparkSession, out: Path) -> ViewTable:
    name = f"cluster-view-{uuid.uuid4().hex[:6]}"
    runtime.client().create_table(name, KEY_SCHEMA, VIEW_SPLITS)
    options = {
        "resources": runtime.resources.to_json(),
        "endpoint": runtime.endpoint_url,
        "dynamodbEndpoint": runtime.dynamodb_endpoint_url,
        "awsRegion": runtime.region,
    }
    register(spark)
    first, second = key_rows(3_000, seed=343), key_rows(1_000, seed=344)

    def append(rows: list[tuple[Any, ...]]) -> None:
        writer = dataframe(spark, KEY_SCHEMA, rows).write.format(FORMAT).options(**options, committer="sync")
        writer.mode("append").save(name)

    append(first)
    parsed = SourceOptions.parse({"table": name, **options})
    client = parsed.connection.client()
    info = client.get_table(name)
    QueryableView(info.table_id, KEY_SCHEMA, client.log, parsed.connection.view_store()).update(
        client.state_store(info.table_id).state
    )
    append(second)  # after the view's number: the view's answer merges it
    source = {
        "table": name,
        "options": options,
        "region": VIEW_REGION,
        "through_view": str(out / "through-view"),
        "full_load": str(out / "full-load"),
    }
    return ViewTable(source, first + second)


@dataclass
class PipelineRun:
    """The module's two applications: the first ingest, then PIPELINE, and what each printed."""

    client: StateStoreClient
    table_id: str
    bucket: DataStore
    out: Path
    local_input: Path
    first: dict[str, Any]
    printed: list[dict[str, Any]]
    view_rows: list[tuple[Any, ...]]


@pytest.fixture(scope="module")
def pipeline_run(
    cluster: Cluster,
    package: Path,
    runtime: LocalRuntime,
    spark: SparkSession,
    tmp_path_factory: pytest.TempPathFactory,
) -> PipelineRun:
    """Both tests' work in two applications: every application starts its own executors, which is most of a
    small job's time on the cluster."""
    out = tmp_path_factory.mktemp("cluster-run")
    client = runtime.client()
    table = client.create_table(f"cluster-{uuid.uuid4().hex[:6]}", SCHEMA, [50_000])
    bucket = DataStore.s3(runtime.resources.bucket, endpoint_url=runtime.endpoint_url)
    common = [
        "--table", table.table_name,
        "--resources", runtime.resources.to_json(),
        "--endpoint-url", runtime.endpoint_url,
        "--dynamodb-endpoint-url", runtime.dynamodb_endpoint_url,
        "--region", runtime.region,
        "--wait-timeout", "120",
    ]  # fmt: skip
    entry = package / layout.SPARK_ENTRY_POINT

    # Batch 1 staged in the bucket (two files), batch 2 in a local directory.
    local_input = out / "input"
    for batch, files in ((1, 2), (2, 1)):
        for part in range(files):
            rows = _rows(batch * 10 + part, 3_000)
            (local_input / f"batch-{batch}").mkdir(parents=True, exist_ok=True)
            pq.write_table(rows, local_input / f"batch-{batch}" / f"part-{part}.parquet")
            if batch == 1:
                key = f"{layout.SPARK_INPUT_PREFIX}{table.table_id}/part-{part}.parquet"
                pq.write_table(rows, bucket.path(key), filesystem=bucket.filesystem())

    staged = f"s3://{bucket.base}/{layout.SPARK_INPUT_PREFIX}{table.table_id}"
    [first] = submit(cluster, package, entry, "ingest", *common, "--input", staged)
    watermark = first["outcome"]["transaction_number"]

    result = f"s3://{bucket.base}/{layout.SPARK_OUTPUT_PREFIX}{table.table_id}"
    jobs = [
        ["ingest", *common, "--input", str(local_input / "batch-2")],
        ["split", *common, "--max-rows", "2000"],
        ["compact", *common],
        ["query", *common, "--key-range", "key=20000:70000", "--output", f"{result}/region"],
        ["incremental", *common, "--since", str(watermark), "--output", str(out / "added")],
    ]
    source = {
        "table": table.table_name,
        "options": {
            "resources": runtime.resources.to_json(),
            "endpoint": runtime.endpoint_url,
            "dynamodbEndpoint": runtime.dynamodb_endpoint_url,
            "awsRegion": runtime.region,
        },
        "copy": str(out / "source-region"),  # Spark writes locally: no s3a connector offline
        "append": str(local_input / "batch-3"),
    }
    (local_input / "batch-3").mkdir()
    pq.write_table(_rows(30, 2_000), local_input / "batch-3" / "part-0.parquet")
    view_table = _view_table(runtime, spark, out)
    pipeline = out / "pipeline.py"
    pipeline.write_text(PIPELINE + VIEW_READ)
    printed = submit(
        cluster, package, pipeline, json.dumps(jobs), json.dumps(source), json.dumps(view_table.source)
    )
    return PipelineRun(client, table.table_id, bucket, out, local_input, first, printed, view_table.rows)


def test_ingest_split_compact_query_and_read_incrementally_on_the_cluster_from_the_package(
    pipeline_run: PipelineRun, spark: SparkSession
) -> None:
    run, first = pipeline_run, pipeline_run.first
    assert first["rows"] == 6_000 and first["outcome"]["committed"], first
    probe, second, split, compacted, answer, added, through_source = run.printed[:7]

    check_executors(probe["executors"])
    assert second["rows"] == 3_000 and second["outcome"]["committed"], second
    assert split["split"], split
    assert compacted["jobs_committed"] >= 1 and compacted["jobs_lost"] == [], compacted

    store = run.client.state_store(run.table_id)
    state = store.state()
    before_append = store.load(state.transaction_number - 1)
    assert sum(r.number_of_rows for r in before_append.file_references()) == 9_000
    assert len(state.leaf_partitions()) > 2

    local_input = run.local_input
    everything = spark.read.parquet(str(local_input / "batch-1"), str(local_input / "batch-2"))
    expected_region = sorted(tuple(r) for r in everything.where("key >= 20000 AND key < 70000").collect())
    assert answer["rows"] == len(expected_region)
    assert _read_output(run.bucket, f"{layout.SPARK_OUTPUT_PREFIX}{run.table_id}/region") == expected_region

    expected_added = sorted(tuple(r) for r in spark.read.parquet(str(local_input / "batch-2")).collect())
    assert added["rows"] == 3_000
    assert _read_output(DataStore.local(run.out), "added") == expected_added

    # The data source, on the executors: a region read (planned on the driver, read in the tasks), then an
    # append of batch 3 committed as ONE more transaction.
    assert through_source == {"source": "done"}
    assert _read_output(DataStore.local(run.out), "source-region") == expected_region
    assert sum(r.number_of_rows for r in state.file_references()) == 11_000


def test_a_region_read_through_the_view_on_the_cluster_returns_the_full_loads_rows(
    pipeline_run: PipelineRun,
) -> None:
    """A region read planned through the queryable view, with a commit after the view's number, returns
    the same rows as through a full load."""
    planned, done = pipeline_run.printed[7:]

    assert planned["through_view"] and planned["parts"] > 0, planned
    assert done == {"read": "done"}
    expected = sorted(r for r in pipeline_run.view_rows if VIEW_REGION[0] <= r[0] < VIEW_REGION[1])
    local = DataStore.local(pipeline_run.out)
    assert _read_output(local, "through-view") == _read_output(local, "full-load") == expected
