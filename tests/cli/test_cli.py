"""The ``statestore`` CLI against the local runtime's endpoints (DynamoDB Local and a moto server), with the
runtime committing what it sends."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from statestore.cli import (
    EXIT_FAILED,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    main,
)
from statestore.codec.transaction_json import transaction_to_json
from statestore.local.runtime import LocalRuntime
from statestore.model.files import FileReference
from statestore.services import cleanup
from statestore.transactions import AddFiles, AssignJobIdRequest, AssignJobIds
from tests.cli.conftest import Cli
from tests.fixtures.aws_servers import REPO_ROOT

SCHEMA = {
    "row_keys": [{"name": "key", "type": "long"}],
    "sort_keys": [{"name": "ts", "type": "long"}],
    "values": [{"name": "value", "type": "string"}],
}


def write(path: Path, content: object) -> str:
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return str(path)


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def create(cli: Cli, tmp_path: Path, name: str, *extra: str) -> dict[str, object]:
    result = cli(
        "tables", "create", name, "--schema", write(tmp_path / "schema.json", SCHEMA), *extra, "--json"
    )
    assert result.code == EXIT_OK, result.err
    created: dict[str, object] = result.json()
    return created


def add_files_file(tmp_path: Path, table_id: str, partition_id: str, *names: str) -> str:
    transaction = AddFiles(
        tuple(FileReference(f"tables/{table_id}/data/{n}", partition_id, 100) for n in names)
    )
    return write(tmp_path / f"add-{uuid.uuid4().hex[:6]}.json", transaction_to_json(transaction))


def leaf_ids(cli: Cli, table: str) -> list[str]:
    return [p["id"] for p in cli("partitions", table, "--leaves", "--json").json()]


# --- tables ---------------------------------------------------------------------------------------------


def test_create_a_table_with_split_points_from_a_file_then_list_and_show_it(cli: Cli, tmp_path: Path) -> None:
    name = unique("events")
    splits = write(tmp_path / "splits.txt", "100\n200\n\n300\n")
    result = cli(
        "tables", "create", name, "--schema", write(tmp_path / "s.json", SCHEMA), "--split-points", splits,
        "--property", "gc_delay_minutes=15",
    )  # fmt: skip

    assert result.code == EXIT_OK, result.err
    assert f"created table {name!r}" in result.out and "4 leaf partitions" in result.out

    listed = cli("tables", "list")
    header, *rows = listed.out.splitlines()
    assert header.split() == ["NAME", "TABLE", "ID", "ROW", "KEYS", "TRANSACTIONS", "CREATED"]
    [row] = [r for r in rows if r.startswith(name + " ")]
    assert "key:long" in row
    [entry] = [t for t in cli("tables", "list", "--json").json() if t["table_name"] == name]
    assert entry["schema"] == SCHEMA and entry["properties"] == {"gc_delay_minutes": "15"}
    assert entry["transaction_number"] == 1

    shown = cli("tables", "show", name)
    assert shown.code == EXIT_OK
    assert "partitions:  7 (4 leaves)" in shown.out and "properties:  gc_delay_minutes=15" in shown.out
    details = cli("tables", "show", name, "--json").json()
    assert (details["partitions"], details["leaf_partitions"], details["files"]) == (7, 4, 0)
    assert details["latest_snapshot"] is None

    leaves = cli("partitions", name, "--leaves", "--json").json()
    assert [(p["region"][0]["min"], p["region"][0]["max"]) for p in leaves] == [
        (-(2**63), 100),
        (100, 200),
        (200, 300),
        (300, None),
    ]
    tree = cli("partitions", name).out
    assert "key in [-inf, +inf)" in tree and "key in [300, +inf)" in tree


def test_split_points_as_options_and_as_a_json_array_for_string_keys(cli: Cli, tmp_path: Path) -> None:
    schema = write(tmp_path / "s.json", {"row_keys": [{"name": "id", "type": "string"}]})
    by_option = unique("strings")
    assert (
        cli(
            "tables", "create", by_option, "--schema", schema, "--split-point", "m", "--split-point", "t"
        ).code
        == 0
    )
    by_file = unique("strings")
    points = write(tmp_path / "p.json", ["g", "p"])
    assert cli("tables", "create", by_file, "--schema", schema, "--split-points", points).code == 0

    regions = [
        [r["region"][0]["min"] for r in cli("partitions", t, "--leaves", "--json").json()]
        for t in (by_option, by_file)
    ]
    assert regions == [["", "m", "t"], ["", "g", "p"]]


def test_rename_and_delete_a_table(cli: Cli, tmp_path: Path) -> None:
    old, new = unique("old"), unique("new")
    create(cli, tmp_path, old)

    assert cli("tables", "rename", old, new).code == EXIT_OK
    assert cli("tables", "show", old).code == EXIT_NOT_FOUND
    refused = cli("tables", "delete", new)  # stdin is not a terminal: no one to ask
    assert refused.code == EXIT_USAGE and "without --yes" in refused.err
    assert cli("tables", "delete", new, "--yes").code == EXIT_OK
    assert new not in [t["table_name"] for t in cli("tables", "list", "--json").json()]


def test_a_table_whose_delete_was_interrupted_is_listed_as_such_read_by_nothing_and_deleted_again(
    cli: Cli, tmp_path: Path
) -> None:
    name = unique("half")
    table_id = str(create(cli, tmp_path, name)["table_id"])
    client = cli.runtime.client()
    client.table_index.mark_deleting(table_id)  # a delete that began, then stopped
    client.log.delete_table(table_id)

    listed = {t["table_name"]: t for t in cli("tables", "list", "--json").json()}
    assert listed[name]["deleting"] is True
    assert f"{name} (being deleted)" in cli("tables", "list").out
    shown = cli("tables", "show", name)  # before: an empty table at transaction 0
    assert shown.code == EXIT_NOT_FOUND and "is being deleted" in shown.err
    assert cli("tables", "delete", name, "--yes").code == EXIT_OK
    assert name not in [t["table_name"] for t in cli("tables", "list", "--json").json()]


def test_cleanup_deletes_what_a_late_writer_put_under_a_deleted_tables_prefix(
    cli: Cli, tmp_path: Path
) -> None:
    name = unique("gone")
    table_id = str(create(cli, tmp_path, name)["table_id"])
    assert cli("tables", "delete", name, "--yes").code == EXIT_OK
    late = f"tables/{table_id}/data/late.parquet"  # a job that still wrote after the delete
    cli.runtime.client().blobs.put(late, b"late")

    kept = cli("cleanup", "--json")  # younger than the GC delay
    swept = cli("cleanup", "--gc-delay", "0", "--max-clock-skew", "0")
    again = cli("cleanup", "--json")

    assert kept.code == EXIT_OK and {"table_id": table_id, "objects_deleted": 0, "objects_kept": 1,
        "tombstone_deleted": False} in kept.json()["deleted_tables"]  # fmt: skip
    assert swept.code == EXIT_OK and "late writers left under the prefixes of" in swept.out
    assert cli.runtime.client().blobs.list(f"tables/{table_id}/") == []
    assert {"table_id": table_id, "objects_deleted": 0, "objects_kept": 0, "tombstone_deleted": False} in (
        again.json()["deleted_tables"]
    )


def test_a_cleanup_the_delete_of_its_table_overtook_is_reported_skipped_not_done(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = unique("overtaken")
    table_id = str(create(cli, tmp_path, name)["table_id"])
    clean = cleanup.cleanup_table

    def overtaken(*args: object, **kwargs: object) -> object:
        report = clean(*args, **kwargs)  # type: ignore[arg-type]
        cli.runtime.client().table_index.mark_deleting(table_id)  # the delete begins as it ends
        return report

    monkeypatch.setattr(cleanup, "cleanup_table", overtaken)
    result = cli("cleanup", name, "--json")

    assert result.code == EXIT_OK
    assert result.json()["tables"] == [] and "being deleted" in result.json()["skipped"][name]
    assert cli.runtime.client().blobs.list(f"tables/{table_id}/upkeep/") == []  # its sweep's progress
    assert cli("tables", "delete", name, "--yes").code == EXIT_OK


# --- commits, status, log, files ------------------------------------------------------------------------


def test_commit_a_transaction_file_and_wait_then_see_it_in_status_log_and_files(
    cli: Cli, tmp_path: Path
) -> None:
    name = unique("commits")
    table = create(cli, tmp_path, name, "--split-point", "0")
    table_id = str(table["table_id"])
    leaf = leaf_ids(cli, name)[0]

    result = cli(
        "commit", name, add_files_file(tmp_path, table_id, leaf, "a.parquet", "b.parquet"), "--wait", "30"
    )

    assert result.code == EXIT_OK, result.err
    request_id, outcome = result.out.strip().split(" ", 1)
    assert outcome == "committed at transaction 2"
    status = cli("status", name, request_id, "--json")
    assert status.code == EXIT_OK
    assert status.json() | {"recorded_time": 0} == {
        "request_id": request_id,
        "table_id": table_id,
        "table_name": name,
        "outcome": "committed",
        "transaction_number": 2,
        "reason": None,
        "recorded_time": 0,
    }
    assert "outcome:     committed" in cli("status", name, request_id).out

    log = cli("log", name, "--json").json()
    assert [(e["transaction_number"], e["type"], e["request_ids"]) for e in log] == [
        (1, "InitialisePartitions", []),
        (2, "Batch", [request_id]),
    ]
    assert log[1]["summary"] == "1 request: added 2 files (2 references, 200 rows)"
    human_log = cli("log", name, "--from", "2", "--limit", "1").out.splitlines()
    assert len(human_log) == 2 and request_id in human_log[1] and "added 2 files" in human_log[1]

    files = cli("files", name, "--json").json()
    assert [f["filename"] for f in files] == [
        f"tables/{table_id}/data/a.parquet",
        f"tables/{table_id}/data/b.parquet",
    ]
    assert all(f["references"][0]["partition_id"] == leaf for f in files)
    assert cli("files", name, "--unreferenced").out.strip() == "no unreferenced files"


def test_commit_from_stdin_without_waiting_prints_the_request_id(
    cli: Cli, tmp_path: Path, runtime: LocalRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = unique("stdin")
    table_id = str(create(cli, tmp_path, name)["table_id"])
    body = Path(add_files_file(tmp_path, table_id, "root", "c.parquet")).read_text()
    monkeypatch.setattr(sys, "stdin", io.StringIO(body))

    result = cli("commit", name, "-", "--request-id", "my-request-1")

    assert (result.code, result.out.strip()) == (EXIT_OK, "my-request-1")
    runtime.wait_idle()
    assert cli("status", name, "my-request-1").code == EXIT_OK


def test_a_rejected_commit_exits_1_with_the_reason(cli: Cli, tmp_path: Path) -> None:
    name = unique("rejected")
    table_id = str(create(cli, tmp_path, name)["table_id"])

    result = cli(
        "commit", name, add_files_file(tmp_path, table_id, "no-such-partition", "x.parquet"), "--wait", "30"
    )

    assert result.code == EXIT_FAILED
    assert result.out.strip().endswith("rejected: partition not found: 'no-such-partition'")
    request_id = result.out.split()[0]
    assert result.err.strip().endswith(
        f"statestore: error: request {request_id} rejected: partition not found: 'no-such-partition'"
    )
    assert cli("status", name, request_id).code == EXIT_FAILED
    assert cli("tables", "show", name, "--json").json()["transaction_number"] == 1


def test_a_row_count_beyond_int64_is_rejected_with_its_limit_and_the_table_still_snapshots(
    cli: Cli, tmp_path: Path
) -> None:
    name = unique("huge")
    table_id = str(create(cli, tmp_path, name)["table_id"])
    huge = AddFiles((FileReference(f"tables/{table_id}/data/huge.parquet", "root", 2**70),))

    result = cli("commit", name, write(tmp_path / "huge.json", transaction_to_json(huge)), "--wait", "30")

    assert result.code == EXIT_FAILED
    assert "number_of_rows value 1180591620717411303424 is out of range" in result.out
    assert "allowed 0 to 9223372036854775807 (int64)" in result.out
    assert cli("tables", "show", name, "--json").json()["transaction_number"] == 1
    assert cli("snapshot", name).code == EXIT_OK


@pytest.mark.parametrize("wait", ["-5", "nan", "inf"])
def test_commit_with_a_bad_wait_exits_2_before_sending_anything(
    cli: Cli, tmp_path: Path, runtime: LocalRuntime, wait: str
) -> None:
    name = unique("badwait")
    table_id = str(create(cli, tmp_path, name)["table_id"])
    body = add_files_file(tmp_path, table_id, "root", "w.parquet")

    result = cli("commit", name, body, "--wait", wait, "--request-id", f"bad-wait-{name}")

    assert result.code == EXIT_USAGE and result.out == ""
    assert result.err.splitlines() == [
        f"statestore: error: --wait must be from 0 to 86400 seconds, got {wait}"
    ]
    runtime.wait_idle()  # had anything been sent, the committer would have dealt with it by now
    assert cli("status", name, f"bad-wait-{name}").code == EXIT_NOT_FOUND
    assert cli("tables", "show", name, "--json").json()["transaction_number"] == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["log", "any", "--limit", "0"], "--limit must be from 1 to 2147483647 entries, got 0"),
        (["log", "any", "--from", "-1"], "--from must be from 1 to 9223372036854775807, got -1"),
        (
            ["cleanup", "--snapshot-retention", "-1"],
            "--snapshot-retention must be from 0 to 5256000 minutes, got -1",
        ),
        (
            ["cleanup", "--log-min-snapshot-age", "nan"],
            "--log-min-snapshot-age must be from 0 to 5256000 minutes",
        ),
        (["cleanup", "--gc-delay", "-1"], "--gc-delay must be from 0 to 43200 minutes, got -1"),
        (["cleanup", "--claim-expiry", "50000"], "--claim-expiry must be from 0 to 43200 minutes, got 50000"),
        (["local", "--poll-interval", "21"], "--poll-interval must be from 0 to 20 seconds"),
        (["local", "--max-receive-count", "0"], "--max-receive-count must be from 1 to 1000"),
        (["local", "--port", "65536"], "--port must be from 0 to 65535, got 65536"),
        (["local", "--snapshot-interval", "-1"], "--snapshot-interval must be from 0 to 2592000 seconds"),
    ],
)
def test_a_numeric_option_out_of_range_is_a_one_line_usage_error(
    cli: Cli, args: list[str], message: str
) -> None:
    result = cli(*args)

    assert result.code == EXIT_USAGE and result.out == ""
    assert len(result.err.splitlines()) == 1 and message in result.err


# --- upkeep ---------------------------------------------------------------------------------------------


def test_cleanup_releases_claims_older_than_the_expiry_given_or_set_in_the_environment(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = unique("claims")
    table_id = str(create(cli, tmp_path, name)["table_id"])
    assert (
        cli("commit", name, add_files_file(tmp_path, table_id, "root", "f.parquet"), "--wait", "30").code == 0
    )
    assign = AssignJobIds((AssignJobIdRequest("dead-job", "root", (f"tables/{table_id}/data/f.parquet",)),))
    claim = write(tmp_path / "claim.json", transaction_to_json(assign))
    assert cli("commit", name, claim, "--wait", "30").code == EXIT_OK

    kept = cli("cleanup", name, "--json")  # by default a claim lives for hours
    monkeypatch.setenv("STATESTORE_CLAIM_EXPIRY_MINUTES", "nonsense")
    refused = cli("cleanup", name)
    monkeypatch.setenv("STATESTORE_CLAIM_EXPIRY_MINUTES", "600")
    still_kept = cli("cleanup", name, "--json")
    too_short = cli(
        "cleanup", name, "--claim-expiry", "0"
    )  # shorter than the 10 minutes clocks may differ by
    # Every clock involved is this machine's: a 0-minute expiry is sound once the skew assumed is 0.
    released = cli("cleanup", name, "--claim-expiry", "0", "--max-clock-skew", "0", "--json")

    assert kept.json()["tables"][0]["claims_released"] == 0
    assert refused.code == EXIT_USAGE
    assert "STATESTORE_CLAIM_EXPIRY_MINUTES='nonsense' is not a number of minutes" in refused.err
    assert too_short.code == EXIT_USAGE
    assert (
        "claim_expiry_ms (0 ms) is shorter than the clock skew cleanup assumes (600,000 ms)" in too_short.err
    )
    assert still_kept.json()["tables"][0]["claims_released"] == 0
    [report] = released.json()["tables"]
    assert (report["claims_released"], report["released_jobs"]) == (1, ["dead-job"])
    files = cli("files", name, "--json").json()
    assert [r["job_id"] for f in files for r in f["references"]] == [None]


def test_snapshot_now_then_nothing_new_to_snapshot_and_cleanup(cli: Cli, tmp_path: Path) -> None:
    name = unique("upkeep")
    table_id = str(create(cli, tmp_path, name)["table_id"])
    assert (
        cli("commit", name, add_files_file(tmp_path, table_id, "root", "f.parquet"), "--wait", "30").code == 0
    )

    first = cli("snapshot", name, "--json")
    again = cli("snapshot", name)

    assert first.code == EXIT_OK and first.json()["written"] is True
    assert first.json()["snapshot"]["transaction_number"] == 2
    assert again.code == EXIT_OK and "no snapshot written" in again.out
    assert cli("tables", "show", name, "--json").json()["latest_snapshot"]["transaction_number"] == 2

    cleaned = cli("cleanup", name, "--log-min-snapshot-age", "0", "--json")
    assert cleaned.code == EXIT_OK
    [report] = cleaned.json()["tables"]
    assert (report["table_name"], report["log_retained_from"]) == (name, 2)
    assert report["log_entries_deleted"] >= 1
    assert cli("cleanup").code == EXIT_OK
    tail = cli("log", name, "--from", "1", "--json")
    assert tail.code == EXIT_OK and "were deleted by cleanup" in tail.err
    assert [e["transaction_number"] for e in tail.json()] == [2]
    assert cli("tables", "show", name, "--json").json()["files"] == 1  # loads from the snapshot


# --- errors and exit codes ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"row_keys": []}, "at least one row key"),
        ({"row_keys": [{"name": "k", "type": "float"}]}, "has type 'float'"),
        ("{not json", "not valid JSON"),
    ],
)
def test_an_invalid_schema_exits_2_naming_the_problem(
    cli: Cli, tmp_path: Path, schema: object, message: str
) -> None:
    result = cli("tables", "create", unique("bad"), "--schema", write(tmp_path / "bad.json", schema))

    assert result.code == EXIT_USAGE
    assert message in result.err and result.err.count("\n") == 1 and "Traceback" not in result.err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--schema", "missing.json"], "does not exist"),
        (["--split-point", "x"], "not a valid long"),
        (["--split-point", "5", "--split-point", "1"], "sorted and distinct"),
        (["--property", "novalue"], "NAME=VALUE"),
    ],
)
def test_bad_table_input_exits_2(cli: Cli, tmp_path: Path, args: list[str], message: str) -> None:
    if "--schema" not in args:
        args = ["--schema", write(tmp_path / "s.json", SCHEMA), *args]
    result = cli("tables", "create", unique("bad"), *args)

    assert result.code == EXIT_USAGE and message in result.err


def test_a_duplicate_table_name_exits_1(cli: Cli, tmp_path: Path) -> None:
    name = unique("twice")
    create(cli, tmp_path, name)

    result = cli("tables", "create", name, "--schema", write(tmp_path / "s.json", SCHEMA))

    assert result.code == EXIT_FAILED and f"a table named {name!r} already exists" in result.err


@pytest.mark.parametrize(
    "command",
    [["tables", "show"], ["partitions"], ["files"], ["log"], ["snapshot"], ["cleanup"], ["tables", "delete"]],
)
def test_a_missing_table_exits_3(cli: Cli, command: list[str]) -> None:
    result = cli(*command, "no-such-table")

    assert result.code == EXIT_NOT_FOUND
    assert result.err.strip() == (
        "statestore: error: table not found: 'no-such-table'; list the tables with `statestore tables list`"
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('{"version": 1, "type": "AddFiles"', "is not valid JSON"),
        ('{"version": 1, "type": "Bogus"}', "unknown transaction type 'Bogus'"),
        ('{"type": "ClearFiles"}', "no 'version' field"),
        ("[1, 2]", "must be a JSON object"),
    ],
)
def test_a_malformed_transaction_exits_2_and_sends_nothing(
    cli: Cli, tmp_path: Path, body: str, message: str
) -> None:
    name = unique("malformed")
    create(cli, tmp_path, name)

    result = cli("commit", name, write(tmp_path / "t.json", body), "--wait", "5")

    assert result.code == EXIT_USAGE and message in result.err and result.out == ""


def test_unknown_request_ids_missing_files_and_usage_errors(cli: Cli, tmp_path: Path) -> None:
    assert cli("status", "no-such-table", "never-sent").code == EXIT_NOT_FOUND
    assert "table not found" in cli("status", "no-such-table", "never-sent").err
    assert cli("commit", "any", str(tmp_path / "nope.json")).code == EXIT_USAGE
    assert cli("tables", "frobnicate").code == EXIT_USAGE
    assert main(["--help"]) == EXIT_OK


def test_an_endpoint_nobody_listens_on_or_an_instance_not_set_up_exits_4(
    moto_server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.fixtures.aws_servers import free_port

    assert main(["tables", "list", "--endpoint-url", f"http://127.0.0.1:{free_port()}"]) == EXIT_UNAVAILABLE
    assert "nothing answers at" in capsys.readouterr().err

    assert main(["tables", "list", "--endpoint-url", moto_server, "--instance", "never-provisioned"]) == 4
    error = capsys.readouterr().err
    assert "instance 'never-provisioned' is not set up" in error and error.count("\n") == 1


# --- statestore local ------------------------------------------------------------------------------------


def _start_statestore_local(*options: str) -> tuple[subprocess.Popen[str], list[str], dict[str, str]]:
    """``statestore local OPTIONS`` in a child process, read up to "Press Ctrl-C"; returns the process,
    the lines it printed and the environment it said to export."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("AWS_ENDPOINT_URL", None)
    env.pop("AWS_ENDPOINT_URL_DYNAMODB", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "statestore", "local", "--port", "0", *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO_ROOT,
        env=env,
    )
    assert process.stdout is not None
    lines = []
    for line in process.stdout:
        lines.append(line.rstrip())
        if line.startswith("Press Ctrl-C"):
            break
    exports = dict(
        line.removeprefix("  export ").split("=", 1) for line in lines if line.startswith("  export ")
    )
    return process, lines, exports


def _stop(process: subprocess.Popen[str]) -> str:
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert "stopped" in err
    return err


def _endpoints(exports: dict[str, str], instance: str) -> list[str]:
    return [
        "--endpoint-url",
        exports["AWS_ENDPOINT_URL"],
        "--dynamodb-endpoint-url",
        exports["AWS_ENDPOINT_URL_DYNAMODB"],
        "--instance",
        instance,
    ]


@pytest.mark.dynamodb_local  # the embedded default runs DynamoDB Local
def test_statestore_local_runs_until_interrupted_and_prints_how_to_use_it(tmp_path: Path) -> None:
    process, lines, exports = _start_statestore_local("--instance", "clilocal")
    try:
        assert exports["AWS_ENDPOINT_URL"].startswith("http://127.0.0.1:")
        assert exports["AWS_ENDPOINT_URL_DYNAMODB"].startswith("http://127.0.0.1:")
        assert exports["AWS_ENDPOINT_URL_DYNAMODB"] != exports["AWS_ENDPOINT_URL"]
        assert exports["STATESTORE_INSTANCE_ID"] == "clilocal"
        assert any("everything is deleted when it stops" in line for line in lines)

        schema = write(tmp_path / "s.json", SCHEMA)
        assert main(["tables", "create", "t", "--schema", schema, *_endpoints(exports, "clilocal")]) == 0
    finally:
        err = _stop(process)
    assert "no --data-dir" in err


@pytest.mark.dynamodb_local  # the embedded default runs DynamoDB Local
def test_statestore_local_with_a_data_dir_keeps_tables_across_a_restart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    schema = write(tmp_path / "s.json", SCHEMA)
    process, lines, exports = _start_statestore_local("--instance", "clikeep", "--data-dir", str(data))
    try:
        assert any(f"state kept in {data}" in line for line in lines)
        assert main(["tables", "create", "kept", "--schema", schema, *_endpoints(exports, "clikeep")]) == 0
    finally:
        err = _stop(process)
    assert "no --data-dir" not in err

    process, _, exports = _start_statestore_local("--instance", "clikeep", "--data-dir", str(data))
    try:
        capsys.readouterr()
        assert main(["tables", "list", "--json", *_endpoints(exports, "clikeep")]) == 0
        assert [t["table_name"] for t in json.loads(capsys.readouterr().out)] == ["kept"]
    finally:
        _stop(process)


@pytest.mark.dynamodb_local  # the embedded default runs DynamoDB Local
def test_statestore_local_refuses_a_data_dir_another_runtime_holds(tmp_path: Path) -> None:
    process, _, _ = _start_statestore_local("--instance", "clilock", "--data-dir", str(tmp_path))
    try:
        second = subprocess.run(
            [sys.executable, "-m", "statestore", "local", "--port", "0", "--data-dir", str(tmp_path)],
            capture_output=True,
            text=True,
            cwd=REPO_ROOT,
            timeout=120,
        )
        assert second.returncode == EXIT_USAGE
        assert f"the data directory {tmp_path} is in use by another local runtime" in second.stderr
    finally:
        _stop(process)


def test_a_gc_delay_property_cleanup_would_refuse_is_refused_when_the_table_is_created(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    schema = write(tmp_path / "s.json", SCHEMA)
    short, bad = unique("short"), unique("bad")

    refused = cli("tables", "create", short, "--schema", schema, "--property", "gc_delay_minutes=5")
    not_minutes = cli("tables", "create", bad, "--schema", schema, "--property", "gc_delay_minutes=soon")

    assert refused.code == EXIT_USAGE and "gc_delay_minutes" in refused.err and "clock skew" in refused.err
    assert not_minutes.code == EXIT_USAGE and "'soon' is not a number of minutes" in not_minutes.err
    assert cli("tables", "show", short).code != EXIT_OK  # nothing was created
    monkeypatch.setenv("STATESTORE_MAX_CLOCK_SKEW_MINUTES", "0")  # every clock is this machine's
    created = cli("tables", "create", short, "--schema", schema, "--property", "gc_delay_minutes=5")
    assert created.code == EXIT_OK
