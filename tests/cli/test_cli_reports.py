"""``statestore report``: GC candidates, files, references per partition, leaf sizes and claims, human and
``--json``, with their exit codes. The tables are written through the DynamoDB-backed client, so the new
transactions also take the real log's path."""

from __future__ import annotations

import uuid

import pytest

from statestore.cli import EXIT_FAILED, EXIT_NOT_FOUND, EXIT_OK, EXIT_USAGE
from statestore.local.runtime import LocalRuntime
from statestore.model.schema import Schema
from statestore.services.client import StateStoreClient
from statestore.transactions import (
    AddFiles,
    AssignJobIdRequest,
    AssignJobIds,
    ClearTable,
    ExtendPartitionTree,
    InitialisePartitions,
)
from tests.builders import ref, table_data_key, tree
from tests.cli.conftest import Cli

SCHEMA = Schema.of({"key": "long"})


@pytest.fixture(scope="module")
def client(runtime: LocalRuntime) -> StateStoreClient:
    return runtime.client()


def reported_table(client: StateStoreClient) -> str:
    """Leaves p1 (< 0) and p2 (>= 0): a, b in p1 (b claimed by job1); c (250 rows) in p2; two files with no
    references."""
    name = f"report-{uuid.uuid4().hex[:8]}"
    client.create_table(name, SCHEMA)
    client.commit(name, InitialisePartitions(tuple(tree(SCHEMA, [0]))))
    a, b, c, x, y = (table_data_key(client, name, n) for n in ("a", "b", "c", "x", "y"))
    client.commit(name, AddFiles((ref(a, "p1", 10), ref(b, "p1", 20), ref(c, "p2", 250)), (x, y)))
    client.commit(name, AssignJobIds((AssignJobIdRequest("job1", "p1", (b,)),)))
    return name


def test_tables_show_counts_files_references_and_rows_of_a_table_with_references(
    cli: Cli, client: StateStoreClient
) -> None:
    name = reported_table(client)
    # A file spanning both leaves, one of its counts approximate: two references, 30 + 40 rows.
    d = table_data_key(client, name, "d")
    client.commit(name, AddFiles((ref(d, "p1", 30), ref(d, "p2", 40, approximate=True))))

    shown = cli("tables", "show", name, "--json")

    assert shown.code == EXIT_OK, shown.err
    details = shown.json()
    assert (details["files"], details["file_references"], details["unreferenced_files"]) == (6, 5, 2)
    assert (details["rows"], details["rows_approximate"]) == (10 + 20 + 250 + 30 + 40, True)
    assert (details["partitions"], details["leaf_partitions"]) == (3, 2)
    human = cli("tables", "show", name).out
    assert "files:       6 (2 awaiting garbage collection)" in human and "references:  5" in human


def test_report_gc_lists_files_ready_before_a_time_with_a_limit(cli: Cli, client: StateStoreClient) -> None:
    name = reported_table(client)

    everything = cli("report", "gc", name, "--json")
    limited = cli("report", "gc", name, "--limit", "1", "--json")
    human = cli("report", "gc", name, "--limit", "1")
    none_yet = cli("report", "gc", name, "--before", "2000-01-01T00:00:00Z")
    x, y = table_data_key(client, name, "x"), table_data_key(client, name, "y")

    assert everything.code == EXIT_OK, everything.err
    assert [f["filename"] for f in everything.json()["files"]] == [x, y]
    assert (everything.json()["total"], everything.json()["more"]) == (2, False)
    assert [f["filename"] for f in limited.json()["files"]] == [x] and limited.json()["more"]
    assert x in human.out and "1 more files" in human.out
    assert none_yet.code == EXIT_OK and "no files ready for garbage collection" in none_yet.out


def test_report_files_lists_referenced_and_unreferenced_files_capped(
    cli: Cli, client: StateStoreClient
) -> None:
    name = reported_table(client)

    report = cli("report", "files", name, "--limit", "2", "--json").json()
    human = cli("report", "files", name).out
    a, b, x, y = (table_data_key(client, name, n) for n in ("a", "b", "x", "y"))

    assert [f["filename"] for f in report["referenced"]] == [a, b]
    assert [f["filename"] for f in report["unreferenced"]] == [x, y]
    assert (report["referenced_total"], report["unreferenced_total"], report["more"]) == (3, 2, True)
    assert "3 referenced files (3 references), 2 unreferenced files" in human
    assert "job1" in human and "UNREFERENCED FILE" in human


def test_report_references_and_leaf_sizes_over_a_split_threshold(cli: Cli, client: StateStoreClient) -> None:
    name = reported_table(client)
    state = client.state(name)
    p2, low, high = state.partition("p2").split(0, 100, "p2-low", "p2-high")
    high_split, high_low, high_high = high.split(0, 1000, "p2-mid", "p2-top")
    client.commit(name, ExtendPartitionTree((p2,), (low, high_split, high_low, high_high)))

    references = cli("report", "references", name, "--json").json()
    partitions = cli("report", "partitions", name, "--split-threshold", "100", "--json")
    human = cli("report", "partitions", name, "--split-threshold", "100").out

    by_id = {p["partition_id"]: p for p in references}
    assert (by_id["p1"]["references"], by_id["p1"]["rows"], by_id["p1"]["assigned_to_jobs"]) == (2, 30, 1)
    assert by_id["p2"]["references"] == 1 and not by_id["p2"]["leaf"]
    assert partitions.code == EXIT_OK, partitions.err
    leaves = [leaf["partition_id"] for leaf in partitions.json()["leaves"]]
    assert leaves == ["p1", "p2-low", "p2-mid", "p2-top"]
    # c's 250 rows are still referenced on p2: no leaf is over the threshold until they are split down.
    assert partitions.json()["over_split_threshold"] == []
    assert "7 partitions, 4 leaves; 0 over the split threshold of 100 rows" in human


def test_report_claim_exits_0_when_the_job_holds_its_files_and_1_when_not(
    cli: Cli, client: StateStoreClient
) -> None:
    name = reported_table(client)
    a, b = table_data_key(client, name, "a"), table_data_key(client, name, "b")

    held = cli("report", "claim", name, "job1", "p1", b, "--json")
    not_held = cli("report", "claim", name, "job1", "p1", a, b)
    other_job = cli("report", "claim", name, "job2", "p1", b)
    missing = cli("report", "claim", name, "job1", "p2", b)

    assert held.code == EXIT_OK and held.json()["held"] is True
    assert not_held.code == EXIT_FAILED and "does not hold its 2 files" in not_held.out
    assert (
        other_job.code == EXIT_FAILED
        and f"'{b}' in partition 'p1' is already assigned to job 'job1'" in other_job.err
    )
    assert missing.code == EXIT_FAILED and f"file reference not found: '{b}' in partition 'p2'" in missing.err


def test_a_cleared_table_reports_nothing_and_can_be_initialised_again(
    cli: Cli, client: StateStoreClient
) -> None:
    name = reported_table(client)

    client.commit(name, ClearTable())
    assert cli("report", "files", name, "--json").json()["referenced_total"] == 0
    assert cli("report", "partitions", name, "--json").json()["leaves"] == []
    client.commit(name, InitialisePartitions(tuple(tree(SCHEMA))))

    assert [
        leaf["partition_id"] for leaf in cli("report", "partitions", name, "--json").json()["leaves"]
    ] == ["root"]


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (
            ["report", "gc", "{table}", "--before", "yesterday"],
            EXIT_USAGE,
            "--before 'yesterday' is not a time",
        ),
        (["report", "files", "{table}", "--limit", "0"], EXIT_USAGE, "--limit must be from 1 to"),
        (
            ["report", "partitions", "{table}", "--split-threshold", "-1"],
            EXIT_USAGE,
            "--split-threshold must be from 0 to",
        ),
        (["report", "gc", "no-such-table"], EXIT_NOT_FOUND, "table not found: 'no-such-table'"),
    ],
    ids=["bad-time", "zero-limit", "negative-threshold", "no-table"],
)
def test_bad_report_options_exit_with_a_message_naming_them(
    cli: Cli, client: StateStoreClient, args: list[str], code: int, message: str
) -> None:
    name = reported_table(client)

    result = cli(*(a.format(table=name) for a in args))

    assert result.code == code and message in result.err and result.out == ""
