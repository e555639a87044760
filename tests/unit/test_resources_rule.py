"""Whose resources: the library, the CLI, the Spark data source and the Spark jobs find an instance by one
rule (statestore.instance.resolve_resources), so one shell's settings reach the same tables and bucket."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import pytest

from spark_client import jobs, source_options
from statestore.cli.errors import EXIT_USAGE, CliError
from statestore.cli.output import Output
from statestore.cli.session import Session
from statestore.instance import ResourceNames
from statestore.services.connect import _resources as connect_resources

STACK = ResourceNames.for_instance("stack", "stack-bucket-123456789012-eu-west-1")

CASES = [
    # (given instance id, environment, expected)
    (None, {}, ResourceNames.for_instance("local")),
    (None, {"STATESTORE_INSTANCE_ID": "prod"}, ResourceNames.for_instance("prod")),
    (
        None,
        {"STATESTORE_INSTANCE_ID": "prod", "STATESTORE_BUCKET": "prod-data-123"},
        ResourceNames.for_instance("prod", "prod-data-123"),
    ),
    (
        "named",
        {"STATESTORE_RESOURCES": STACK.to_json(), "STATESTORE_BUCKET": "named-data"},
        ResourceNames.for_instance("named", "named-data"),
    ),
    (None, {"STATESTORE_RESOURCES": STACK.to_json(), "STATESTORE_INSTANCE_ID": "prod"}, STACK),
]


def by_cli(instance: str | None, env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> ResourceNames:
    for name in ("STATESTORE_RESOURCES", "STATESTORE_INSTANCE_ID", "STATESTORE_BUCKET"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    args = argparse.Namespace(resources_json=None, instance=instance)
    return Session(args, Output(json_mode=False)).resources


FRONT_ENDS: dict[str, Callable[[str | None, dict[str, str], pytest.MonkeyPatch], ResourceNames]] = {
    "statestore.connect": lambda instance, env, _: connect_resources(instance, env),
    "the CLI": by_cli,
    "the data source": lambda instance, env, _: source_options._resources(
        {} if instance is None else {"instance": instance}, env
    ),
    "the jobs": lambda instance, env, _: jobs.resolve_resources(None, None, None, instance, environ=env),
}


@pytest.mark.parametrize("front_end", sorted(FRONT_ENDS))
@pytest.mark.parametrize(("instance", "env", "expected"), CASES)
def test_every_front_end_finds_the_same_instance_and_bucket(
    front_end: str,
    instance: str | None,
    env: dict[str, str],
    expected: ResourceNames,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Before, the CLI alone ignored $STATESTORE_BUCKET: it read and deleted in another bucket.
    assert FRONT_ENDS[front_end](instance, env, monkeypatch) == expected


def by_cli_given(resources: str) -> ResourceNames:
    args = argparse.Namespace(resources_json=resources, instance=None)
    return Session(args, Output(json_mode=False)).resources


GIVEN_JSON_OR_FILE: dict[str, tuple[Callable[[str], ResourceNames], type[Exception], str]] = {
    "the CLI": (by_cli_given, CliError, "--resources-json"),
    "the data source": (
        lambda given: source_options._resources({"resources": given}, {}),
        source_options.DataSourceOptionError,
        "option 'resources'",
    ),
    "the jobs": (
        lambda given: jobs.resolve_resources(given, None, None, environ={}),
        jobs.JobError,
        "--resources",
    ),
}


@pytest.mark.parametrize("front_end", sorted(GIVEN_JSON_OR_FILE))
def test_the_resources_given_are_json_or_a_file_holding_it_and_a_missing_file_is_named(
    front_end: str, tmp_path: Path
) -> None:
    resolve, error, setting = GIVEN_JSON_OR_FILE[front_end]
    saved = tmp_path / "resources.json"
    saved.write_text(STACK.to_json(), encoding="utf-8")
    assert resolve(STACK.to_json()) == STACK
    assert resolve(str(saved)) == STACK

    # Before, the jobs let the missing file's OSError out as a traceback.
    missing = str(tmp_path / "no-such.json")
    with pytest.raises(error, match=f"^{setting}: file '{missing}' does not exist$") as raised:
        resolve(missing)
    assert getattr(raised.value, "exit_code", EXIT_USAGE) == EXIT_USAGE  # the caller's mistake
