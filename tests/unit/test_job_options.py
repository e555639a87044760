"""The job entry point's options: where the instance is, key ranges, and clear errors before any Spark."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from spark_client.jobs import (
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    JobError,
    _key_ranges,
    main,
    parser,
    resolve_resources,
)
from statestore.instance import ResourceNames
from statestore.model.schema import Schema

SCHEMA = Schema.of({"key": "long", "name": "string"}, values={"v": "string"})


def test_the_resources_come_from_json_text_a_file_or_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = ResourceNames.for_instance("jobs")
    assert resolve_resources(names.to_json(), None, None) == names
    path = tmp_path / "resources.json"
    path.write_text(names.to_json())
    assert resolve_resources(str(path), None, None) == names
    monkeypatch.setenv("STATESTORE_RESOURCES", names.to_json())
    assert resolve_resources(None, None, None) == names


def test_the_instance_comes_from_the_option_or_the_environment_as_the_cli_finds_it() -> None:
    named = ResourceNames.for_instance("named")
    env = {"STATESTORE_INSTANCE_ID": "fromenv"}
    assert resolve_resources(None, None, None, environ=env) == ResourceNames.for_instance("fromenv")
    assert resolve_resources(None, None, None, "named", environ=env) == named
    # --instance wins over $STATESTORE_RESOURCES, as it does for the CLI; the resources JSON over the id
    with_json = {**env, "STATESTORE_RESOURCES": ResourceNames.for_instance("json").to_json()}
    assert resolve_resources(None, None, None, "named", environ=with_json) == named
    assert resolve_resources(None, None, None, environ=with_json) == ResourceNames.for_instance("json")
    assert resolve_resources(None, None, None, environ={}) == ResourceNames.for_instance("local")
    bucket = {**env, "STATESTORE_BUCKET": "my-data"}
    assert resolve_resources(None, None, None, environ=bucket).bucket == "my-data"


def test_a_bad_instance_id_and_a_wrong_resources_json_are_usage_errors_naming_where_they_came_from(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("STATESTORE_RESOURCES", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL_DYNAMODB", raising=False)
    monkeypatch.setenv("STATESTORE_INSTANCE_ID", "Not_An_Id")
    assert main(["compact", "--table", "t"]) == EXIT_USAGE
    assert "$STATESTORE_INSTANCE_ID: instance id 'Not_An_Id' must be" in capsys.readouterr().err
    assert main(["compact", "--table", "t", "--instance", "x y"]) == EXIT_USAGE
    assert "--instance: instance id 'x y' must be" in capsys.readouterr().err
    assert main(["compact", "--table", "t", "--resources", json.dumps({"bucket": "b"})]) == EXIT_USAGE
    assert "--resources is not the stack's StatestoreResources JSON" in capsys.readouterr().err


def test_a_local_endpoint_where_nothing_answers_fails_at_once_saying_how_to_start_one(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    assert main(["compact", "--table", "t"]) == EXIT_UNAVAILABLE
    err = capsys.readouterr().err
    assert f"nothing answers at http://127.0.0.1:{port}" in err and "statestore local" in err
    assert "--endpoint-url / $AWS_ENDPOINT_URL" in err


def test_key_ranges_are_typed_by_the_schema_and_either_side_may_be_open() -> None:
    assert _key_ranges(SCHEMA, ["key=10:20", "name=:m"]) == {"key": (10, 20), "name": (None, "m")}
    assert _key_ranges(SCHEMA, []) is None
    for bad, message in (
        ("key", "write KEY=MIN:MAX"),
        ("key=1", "write KEY=MIN:MAX"),
        ("v=1:2", "'v' is not a row key"),
        ("key=ten:20", "'ten' is not a long"),
    ):
        with pytest.raises(JobError, match=message):
            _key_ranges(SCHEMA, [bad])


def test_counts_must_be_positive_whole_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    for value in ("0", "-3", "many"):
        with pytest.raises(SystemExit) as exited:
            parser().parse_args(["split", "--table", "t", "--max-rows", value])
        assert exited.value.code == 2
    assert "is not" in capsys.readouterr().err
