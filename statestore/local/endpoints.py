"""The local runtime's plumbing: a commit sender for an instance, waiting for an endpoint, the queues
(created, or found and brought to the runtime's redrive setting), and the process environment."""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable, Mapping
from typing import Any

from statestore.adapters.aws.clients import AwsCaller, make_client
from statestore.adapters.aws.sqs_queue import provision_queues, provision_upkeep_queues
from statestore.engine.requests import CommitSender
from statestore.errors import EndpointUnavailableError, ResourceSettingsConflictError
from statestore.instance import ResourceNames
from statestore.services.upkeep import UpkeepKind


def connect_commit_sender(
    resources: ResourceNames,
    endpoint_url: str | None = None,
    *,
    region: str | None = None,
    dynamodb_endpoint_url: str | None = None,
) -> CommitSender:
    """A :class:`CommitSender` for an instance's queue, status table and bucket, on AWS or local endpoints
    (``endpoint_url`` for all services, or for SQS and S3 beside ``dynamodb_endpoint_url``).

    Raises StateStoreError if the commit queue does not exist.
    """
    from statestore.adapters.aws.backend import AwsBackend

    backend = AwsBackend.connect(
        resources, endpoint_url, region=region, dynamodb_endpoint_url=dynamodb_endpoint_url
    )
    return backend.commit_sender(make_client("sqs", endpoint_url=endpoint_url, region=region))


def wait_for_endpoint(endpoint_url: str, timeout: float = 10.0) -> None:
    """Raise EndpointUnavailableError unless something accepts connections at ``endpoint_url``."""
    from urllib.parse import urlsplit

    parts = urlsplit(endpoint_url)
    host, port = parts.hostname or "localhost", parts.port or (443 if parts.scheme == "https" else 80)
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, port), timeout=1.0):
                return
        except OSError as e:
            if time.monotonic() > deadline:
                raise EndpointUnavailableError(
                    f"nothing answers at {endpoint_url} ({e.strerror or e}); "
                    "start it (e.g. `statestore local`) or check the URL"
                ) from e
            time.sleep(0.2)


def provision_or_update_queues(resources: ResourceNames, sqs: Any, max_receive_count: int) -> tuple[str, str]:
    """Create the queues; if they exist with another redrive policy, update it to ``max_receive_count``."""
    try:
        return provision_queues(resources, sqs, max_receive_count=max_receive_count)
    except ResourceSettingsConflictError:
        pass
    call = AwsCaller()
    dlq_url = call("find the dead-letter queue", sqs.get_queue_url, QueueName=resources.dead_letter_queue)[
        "QueueUrl"
    ]
    queue_url = call("find the commit queue", sqs.get_queue_url, QueueName=resources.commit_queue)["QueueUrl"]
    dlq_arn = call(
        "read the dead-letter queue's ARN",
        sqs.get_queue_attributes,
        QueueUrl=dlq_url,
        AttributeNames=["QueueArn"],
    )["Attributes"]["QueueArn"]
    call(
        "update the commit queue's redrive policy",
        sqs.set_queue_attributes,
        QueueUrl=queue_url,
        Attributes={
            "RedrivePolicy": json.dumps(
                {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": max_receive_count}
            )
        },
    )
    return queue_url, dlq_url


def provision_or_find_upkeep_queues(
    resources: ResourceNames, sqs: Any, max_receive_count: int
) -> dict[str, str]:
    """Create the work queues; if they exist (another runtime made them with other settings), use them."""
    try:
        return provision_upkeep_queues(resources, sqs, max_receive_count=max_receive_count)
    except ResourceSettingsConflictError:
        pass
    call = AwsCaller()
    names = {kind.value: resources.upkeep_queue(kind.value) for kind in UpkeepKind}
    names["dead_letters"] = str(resources.upkeep_dead_letter_queue)
    return {
        key: call(f"find the queue {name!r}", sqs.get_queue_url, QueueName=name)["QueueUrl"]
        for key, name in names.items()
    }


def configured_region() -> str | None:
    import boto3

    region = boto3.session.Session().region_name
    return str(region) if region else None


def has_credentials() -> bool:
    import boto3

    return boto3.session.Session().get_credentials() is not None


def set_environment(values: Mapping[str, str]) -> Callable[[], None]:
    """Set ``values`` in ``os.environ``; returns a function putting back what was there before."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)

    def restore() -> None:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

    return restore
