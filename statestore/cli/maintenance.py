"""Upkeep: ``statestore snapshot``, ``cleanup``, ``files --orphans``, and the version. The dead letters are
``dead_letters.py``."""

from __future__ import annotations

from functools import partial
from importlib import metadata
from typing import TYPE_CHECKING, Any

from statestore.cli import output as fmt
from statestore.cli.errors import (
    BACKEND_ERRORS,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
)
from statestore.cli.parser import Command, add_number
from statestore.errors import StateStoreError
from statestore.model.clock import now_millis
from statestore.services.cleanup_policy import MAX_DELAY_MS

if TYPE_CHECKING:
    from statestore.cli.session import Session
    from statestore.services.cleanup_policy import CleanupPolicy
    from statestore.services.leftovers import LeftoversReport

# The cleanup options' ranges in minutes: the policy's own limit for the delays, ten years for the ages.
MAX_DELAY_MINUTES = MAX_DELAY_MS // 60_000
MAX_AGE_MINUTES = 10 * 365 * 24 * 60


def version() -> str:
    """The installed package's version."""
    try:
        return metadata.version("statestore")
    except metadata.PackageNotFoundError:  # run from a checkout that is not installed
        return "unknown (not installed)"


def register_upkeep(commands: Any, command: Command) -> None:
    """Add ``snapshot`` and ``cleanup``."""
    p = command(commands, "snapshot", "write a snapshot of a table now", cmd_snapshot)
    p.add_argument("table", metavar="TABLE")

    p = command(
        commands, "cleanup", "delete old log entries, old snapshots and garbage data files", cmd_cleanup
    )
    p.add_argument("table", metavar="TABLE", nargs="?", help="one table (default: every table)")
    add_number(
        p,
        "--log-min-snapshot-age",
        float,
        0,
        MAX_AGE_MINUTES,
        " minutes",
        metavar="MINUTES",
        help="delete log entries covered by a snapshot at least this old (default 1 day)",
    )
    add_number(
        p,
        "--snapshot-retention",
        float,
        0,
        MAX_AGE_MINUTES,
        " minutes",
        metavar="MINUTES",
        help="delete snapshots older than this, except the latest (default 2 days)",
    )
    add_number(
        p,
        "--gc-delay",
        float,
        0,
        MAX_DELAY_MINUTES,
        " minutes",
        metavar="MINUTES",
        help="delete data files that have had no references for this long (default "
        "$STATESTORE_GC_DELAY_MINUTES, else 12 hours; a table's gc_delay_minutes property overrides it)",
    )
    add_number(
        p,
        "--claim-expiry",
        float,
        0,
        MAX_DELAY_MINUTES,
        " minutes",
        metavar="MINUTES",
        help="release compaction claims older than this: their jobs are presumed dead (default "
        "$STATESTORE_CLAIM_EXPIRY_MINUTES, else 13 hours)",
    )
    add_number(
        p,
        "--max-clock-skew",
        float,
        0,
        24 * 60,
        " minutes",
        metavar="MINUTES",
        help="the most any two clocks writing or judging the log's times may differ by; --gc-delay and "
        "--claim-expiry must exceed it (default $STATESTORE_MAX_CLOCK_SKEW_MINUTES, else 10; 0 only where "
        "every clock is the same one)",
    )


def cmd_snapshot(s: Session) -> int:
    table = s.table(s.args.table)
    s.out.progress(f"writing a snapshot of table {table.table_name!r}")
    snapshot = s.client.create_snapshot(table.table_id)
    if snapshot is None:
        latest = s.client.snapshots.metadata.latest(table.table_id)
        at = latest.transaction_number if latest else 0
        s.out.result(
            {"written": False, "table_name": table.table_name, "latest_snapshot": fmt.snapshot_json(latest)},
            lambda: (
                f"no snapshot written: table {table.table_name!r} has no transactions since its "
                f"latest snapshot (at transaction {at})"
            ),
        )
        return EXIT_OK
    s.out.result(
        {"written": True, "table_name": table.table_name, "snapshot": fmt.snapshot_json(snapshot)},
        lambda: (
            f"snapshot of table {table.table_name!r} at transaction {snapshot.transaction_number} written"
        ),
    )
    return EXIT_OK


def cmd_cleanup(s: Session) -> int:
    from statestore.services.cleanup import cleanup_table, overtaken_by_delete
    from statestore.services.cleanup_policy import policy_from_environment

    # The same defaults as the cleanup Lambda of the local runtime: the library's, or the environment's.
    options = {
        "log_min_snapshot_age_ms": s.args.log_min_snapshot_age,
        "snapshot_retention_ms": s.args.snapshot_retention,
        "gc_delay_ms": s.args.gc_delay,
        "claim_expiry_ms": s.args.claim_expiry,
        "max_clock_skew_ms": s.args.max_clock_skew,
    }
    try:
        policy = policy_from_environment(
            overrides={
                setting: int(minutes * 60_000) for setting, minutes in options.items() if minutes is not None
            }
        )
    except ValueError as e:
        raise CliError(str(e), EXIT_USAGE) from None
    everyone = [t for t in s.client.list_tables() if not t.deleting]  # a marked table: its delete's to finish
    tables = [s.table(s.args.table)] if s.args.table else everyone
    reports, errors, skipped = [], {}, {}
    for table in tables:
        s.out.progress(f"cleaning up table {table.table_name!r}")
        # Its record is read again at the end, as the cleanup Lambda's worker does: a table whose delete began
        # meanwhile is reported skipped, not cleaned up (and the sweep's progress saved after the delete's
        # pass is deleted again).
        check = partial(s.client.table_index.check_live, table.table_id)
        try:
            report = cleanup_table(
                s.client.state_store(table.table_id), table, s.client.snapshots, s.client.blobs, policy=policy
            )
            gone = overtaken_by_delete(table.table_id, s.client.blobs, check)
        except BACKEND_ERRORS:
            raise
        except StateStoreError as e:
            gone = overtaken_by_delete(table.table_id, s.client.blobs, check)
            if gone is None:
                errors[table.table_name] = str(e)
                s.out.progress(f"could not clean up table {table.table_name!r}: {e}")
                continue
        if gone is not None:
            skipped[table.table_name] = gone
            s.out.progress(f"skipped table {table.table_name!r}: {gone}")
            continue
        reports.append((table, report))
    leftovers = [] if s.args.table else _delete_leftovers(s, policy, errors)

    def human() -> str:
        after = "".join(f"\nskipped table {name!r}: {why}" for name, why in skipped.items())
        after += _leftovers_line(leftovers)
        if not reports:
            return "no tables cleaned up" + after
        cleaned = fmt.render_table(
            ["TABLE", "LOG ENTRIES", "SNAPSHOTS", "DATA FILES", "REQUEST BODIES", "REFUSED FILES", "CLAIMS"],
            [
                [
                    t.table_name,
                    r.log_entries_deleted,
                    r.snapshots_deleted,
                    r.data_files_deleted,
                    r.request_bodies_deleted,
                    len(r.refused_files),
                    r.claims_released,
                ]
                for t, r in reports
            ],
        )
        return cleaned + after

    s.out.result(
        {
            "tables": [
                {
                    "table_name": t.table_name,
                    "table_id": t.table_id,
                    "log_entries_deleted": r.log_entries_deleted,
                    "log_retained_from": r.log_retained_from,
                    "snapshots_deleted": r.snapshots_deleted,
                    "data_files_deleted": r.data_files_deleted,
                    "delete_files_commits": r.delete_files_commits,
                    "request_bodies_deleted": r.request_bodies_deleted,
                    "refused_files": list(r.refused_files),
                    "claims_released": r.claims_released,
                    "released_jobs": list(r.released_jobs),
                    "orphan_files_deleted": r.orphan_files_deleted,
                }
                for t, r in reports
            ],
            "deleted_tables": [
                {
                    "table_id": r.table_id,
                    "objects_deleted": r.objects_deleted,
                    "objects_kept": r.objects_kept,
                    "tombstone_deleted": r.tombstone_deleted,
                }
                for r in leftovers
            ],
            "skipped": skipped,
            "errors": errors,
        },
        human,
    )
    if errors:
        raise CliError(f"could not clean up {fmt.plural(len(errors), 'table')}: {', '.join(errors)}")
    return EXIT_OK


def _delete_leftovers(s: Session, policy: CleanupPolicy, errors: dict[str, str]) -> list[LeftoversReport]:
    """What late writers left under the prefixes of deleted tables (each with a tombstone and no record),
    deleted as the cleanup Lambda's work does (:mod:`statestore.services.leftovers`); errors by table id."""
    from statestore.services.leftovers import delete_leftovers, deleted_tables

    reports = []
    for table_id in deleted_tables(s.client.blobs, s.client.list_tables()):
        s.out.progress(f"deleting what is left of deleted table {table_id!r}")
        try:
            report = delete_leftovers(table_id, s.client.blobs, now=now_millis(), policy=policy)
        except BACKEND_ERRORS:
            raise
        except StateStoreError as e:
            errors[table_id] = str(e)
            s.out.progress(f"could not delete what is left of deleted table {table_id!r}: {e}")
            continue
        if report is not None:
            reports.append(report)
    return reports


def _leftovers_line(reports: list[LeftoversReport]) -> str:
    if not reports:
        return ""
    deleted, kept = sum(r.objects_deleted for r in reports), sum(r.objects_kept for r in reports)
    return (
        f"\ndeleted {fmt.plural(deleted, 'object')} late writers left under the prefixes of "
        f"{fmt.plural(len(reports), 'deleted table')}"
        + (f"; kept {kept} newer than the GC delay" if kept else "")
    )


# --- dead letters -------------------------------------------------------------------------------------


def cmd_orphan_files(s: Session) -> int:
    """``files TABLE --orphans``: data objects nothing names, old enough for cleanup to delete (older than the
    table's GC delay and than a commit request naming them can be in flight)."""
    from statestore.engine.orphans import find_orphan_files
    from statestore.model.clock import now_millis
    from statestore.services.cleanup_policy import gc_delay_ms, policy_from_environment

    table = s.table(s.args.table)
    client = s.client
    try:
        policy = policy_from_environment()
    except ValueError as e:
        raise CliError(str(e), EXIT_USAGE) from None
    delay = policy.orphan_delay_ms(gc_delay_ms(table, policy.gc_delay_ms))
    orphans = find_orphan_files(
        client.state_store(table.table_id),
        client.snapshots.metadata,
        client.blobs,
        before=now_millis() - delay,
    )
    s.out.progress(
        f"orphan data files of table {table.table_name!r} older than {delay // 60_000:,} min (the GC delay, "
        "and the longest a commit request naming them can be in flight)"
    )
    s.out.result(
        [{"filename": o.filename, "last_modified": fmt.iso_time(o.last_modified)} for o in orphans],
        lambda: (
            fmt.render_table(
                ["FILE", "LAST MODIFIED"], [[o.filename, fmt.format_time(o.last_modified)] for o in orphans]
            )
            if orphans
            else "no orphan files"
        ),
    )
    return 0
