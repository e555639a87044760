"""``statestore.connect`` and the package's entry point: an instance found as every statestore tool finds
it, wrong settings named, and ``import statestore`` as light as before."""

from __future__ import annotations

import subprocess
import sys

import pytest

import statestore
from statestore.errors import ConnectionSettingsError
from statestore.instance import ResourceNames
from statestore.services.client import StateStoreClient
from statestore.services.connect import connect
from statestore.store.memory_files import InMemoryFileReferenceStore


def resources_of(client: StateStoreClient) -> str:
    """The transaction log table the client's log writes to: which instance it reached."""
    table: str = client.log.table_name  # type: ignore[attr-defined]
    return table


def test_the_package_exports_what_a_user_needs_and_says_what_it_does_not_hold() -> None:
    assert statestore.connect is connect
    assert statestore.StateStoreClient is StateStoreClient
    for name in ("Schema", "AddFiles", "FileReference", "Region", "TableNotFoundError", "LocalRuntime"):
        assert name in dir(statestore) and name in statestore.__all__
        assert getattr(statestore, name) is not None
    assert sorted(statestore.__all__) == sorted(statestore._EXPORTS)
    assert all(getattr(statestore, name).__name__ == name for name in statestore.__all__)
    with pytest.raises(AttributeError, match="no attribute 'connnect'"):
        statestore.connnect  # noqa: B018


def test_importing_the_package_loads_none_of_what_its_exports_need() -> None:
    heavy = "('pyarrow', 'boto3', 'botocore')"
    code = f"import sys, statestore; print(sorted(m for m in {heavy} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_instance_comes_from_the_argument_then_the_resources_then_the_instance_id() -> None:
    env = {"STATESTORE_INSTANCE_ID": "fromid"}
    given = ResourceNames.for_instance("given")
    assert resources_of(connect("named", region="eu-west-1", environ=env)).startswith("statestore-named-")
    assert resources_of(connect(given, region="eu-west-1", environ=env)) == given.transaction_log_table
    as_json = connect(given.to_json(), region="eu-west-1", environ={})
    assert resources_of(as_json) == given.transaction_log_table
    assert resources_of(connect(region="eu-west-1", environ=env)).startswith("statestore-fromid-")
    deployed = {**env, "STATESTORE_RESOURCES": ResourceNames.for_instance("stack").to_json()}
    assert resources_of(connect(region="eu-west-1", environ=deployed)).startswith("statestore-stack-")
    assert resources_of(connect(region="eu-west-1", environ={})).startswith("statestore-local-")


def test_the_endpoints_come_from_the_arguments_else_the_variables_statestore_local_prints() -> None:
    env = {"AWS_ENDPOINT_URL": "http://127.0.0.1:4566", "AWS_ENDPOINT_URL_DYNAMODB": "http://127.0.0.1:4567"}
    client = connect("local", region="eu-west-1", environ=env)
    assert client.log.dynamodb.meta.endpoint_url == "http://127.0.0.1:4567"  # type: ignore[attr-defined]
    assert client.blobs.s3.meta.endpoint_url == "http://127.0.0.1:4566"  # type: ignore[attr-defined]
    mine = connect("local", region="eu-west-1", endpoint_url="http://127.0.0.1:9000", environ={})
    assert mine.blobs.s3.meta.endpoint_url == "http://127.0.0.1:9000"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("kwargs", "env", "named"),
    [
        ({"instance": "Bad_Id"}, {}, "instance"),
        ({}, {"STATESTORE_INSTANCE_ID": "Bad_Id"}, r"\$STATESTORE_INSTANCE_ID"),
        ({}, {"STATESTORE_RESOURCES": '{"instance_id": 1}'}, r"\$STATESTORE_RESOURCES"),
        ({"endpoint_url": "127.0.0.1:4566"}, {}, "endpoint_url '127.0.0.1:4566' is not a URL"),
        ({}, {"AWS_ENDPOINT_URL_DYNAMODB": "localhost"}, r"\$AWS_ENDPOINT_URL_DYNAMODB 'localhost'"),
        ({"postgres_url": "postgresql://db/x", "file_store": InMemoryFileReferenceStore()}, {}, "not both"),
    ],
)
def test_a_wrong_setting_is_named(kwargs: dict[str, object], env: dict[str, str], named: str) -> None:
    with pytest.raises(ConnectionSettingsError, match=named):
        connect(region="eu-west-1", environ=env, **kwargs)  # type: ignore[arg-type]


def test_a_file_store_given_holds_the_postgres_tables() -> None:
    store = InMemoryFileReferenceStore()
    assert connect("local", region="eu-west-1", file_store=store, environ={}).file_store is store
