"""The job entry point's options: where the instance is, key ranges, and clear errors before any Spark."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spark_client.jobs import EXIT_USAGE, JobError, _key_ranges, main, parser, resolve_resources
from statestore.resources import ResourceNames
from statestore.schema import Schema

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


def test_no_instance_and_a_wrong_resources_json_are_usage_errors_naming_the_option(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("STATESTORE_RESOURCES", raising=False)
    assert main(["compact", "--table", "t"]) == EXIT_USAGE
    assert "--resources JSON|FILE, --stack NAME or $STATESTORE_RESOURCES" in capsys.readouterr().err
    assert main(["compact", "--table", "t", "--resources", json.dumps({"bucket": "b"})]) == EXIT_USAGE
    assert "--resources is not the stack's StatestoreResources JSON" in capsys.readouterr().err


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
