"""``statestore dead-letters``: list, show, redrive and purge the messages the committer and the upkeep
workers could not process."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from statestore.cli import output as fmt
from statestore.cli.errors import (
    EXIT_NOT_FOUND,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    CliError,
)
from statestore.cli.parser import Command
from statestore.errors import DeadLetterNotFoundError
from statestore.services import dead_letters

if TYPE_CHECKING:
    from statestore.adapters.aws.sqs_queue import SqsCommitQueue
    from statestore.cli.session import Session
    from statestore.services.upkeep import UpkeepKind
    from statestore.store.dead_letter_ports import DeadLetter, DeadLetterQueue

QUEUES = ("commit", "upkeep")


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
