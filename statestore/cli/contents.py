"""What a table holds: ``statestore partitions``, ``files`` and ``log``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from statestore.cli import maintenance, view
from statestore.cli import output as fmt
from statestore.cli.errors import EXIT_NOT_FOUND, EXIT_OK, EXIT_USAGE, CliError
from statestore.cli.parser import INT64_MAX, MAX_LIMIT, Command, add_number
from statestore.errors import UnreadableLogEntryError

if TYPE_CHECKING:
    from statestore.cli.session import Session


def register_partitions(commands: Any, command: Command) -> None:
    """Add ``partitions``."""
    p = command(commands, "partitions", "a table's partition tree", cmd_partitions)
    p.add_argument("table", metavar="TABLE")
    p.add_argument("--leaves", action="store_true", help="only the leaf partitions")


def register_files_and_log(commands: Any, command: Command) -> None:
    """Add ``files`` and ``log``."""
    p = command(
        commands,
        "files",
        "a table's files and their references; one partition's, a key range's, a job's or a file's through "
        "the table's queryable view",
        cmd_files,
    )
    p.add_argument("table", metavar="TABLE")
    shown = p.add_mutually_exclusive_group()
    shown.add_argument("--unreferenced", action="store_true", help="only files awaiting garbage collection")
    shown.add_argument(
        "--orphans", action="store_true", help="data objects no file names, older than the GC delay"
    )
    view.add_query_options(shown, p)

    p = command(commands, "log", "a table's transaction log", cmd_log)
    p.add_argument("table", metavar="TABLE")
    add_number(
        p,
        "--from",
        int,
        1,
        INT64_MAX,
        dest="from_number",
        metavar="N",
        help="first transaction (default: the tail)",
    )
    add_number(
        p,
        "--limit",
        int,
        1,
        MAX_LIMIT,
        " entries",
        default=20,
        metavar="N",
        help="at most N entries (default 20)",
    )


def cmd_partitions(s: Session) -> int:
    table = s.table(s.args.table)
    state = s.client.state(table.table_id)
    by_partition = state.references_by_partition()
    schema = table.schema
    ordered = _tree_order(dict(state.partitions_by_id))
    if s.args.leaves:
        ordered = [(p, 0) for p, _ in ordered if p.leaf]

    def human() -> str:
        rows = []
        for partition, depth in ordered:
            refs = by_partition.get(partition.id, [])
            rows.append(
                [
                    "  " * depth + partition.id,
                    partition.leaf,
                    "-" if partition.leaf else schema.row_keys[partition.dimension].name,
                    fmt.format_region(partition, schema),
                    len(refs),
                    fmt.rows_text(
                        sum(r.number_of_rows for r in refs), any(r.count_approximate for r in refs)
                    ),
                ]
            )
        return fmt.render_table(["PARTITION", "LEAF", "SPLIT ON", "REGION", "FILES", "ROWS"], rows)

    s.out.result(
        [fmt.partition_json(p, schema, by_partition.get(p.id, [])) for p, _ in ordered],
        human,
    )
    return EXIT_OK


def _tree_order(partitions: dict[str, Any]) -> list[tuple[Any, int]]:
    """Partitions depth first from the root(s), each with its depth; children in region order."""
    roots = [p for p in partitions.values() if p.parent_id is None or p.parent_id not in partitions]
    out: list[tuple[Any, int]] = []
    stack = [(p, 0) for p in reversed(roots)]
    while stack:
        partition, depth = stack.pop()
        out.append((partition, depth))
        children = [partitions[c] for c in partition.child_ids if c in partitions]
        stack.extend((c, depth + 1) for c in reversed(children))
    return out


def cmd_files(s: Session) -> int:
    if s.args.full_load and not view.wants_view_query(s.args):
        raise CliError("--full-load goes with --partition, --range, --job or --file", EXIT_USAGE)
    if view.wants_view_query(s.args):
        return view.cmd_files_through_view(s)
    if s.args.orphans:
        return maintenance.cmd_orphan_files(s)
    table = s.table(s.args.table)
    state = s.client.state(table.table_id)
    files = sorted(state.files_by_name.values(), key=lambda f: f.filename)
    if s.args.unreferenced:
        files = [f for f in files if not f.references]

    def human() -> str:
        if not files:
            return "no unreferenced files" if s.args.unreferenced else "no files"
        if s.args.unreferenced:
            return fmt.render_table(
                ["FILE", "UNREFERENCED SINCE"],
                [[f.filename, fmt.format_time(f.last_update_time)] for f in files],
            )
        rows: list[list[object]] = []
        for f in files:
            for r in f.references or [None]:
                if r is None:
                    rows.append([f.filename, "-", "-", "-", fmt.format_time(f.last_update_time)])
                else:
                    rows.append(
                        [
                            f.filename,
                            r.partition_id,
                            fmt.rows_text(r.number_of_rows, r.count_approximate),
                            r.job_id,
                            fmt.format_time(r.last_update_time),
                        ]
                    )
        return fmt.render_table(["FILE", "PARTITION", "ROWS", "JOB", "UPDATED"], rows)

    s.out.result([fmt.file_json(f) for f in files], human)
    return EXIT_OK


def cmd_log(s: Session) -> int:
    from statestore.codec.transaction_json import decode_entry
    from statestore.transactions import request_ids_of

    table = s.table(s.args.table)
    latest = s.client.log.latest_number(table.table_id)
    start = s.args.from_number if s.args.from_number is not None else max(1, latest - s.args.limit + 1)
    entries = list(s.client.log.read(table.table_id, start, start + s.args.limit - 1))
    if entries and entries[0].transaction_number > start:
        s.out.progress(
            f"note: entries {start}..{entries[0].transaction_number - 1} were deleted by cleanup "
            "(a snapshot covers them)"
        )
    elif not entries and start <= latest:
        raise CliError(
            f"table {table.table_name!r}: log entries from {start} were deleted by cleanup; "
            "they are covered by a snapshot",
            EXIT_NOT_FOUND,
        )

    items: list[dict[str, Any]] = []
    for entry in entries:
        try:
            transaction = decode_entry(entry, table.table_id)
            request_ids = list(request_ids_of(transaction))
            summary = fmt.summarize(transaction)
        except UnreadableLogEntryError as e:
            request_ids, summary = [], f"cannot decode: {e}"
        items.append(
            {
                "transaction_number": entry.transaction_number,
                "update_time": entry.update_time,
                "type": entry.transaction_type,
                "request_ids": request_ids,
                "summary": summary,
                "body_bytes": len(entry.body),
                "compressed": entry.compressed,
            }
        )

    def human() -> str:
        if not items:
            return f"no log entries from {start} (the latest is {latest})"
        rows = []
        for item in items:
            ids = item["request_ids"]
            requests = "-" if not ids else ids[0] if len(ids) == 1 else f"{ids[0]} (+{len(ids) - 1})"
            rows.append(
                [
                    item["transaction_number"],
                    fmt.format_time(item["update_time"]),
                    item["type"],
                    requests,
                    item["summary"],
                ]
            )
        return fmt.render_table(["NUMBER", "TIME", "TYPE", "REQUESTS", "SUMMARY"], rows)

    s.out.result(items, human)
    return EXIT_OK
