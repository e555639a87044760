"""``statestore tables view`` and ``statestore files TABLE --partition/--range/--job/--file`` against the
local runtime (DynamoDB Local and a moto server): the snapshot schedule keeps the view of a table that asks
for one, and the CLI's answers through it equal a full load's."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from statestore.adapters.aws.dynamodb_view import ITEM_PREFIX, META_KEY, DynamoDBQueryableViewStore
from statestore.cli import EXIT_OK, EXIT_UNAVAILABLE, EXIT_USAGE
from statestore.model.files import FileReference
from statestore.model.partitions import Region
from statestore.transactions import AddFiles, AssignJobIdRequest, AssignJobIds
from statestore.views import view_answers
from statestore.views.queryable_view import references_prefix
from tests.builders import data_key, ref
from tests.cli.conftest import Cli
from tests.cli.test_cli import create, unique


def reference_rows(references: Sequence[FileReference]) -> list[tuple[str, str, int, str | None]]:
    return [(r.filename, r.partition_id, r.number_of_rows, r.job_id) for r in references]


def json_rows(found: dict[str, Any]) -> list[tuple[str, str, int, str | None]]:
    return [(r["filename"], r["partition_id"], r["number_of_rows"], r["job_id"]) for r in found["references"]]


def filled(cli: Cli, tmp_path: Path, *extra: str) -> tuple[str, str, str, str]:
    """A table split at 100 with a file in each leaf and one at the root, one claimed by a job; returns its
    name, id and its left and right leaves."""
    name = unique("viewed")
    table_id = str(create(cli, tmp_path, name, "--split-point", "100", *extra)["table_id"])
    client = cli.runtime.client()
    left, right = sorted(
        client.leaf_partitions(name),
        key=lambda p: p.region.ranges[0].min,
    )
    a, b, c = (data_key(table_id, f) for f in ("a.parquet", "b.parquet", "c.parquet"))
    client.commit(name, AddFiles((ref(a, left.id), ref(b, right.id), ref(c, "root"))))
    client.commit(name, AssignJobIds((AssignJobIdRequest("job-1", left.id, (a,)),)))
    return name, table_id, left.id, right.id


def test_the_snapshot_schedule_keeps_the_view_and_the_cli_answers_as_a_full_load(
    cli: Cli, tmp_path: Path
) -> None:
    name, table_id, left, _ = filled(cli, tmp_path, "--property", "queryable_view=true")

    done = cli.runtime.run_snapshots()

    head = cli.runtime.client().log.latest_number(table_id)
    assert done["views"][table_id] == head and table_id not in done["view_errors"]
    shown = cli("tables", "view", name, "--json").json()
    assert (shown["queryable_view"], shown["transaction_number"], shown["log_transaction_number"]) == (
        True,
        head,
        head,
    )
    # A commit after the view's number is merged into the answers.
    client = cli.runtime.client()
    client.commit(name, AddFiles((ref(data_key(table_id, "d.parquet"), left),)))
    state = client.state(name)

    in_leaf = cli("files", name, "--partition", left, "--json")
    assert in_leaf.code == EXIT_OK, in_leaf.err
    found = in_leaf.json()
    assert (found["transaction_number"], found["source"]) == (state.transaction_number, "queryable_view")
    assert json_rows(found) == reference_rows(view_answers.references_in_partition(state, left))

    in_range = cli("files", name, "--range", "key=0:50", "--json").json()
    region = Region.of(state.schema, {"key": (0, 50)})
    expected = view_answers.references_in_region(state, region)
    assert in_range["partitions"] == list(expected)
    assert json_rows(in_range) == reference_rows([r for refs in expected.values() for r in refs])

    claims = cli("files", name, "--job", "job-1", "--json").json()
    assert json_rows(claims) == reference_rows(view_answers.claimed_references(state, "job-1"))
    a = data_key(table_id, "a.parquet")
    one = cli("files", name, "--file", a, "--json").json()
    assert one["file"]["filename"] == a and json_rows(one) == reference_rows(
        state.files_by_name[a].references
    )

    human = cli("files", name, "--range", "key=:100")
    assert human.code == EXIT_OK and f"at transaction {state.transaction_number}" in human.out
    assert "b.parquet" not in human.out and "a.parquet" in human.out and "c.parquet" in human.out


def test_a_table_without_a_view_is_untouched_and_refused_unless_a_full_load_is_asked_for(
    cli: Cli, tmp_path: Path
) -> None:
    name, table_id, left, _ = filled(cli, tmp_path)

    assert table_id not in cli.runtime.run_snapshots()["views"]
    views = cli.runtime.client().queryable_view_store
    assert views is not None and views.meta(table_id) is None and views.with_prefix(table_id, "") == {}

    refused = cli("files", name, "--partition", left)
    assert refused.code == EXIT_USAGE
    assert f"tables view {name} --on" in refused.err and "--full-load" in refused.err
    loaded = cli("files", name, "--partition", left, "--full-load", "--json").json()
    assert loaded["source"] == "full_load" and len(loaded["references"]) == 1


def test_the_view_is_switched_on_and_off_and_brought_current(cli: Cli, tmp_path: Path) -> None:
    name, table_id, left, _ = filled(cli, tmp_path)

    on = cli("tables", "view", name, "--on", "--json").json()
    assert on["queryable_view"] and on["transaction_number"] is None
    updated = cli("tables", "view", name, "--update")
    assert updated.code == EXIT_OK and "rebuilt the view to transaction 3" in updated.err
    assert "at transaction 3, the log's latest" in updated.out
    assert cli("files", name, "--partition", left, "--json").json()["source"] == "queryable_view"

    off = cli("tables", "view", name, "--off", "--json").json()
    assert not off["queryable_view"] and off["transaction_number"] == 3  # the items are kept
    assert cli("files", name, "--partition", left).code == EXIT_USAGE


def test_a_damaged_item_is_the_stores_fault_answered_by_a_full_load_if_asked_and_rebuilt(
    cli: Cli, tmp_path: Path
) -> None:
    name, table_id, left, _ = filled(cli, tmp_path, "--property", "queryable_view=true")
    assert cli("tables", "view", name, "--update").code == EXIT_OK
    views = cli.runtime.client().queryable_view_store
    assert isinstance(views, DynamoDBQueryableViewStore)
    [key] = [k for k in views.keys(table_id) if k.startswith(references_prefix(left))]
    views.dynamodb.put_item(
        TableName=views.table_name,
        Item={
            "table_id": {"S": table_id},
            "snapshot_key": {"S": ITEM_PREFIX + key},
            "view_value": {"S": "{"},
        },
    )

    damaged = cli("files", name, "--partition", left)
    assert damaged.code == EXIT_UNAVAILABLE  # not the caller's input: what the store holds
    assert f"item {key!r} cannot be read" in damaged.err and "tables view TABLE --rebuild" in damaged.err
    loaded = cli("files", name, "--partition", left, "--full-load", "--json").json()
    assert loaded["source"] == "full_load" and len(loaded["references"]) == 1

    rebuilt = cli("tables", "view", name, "--rebuild")
    assert rebuilt.code == EXIT_OK and "rebuilt the view to transaction 3" in rebuilt.err
    answered = cli("files", name, "--partition", left, "--json").json()
    assert answered["source"] == "queryable_view" and len(answered["references"]) == 1


def test_a_damaged_meta_is_the_stores_fault_named_by_the_status_and_mended_by_a_rebuild(
    cli: Cli, tmp_path: Path
) -> None:
    name, table_id, left, _ = filled(cli, tmp_path, "--property", "queryable_view=true")
    assert cli("tables", "view", name, "--update").code == EXIT_OK
    views = cli.runtime.client().queryable_view_store
    assert isinstance(views, DynamoDBQueryableViewStore)
    views.dynamodb.put_item(
        TableName=views.table_name,
        Item={"table_id": {"S": table_id}, "snapshot_key": {"S": META_KEY}, "view_format": {"N": "2"}},
    )

    status = cli("tables", "view", name)
    assert status.code == EXIT_UNAVAILABLE
    assert f"item {META_KEY!r} cannot be read: it has no attribute 'transaction_number'" in status.err
    assert cli("files", name, "--partition", left, "--full-load", "--json").json()["source"] == "full_load"

    rebuilt = cli("tables", "view", name, "--rebuild")
    assert rebuilt.code == EXIT_OK and "rebuilt the view to transaction 3" in rebuilt.err
    assert cli("tables", "view", name, "--json").json()["transaction_number"] == 3
    assert cli("files", name, "--partition", left, "--json").json()["source"] == "queryable_view"


def test_bad_input_is_one_line_and_a_usage_error(cli: Cli, tmp_path: Path) -> None:
    name, _, _, _ = filled(cli, tmp_path, "--property", "queryable_view=true")

    for args, says in (
        (("--range", "key"), "give it as KEY=LOW:HIGH"),
        (("--range", "nope=1:2"), "'nope' is not a row key"),
        (("--range", "key=x:5"), "--range bound 'x' is not a valid long"),
        (("--range", "key=5:5"), "empty range"),
        (("--range", "key=1:2", "--range", "key=3:4"), "given twice"),
        (("--range", "key=[1]"), "give [low, high]"),
        (("--full-load",), "--full-load goes with"),
        (("--partition", "p", "--job", "j"), "not allowed with"),
    ):
        result = cli("files", name, *args)
        assert result.code == EXIT_USAGE, (args, result.err)
        assert says in result.err, (args, result.err)
        assert result.err.count("statestore: error:") == 1

    bad = cli(
        "tables", "create", unique("bad"), "--schema", str(tmp_path / "schema.json"),
        "--property", "queryable_view=maybe",
    )  # fmt: skip
    assert bad.code == EXIT_USAGE and "queryable_view='maybe' must be true or false" in bad.err
