"""The deployed functions' PostgreSQL file store, built from the environment the stack sets: the host, and the
credentials read from a Secrets Manager secret (moto) — connecting to a real PostgreSQL server."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator

import boto3
import psycopg
import pytest
from moto import mock_aws

from lambdas._runtime import postgres_file_store
from lambdas.postgres_schema import migrate_from_environment
from statestore.adapters.postgres.schema import APP_ROLE
from statestore.errors import ResourceNotFoundError, StateStoreError
from statestore.instance import (
    POSTGRES_HOST_ENV,
    POSTGRES_MASTER_SECRET_ARN_ENV,
    POSTGRES_SECRET_ARN_ENV,
    POSTGRES_SSLMODE_ENV,
)
from statestore.store.ports import FileCommitMember
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


def test_no_database_settings_needs_no_postgresql_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    # The embedded default installed with the `local` extra only has no psycopg; its committer asks for the
    # file store on every batch and must not fail importing a driver for a database nobody named.
    drivers = [
        m for m in sys.modules if m == "psycopg" or m.startswith(("psycopg.", "statestore.adapters.postgres"))
    ]
    for name in drivers:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "psycopg", None)  # `import psycopg` now raises ImportError

    assert postgres_file_store({}) is None


@pytest.mark.parametrize("only", [POSTGRES_HOST_ENV, POSTGRES_SECRET_ARN_ENV])
def test_half_the_database_settings_is_refused_naming_both(only: str) -> None:
    with pytest.raises(ValueError, match=f"{POSTGRES_HOST_ENV} and {POSTGRES_SECRET_ARN_ENV}"):
        postgres_file_store({only: "x"})


def test_the_store_connects_to_the_host_given_as_the_app_role_the_migration_made(
    secrets: object, postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    dbname = postgres_server.create_database("runtime").split("dbname=")[1].split()[0]

    def secret(name: str, username: str) -> str:
        # RDS's secret names the cluster's host; the function is told the proxy's, which must win.
        fields = {
            "username": username,
            "password": f"{name}-pw",
            "port": postgres_server.port,
            "dbname": dbname,
        }
        return secrets.create_secret(  # type: ignore[attr-defined]
            Name=name, SecretString=json.dumps({**fields, "host": "cluster.invalid"})
        )["ARN"]

    master, app = secret("master", SUPERUSER), secret("app", APP_ROLE)
    environ = {
        POSTGRES_HOST_ENV: "127.0.0.1",
        POSTGRES_SECRET_ARN_ENV: app,
        POSTGRES_MASTER_SECRET_ARN_ENV: master,
        POSTGRES_SSLMODE_ENV: "disable",
    }
    assert migrate_from_environment(environ) == APP_ROLE  # what the deploy's trigger runs

    store = postgres_file_store({k: v for k, v in environ.items() if k != POSTGRES_MASTER_SECRET_ARN_ENV})
    assert store is not None
    try:
        partitions = {p.id: p for p in tree(STRING_SCHEMA)}
        members = [FileCommitMember(AddFiles((ref(data_key("table-1", "a")),)), "request-1")]
        outcome = store.commit("table-1", STRING_SCHEMA, partitions, members, 1_000)
        assert outcome.committed == (0,)
        assert set(store.files("table-1")) == {data_key("table-1", "a")}
    finally:
        store.close()  # type: ignore[attr-defined]
    with psycopg.connect(postgres_server.conninfo(dbname)) as conn:
        row = conn.execute("SELECT rolpassword FROM pg_authid WHERE rolname = %s", (APP_ROLE,)).fetchone()
    assert row is not None and row[0].startswith("SCRAM-SHA-256$"), "a SCRAM verifier, never the password"


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
