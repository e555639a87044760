"""The PostgreSQL password is never taken on a command line, where every user of the machine can read it
(``ps``): ``--postgres-url`` holding one is refused, naming the environment's alternatives."""

from __future__ import annotations

import pytest

from statestore.cli import EXIT_USAGE
from statestore.cli.errors import EXIT_UNAVAILABLE
from tests.cli.conftest import Cli


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://statestore:s3cret@db.example/statestore",
        "postgresql://statestore@db.example/statestore?password=s3cret",
        "host=db.example user=statestore password=s3cret dbname=statestore",
    ],
)
def test_a_postgres_url_with_a_password_on_the_command_line_is_refused(cli: Cli, url: str) -> None:
    refused = cli("tables", "list", "--postgres-url", url)

    assert refused.code == EXIT_USAGE
    assert "STATESTORE_POSTGRES_URL" in refused.err and "PGPASSWORD" in refused.err
    assert "s3cret" not in refused.err


def test_the_same_url_in_the_environment_is_taken(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STATESTORE_POSTGRES_URL", "postgresql://statestore:s3cret@db.invalid/statestore")
    listed = cli("tables", "list", "--json")
    # Taken: the CLI goes on to connect (to a host that does not exist), and says so.
    assert listed.code == EXIT_UNAVAILABLE and "db.invalid" in listed.err, listed.err
