"""``statestore dead-letters``, ``files --orphans``, ``--version`` and the one error style, against the
embedded local runtime (committer and all)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from statestore.cli import EXIT_FAILED, EXIT_NOT_FOUND, EXIT_OK, EXIT_USAGE, main
from statestore.engine.requests import CommitRequest, encode_request
from statestore.model import layout
from statestore.services.upkeep import UpkeepKind, UpkeepWork
from statestore.store.ports import QueueMessage
from statestore.transactions import AddFiles
from tests.builders import INT_SCHEMA, data_keys, ref
from tests.cli.conftest import Cli, cli_json

ours = cli_json


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    assert main(["--version"]) == EXIT_OK
    assert capsys.readouterr().out.strip() == f"statestore {version('statestore')}"


def test_a_usage_error_of_a_subcommand_is_one_statestore_error_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["files"]) == EXIT_USAGE
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("statestore: error: files: the following arguments are required: TABLE")


def test_dead_letters_list_show_redrive_and_purge(cli: Cli) -> None:
    rt = cli.runtime
    request = CommitRequest("req-missing-table", "no-such-table", AddFiles((ref("a.parquet"),)))
    rt.queue.send([QueueMessage(encode_request(request), "no-such-table", "d1")])
    rt.dead_letter_queue.send([QueueMessage("not json {", "orders", "d2")])  # as the redrive policy moves it
    deadline = time.monotonic() + 30
    while len(listed := ours(cli("dead-letters", "list", "--json").out)) < 2 and time.monotonic() < deadline:
        time.sleep(0.5)

    by_group = {d["group_id"]: d for d in listed}
    assert set(by_group) == {"no-such-table", "orders"}
    missing, junk = by_group["no-such-table"], by_group["orders"]
    assert missing["request_id"] == "req-missing-table" and "no-such-table" in missing["reason"]
    assert junk["moved_by_redrive_policy"] and "redrive policy" in junk["reason"]
    assert junk["body"] == "not json {" and "not valid JSON" in junk["body_problem"]
    human = cli("dead-letters", "list")
    assert (
        human.code == EXIT_OK and "(not a commit request)" in human.out and "req-missing-table" in human.out
    )
    shown = cli("dead-letters", "show", missing["message_id"])
    assert shown.code == EXIT_OK and "req-missing-table" in shown.out

    gone = cli("dead-letters", "show", "no-such-message")
    assert gone.code == EXIT_NOT_FOUND and gone.err.startswith(
        "statestore: error: no message 'no-such-message'"
    )
    assert cli("dead-letters", "redrive").code == EXIT_USAGE

    purged = cli("dead-letters", "purge", junk["message_id"], "--json")
    assert (purged.code, ours(purged.out)) == (EXIT_OK, {"purged": [junk["message_id"]]})
    redriven = cli("dead-letters", "redrive", "--all", "--json")
    assert ours(redriven.out) == {
        "redriven": [{"message_id": missing["message_id"], "group_id": "no-such-table"}]
    }
    # The committer dead-letters it again (the table still does not exist), as a new message.
    deadline = time.monotonic() + 30
    while not (again := ours(cli("dead-letters", "list", "--json").out)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert [d["request_id"] for d in again] == ["req-missing-table"]
    assert again[0]["message_id"] != missing["message_id"]
    assert cli("dead-letters", "purge", "--all").code == EXIT_OK


def test_dead_letters_of_the_upkeep_queue_name_their_table_and_redrive_as_fresh_work(
    cli: Cli, tmp_path: Path
) -> None:
    rt = cli.runtime
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(INT_SCHEMA.to_json()))
    assert cli("tables", "create", "upkept", "--schema", str(schema)).code == EXIT_OK
    table_id = cli("tables", "show", "upkept", "--json").json()["table_id"]
    # As the work queue's redrive policy moves them: a snapshot planned a day ago (the old message would be
    # dropped as superseded), and a body no plan writes.
    long_ago = int(time.time() * 1000) - 86_400_000
    rt.upkeep_dead_letter_queue.send(
        [
            UpkeepWork(UpkeepKind.SNAPSHOT, table_id, long_ago, 15 * 60_000).to_message(),
            QueueMessage("not json {", "junk-table", "junk-1"),
        ]
    )
    upkeep = ("dead-letters", "--queue", "upkeep")

    listed = {d["group_id"]: d for d in ours(cli(*upkeep, "list", "--json").out)}
    assert set(listed) == {table_id, "junk-table"}
    snap, junk = listed[table_id], listed["junk-table"]
    assert (snap["table_id"], snap["kind"]) == (table_id, "snapshot") and "snapshot failed" in snap["reason"]
    assert junk["kind"] is None and "not an upkeep work message" in junk["body_problem"]
    human = cli(*upkeep, "list")
    assert human.code == EXIT_OK and table_id in human.out and "(not upkeep work)" in human.out
    assert ours(cli(*upkeep, "show", snap["message_id"], "--json").out)["kind"] == "snapshot"
    assert ours(cli("dead-letters", "list", "--json").out) == []  # the commit queue's are apart

    refused = cli(*upkeep, "redrive", "--all")
    assert refused.code == EXIT_FAILED and junk["message_id"] in refused.err and "purge" in refused.err
    purged = cli(*upkeep, "purge", junk["message_id"], "--json")
    assert (purged.code, ours(purged.out)) == (EXIT_OK, {"purged": [junk["message_id"]]})
    redriven = cli(*upkeep, "redrive", "--all", "--json")
    assert ours(redriven.out) == {
        "redriven": [{"message_id": snap["message_id"], "table_id": table_id, "kind": "snapshot"}]
    }
    assert ours(cli(*upkeep, "list", "--json").out) == []
    # The snapshot worker takes the fresh work and snapshots the table.
    deadline = time.monotonic() + 30
    while (
        ours(cli("tables", "show", "upkept", "--json").out)["latest_snapshot"] is None
        and time.monotonic() < deadline
    ):
        time.sleep(0.5)
    assert ours(cli("tables", "show", "upkept", "--json").out)["latest_snapshot"] is not None


def test_files_orphans_lists_data_objects_old_enough_for_cleanup_to_delete(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(INT_SCHEMA.to_json()))
    assert cli("tables", "create", "orphans", "--schema", str(schema)).code == 0
    table_id = cli("tables", "show", "orphans", "--json").json()["table_id"]
    blobs = cli.runtime.client().blobs
    orphan = f"{layout.data_prefix(table_id)}root/orphan.parquet"
    blobs.put(orphan, b"x")
    time.sleep(1.1)  # S3 keeps whole seconds
    assert cli("files", "orphans", "--orphans", "--json").json() == []  # a request naming it may be in flight
    # Queues that keep a request no time at all, one clock, no GC delay: it is an orphan at once.
    for variable in ("MAX_REQUEST_AGE", "MAX_CLOCK_SKEW", "GC_DELAY"):
        monkeypatch.setenv(f"STATESTORE_{variable}_MINUTES", "0")

    result = cli("files", "orphans", "--orphans", "--json")
    assert (result.code, [o["filename"] for o in result.json()]) == (EXIT_OK, [orphan])
    assert orphan in cli("files", "orphans", "--orphans").out


def test_a_damaged_snapshot_is_skipped_and_one_nothing_intact_covers_exits_4_naming_it(cli: Cli) -> None:
    client = cli.runtime.client()
    table = client.create_table("damaged", INT_SCHEMA)
    a, b, c = data_keys(table.table_id, "a.parquet", "b.parquet", "c.parquet")
    client.commit(table.table_id, AddFiles((ref(a),)))
    assert cli("snapshot", "damaged").code == EXIT_OK
    client.commit(table.table_id, AddFiles((ref(b),)))
    assert cli("snapshot", "damaged").code == EXIT_OK
    latest = client.snapshots.metadata.latest(table.table_id)
    assert latest is not None
    data = client.blobs.get(latest.files_key)
    client.blobs.put(latest.files_key, data[: len(data) // 2])  # truncated

    listed = cli("files", "damaged", "--json")  # falls back to the first snapshot and the log after it
    assert listed.code == EXIT_OK, listed.err
    assert sorted(f["filename"] for f in ours(listed.out)) == [a, b]
    assert cli("snapshot", "damaged").code == EXIT_OK  # nothing new to snapshot, and no failure either

    client.commit(table.table_id, AddFiles((ref(c),)))
    client.log.delete_up_to(table.table_id, latest.transaction_number)  # what the fallback needs is gone
    failed = cli("files", "damaged")

    assert failed.code == 4  # the store's fault, not bad usage (2)
    assert f"table {table.table_id!r}: no intact snapshot and log cover its state" in failed.err
    named = f"snapshot {latest.transaction_number} cannot be read from object {latest.files_key!r}"
    assert named in failed.err
