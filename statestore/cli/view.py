"""The queryable view from the command line: ``statestore tables view`` (switch it, see where it stands,
bring it current) and ``statestore files TABLE --partition/--range/--job/--file`` (queries through it)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from statestore.cli import output as fmt
from statestore.cli.errors import EXIT_OK, EXIT_USAGE, CliError
from statestore.cli.tables import key_value
from statestore.errors import InvalidKeyError, InvalidPartitionTreeError, QueryableViewOffError

if TYPE_CHECKING:
    import argparse

    from statestore.cli.parser import Command
    from statestore.cli.session import Session
    from statestore.engine.queryable_view import Answer
    from statestore.model.files import FileReference, TableFile
    from statestore.model.schema import Key, Schema


def register_tables_view(table_commands: Any, command: Command) -> None:
    """Add ``tables view``."""
    p = command(
        table_commands,
        "view",
        "show, switch or bring current a table's queryable view (answers partition, region, job and file "
        "queries without loading the table)",
        cmd_tables_view,
    )
    p.add_argument("name", metavar="TABLE")
    change = p.add_mutually_exclusive_group()
    change.add_argument(
        "--on", action="store_true", help="keep the table's view: the snapshot upkeep builds it and keeps it"
    )
    change.add_argument(
        "--off", action="store_true", help="stop keeping it (its items are kept, unused, until switched on)"
    )
    change.add_argument("--update", action="store_true", help="bring the view to the log's latest entry now")
    change.add_argument(
        "--rebuild",
        action="store_true",
        help="write the view again from a full load of the table (after a damaged item: every item is "
        "written, and any other deleted)",
    )


def add_query_options(shown: argparse._MutuallyExclusiveGroup, parser: argparse.ArgumentParser) -> None:
    """``files``' queries through the view, in the group of its other (exclusive) listings."""
    shown.add_argument("--partition", metavar="ID", help="the references in this partition")
    shown.add_argument(
        "--range",
        metavar="KEY=LOW:HIGH",
        action="append",
        help="the files holding rows in this range of a row key (LOW inclusive, HIGH exclusive, either "
        'empty for unbounded; KEY=["low", "high"] as JSON for a string with a colon); repeat for other row '
        "keys; a row key not named is whole",
    )
    shown.add_argument("--job", metavar="ID", help="the references this compaction job holds")
    shown.add_argument("--file", metavar="NAME", help="this file and all its references")
    parser.add_argument(
        "--full-load",
        action="store_true",
        help="with --partition/--range/--job/--file on a table that keeps no queryable view, or whose view "
        "holds a damaged item: answer from a full load of its state instead of refusing",
    )


def wants_view_query(args: argparse.Namespace) -> bool:
    return any(getattr(args, name) is not None for name in ("partition", "range", "job", "file"))


def cmd_tables_view(s: Session) -> int:
    args = s.args
    if args.on or args.off:
        s.client.set_queryable_view(args.name, enabled=args.on)
    elif args.update or args.rebuild:
        update = s.client.rebuild_queryable_view if args.rebuild else s.client.update_queryable_view
        result = update(args.name)
        s.out.progress(
            f"{'rebuilt' if result.rebuilt else 'moved'} the view to transaction {result.to_number} "
            f"({fmt.plural(result.writes, 'item write')})"
        )
    status = s.client.queryable_view_status(args.name)
    data = {
        "table_name": status.table_name,
        "table_id": status.table_id,
        "queryable_view": status.enabled,
        "transaction_number": status.transaction_number,
        "writing_to": status.writing_to,
        "log_transaction_number": status.log_head,
    }

    def human() -> str:
        if status.transaction_number is None:
            stands = "not built yet"
        elif status.behind:
            stands = f"at transaction {status.transaction_number}, {status.behind} behind the log"
        else:
            stands = f"at transaction {status.transaction_number}, the log's latest"
        if status.writing_to is not None:
            stands += f" (being written to {status.writing_to})"
        return fmt.render_fields(
            [
                ("table", status.table_name),
                ("queryable view", "on" if status.enabled else "off"),
                ("view", stands),
                ("log", f"at transaction {status.log_head}"),
            ]
        )

    s.out.result(data, human)
    return EXIT_OK


def cmd_files_through_view(s: Session) -> int:
    """``files TABLE --partition/--range/--job/--file``: one query through the table's view."""
    args = s.args
    table = s.table(args.table)
    try:
        answer, partitions, found, references = _query(s, table.table_id, table.schema)
    except QueryableViewOffError:
        raise CliError(
            f"table {table.table_name!r} keeps no queryable view: switch it on with `statestore tables view "
            f"{table.table_name} --on` (the next snapshot upkeep builds it), or add --full-load to answer "
            "from a full load of the table",
            EXIT_USAGE,
        ) from None
    source = "full_load" if answer.from_full_load else "queryable_view"
    data: dict[str, Any] = {
        "table_name": table.table_name,
        "table_id": table.table_id,
        "transaction_number": answer.transaction_number,
        "source": source,
        "references": [_reference_json(r) for r in references],
    }
    if partitions is not None:
        data["partitions"] = partitions
    if args.file is not None:
        data["file"] = None if found is None else fmt.file_json(found)

    def human() -> str:
        if args.partition is not None:
            asked = f"partition {args.partition!r}"
        elif args.range is not None:
            asked = "range " + ", ".join(args.range)
        else:
            asked = f"job {args.job!r}" if args.job is not None else f"file {args.file!r}"
        how = "a full load" if source == "full_load" else "the queryable view"
        head = f"{asked} at transaction {answer.transaction_number} (through {how})"
        if partitions is not None:
            head += f": {fmt.plural(len(partitions), 'partition')} overlap it"
        if args.file is not None and found is None:
            return f"{head}: no such file"
        if not references:
            return f"{head}: no references"
        rows = [
            [
                r.filename,
                r.partition_id,
                fmt.rows_text(r.number_of_rows, r.count_approximate),
                r.job_id,
                fmt.format_time(r.last_update_time),
            ]
            for r in references
        ]
        return head + "\n" + fmt.render_table(["FILE", "PARTITION", "ROWS", "JOB", "UPDATED"], rows)

    s.out.result(data, human)
    return EXIT_OK


def _query(
    s: Session, table_id: str, schema: Schema
) -> tuple[Answer[Any], list[str] | None, TableFile | None, list[FileReference]]:
    """The query the options ask for: its answer (the transaction number it is current to, whether from a
    full load), the partitions overlapping a range (None for other queries), the file asked for (None if
    absent or not asked) and the references."""
    args, client, full_load = s.args, s.client, s.args.full_load
    if args.partition is not None:
        in_partition = client.references_in_partition(table_id, args.partition, allow_full_load=full_load)
        return in_partition, None, None, in_partition.value
    if args.range is not None:
        bounds: dict[str, tuple[Key | None, Key | None]] = {}
        for given in args.range:
            name, bound = _range(schema, given)
            if name in bounds:
                raise CliError(f"--range: row key {name!r} is given twice", EXIT_USAGE)
            bounds[name] = bound
        try:
            in_region = client.references_in_region(table_id, bounds, allow_full_load=full_load)
        except (InvalidKeyError, InvalidPartitionTreeError) as e:
            raise CliError(f"--range: {e}", EXIT_USAGE) from None
        references = [ref for refs in in_region.value.values() for ref in refs]
        return in_region, list(in_region.value), None, references
    if args.job is not None:
        claimed = client.claimed_references(table_id, args.job, allow_full_load=full_load)
        return claimed, None, None, claimed.value
    file = client.file(table_id, args.file, allow_full_load=full_load)
    return file, None, file.value, list(file.value.references) if file.value else []


def _reference_json(ref: FileReference) -> dict[str, Any]:
    return {"filename": ref.filename, **fmt.reference_json(ref)}


def _range(schema: Schema, text: str) -> tuple[str, tuple[Key | None, Key | None]]:
    """``KEY=LOW:HIGH`` (or ``KEY=[low, high]`` in JSON, null unbounded) as a row key and its bounds in the
    key's type. Raises CliError (exit 2) saying what is wrong."""
    name, sep, rest = text.partition("=")
    fields = {f.name: f for f in schema.row_keys}
    if not sep or not name:
        raise CliError(f"--range {text!r}: give it as KEY=LOW:HIGH", EXIT_USAGE)
    field_ = fields.get(name)
    if field_ is None:
        raise CliError(
            f"--range {text!r}: {name!r} is not a row key; the row keys are {list(fields)}", EXIT_USAGE
        )
    raw: list[Any]
    if rest.lstrip().startswith("["):
        try:
            raw = json.loads(rest)
        except ValueError as e:
            raise CliError(f"--range {text!r}: not a JSON [low, high] ({e})", EXIT_USAGE) from None
        if not isinstance(raw, list) or len(raw) != 2:
            raise CliError(f"--range {text!r}: give [low, high], null for unbounded", EXIT_USAGE)
    else:
        low, colon, high = rest.partition(":")
        if not colon:
            raise CliError(f"--range {text!r}: give it as KEY=LOW:HIGH (either may be empty)", EXIT_USAGE)
        raw = [low or None, high or None]
    low_key, high_key = (
        None if v is None else key_value(v, name, field_.type, what="--range bound") for v in raw
    )
    return name, (low_key, high_key)
