"""The deployed functions' PostgreSQL file store, built from the environment the stack sets: the host, and the
credentials read from a Secrets Manager secret (moto) — connecting to a real PostgreSQL server."""

from __future__ import annotations

import json
from collections.abc import Iterator

import boto3
import pytest
from moto import mock_aws

from lambdas._runtime import postgres_file_store
from statestore.errors import ResourceNotFoundError, StateStoreError
from statestore.ports import FileCommitMember
from statestore.resources import POSTGRES_HOST_ENV, POSTGRES_SECRET_ARN_ENV, POSTGRES_SSLMODE_ENV
from statestore.transactions import AddFiles
from tests.builders import STRING_SCHEMA, data_key, ref, tree
from tests.fixtures.postgres import SUPERUSER, PostgresServer

REGION = "eu-west-2"


@pytest.fixture
def secrets() -> Iterator[object]:
    with mock_aws():
        yield boto3.client("secretsmanager", region_name=REGION)


def test_no_database_settings_means_no_file_store() -> None:
    assert postgres_file_store({}) is None


@pytest.mark.parametrize("only", [POSTGRES_HOST_ENV, POSTGRES_SECRET_ARN_ENV])
def test_half_the_database_settings_is_refused_naming_both(only: str) -> None:
    with pytest.raises(ValueError, match=f"{POSTGRES_HOST_ENV} and {POSTGRES_SECRET_ARN_ENV}"):
        postgres_file_store({only: "x"})


def test_the_store_connects_to_the_host_given_with_the_secrets_credentials(
    secrets: object, postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    dbname = postgres_server.create_database("runtime").split("dbname=")[1].split()[0]
    # RDS's secret names the cluster's host; the function is told the proxy's, which must win.
    secret = {"username": SUPERUSER, "password": "unused", "port": postgres_server.port, "dbname": dbname}
    arn = secrets.create_secret(  # type: ignore[attr-defined]
        Name="db", SecretString=json.dumps({**secret, "host": "cluster.invalid"})
    )["ARN"]
    environ = {POSTGRES_HOST_ENV: "127.0.0.1", POSTGRES_SECRET_ARN_ENV: arn, POSTGRES_SSLMODE_ENV: "disable"}

    store = postgres_file_store(environ)
    assert store is not None
    try:
        partitions = {p.id: p for p in tree(STRING_SCHEMA)}
        members = [FileCommitMember(AddFiles((ref(data_key("table-1", "a")),)), "request-1")]
        outcome = store.commit("table-1", STRING_SCHEMA, partitions, members, 1_000)
        assert outcome.committed == (0,)
        assert set(store.files("table-1")) == {data_key("table-1", "a")}
    finally:
        store.close()  # type: ignore[attr-defined]


def test_a_missing_secret_is_a_clear_error(secrets: object, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    arn = f"arn:aws:secretsmanager:{REGION}:123456789012:secret:gone-AbCdEf"
    with pytest.raises(ResourceNotFoundError) as raised:
        postgres_file_store({POSTGRES_HOST_ENV: "127.0.0.1", POSTGRES_SECRET_ARN_ENV: arn})
    assert "database secret" in str(raised.value)


def test_a_secret_that_is_not_json_is_a_clear_error(secrets: object, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    arn = secrets.create_secret(Name="db", SecretString="not json")["ARN"]  # type: ignore[attr-defined]
    with pytest.raises(StateStoreError, match="holds no JSON"):
        postgres_file_store({POSTGRES_HOST_ENV: "127.0.0.1", POSTGRES_SECRET_ARN_ENV: arn})
