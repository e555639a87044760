"""The data source's options: what comes from them, what from the environment, and errors for bad ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spark_client.data_store import DataStore
from spark_client.errors import DataSourceOptionError
from spark_client.source_options import SourceOptions
from statestore.instance import ResourceNames
from statestore.model.partitions import Range, Region
from statestore.model.schema import Schema

pytestmark = pytest.mark.spark

NO_ENV: dict[str, str] = {}


def test_the_instance_and_endpoints_default_to_the_environment_as_the_cli_finds_them() -> None:
    resources = ResourceNames.for_instance("prod", bucket="my-bucket")
    env = {
        "STATESTORE_RESOURCES": resources.to_json(),
        "AWS_ENDPOINT_URL": "http://127.0.0.1:4566",
        "AWS_ENDPOINT_URL_DYNAMODB": "http://127.0.0.1:4567",
    }

    options = SourceOptions.parse({"path": "events"}, env)

    assert options.table == "events"
    assert options.connection.resources == resources
    assert options.connection.endpoint_url == "http://127.0.0.1:4566"
    assert options.connection.dynamodb_endpoint_url == "http://127.0.0.1:4567"
    assert options.data == DataStore.s3("my-bucket", endpoint_url="http://127.0.0.1:4566")
    assert (options.committer, options.as_of, options.region) == ("queue", None, None)


def test_options_win_over_the_environment(tmp_path: Path) -> None:
    env = {
        "STATESTORE_RESOURCES": ResourceNames.for_instance("prod").to_json(),
        "AWS_ENDPOINT_URL": "http://x:1",
    }
    resources_file = tmp_path / "resources.json"
    resources_file.write_text(ResourceNames.for_instance("fromfile").to_json())

    by_instance = SourceOptions.parse({"table": "t", "instance": "dev", "endpoint": "http://y:2"}, env)
    by_file = SourceOptions.parse(
        {"TABLE": "t", "Resources": str(resources_file), "data": str(tmp_path)}, env
    )

    assert by_instance.connection.resources.instance_id == "dev"
    assert by_instance.connection.endpoint_url == "http://y:2"
    assert by_file.connection.resources.instance_id == "fromfile"
    assert by_file.data == DataStore.local(tmp_path)
    assert SourceOptions.parse({"table": "t"}, NO_ENV).connection.resources.instance_id == "local"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "needs the table"),
        ({"table": "t", "tabel": "u"}, "unknown option\\(s\\) \\['tabel'\\]"),
        ({"table": "t", "path": "u"}, "option 'table' is 't' but the path is 'u'"),
        ({"table": "t", "committer": "lambda"}, "option 'committer' is 'queue' or 'sync'"),
        ({"table": "t", "asOf": "-1"}, "option 'asOf' must be an integer >= 0, got '-1'"),
        ({"table": "t", "rowsPerTask": "lots"}, "option 'rowsPerTask' must be an integer >= 1"),
        ({"table": "t", "commitTimeout": "0"}, "option 'commitTimeout' must be a number of seconds > 0"),
        ({"table": "t", "data": "relative/dir"}, "s3://bucket or an absolute local directory"),
        ({"table": "t", "data": "s3://"}, "names no bucket"),
        ({"table": "t", "instance": "Bad_Id"}, "option 'instance': instance id 'Bad_Id'"),
        ({"table": "t", "resources": "{not json"}, "not the stack's StatestoreResources JSON"),
        (
            {"table": "t", "resources": "/no/such/file"},
            "option 'resources': file '/no/such/file' does not exist",
        ),
        ({"table": "t", "region": "us-east-1"}, "the AWS region is option 'awsRegion'"),
        ({"table": "t", "region": "[1, 2]"}, "must be a JSON object of row key -> \\[min, max\\]"),
    ],
)
def test_bad_options_are_named_with_what_to_do(options: dict[str, str], message: str) -> None:
    with pytest.raises(DataSourceOptionError, match=message):
        SourceOptions.parse(options, NO_ENV)


def test_the_region_option_is_a_region_of_the_tables_row_keys() -> None:
    schema = Schema.of({"name": "string", "raw": "bytes", "n": "int"})
    region = {"name": ["b", None], "raw": [None, "/w=="]}  # bytes in base64: b"\xff"

    options = SourceOptions.parse({"table": "t", "region": json.dumps(region)}, NO_ENV)

    assert options.region_in(schema) == Region((Range("b", None), Range(b"", b"\xff"), Range(-(2**31), None)))
    assert SourceOptions.parse({"table": "t"}, NO_ENV).region_in(schema) == Region.whole(schema)
    for bad, message in [
        ({"n": [5, 5]}, "empty range"),
        ({"n": [1]}, "'n' needs \\[min, max\\]"),
        ({"raw": ["%%", None]}, "invalid base64"),
        ({"n": [1.5, None]}, "field 'n' \\(int\\) needs an integer"),
    ]:
        with pytest.raises(DataSourceOptionError, match=f"option 'region': .*{message}"):
            SourceOptions.parse({"table": "t", "region": json.dumps(bad)}, NO_ENV).region_in(schema)
