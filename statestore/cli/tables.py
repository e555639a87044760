"""``statestore tables create|list|show|senders|view|rename|delete`` (``view``: in
:mod:`statestore.cli.view`)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from statestore.cli import output as fmt
from statestore.cli.errors import EXIT_OK, EXIT_USAGE, CliError
from statestore.cli.parser import Command
from statestore.cli.session import read_json, read_text
from statestore.errors import (
    InvalidKeyError,
    InvalidSchemaError,
    StateStoreError,
    TableAlreadyExistsError,
    TransactionValidationError,
)
from statestore.store.tables import FILE_STORE_LOG, FILE_STORES

if TYPE_CHECKING:
    from statestore.cli.session import Session
    from statestore.model.schema import Schema


def register(commands: Any, command: Command) -> None:
    """Add ``tables create|list|show|senders|view|rename|delete``."""
    tables = commands.add_parser(
        "tables", help="create, list, show, rename and delete tables; switch their queryable views"
    )
    table_commands = tables.add_subparsers(
        dest="tables_command", metavar="ACTION", required=True, parser_class=type(tables)
    )
    p = command(table_commands, "create", "create a table and its initial partitions", cmd_tables_create)
    p.add_argument("name", metavar="NAME")
    p.add_argument(
        "--schema",
        metavar="FILE",
        required=True,
        help='JSON schema: {"row_keys": [{"name": "key", "type": "long"}], "sort_keys": [], "values": []}',
    )
    points = p.add_mutually_exclusive_group()
    points.add_argument(
        "--split-points",
        metavar="FILE",
        help="split points on the first row key: a JSON array, or one per line (bytes as base64)",
    )
    points.add_argument(
        "--split-point", metavar="V", action="append", help="a split point (repeat for several)"
    )
    p.add_argument("--property", metavar="NAME=VALUE", action="append", help="a table property (repeatable)")
    p.add_argument(
        "--file-store",
        choices=FILE_STORES,
        default=FILE_STORE_LOG,
        help="where the table keeps its file references: on its transaction log (default), or in PostgreSQL "
        "(give --postgres-url; partitions stay on the log, and time travel, incremental reads and job "
        "history need the log)",
    )
    p.add_argument(
        "--allowed-sender",
        metavar="ID",
        action="append",
        help="an IAM user or role id (AIDA..., AROA...) whose queued commit requests the committer accepts "
        "for the table (repeatable; default: anyone the queue lets send)",
    )
    command(table_commands, "list", "list the tables", cmd_tables_list)
    from statestore.cli.view import register_tables_view

    register_tables_view(table_commands, command)
    p = command(
        table_commands,
        "senders",
        "show, set or clear who may commit to a table through the queue",
        cmd_tables_senders,
    )
    p.add_argument("name", metavar="TABLE")
    change = p.add_mutually_exclusive_group()
    change.add_argument(
        "--set", metavar="ID", action="append", help="allow this IAM user or role id (repeat for several)"
    )
    change.add_argument("--clear", action="store_true", help="allow anyone the queue lets send")
    p = command(table_commands, "show", "a table's schema, properties and state in figures", cmd_tables_show)
    p.add_argument("name", metavar="TABLE")
    p = command(table_commands, "rename", "rename a table (its id, log and data stay)", cmd_tables_rename)
    p.add_argument("name", metavar="TABLE")
    p.add_argument("new_name", metavar="NEW_NAME")
    p = command(
        table_commands, "delete", "delete a table with its log, snapshots and data files", cmd_tables_delete
    )
    p.add_argument("name", metavar="TABLE")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")


def cmd_tables_create(s: Session) -> int:
    from statestore.model.partition_tree import partitions_from_split_points
    from statestore.store.tables import check_properties, check_table_name, parse_schema

    args = s.args
    try:
        check_table_name(args.name)
    except StateStoreError as e:
        raise CliError(str(e), EXIT_USAGE) from None
    try:
        schema = parse_schema(read_json(args.schema, "--schema"))
    except InvalidSchemaError as e:
        raise CliError(f"invalid schema in {args.schema!r}: {e}", EXIT_USAGE) from None
    points = _split_points(args, schema)
    properties = _properties(args.property or [])
    _check_gc_delay(args.name, schema, properties)
    try:
        check_properties(args.name, properties, args.file_store)
    except StateStoreError as e:
        raise CliError(f"--property: {e}", EXIT_USAGE) from None
    senders = _senders(args.allowed_sender or [], "--allowed-sender")
    try:
        partitions = partitions_from_split_points(schema, points)
    except (InvalidKeyError, TransactionValidationError) as e:
        raise CliError(f"invalid split points: {e}", EXIT_USAGE) from None

    s.out.progress(
        f"creating table {args.name!r} with {fmt.plural(len(points), 'split point')} at {s.where()}"
    )
    try:
        table = s.client.create_table(args.name, schema, points, properties, args.file_store, senders)
    except TableAlreadyExistsError as e:
        raise CliError(f"{e}; choose another name, or delete it first (statestore tables delete)") from None
    leaves = sum(1 for p in partitions if p.leaf)
    s.out.result(
        {**fmt.table_json(table), "partitions": len(partitions), "leaf_partitions": leaves},
        lambda: (
            f"created table {table.table_name!r} (id {table.table_id}) with "
            f"{fmt.plural(leaves, 'leaf partition')}"
        ),
    )
    return EXIT_OK


def _senders(ids: Sequence[str], option: str) -> list[str]:
    """The sender ids given, each checked (exit 2 naming the option for one no sender can have)."""
    from statestore.store.tables import check_sender_id

    for sender in ids:
        try:
            check_sender_id(sender)
        except StateStoreError as e:
            raise CliError(f"{option}: {e}", EXIT_USAGE) from None
    return list(dict.fromkeys(ids))


def cmd_tables_senders(s: Session) -> int:
    args = s.args
    if args.set or args.clear:
        table = s.client.set_allowed_senders(args.name, _senders(args.set or [], "--set"))
    else:
        table = s.client.get_table(args.name)
    senders = list(table.allowed_senders)
    s.out.result(
        {"table_name": table.table_name, "table_id": table.table_id, "allowed_senders": senders},
        lambda: (
            f"table {table.table_name!r} accepts queued commits from "
            + (", ".join(senders) if senders else "anyone the queue lets send")
        ),
    )
    return EXIT_OK


def _split_points(args: argparse.Namespace, schema: Any) -> list[Any]:
    """Split points on the first row key, from ``--split-points FILE`` (a JSON array, or one per line) or
    ``--split-point V`` options, converted to the key's type."""
    field_ = schema.row_keys[0]
    raw: list[Any]
    if args.split_points:
        text = read_text(args.split_points, "--split-points")
        if text.lstrip().startswith("["):
            try:
                raw = json.loads(text)
            except ValueError as e:
                raise CliError(
                    f"--split-points: {args.split_points!r} is not valid JSON: {e}", EXIT_USAGE
                ) from None
        else:
            raw = [line.strip() for line in text.splitlines() if line.strip()]
    else:
        raw = list(args.split_point or [])
    return [key_value(v, field_.name, field_.type) for v in raw]


def key_value(value: Any, field_name: str, key_type: str, what: str = "split point") -> Any:
    """A split point (or another key ``what`` names) as the key's type: integers for int/long, text for
    string, base64 text for bytes. Raises CliError (exit 2) naming the value and the row key."""
    import base64
    import binascii

    try:
        if key_type in ("int", "long"):
            if isinstance(value, bool) or not isinstance(value, int | str):
                raise ValueError
            return int(value)
        if key_type == "string":
            if not isinstance(value, str):
                raise ValueError
            return value
        if isinstance(value, dict) and set(value) == {"b64"}:
            value = value["b64"]
        if not isinstance(value, str):
            raise ValueError
        return base64.b64decode(value, validate=True)
    except (ValueError, binascii.Error):
        form = {"int": "an integer", "long": "an integer", "string": "a string"}.get(key_type, "base64 text")
        raise CliError(
            f"{what} {value!r} is not a valid {key_type} for row key {field_name!r}; give {form}",
            EXIT_USAGE,
        ) from None


def _check_gc_delay(name: str, schema: Schema, properties: dict[str, str]) -> None:
    """Refuse a ``gc_delay_minutes`` property cleanup would refuse on every run: not a number of minutes,
    or shorter than the clock skew it assumes ($STATESTORE_MAX_CLOCK_SKEW_MINUTES, else 10 minutes)."""
    from statestore.services.cleanup_policy import (
        GC_DELAY_PROPERTY,
        check_against_skew,
        gc_delay_ms,
        policy_from_environment,
    )
    from statestore.store.tables import TableInfo

    if GC_DELAY_PROPERTY not in properties:
        return
    try:
        skew_ms = policy_from_environment().max_clock_skew_ms
    except ValueError as e:  # names the environment variable that is wrong
        raise CliError(str(e), EXIT_USAGE) from None
    try:
        delay_ms = gc_delay_ms(TableInfo(name, name, schema, properties))
        check_against_skew(f"property {GC_DELAY_PROPERTY}", delay_ms, skew_ms)
    except (ValueError, StateStoreError) as e:
        raise CliError(f"--property: {e}", EXIT_USAGE) from None


def _properties(pairs: Sequence[str]) -> dict[str, str]:
    properties = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise CliError(f"--property {pair!r}: give it as NAME=VALUE", EXIT_USAGE)
        properties[name] = value
    return properties


def cmd_tables_list(s: Session) -> int:
    tables = s.client.list_tables()
    latest = {t.table_id: s.client.log.latest_number(t.table_id) for t in tables}
    # Where files live is a column only once some table keeps them elsewhere than on its log.
    show_file_store = any(t.files_in_rows for t in tables)

    def human() -> str:
        if not tables:
            return f"no tables in instance {s.resources.instance_id!r} (add one: `statestore tables create`)"
        header = ["NAME", "TABLE ID", "ROW KEYS", *(["FILES IN"] if show_file_store else []), "TRANSACTIONS"]
        rows = [
            [
                f"{t.table_name} (being deleted)" if t.deleting else t.table_name,
                t.table_id,
                fmt.schema_text(t.schema.row_keys),
                *([t.file_store] if show_file_store else []),
                latest[t.table_id],
                fmt.format_time(t.created_time),
            ]
            for t in tables
        ]
        return fmt.render_table([*header, "CREATED"], rows)

    s.out.result([{**fmt.table_json(t), "transaction_number": latest[t.table_id]} for t in tables], human)
    return EXIT_OK


def cmd_tables_show(s: Session) -> int:
    table = s.table(s.args.name)
    state = s.client.state(table.table_id)
    snapshots = s.client.snapshots.metadata.list(table.table_id)
    latest_snapshot = s.client.snapshots.metadata.latest(table.table_id)
    totals = state.reference_totals().values()  # summed on the columns: no object per reference
    references = sum(t.references for t in totals)
    rows = sum(t.rows for t in totals)
    approximate = any(t.rows_approximate for t in totals)
    unreferenced = len(state.unreferenced_files())
    leaves = len(state.leaf_ids())
    data = {
        **fmt.table_json(table),
        "transaction_number": state.transaction_number,
        "partitions": len(state.partitions_by_id),
        "leaf_partitions": leaves,
        "files": len(state.files_by_name),
        "file_references": references,
        "unreferenced_files": unreferenced,
        "rows": rows,
        "rows_approximate": approximate,
        "snapshots": len(snapshots),
        "latest_snapshot": fmt.snapshot_json(latest_snapshot),
    }

    def human() -> str:
        snapshot = (
            f"at transaction {latest_snapshot.transaction_number}, "
            f"{fmt.format_time(latest_snapshot.created_time)} ({len(snapshots)} kept)"
            if latest_snapshot
            else "none yet"
        )
        properties = ", ".join(f"{k}={v}" for k, v in sorted(table.properties.items())) or "-"
        return fmt.render_fields(
            [
                ("name", table.table_name),
                ("table id", table.table_id),
                ("created", fmt.format_time(table.created_time)),
                ("row keys", fmt.schema_text(table.schema.row_keys)),
                ("sort keys", fmt.schema_text(table.schema.sort_keys)),
                ("values", fmt.schema_text(table.schema.values)),
                ("properties", properties),
                ("files in", table.file_store),
                ("transaction", state.transaction_number),
                ("partitions", f"{len(state.partitions_by_id)} ({fmt.plural(leaves, 'leaf', 'leaves')})"),
                ("files", f"{len(state.files_by_name)} ({unreferenced} awaiting garbage collection)"),
                ("references", references),
                ("rows", fmt.rows_text(rows, approximate)),
                ("snapshot", snapshot),
            ]
        )

    s.out.result(data, human)
    return EXIT_OK


def cmd_tables_rename(s: Session) -> int:
    from statestore.store.tables import check_table_name

    try:
        check_table_name(s.args.new_name)
    except StateStoreError as e:
        raise CliError(str(e), EXIT_USAGE) from None
    try:
        table = s.client.rename_table(s.args.name, s.args.new_name)
    except TableAlreadyExistsError as e:
        raise CliError(f"{e}; choose another name") from None
    s.out.result(
        fmt.table_json(table),
        lambda: f"renamed table {s.args.name!r} to {table.table_name!r} (id {table.table_id})",
    )
    return EXIT_OK


def cmd_tables_delete(s: Session) -> int:
    table = s.client.table_record(s.args.name)  # one whose delete was interrupted too: it is run again
    if not s.args.yes:
        if not sys.stdin.isatty():
            raise CliError(
                f"refusing to delete table {table.table_name!r} without --yes (no terminal to ask on)",
                EXIT_USAGE,
            )
        answer = input(
            f"Delete table {table.table_name!r} ({table.table_id}) with its log, snapshots and every data "
            "file under its prefix? This cannot be undone. Type the table name to confirm: "
        )
        if answer.strip() != table.table_name:
            raise CliError("not deleted: the name typed did not match")
    s.out.progress(f"deleting table {table.table_name!r}: log, snapshots, objects, then its name")
    s.client.delete_table(table.table_id)
    s.out.result(
        {"deleted": True, **fmt.table_json(table)},
        lambda: f"deleted table {table.table_name!r} (id {table.table_id})",
    )
    return EXIT_OK
