"""The commit queue and its dead-letter queue on SQS FIFO; creating them for the embedded mode and tests."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from statestore import instance
from statestore.adapters.aws.clients import AwsCaller
from statestore.errors import StateStoreError, StoreUnavailableError
from statestore.instance import ResourceNames
from statestore.store.ports import CommitQueue, QueueMessage

_BATCH = 10  # SendMessageBatch / DeleteMessageBatch limit
# A message failing this many times goes to the dead-letter queue without a reason of ours (the committer
# dead-letters what it can name a reason for itself, at once). The queues' settings are the stack's own,
# from statestore.instance (tests/infra checks the template against them).
MAX_RECEIVE_COUNT = instance.COMMIT_MAX_RECEIVE_COUNT


class SqsCommitQueue(CommitQueue):
    """A FIFO queue: ``send`` uses SendMessageBatch, ten messages a call, retrying the entries SQS failed."""

    def __init__(self, sqs_client: Any, queue_url: str, caller: AwsCaller | None = None) -> None:
        self.sqs = sqs_client
        self.queue_url = queue_url
        self.call = caller or AwsCaller()

    @classmethod
    def named(cls, sqs_client: Any, queue_name: str, caller: AwsCaller | None = None) -> SqsCommitQueue:
        """The queue called ``queue_name`` (raises StateStoreError if there is none)."""
        call = caller or AwsCaller()
        response = call(f"find queue {queue_name!r}", sqs_client.get_queue_url, QueueName=queue_name)
        return cls(sqs_client, response["QueueUrl"], call)

    def send(self, messages: Sequence[QueueMessage]) -> None:
        for start in range(0, len(messages), _BATCH):
            self._send_batch(list(messages[start : start + _BATCH]))

    def _send_batch(self, messages: list[QueueMessage]) -> None:
        entries = {str(i): _entry(str(i), m) for i, m in enumerate(messages)}
        for attempt in range(self.call.max_attempts):
            response = self.call(
                f"send {len(entries)} message(s) to {self.queue_url}",
                self.sqs.send_message_batch,
                QueueUrl=self.queue_url,
                Entries=list(entries.values()),
            )
            failed = response.get("Failed") or []
            ours = [f for f in failed if f.get("SenderFault")]
            if ours:
                detail = "; ".join(f"{f.get('Code')}: {f.get('Message', '')}" for f in ours)
                raise StateStoreError(f"the queue refused {len(ours)} message(s): {detail}")
            entries = {f["Id"]: entries[f["Id"]] for f in failed}
            if not entries:
                return
            if attempt + 1 < self.call.max_attempts:
                self.call.backoff(attempt)
        raise StoreUnavailableError(
            f"could not send {len(entries)} message(s) to {self.queue_url}: SQS kept failing them; try again"
        )

    # --- for a local poller and tests: what the Lambda event source mapping does in AWS ---------------

    def receive_event(self, max_messages: int = 10, wait_seconds: int = 0) -> dict[str, Any]:
        """Receive up to ``max_messages`` as a Lambda SQS event (``{"Records": [...]}``, maybe empty)."""
        response = self.call(
            f"receive messages from {self.queue_url}",
            self.sqs.receive_message,
            QueueUrl=self.queue_url,
            MaxNumberOfMessages=max_messages,
            WaitTimeSeconds=wait_seconds,
            MessageSystemAttributeNames=["All"],
            MessageAttributeNames=["All"],
        )
        return {"Records": [_record(m, self.queue_url) for m in response.get("Messages", [])]}

    def delete(self, receipt_handles: Sequence[str]) -> None:
        """Delete received messages (acknowledge them)."""
        delete_messages(self.call, self.sqs, self.queue_url, receipt_handles)


def delete_messages(call: AwsCaller, sqs: Any, queue_url: str, receipt_handles: Sequence[str]) -> None:
    """Delete received messages from ``queue_url``, in batches of SQS's limit."""
    for start in range(0, len(receipt_handles), _BATCH):
        chunk = receipt_handles[start : start + _BATCH]
        call(
            f"delete {len(chunk)} message(s) from {queue_url}",
            sqs.delete_message_batch,
            QueueUrl=queue_url,
            Entries=[{"Id": str(i), "ReceiptHandle": h} for i, h in enumerate(chunk)],
        )


def _entry(entry_id: str, message: QueueMessage) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "Id": entry_id,
        "MessageBody": message.body,
        "MessageGroupId": message.group_id,
        "MessageDeduplicationId": message.deduplication_id,
    }
    if message.attributes:
        entry["MessageAttributes"] = {
            name: {"DataType": "String", "StringValue": value} for name, value in message.attributes
        }
    return entry


def _record(message: dict[str, Any], queue_url: str) -> dict[str, Any]:
    """An SQS message as the Lambda event source mapping hands it to a function."""
    attributes = {
        name: {"stringValue": value.get("StringValue"), "dataType": value.get("DataType", "String")}
        for name, value in (message.get("MessageAttributes") or {}).items()
    }
    return {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message.get("Body", ""),
        "attributes": dict(message.get("Attributes") or {}),
        "messageAttributes": attributes,
        "md5OfBody": message.get("MD5OfBody", ""),
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_url,
        "awsRegion": "",
    }


def provision_queues(
    names: ResourceNames,
    sqs_client: Any,
    caller: AwsCaller | None = None,
    *,
    max_receive_count: int = MAX_RECEIVE_COUNT,
) -> tuple[str, str]:
    """Create the commit queue and its dead-letter queue if absent; returns their URLs (queue, DLQ).

    A message received ``max_receive_count`` times without being deleted moves to the dead-letter queue.
    """
    call = caller or AwsCaller()
    dlq_url, dlq_arn = _create_dead_letter_queue(call, sqs_client, names.dead_letter_queue)
    queue_url = _create_fifo_queue(
        call,
        sqs_client,
        names.commit_queue,
        dlq_arn,
        max_receive_count,
        visibility_timeout_seconds=instance.COMMIT_QUEUE_VISIBILITY_TIMEOUT_SECONDS,
        retention_seconds=instance.COMMIT_QUEUE_RETENTION_SECONDS,
    )
    return queue_url, dlq_url


def provision_upkeep_queues(
    names: ResourceNames,
    sqs_client: Any,
    caller: AwsCaller | None = None,
    *,
    max_receive_count: int = instance.WORK_MAX_RECEIVE_COUNT,
) -> dict[str, str]:
    """Create the snapshot and cleanup work queues and their shared dead-letter queue if absent; returns
    their URLs by name (``snapshot``, ``cleanup``, ``dead_letters``)."""
    call = caller or AwsCaller()
    dlq_name = names.upkeep_dead_letter_queue
    if dlq_name is None:
        raise StateStoreError(f"instance {names.instance_id!r} names no upkeep queues")
    dlq_url, dlq_arn = _create_dead_letter_queue(call, sqs_client, dlq_name)
    urls = {"dead_letters": dlq_url}
    for kind in ("snapshot", "cleanup"):
        urls[kind] = _create_fifo_queue(
            call,
            sqs_client,
            names.upkeep_queue(kind),
            dlq_arn,
            max_receive_count,
            visibility_timeout_seconds=instance.WORK_QUEUE_VISIBILITY_TIMEOUT_SECONDS[kind],
            retention_seconds=instance.WORK_QUEUE_RETENTION_SECONDS,
        )
    return urls


_FIFO_ATTRIBUTES = {"FifoQueue": "true", "ContentBasedDeduplication": "false"}


def _create_dead_letter_queue(call: AwsCaller, sqs_client: Any, name: str) -> tuple[str, str]:
    """Create the FIFO dead-letter queue ``name`` if absent; returns its URL and ARN."""
    attributes = {**_FIFO_ATTRIBUTES, "MessageRetentionPeriod": str(instance.DEAD_LETTER_RETENTION_SECONDS)}
    url = call(f"create queue {name!r}", sqs_client.create_queue, QueueName=name, Attributes=attributes)[
        "QueueUrl"
    ]
    arn = call(
        f"read the attributes of {name!r}",
        sqs_client.get_queue_attributes,
        QueueUrl=url,
        AttributeNames=["QueueArn"],
    )["Attributes"]["QueueArn"]
    return url, arn


def _create_fifo_queue(
    call: AwsCaller,
    sqs_client: Any,
    name: str,
    dead_letter_arn: str,
    max_receive_count: int,
    *,
    visibility_timeout_seconds: int,
    retention_seconds: int,
) -> str:
    """Create the FIFO queue ``name`` if absent, redriving to ``dead_letter_arn``; returns its URL."""
    return call(
        f"create queue {name!r}",
        sqs_client.create_queue,
        QueueName=name,
        Attributes={
            **_FIFO_ATTRIBUTES,
            "VisibilityTimeout": str(visibility_timeout_seconds),
            "MessageRetentionPeriod": str(retention_seconds),
            "RedrivePolicy": json.dumps(
                {"deadLetterTargetArn": dead_letter_arn, "maxReceiveCount": max_receive_count}
            ),
        },
    )["QueueUrl"]
