"""TLS to PostgreSQL is verified (``sslmode=verify-full``) against the bundled RDS certificate authorities
unless told otherwise, for real against the throwaway server, which presents a certificate of a test CA;
(The CLI refuses a password on its command line: tests/cli/test_cli_postgres_password.py.)"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from cryptography import x509
from psycopg.conninfo import conninfo_to_dict

from statestore.adapters.postgres import PostgresFileReferenceStore, conninfo_from_secret
from statestore.adapters.postgres.tls import bundled_ca_file, secure_conninfo
from statestore.errors import StoreUnavailableError
from statestore.store.ports import FileCommitMember
from statestore.transactions import AddFiles
from tests.builders import STRING_SCHEMA, data_key, ref, tree
from tests.fixtures.postgres import REMOTE_NAME, SUPERUSER, PostgresServer

PARTITIONS = {p.id: p for p in tree(STRING_SCHEMA)}


def remote_conninfo(server: PostgresServer, dbname: str, **extra: str) -> str:
    """The test server as a client would see a database across the network: by a name its certificate
    holds (reached at the loopback address), with no sslmode unless given."""
    options = " ".join(f"{k}={v}" for k, v in extra.items())
    return (
        f"host={REMOTE_NAME} hostaddr=127.0.0.1 port={server.port} user={SUPERUSER} dbname={dbname} "
        f"connect_timeout=10 {options}"
    )


def dbname(server: PostgresServer) -> str:
    return server.create_database("tls").split("dbname=")[1].split()[0]


def works(conninfo: str) -> None:
    with PostgresFileReferenceStore.connect(conninfo) as store:
        members = [FileCommitMember(AddFiles((ref(data_key("t", "a.parquet"), "root"),)), "r")]
        assert store.commit("t", STRING_SCHEMA, PARTITIONS, members, 1).committed == (0,)
        ssl = store._pool.getconn()
        try:
            assert ssl.pgconn.ssl_in_use
        finally:
            store._pool.putconn(ssl)


def test_a_remote_server_is_verified_by_default_and_one_the_bundle_does_not_vouch_for_is_refused(
    postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PGSSLROOTCERT", raising=False)
    monkeypatch.delenv("PGSSLMODE", raising=False)
    with pytest.raises(StoreUnavailableError, match="certificate"):
        PostgresFileReferenceStore.connect(remote_conninfo(postgres_server, dbname(postgres_server)))


def test_verify_full_connects_to_a_server_whose_ca_is_trusted_and_whose_name_matches(
    postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGSSLROOTCERT", str(postgres_server.ca_file))
    works(remote_conninfo(postgres_server, dbname(postgres_server)))
    works(postgres_server.tls_conninfo(dbname(postgres_server)))  # verify-full given, the CA named


def test_verify_full_refuses_a_trusted_certificate_for_another_name(
    postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGSSLROOTCERT", str(postgres_server.ca_file))
    conninfo = remote_conninfo(postgres_server, dbname(postgres_server)).replace(REMOTE_NAME, "other.test")
    with pytest.raises(StoreUnavailableError, match="other.test"):
        PostgresFileReferenceStore.connect(conninfo)


def test_the_conninfo_from_a_secret_verifies_against_the_bundle() -> None:
    conninfo = conninfo_from_secret({"host": "db.example", "username": "u", "password": "p"})
    params = conninfo_to_dict(conninfo)
    assert params["sslmode"] == "verify-full"
    assert params["sslrootcert"] == bundled_ca_file()


def test_the_bundle_holds_the_rds_authorities_and_the_roots_of_rds_proxy() -> None:
    text = Path(bundled_ca_file()).read_bytes()
    names = {
        c.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)[0].value
        for c in x509.load_pem_x509_certificates(text)
    }
    assert "Amazon RDS us-east-1 Root CA RSA2048 G1" in names
    assert "Amazon RDS eu-west-2 Root CA ECC384 G1" in names
    assert {"Amazon Root CA 1", "Amazon Root CA 3"} <= names  # RDS Proxy's certificates chain to these


def test_a_weaker_sslmode_for_a_remote_server_is_honoured_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, "statestore.postgres"):
        conninfo = secure_conninfo("host=db.example sslmode=require", environ={})
    assert conninfo_to_dict(conninfo)["sslmode"] == "require"
    assert "db.example" in caplog.text and "not checked" in caplog.text


def test_a_local_server_is_left_as_given() -> None:
    for conninfo in ("host=127.0.0.1 port=5", "host=localhost", "host=/tmp/socket", "dbname=x"):
        assert secure_conninfo(conninfo, environ={}) == conninfo
