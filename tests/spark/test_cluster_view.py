"""A region read planned through the queryable view on the multi-process Spark cluster, from the package:
the same rows as through a full load, with commits after the view's number.

The cluster, the package and the embedded instance are ``test_cluster.py``'s fixtures; the table's state
is on DynamoDB Local and its data files in the instance's bucket (moto's S3), read by the executors.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from spark_client.data_store import DataStore
from spark_client.datasource import FORMAT, register
from spark_client.source_options import SourceOptions
from statestore.engine.queryable_view import QueryableView
from statestore.local.runtime import LocalRuntime
from tests.spark.conftest import KEY_SCHEMA, dataframe, key_rows
from tests.spark.test_cluster import (  # noqa: F401  (module fixtures)
    Cluster,
    _read_output,
    cluster,
    package,
    runtime,
    submit,
)

pytestmark = [pytest.mark.spark, pytest.mark.e2e]

SPLITS = [1_000 * i for i in range(1, 10)]
REGION = [3_200, 3_700]

# On the cluster's driver: plan the region's read as the data source does (printing which way), then read
# it through the data source with the view allowed and with it ruled out, each copied to a local directory.
SCRIPT = """
import json, sys
from pyspark.sql import SparkSession
from spark_client import register
from spark_client.read_plan import region_of
from spark_client.source_options import SourceOptions
from spark_client.view_plan import plan_latest, table_view

source = json.loads(sys.argv[1])
options = {"table": source["table"], **source["options"]}
parsed = SourceOptions.parse(options)
client = parsed.connection.client()
info = client.get_table(source["table"])
region = region_of(info.schema, {"key": tuple(source["region"])})
view = table_view(info, client.log, parsed.connection.view_store())
planned = plan_latest(client.state_store(info.table_id), view, [region])
print(json.dumps({"through_view": planned.through_view, "parts": len(planned.parts)}))

spark = SparkSession.builder.getOrCreate()
register(spark)
read = spark.read.format("statestore-table").options(**options)
read = read.option("region", json.dumps({"key": source["region"]}))
read.load().write.parquet(source["through_view"])
read.option("viewMaxLeaves", "0").load().write.parquet(source["full_load"])
print(json.dumps({"read": "done"}))
"""


def test_a_region_read_through_the_view_on_the_cluster_returns_the_full_loads_rows(
    cluster: Cluster,  # noqa: F811
    package: Path,  # noqa: F811
    runtime: LocalRuntime,  # noqa: F811
    spark: SparkSession,
    tmp_path: Path,
) -> None:
    name = f"cluster-view-{uuid.uuid4().hex[:6]}"
    runtime.client().create_table(name, KEY_SCHEMA, SPLITS)
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

    script = tmp_path / "view_read.py"
    script.write_text(SCRIPT)
    source = {
        "table": name,
        "options": options,
        "region": REGION,
        "through_view": str(tmp_path / "through-view"),
        "full_load": str(tmp_path / "full-load"),
    }
    planned, done = submit(cluster, package, script, json.dumps(source))

    assert planned["through_view"] and planned["parts"] > 0, planned
    assert done == {"read": "done"}
    expected = sorted(r for r in first + second if REGION[0] <= r[0] < REGION[1])
    local = DataStore.local(tmp_path)
    assert _read_output(local, "through-view") == _read_output(local, "full-load") == expected
