"""Sorting a batch once: malformed messages, duplicates of requests already decided, and fresh requests.

Only fresh requests go on to be committed; the others are decided here, before any table is touched.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from statestore.engine.requests import RequestEnvelope, parse_request
from statestore.errors import CodecError
from statestore.services.committer.decisions import (
    DeadLettered,
    Decision,
    Duplicate,
    ParsedMessage,
    already_decided,
    is_final,
    is_stray,
    transaction_number_of,
)
from statestore.services.committer.messages import ReceivedMessage
from statestore.store.ports import CommitStatus, RequestKey


class FreshRequest(NamedTuple):
    """A well-formed request not decided before, at ``position`` in its batch.

    (A named tuple: one is made per message, and the committer's own work per message is kept small.)
    """

    position: int
    message: ReceivedMessage
    envelope: RequestEnvelope
    request_id: str


@dataclass(frozen=True)
class SortedBatch:
    """A batch sorted once.

    ``decided`` holds the decision of every message decided without touching its table (malformed, or a
    copy of a request with a final status); ``fresh`` the other messages by table (message group), in
    message order; ``groups`` every message's position by message group, in order of first appearance
    (a group that fails is retried as a whole).
    """

    messages: Sequence[ParsedMessage]
    decided: Mapping[int, Decision]
    fresh: Mapping[str, Sequence[FreshRequest]]
    groups: Mapping[str, Sequence[int]]


def parse_message(
    message: ReceivedMessage, clock: Callable[[], int]
) -> tuple[ParsedMessage, Decision | None]:
    """The message's envelope, and its decision if it is malformed: not a commit request, or sent in
    another message group than its table's (``clock`` stamps that one's dead-lettered status)."""
    try:
        envelope = parse_request(message.body)
    except CodecError as e:
        return ParsedMessage(message, None), DeadLettered(f"malformed commit request: {e}", None)
    parsed = ParsedMessage(message, envelope)
    if envelope.table_id != message.group_id:
        reason = (
            f"commit request {envelope.request_id!r} is for table {envelope.table_id!r} but was sent in "
            f"message group {message.group_id!r}; send it with MessageGroupId = table id"
        )
        return parsed, DeadLettered(reason, time=clock())
    return parsed, None


def sort_batch(
    messages: Sequence[ParsedMessage],
    malformed: Mapping[int, Decision],
    final_statuses: Mapping[RequestKey, CommitStatus],
) -> SortedBatch:
    """Sort parsed messages given those found ``malformed`` (by position) and the final statuses of their
    requests (by table and request id). A request already decided is a duplicate wherever its copy turns up
    (in its table's group, in another group, naming a table that is gone): it changes nothing, not even its
    status."""
    decided: dict[int, Decision] = dict(malformed)
    fresh: dict[str, list[FreshRequest]] = {}
    groups: dict[str, list[int]] = {}
    for index, parsed in enumerate(messages):
        group_id = parsed.message.group_id
        groups.setdefault(group_id, []).append(index)
        envelope = parsed.envelope
        final = final_statuses.get(envelope.key) if envelope is not None else None
        if final is not None:
            decided[index] = already_decided(final)
        elif envelope is not None and index not in decided:
            fresh.setdefault(group_id, []).append(
                FreshRequest(index, parsed.message, envelope, envelope.request_id)
            )
    return SortedBatch(messages, decided, fresh, groups)


def split_copies(
    requests: Sequence[FreshRequest],
) -> tuple[list[FreshRequest], list[tuple[FreshRequest, FreshRequest]]]:
    """One table's fresh requests as the first copy of each request id, and every later copy paired with
    its first copy (a request sent twice in one batch is committed once)."""
    first_of: dict[str, FreshRequest] = {}
    copies: list[tuple[FreshRequest, FreshRequest]] = []
    for request in requests:
        first = first_of.setdefault(request.request_id, request)
        if first is not request:
            copies.append((request, first))
    return list(first_of.values()), copies


def strays_decided_here(
    messages: Sequence[ParsedMessage], decisions: Mapping[int, Decision]
) -> dict[int, Decision]:
    """A stray copy (wrong group) of a request this very batch decided is a duplicate of it."""
    stray = [index for index, decision in decisions.items() if is_stray(decision)]
    if not stray:
        return {}  # the usual batch: no statuses to derive twice
    decided = {
        (p.envelope.table_id, p.envelope.request_id): decision
        for index, p in enumerate(messages)
        if p.envelope is not None and (decision := decisions[index]) is not None and is_final(decision)
    }
    strays: dict[int, Decision] = {}
    for index in stray:
        envelope = messages[index].envelope
        if envelope is not None and (first := decided.get((envelope.table_id, envelope.request_id))):
            strays[index] = Duplicate(transaction_number_of(first), "decided in this batch")
    return strays
