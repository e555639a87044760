"""Upkeep and operations: ``statestore snapshot``, ``cleanup``, ``dead-letters``, ``files --orphans`` and
the version."""

from __future__ import annotations

from collections.abc import Callable
from importlib import metadata
from typing import TYPE_CHECKING, Any

from statestore.cli import output as fmt
from statestore.cli.errors import (
    BACKEND_ERRORS,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    CliError,
)
from statestore.cli.parser import Command, add_number
from statestore.errors import DeadLetterNotFoundError, StateStoreError
from statestore.services import dead_letters
from statestore.services.cleanup import MAX_DELAY_MS

if TYPE_CHECKING:
    from statestore.adapters.aws.sqs_queue import SqsCommitQueue
    from statestore.cli.session import Session
    from statestore.services.upkeep import UpkeepKind
    from statestore.store.ports import DeadLetter, DeadLetterQueue

QUEUES = ("commit", "upkeep")
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
    from statestore.services.cleanup import cleanup_table, policy_from_environment

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
    tables = [s.table(s.args.table)] if s.args.table else s.client.list_tables()
    reports, errors = [], {}
    for table in tables:
        s.out.progress(f"cleaning up table {table.table_name!r}")
        try:
            report = cleanup_table(
                s.client.state_store(table.table_id), table, s.client.snapshots, s.client.blobs, policy=policy
            )
        except BACKEND_ERRORS:
            raise
        except StateStoreError as e:
            errors[table.table_name] = str(e)
            s.out.progress(f"could not clean up table {table.table_name!r}: {e}")
            continue
        reports.append((table, report))

    def human() -> str:
        if not reports:
            return "no tables cleaned up"
        return fmt.render_table(
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
            "errors": errors,
        },
        human,
    )
    if errors:
        raise CliError(f"could not clean up {fmt.plural(len(errors), 'table')}: {', '.join(errors)}")
    return EXIT_OK


# --- dead letters -------------------------------------------------------------------------------------


def register_dead_letters(commands: Any, command: Command) -> None:
    """Add ``dead-letters [--queue commit|upkeep] list|show|redrive|purge`` to the CLI's subcommands."""
    dlq = commands.add_parser(
        "dead-letters",
        help="list, show, redrive and purge the commit requests (or the upkeep work) on a dead-letter queue",
    )
    dlq.add_argument(
        "--queue",
        choices=QUEUES,
        default="commit",
        help="commit: failed commit requests (the default); upkeep: a table's snapshot or cleanup that "
        "failed 3 times, which redrive queues afresh on its work queue",
    )
    actions = dlq.add_subparsers(
        dest="dead_letters_command", metavar="ACTION", required=True, parser_class=type(dlq)
    )
    command(actions, "list", "every message on the dead-letter queue, with why it is there", cmd_list)
    p = command(actions, "show", "one dead letter: its reason, its request and its body", cmd_show)
    p.add_argument("message_id", metavar="MESSAGE_ID")
    for name, help_, run in (
        (
            "redrive",
            "send messages back to the commit queue (their table's group, a new deduplication id)",
            cmd_redrive,
        ),
        ("purge", "delete messages from the dead-letter queue for good", cmd_purge),
    ):
        p = command(actions, name, help_, run)
        p.add_argument("message_ids", metavar="MESSAGE_ID", nargs="*")
        p.add_argument("--all", action="store_true", help="every message on the queue")


def _sqs(s: Session) -> Any:
    from statestore.adapters.aws.clients import make_client

    s.backend  # noqa: B018 - checks the endpoints before a client is made
    return make_client("sqs", endpoint_url=s.endpoint_url, region=s.args.region)


def _upkeep(s: Session) -> bool:
    return bool(s.args.queue == "upkeep")


def _dead_letter_queue(s: Session) -> DeadLetterQueue:
    if _upkeep(s):
        return _resource(lambda: s.backend.upkeep_dead_letter_queue(_sqs(s)))
    return s.backend.dead_letter_queue(_sqs(s))


def _work_queue(s: Session, kind: UpkeepKind) -> SqsCommitQueue:
    return s.backend.queue(_sqs(s), _resource(lambda: s.resources.upkeep_queue(kind.value)))


def _resource(find: Callable[[], Any]) -> Any:
    """``find()``, whose ValueError says the instance's resources predate the upkeep queues."""

    try:
        return find()
    except ValueError as e:
        raise CliError(str(e), EXIT_UNAVAILABLE) from None


def _commit_queue(s: Session) -> SqsCommitQueue:
    return s.backend.queue(_sqs(s), s.resources.commit_queue)


def _letter_json(d: dead_letters.DescribedDeadLetter) -> dict[str, Any]:
    return {
        "message_id": d.letter.message_id,
        "group_id": d.letter.group_id,
        "sent": fmt.iso_time(d.letter.sent_time),
        "reason": d.reason,
        "moved_by_redrive_policy": d.letter.reason is None,
        "request_id": d.request_id,
        "table_id": d.table_id,
        "transaction_type": d.transaction_type,
        "body_problem": d.body_problem,
        "source_message_id": d.letter.source_message_id,
        "body": d.letter.body,
    }


def _upkeep_json(d: dead_letters.DescribedUpkeepLetter) -> dict[str, Any]:
    return {
        "message_id": d.letter.message_id,
        "group_id": d.letter.group_id,
        "sent": fmt.iso_time(d.letter.sent_time),
        "reason": d.reason,
        "table_id": d.work.table_id if d.work else None,
        "kind": d.work.kind.value if d.work else None,
        "planned": fmt.iso_time(d.work.planned_at) if d.work else None,
        "body_problem": d.body_problem,
        "body": d.letter.body,
    }


def _warn_of_full_groups(s: Session, letters: list[DeadLetter]) -> None:
    from statestore.adapters.aws.sqs_dead_letters import SQS_FIFO_GROUP_WINDOW

    full = [g for g, n in dead_letters.group_sizes(letters).items() if n >= SQS_FIFO_GROUP_WINDOW]
    if full:
        s.out.progress(
            f"SQS shows at most {SQS_FIFO_GROUP_WINDOW} messages of a group at a time; group(s) "
            f"{', '.join(full)} may hold more: redrive or purge these to see them"
        )


def _cmd_list_upkeep(s: Session) -> int:
    letters = _dead_letter_queue(s).peek()
    described = [dead_letters.describe_upkeep(letter) for letter in letters]
    _warn_of_full_groups(s, letters)

    def human() -> str:
        if not described:
            return "no upkeep dead letters"
        return fmt.render_table(
            ["MESSAGE", "TABLE", "WORK", "SENT", "REASON"],
            [
                [d.letter.message_id, d.work.table_id if d.work else d.letter.group_id,
                 d.work.kind.value if d.work else "(not upkeep work)", fmt.format_time(d.letter.sent_time),
                 d.reason]
                for d in described
            ],
        )  # fmt: skip

    s.out.result([_upkeep_json(d) for d in described], human)
    return 0


def _cmd_show_upkeep(s: Session) -> int:
    d = dead_letters.describe_upkeep(
        _found(lambda: dead_letters.find(_dead_letter_queue(s), s.args.message_id))
    )
    s.out.result(
        _upkeep_json(d),
        lambda: fmt.render_fields(
            [
                ("message", d.letter.message_id),
                ("group", d.letter.group_id),
                ("sent", fmt.format_time(d.letter.sent_time)),
                ("reason", d.reason),
                ("table", d.work.table_id if d.work else None),
                ("work", d.work.kind.value if d.work else None),
                ("planned", fmt.format_time(d.work.planned_at) if d.work else None),
                ("body problem", d.body_problem),
                ("body", d.letter.body),
            ]
        ),
    )
    return 0


def cmd_list(s: Session) -> int:
    if _upkeep(s):
        return _cmd_list_upkeep(s)
    letters = _dead_letter_queue(s).peek()
    described = [dead_letters.describe(letter) for letter in letters]
    _warn_of_full_groups(s, letters)

    def human() -> str:
        if not described:
            return "no dead letters"
        return fmt.render_table(
            ["MESSAGE", "GROUP", "SENT", "REQUEST", "REASON"],
            [
                [d.letter.message_id, d.letter.group_id, fmt.format_time(d.letter.sent_time),
                 d.request_id or "(not a commit request)", d.reason]
                for d in described
            ],
        )  # fmt: skip

    s.out.result([_letter_json(d) for d in described], human)
    return 0


def cmd_show(s: Session) -> int:
    if _upkeep(s):
        return _cmd_show_upkeep(s)
    d = dead_letters.describe(_found(lambda: dead_letters.find(_dead_letter_queue(s), s.args.message_id)))
    s.out.result(
        _letter_json(d),
        lambda: fmt.render_fields(
            [
                ("message", d.letter.message_id),
                ("group", d.letter.group_id),
                ("sent", fmt.format_time(d.letter.sent_time)),
                ("reason", d.reason),
                ("request", d.request_id),
                ("table", d.table_id),
                ("transaction", d.transaction_type),
                ("body problem", d.body_problem),
                ("body", d.letter.body),
            ]
        ),
    )
    return 0


def _chosen_ids(s: Session, verb: str) -> list[str] | None:

    if s.args.all == bool(s.args.message_ids):
        raise CliError(f"dead-letters {verb}: give message ids or --all (not both)", EXIT_USAGE)
    return None if s.args.all else list(s.args.message_ids)


def _found(run: Callable[[], Any]) -> Any:

    try:
        return run()
    except DeadLetterNotFoundError as e:
        raise CliError(str(e), EXIT_NOT_FOUND) from None


def cmd_redrive(s: Session) -> int:
    ids = _chosen_ids(s, "redrive")
    if _upkeep(s):
        dlq = _dead_letter_queue(s)
        redriven = _found(lambda: dead_letters.redrive_upkeep(dlq, lambda kind: _work_queue(s, kind), ids))
        s.out.result(
            {
                "redriven": [
                    {"message_id": d.letter.message_id, "table_id": w.table_id, "kind": w.kind.value}
                    for d in redriven
                    if (w := d.work) is not None
                ]
            },
            lambda: f"queued fresh work for {fmt.plural(len(redriven), 'table')} on the work queues",
        )
        return 0
    dlq, queue = _dead_letter_queue(s), _commit_queue(s)
    letters = _found(lambda: dead_letters.redrive(dlq, queue, ids))
    s.out.result(
        {"redriven": [{"message_id": x.message_id, "group_id": x.group_id} for x in letters]},
        lambda: f"redrove {fmt.plural(len(letters), 'message')} to the commit queue",
    )
    return 0


def cmd_purge(s: Session) -> int:
    ids = _chosen_ids(s, "purge")
    letters = _found(lambda: dead_letters.purge(_dead_letter_queue(s), ids))
    queue = "upkeep " if _upkeep(s) else ""
    s.out.result(
        {"purged": [x.message_id for x in letters]},
        lambda: f"purged {fmt.plural(len(letters), 'message')} from the {queue}dead-letter queue",
    )
    return 0


def cmd_orphan_files(s: Session) -> int:
    """``files TABLE --orphans``: data objects nothing names, old enough for cleanup to delete (older than the
    table's GC delay and than a commit request naming them can be in flight)."""
    from statestore.engine.orphans import find_orphan_files
    from statestore.model.clock import now_millis
    from statestore.services.cleanup import gc_delay_ms, policy_from_environment

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
