"""``statestore tables create --file-store``, ``--postgres-url``, and the file store shown by
``tables list`` / ``tables show``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from statestore.cli import EXIT_OK, EXIT_USAGE, session
from statestore.cli.errors import CliError
from statestore.instance import POSTGRES_URL_ENV
from statestore.model.files import FileReference
from statestore.services.client import StateStoreClient
from statestore.store.memory_files import InMemoryFileReferenceStore
from statestore.store.ports import FileReferenceStore
from statestore.transactions import AddFiles
from tests.cli.conftest import Cli
from tests.cli.test_cli import SCHEMA, unique, write
from tests.fixtures.postgres import PostgresServer


@pytest.fixture
def postgres(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """``--postgres-url`` connects to an in-memory twin (the PostgreSQL adapter is wired by the
    coordinator); returns the URLs asked for."""
    asked: list[str] = []
    store = InMemoryFileReferenceStore()

    def connect(url: str) -> FileReferenceStore:
        asked.append(url)
        return store

    monkeypatch.setattr(session, "postgres_file_store", connect)
    monkeypatch.delenv("STATESTORE_POSTGRES_URL", raising=False)
    return asked


def test_tables_are_created_with_the_file_store_asked_for_and_list_and_show_say_which(
    cli: Cli, tmp_path: Path, postgres: list[str]
) -> None:
    schema = write(tmp_path / "schema.json", SCHEMA)
    on_log, in_rows = unique("on-log"), unique("in-rows")

    made = cli("tables", "create", on_log, "--schema", schema, "--file-store", "log", "--json")
    assert made.code == EXIT_OK, made.err
    assert made.json()["file_store"] == "log"
    made = cli(
        "tables", "create", in_rows, "--schema", schema, "--file-store", "postgres",
        "--postgres-url", "postgresql://db/statestore", "--json",
    )  # fmt: skip
    assert made.code == EXIT_OK, made.err
    assert made.json()["file_store"] == "postgres"
    assert postgres == ["postgresql://db/statestore"]

    listed = cli("tables", "list", "--json")
    by_name = {t["table_name"]: t["file_store"] for t in listed.json()}
    assert (by_name[on_log], by_name[in_rows]) == ("log", "postgres")
    assert "FILES IN" in cli("tables", "list").out

    shown = cli("tables", "show", in_rows, "--postgres-url", "postgresql://db/statestore")
    assert shown.code == EXIT_OK, shown.err
    assert "files in:" in shown.out and "postgres" in shown.out


def test_a_postgres_table_without_a_postgres_url_says_how_to_give_one(
    cli: Cli, tmp_path: Path, postgres: list[str]
) -> None:
    schema = write(tmp_path / "schema.json", SCHEMA)
    made = cli("tables", "create", unique("no-url"), "--schema", schema, "--file-store", "postgres")
    assert made.code != EXIT_OK
    assert "--postgres-url" in made.err and "STATESTORE_POSTGRES_URL" in made.err
    bad = cli("tables", "create", unique("bad"), "--schema", schema, "--file-store", "mysql")
    assert bad.code == EXIT_USAGE


def test_the_postgres_factory_says_what_is_missing_until_the_adapter_is_installed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "statestore.adapters.postgres", None)  # not importable
    with pytest.raises(CliError, match="PostgreSQL file store cannot be loaded"):
        session.postgres_file_store("postgresql://db/statestore")


def test_on_a_real_postgresql_a_table_made_by_the_cli_keeps_its_files_there_and_the_cli_reads_them(
    cli: Cli, tmp_path: Path, postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(POSTGRES_URL_ENV, raising=False)
    url = postgres_server.create_database("cli")
    schema = write(tmp_path / "schema.json", SCHEMA)
    name = unique("real-rows")
    made = cli(
        "tables", "create", name, "--schema", schema, "--file-store", "postgres", "--postgres-url", url
    )  # fmt: skip
    assert made.code == EXIT_OK, made.err

    from statestore.adapters.postgres import PostgresFileReferenceStore

    with PostgresFileReferenceStore.connect(url) as rows:
        client = StateStoreClient.for_aws(
            cli.runtime.resources,
            cli.runtime.endpoint_url,
            dynamodb_endpoint_url=cli.runtime.dynamodb_endpoint_url,
            file_store=rows,
        )
        table_id = client.get_table(name).table_id
        client.commit(name, AddFiles((FileReference(f"tables/{table_id}/data/a.parquet", "root", 7),)))
        assert set(rows.files(table_id)) == {f"tables/{table_id}/data/a.parquet"}

    listed = cli("files", name, "--json", "--postgres-url", url)
    assert listed.code == EXIT_OK, listed.err
    assert f"tables/{table_id}/data/a.parquet" in listed.out
    # Without the URL the CLI cannot read the table's files, and says how to give it.
    refused = cli("files", name)
    assert refused.code != EXIT_OK and "--postgres-url" in refused.err
