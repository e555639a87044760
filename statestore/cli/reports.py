"""``statestore report ...``: reports on a table's state, human-readable or ``--json``.

``gc`` (files ready for garbage collection before a time), ``files`` (referenced and unreferenced files,
capped), ``references`` (references per partition), ``partitions`` (leaf sizes against a split threshold)
and ``claim`` (whether a compaction job still holds its input files). The figures come from
:mod:`statestore.views.reports`; this module only reads the options and prints.
"""

from __future__ import annotations

import argparse
from typing import Any

from statestore.cli import output as fmt
from statestore.cli.errors import EXIT_FAILED, EXIT_OK
from statestore.cli.parser import INT64_MAX, MAX_LIMIT, Command, add_number, add_time
from statestore.cli.session import Session
from statestore.model.clock import now_millis
from statestore.views import reports

DEFAULT_LIMIT = 100


def register(commands: Any, command: Command) -> None:
    """Register ``statestore report ACTION`` on the top-level subparsers."""
    report = commands.add_parser("report", help="reports on a table's files, references and partitions")
    actions = report.add_subparsers(
        dest="report_command", metavar="ACTION", required=True, parser_class=type(report)
    )
    p = command(actions, "gc", "files ready for garbage collection (no references) before a time", cmd_gc)
    p.add_argument("table", metavar="TABLE")
    add_time(
        p,
        "--before",
        help="unreferenced since before TIME: epoch milliseconds or ISO 8601 (default: now)",
    )
    _limit(p)
    p = command(actions, "files", "referenced and unreferenced files, at most --limit of each", cmd_files)
    p.add_argument("table", metavar="TABLE")
    _limit(p)
    p = command(actions, "references", "the file references held on each partition", cmd_references)
    p.add_argument("table", metavar="TABLE")
    p = command(
        actions, "partitions", "leaf sizes from their references, and the leaves to split", cmd_partitions
    )
    p.add_argument("table", metavar="TABLE")
    add_number(
        p,
        "--split-threshold",
        int,
        0,
        INT64_MAX,
        " rows",
        metavar="ROWS",
        help="mark the leaves holding more than ROWS rows (the splitting job's rule)",
    )
    p = command(
        actions,
        "claim",
        "whether a compaction job holds its input files in a partition (exit 0 held, 1 not)",
        cmd_claim,
    )
    p.add_argument("table", metavar="TABLE")
    p.add_argument("job_id", metavar="JOB_ID")
    p.add_argument("partition_id", metavar="PARTITION_ID")
    p.add_argument("filenames", metavar="FILE", nargs="+")


def _limit(p: argparse.ArgumentParser) -> None:
    help_ = f"at most N files (default {DEFAULT_LIMIT})"
    add_number(p, "--limit", int, 1, MAX_LIMIT, " files", default=DEFAULT_LIMIT, metavar="N", help=help_)


def _before(value: int | None) -> int:
    """``--before`` (epoch milliseconds, parsed by the option's type); now if unset."""
    return now_millis() if value is None else value


def _more_text(shown: int, total: int, what: str) -> str:
    return f"... and {total - shown} more {what} (raise --limit to see them)" if total > shown else ""


def cmd_gc(s: Session) -> int:
    table = s.table(s.args.table)
    before = _before(s.args.before)
    ready = s.client.files_ready_for_gc(table.table_id, before, s.args.limit)

    def human() -> str:
        if not ready.files:
            return f"no files ready for garbage collection before {fmt.format_time(before)}"
        rows = [[f.filename, fmt.format_time(f.last_update_time)] for f in ready.files]
        lines = [fmt.render_table(["FILE", "UNREFERENCED SINCE"], rows)]
        more = _more_text(len(ready.files), ready.total, "files")
        return "\n".join([*lines, more] if more else lines)

    s.out.result(
        {
            "table_name": table.table_name,
            "before": before,
            "before_time": fmt.iso_time(before),
            "files": [
                {
                    "filename": f.filename,
                    "unreferenced_since": f.last_update_time,
                    "unreferenced_since_time": fmt.iso_time(f.last_update_time),
                }
                for f in ready.files
            ],
            "total": ready.total,
            "more": ready.more,
        },
        human,
    )
    return EXIT_OK


def cmd_files(s: Session) -> int:
    table = s.table(s.args.table)
    report = reports.files_report(s.client.state(table.table_id), s.args.limit)

    def human() -> str:
        out = [
            f"{fmt.plural(report.referenced_total, 'referenced file')} "
            f"({fmt.plural(report.reference_total, 'reference')}), "
            f"{fmt.plural(report.unreferenced_total, 'unreferenced file')}"
        ]
        if report.referenced:
            rows = [
                [
                    f.filename,
                    len(f.references),
                    fmt.rows_text(
                        sum(r.number_of_rows for r in f.references),
                        any(r.count_approximate for r in f.references),
                    ),
                    ", ".join(sorted({r.job_id for r in f.references if r.job_id})) or "-",
                ]
                for f in report.referenced
            ]
            out += ["", fmt.render_table(["FILE", "REFERENCES", "ROWS", "JOBS"], rows)]
            out += [m for m in [_more_text(len(report.referenced), report.referenced_total, "files")] if m]
        if report.unreferenced:
            rows = [[f.filename, fmt.format_time(f.last_update_time)] for f in report.unreferenced]
            out += ["", fmt.render_table(["UNREFERENCED FILE", "SINCE"], rows)]
            shown, total = len(report.unreferenced), report.unreferenced_total
            out += [m for m in [_more_text(shown, total, "unreferenced files")] if m]
        return "\n".join(out)

    s.out.result(
        {
            "table_name": table.table_name,
            "referenced": [fmt.file_json(f) for f in report.referenced],
            "unreferenced": [fmt.file_json(f) for f in report.unreferenced],
            "referenced_total": report.referenced_total,
            "unreferenced_total": report.unreferenced_total,
            "reference_total": report.reference_total,
            "more": report.more,
        },
        human,
    )
    return EXIT_OK


def cmd_references(s: Session) -> int:
    table = s.table(s.args.table)
    per_partition = reports.references_per_partition(s.client.state(table.table_id))

    def human() -> str:
        rows = [
            [
                p.partition_id,
                p.leaf,
                p.references,
                p.assigned_to_jobs,
                fmt.rows_text(p.rows, p.rows_approximate),
            ]
            for p in per_partition
        ]
        return fmt.render_table(["PARTITION", "LEAF", "REFERENCES", "CLAIMED", "ROWS"], rows)

    s.out.result(
        [
            {
                "partition_id": p.partition_id,
                "leaf": p.leaf,
                "references": p.references,
                "assigned_to_jobs": p.assigned_to_jobs,
                "rows": p.rows,
                "rows_approximate": p.rows_approximate,
            }
            for p in per_partition
        ],
        human,
    )
    return EXIT_OK


def cmd_partitions(s: Session) -> int:
    threshold = s.args.split_threshold
    table = s.table(s.args.table)
    report = reports.partition_report(s.client.state(table.table_id), threshold)
    schema = table.schema

    def human() -> str:
        rows = [
            [
                leaf.partition.id,
                fmt.format_region(leaf.partition, schema),
                leaf.references,
                fmt.rows_text(leaf.rows, leaf.rows_approximate),
                "-" if threshold is None else leaf.over_split_threshold,
            ]
            for leaf in report.leaves
        ]
        leaves = fmt.plural(len(report.leaves), "leaf", "leaves")
        summary = f"{fmt.plural(report.partitions, 'partition')}, {leaves}"
        if threshold is not None:
            summary += f"; {len(report.leaves_to_split)} over the split threshold of {threshold} rows"
        table_text = fmt.render_table(["LEAF", "REGION", "REFERENCES", "ROWS", "OVER THRESHOLD"], rows)
        return f"{summary}\n\n{table_text}"

    s.out.result(
        {
            "table_name": table.table_name,
            "partitions": report.partitions,
            "split_threshold": threshold,
            "leaves": [
                {
                    "partition_id": leaf.partition.id,
                    "region": fmt.partition_json(leaf.partition, schema, [])["region"],
                    "references": leaf.references,
                    "rows": leaf.rows,
                    "rows_approximate": leaf.rows_approximate,
                    "over_split_threshold": leaf.over_split_threshold,
                }
                for leaf in report.leaves
            ],
            "over_split_threshold": [leaf.partition.id for leaf in report.leaves_to_split],
        },
        human,
    )
    return EXIT_OK


def cmd_claim(s: Session) -> int:
    args = s.args
    table = s.table(args.table)
    held = s.client.state(table.table_id).is_assigned(args.job_id, args.partition_id, args.filenames)
    files = fmt.plural(len(args.filenames), "file")

    def human() -> str:
        if held:
            return f"job {args.job_id} holds its {files} in partition {args.partition_id}"
        return (
            f"job {args.job_id} does not hold its {files} in partition {args.partition_id}: "
            "not every one is claimed"
        )

    s.out.result(
        {
            "table_name": table.table_name,
            "job_id": args.job_id,
            "partition_id": args.partition_id,
            "filenames": list(args.filenames),
            "held": held,
        },
        human,
    )
    return EXIT_OK if held else EXIT_FAILED
