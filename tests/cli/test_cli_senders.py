"""``statestore tables create --allowed-sender`` and ``statestore tables senders``: who may commit to a table
through the queue, kept in its record (on the embedded default's DynamoDB)."""

from __future__ import annotations

from pathlib import Path

from statestore.cli import EXIT_OK, EXIT_USAGE
from tests.cli.conftest import Cli
from tests.cli.test_cli import create, unique

JOB_ROLE = "AROAEXAMPLEJOBROLEID1"
OPERATOR = "AIDAEXAMPLEOPERATOR01"


def test_senders_are_set_at_creation_shown_changed_and_cleared(cli: Cli, tmp_path: Path) -> None:
    name = unique("guarded")
    made = create(cli, tmp_path, name, "--allowed-sender", JOB_ROLE)
    assert made["allowed_senders"] == [JOB_ROLE]

    assert cli("tables", "senders", name, "--json").json()["allowed_senders"] == [JOB_ROLE]
    changed = cli("tables", "senders", name, "--set", JOB_ROLE, "--set", OPERATOR, "--json")
    assert changed.code == EXIT_OK, changed.err
    assert cli("tables", "show", name, "--json").json()["allowed_senders"] == [JOB_ROLE, OPERATOR]
    cleared = cli("tables", "senders", name, "--clear")
    assert cleared.code == EXIT_OK and "anyone the queue lets send" in cleared.out
    assert cli("tables", "senders", name, "--json").json()["allowed_senders"] == []


def test_a_role_arn_is_refused_saying_to_give_its_id(cli: Cli, tmp_path: Path) -> None:
    name = unique("guarded")
    create(cli, tmp_path, name)
    refused = cli("tables", "senders", name, "--set", "arn:aws:iam::123456789012:role/job")
    assert refused.code == EXIT_USAGE
    assert "--set" in refused.err and "get-role" in refused.err
    assert cli("tables", "senders", name, "--json").json()["allowed_senders"] == []
