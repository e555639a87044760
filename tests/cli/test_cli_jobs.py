"""``statestore jobs`` and ``statestore job`` against the local runtime: the job-status model from the log."""

from __future__ import annotations

from pathlib import Path

from statestore.cli import EXIT_NOT_FOUND, EXIT_OK, EXIT_USAGE
from statestore.codec.transaction_json import transaction_to_json
from statestore.model.files import FileReference
from statestore.transactions import (
    AssignJobIdRequest,
    AssignJobIds,
    ReplaceFileReferences,
    ReplaceFileReferencesJob,
    Transaction,
)
from tests.cli.conftest import Cli
from tests.cli.test_cli import add_files_file, create, unique, write


def commit(cli: Cli, tmp_path: Path, table: str, transaction: Transaction) -> None:
    body = write(tmp_path / f"{unique('t')}.json", transaction_to_json(transaction))
    result = cli("commit", table, body, "--wait", "30")
    assert result.code == EXIT_OK, result.err


def compacted_table(cli: Cli, tmp_path: Path) -> tuple[str, str]:
    """A table where job ``done`` committed a compaction of a.parquet and b.parquet and ``busy`` holds c."""
    name = unique("jobs")
    table_id = str(create(cli, tmp_path, name)["table_id"])
    assert (
        cli("commit", name, add_files_file(tmp_path, table_id, "root", "a", "b", "c"), "--wait", "30").code
        == 0
    )
    data = f"tables/{table_id}/data/"
    commit(
        cli,
        tmp_path,
        name,
        AssignJobIds(
            (
                AssignJobIdRequest("done", "root", (f"{data}a", f"{data}b")),
                AssignJobIdRequest("busy", "root", (f"{data}c",)),
            )
        ),
    )
    job = ReplaceFileReferencesJob(
        "done", "root", (f"{data}a", f"{data}b"), FileReference(f"{data}out", "root", 150)
    )
    commit(cli, tmp_path, name, ReplaceFileReferences((job,)))
    return name, data


def test_jobs_lists_each_job_with_its_state_and_filters_by_state(cli: Cli, tmp_path: Path) -> None:
    name, data = compacted_table(cli, tmp_path)

    listed = cli("jobs", name)
    assert listed.code == EXIT_OK, listed.err
    lines = listed.out.splitlines()
    assert lines[0].split()[:2] == ["JOB", "STATE"]
    assert [line.split()[:2] for line in lines[1:]] == [["busy", "claimed"], ["done", "committed"]]

    claimed = cli("jobs", name, "--state", "claimed", "--json")
    assert [(r["job_id"], r["state"], r["input_files"]) for r in claimed.json()] == [
        ("busy", "claimed", [f"{data}c"])
    ]


def test_job_shows_the_claim_the_commit_and_its_output_as_text_and_json(cli: Cli, tmp_path: Path) -> None:
    name, data = compacted_table(cli, tmp_path)

    shown = cli("job", name, "done")
    assert shown.code == EXIT_OK, shown.err
    assert "state:" in shown.out and "committed" in shown.out and f"{data}out" in shown.out

    (run,) = cli("job", name, "done", "--json").json()
    assert (run["state"], run["output_file"], run["output_rows"]) == ("committed", f"{data}out", 150)
    assert [e["kind"] for e in run["events"]] == ["claimed", "committed"]
    assert run["claim_transaction"] < run["events"][-1]["transaction_number"]


def test_an_unknown_job_exits_3_naming_it(cli: Cli, tmp_path: Path) -> None:
    name, _ = compacted_table(cli, tmp_path)

    result = cli("job", name, "no-such-job")

    assert result.code == EXIT_NOT_FOUND
    assert result.out == ""
    assert result.err.startswith("statestore: error: no compaction job 'no-such-job'")


def test_a_time_range_selects_jobs_with_events_in_it_and_a_bad_time_exits_2(cli: Cli, tmp_path: Path) -> None:
    name, _ = compacted_table(cli, tmp_path)

    assert cli("jobs", name, "--since", "2999-01-01T00:00:00Z").out.strip() == "no jobs match"
    assert len(cli("jobs", name, "--until", "2999-01-01", "--json").json()) == 2
    bad = cli("jobs", name, "--since", "yesterday")
    assert bad.code == EXIT_USAGE and "--since 'yesterday' is not a time" in bad.err
    backwards = cli("jobs", name, "--since", "2000", "--until", "1000")
    assert backwards.code == EXIT_USAGE and "--until" in backwards.err


def test_a_table_with_no_jobs_says_so(cli: Cli, tmp_path: Path) -> None:
    name = unique("nojobs")
    create(cli, tmp_path, name)

    assert cli("jobs", name).out.strip() == "no compaction jobs"
    assert cli("jobs", name, "--json").json() == []
