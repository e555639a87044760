"""A producer process for the end-to-end tests: its own CommitSender, sending requests as it makes them."""

from __future__ import annotations

import time

from statestore.engine.requests import CommitRequest
from statestore.instance import ResourceNames
from statestore.local.runtime import connect_commit_sender
from statestore.model.files import FileReference
from statestore.transactions import AddFiles

# (table_id, leaf partition ids) per table
Tables = list[tuple[str, list[str]]]
# (request_id, table_id, filename) per request sent
Sent = list[tuple[str, str, str]]


def produce(
    endpoint_url: str,
    dynamodb_endpoint_url: str,
    resources_json: str,
    tables: Tables,
    producer: int,
    requests: int,
    per_send: int = 1,
    work_seconds: float = 0.0,
) -> Sent:
    """Make ``requests`` AddFiles requests of one new file each, round-robin over ``tables``, and send them
    ``per_send`` at a time (one SendMessageBatch call) as they are made, after ``work_seconds`` spent
    "writing" each file; returns what was sent."""
    sender = connect_commit_sender(
        ResourceNames.from_json(resources_json), endpoint_url, dynamodb_endpoint_url=dynamodb_endpoint_url
    )
    sent: Sent = []
    pending: list[CommitRequest] = []
    for i in range(requests):
        time.sleep(work_seconds)
        table_id, leaves = tables[(producer + i) % len(tables)]
        filename = f"tables/{table_id}/data/producer-{producer}/file-{i:04d}.parquet"
        reference = FileReference(filename, leaves[i % len(leaves)], number_of_rows=1 + i)
        request = CommitRequest.new(table_id, AddFiles((reference,)))
        pending.append(request)
        sent.append((request.request_id, table_id, filename))
        if len(pending) == per_send or i == requests - 1:
            sender.send_all(pending)
            pending = []
    return sent
