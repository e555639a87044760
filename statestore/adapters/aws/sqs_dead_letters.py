"""The dead-letter queue on SQS FIFO, for an operator: peek at every message, delete chosen ones.

SQS has no "peek": a message is seen by receiving it, which hides it for a visibility timeout. Peeking
receives every message with a short timeout (``hold_seconds``, so a crash mid-way leaves them hidden only
that long), then makes them all visible again at once. Deleting needs the receipt handle of the latest
receive, so it walks the queue the same way, deletes the chosen messages and makes the rest visible again.

SQS FIFO returns no more messages of a group while some of that group are in flight, so one walk sees at
most the oldest ten messages of each group (table): remove those to see the next.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from statestore.adapters.aws.clients import AwsCaller
from statestore.adapters.aws.sqs_queue import delete_messages
from statestore.store.dead_letter_ports import DeadLetter, DeadLetterQueue
from statestore.store.ports import DEAD_LETTER_REASON_ATTRIBUTE, SOURCE_MESSAGE_ID_ATTRIBUTE

_BATCH = 10  # ReceiveMessage / DeleteMessageBatch / ChangeMessageVisibilityBatch limit
SQS_FIFO_GROUP_WINDOW = 10  # messages of one group a walk can see


class SqsDeadLetterQueue(DeadLetterQueue):
    """The queue at ``queue_url``. ``wait_seconds`` is how long the last, empty receive long-polls: short
    polls sample only some of SQS's servers, so an empty short poll does not prove the queue empty."""

    def __init__(
        self,
        sqs_client: Any,
        queue_url: str,
        caller: AwsCaller | None = None,
        *,
        hold_seconds: int = 30,
        wait_seconds: int = 1,
    ) -> None:
        self.sqs = sqs_client
        self.queue_url = queue_url
        self.call = caller or AwsCaller()
        self.hold_seconds = hold_seconds
        self.wait_seconds = wait_seconds

    @classmethod
    def named(cls, sqs_client: Any, queue_name: str, caller: AwsCaller | None = None) -> SqsDeadLetterQueue:
        """The queue called ``queue_name`` (raises StateStoreError if there is none)."""
        call = caller or AwsCaller()
        response = call(f"find queue {queue_name!r}", sqs_client.get_queue_url, QueueName=queue_name)
        return cls(sqs_client, response["QueueUrl"], call)

    def peek(self) -> list[DeadLetter]:
        received = self._receive_all()
        self._release([m["ReceiptHandle"] for m in received])
        return [_letter(m) for m in received]

    def delete(self, message_ids: Collection[str]) -> list[str]:
        wanted = set(message_ids)
        received = self._receive_all()
        doomed = [m for m in received if m["MessageId"] in wanted]
        try:
            delete_messages(self.call, self.sqs, self.queue_url, [m["ReceiptHandle"] for m in doomed])
        finally:
            self._release([m["ReceiptHandle"] for m in received if m["MessageId"] not in wanted])
        return [m["MessageId"] for m in doomed]

    def _receive_all(self) -> list[dict[str, Any]]:
        """Receive every message it can, oldest first, each once (hidden for ``hold_seconds``). Short polls
        while they bring messages; an empty one is confirmed by a long poll before the walk ends."""
        seen: dict[str, dict[str, Any]] = {}
        while True:
            new = [m for m in self._receive(0) if m["MessageId"] not in seen]
            if not new and self.wait_seconds > 0:
                new = [m for m in self._receive(self.wait_seconds) if m["MessageId"] not in seen]
            if not new:
                return sorted(seen.values(), key=_order)
            for message in new:
                seen[message["MessageId"]] = message

    def _receive(self, wait_seconds: int) -> list[dict[str, Any]]:
        response = self.call(
            f"receive messages from {self.queue_url}",
            self.sqs.receive_message,
            QueueUrl=self.queue_url,
            MaxNumberOfMessages=_BATCH,
            VisibilityTimeout=self.hold_seconds,
            WaitTimeSeconds=wait_seconds,
            MessageSystemAttributeNames=["All"],
            MessageAttributeNames=["All"],
        )
        messages: list[dict[str, Any]] = response.get("Messages", [])
        return messages

    def _release(self, receipt_handles: list[str]) -> None:
        """Make received messages visible again now."""
        for start in range(0, len(receipt_handles), _BATCH):
            chunk = receipt_handles[start : start + _BATCH]
            self.call(
                f"release {len(chunk)} message(s) of {self.queue_url}",
                self.sqs.change_message_visibility_batch,
                QueueUrl=self.queue_url,
                Entries=[
                    {"Id": str(i), "ReceiptHandle": handle, "VisibilityTimeout": 0}
                    for i, handle in enumerate(chunk)
                ],
            )


def _order(message: dict[str, Any]) -> tuple[int, str]:
    attributes = message.get("Attributes") or {}
    return int(attributes.get("SequenceNumber", 0)), message["MessageId"]


def _letter(message: dict[str, Any]) -> DeadLetter:
    attributes = message.get("Attributes") or {}
    values = {
        name: value.get("StringValue") for name, value in (message.get("MessageAttributes") or {}).items()
    }
    return DeadLetter(
        message_id=message["MessageId"],
        body=message.get("Body", ""),
        group_id=attributes.get("MessageGroupId", ""),
        sent_time=int(attributes.get("SentTimestamp", 0)),
        reason=values.get(DEAD_LETTER_REASON_ATTRIBUTE),
        source_message_id=values.get(SOURCE_MESSAGE_ID_ATTRIBUTE),
        receive_count=int(attributes.get("ApproximateReceiveCount", 1)),
    )
