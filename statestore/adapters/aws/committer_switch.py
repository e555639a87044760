"""Pause and resume the committer on AWS (its Lambda's SQS event source mapping) or in the local runtime.

On AWS, the committer Lambda's event source mapping from the commit queue is found with
``lambda:ListEventSourceMappings`` on the function named in the resources JSON and switched with
``lambda:UpdateEventSourceMapping``. Disabling is asynchronous: the mapping goes through ``Disabling``
(batches already taken finish) before ``Disabled``.

The local runtime has no event source mapping: its poller thread plays one. Another process (the CLI)
cannot reach a flag in the runtime's memory, so the flag is a tag on the commit queue
(:data:`PAUSED_TAG`), which the poller reads before each receive. It lives as long as the local queue does.

Both report the queue's depth with ``sqs:GetQueueAttributes``. The age of the oldest message is not a
queue attribute (it is CloudWatch's ``ApproximateAgeOfOldestMessage`` metric), so it is not reported here.
"""

from __future__ import annotations

from typing import Any

from statestore.adapters.aws.clients import NOT_FOUND_CODES, AwsCaller
from statestore.errors import ResourceNotFoundError, StateStoreError
from statestore.store.switch_ports import CommitterState, CommitterSwitch, QueueDepth

PAUSED_TAG = "statestore:committer-paused"
_DEPTH_ATTRIBUTES = [
    "QueueArn",
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
]


class _Queue:
    def __init__(self, sqs: Any, queue_name: str, caller: AwsCaller) -> None:
        self.sqs, self.name, self.call = sqs, queue_name, caller

    def url(self) -> str:
        def translate(code: str, _: Exception) -> StateStoreError | None:
            if code in NOT_FOUND_CODES:
                return ResourceNotFoundError(
                    f"the commit queue {self.name!r} does not exist; check the instance"
                )
            return None

        response = self.call(
            f"look up queue {self.name}", self.sqs.get_queue_url, translate=translate, QueueName=self.name
        )
        return str(response["QueueUrl"])

    def attributes(self) -> dict[str, str]:
        response = self.call(
            f"read the attributes of queue {self.name}",
            self.sqs.get_queue_attributes,
            QueueUrl=self.url(),
            AttributeNames=_DEPTH_ATTRIBUTES,
        )
        return dict(response.get("Attributes", {}))

    def depth(self, attributes: dict[str, str] | None = None) -> QueueDepth:
        a = self.attributes() if attributes is None else attributes
        return QueueDepth(
            int(a.get("ApproximateNumberOfMessages", 0)),
            int(a.get("ApproximateNumberOfMessagesNotVisible", 0)),
            int(a.get("ApproximateNumberOfMessagesDelayed", 0)),
        )


class LambdaCommitterSwitch(CommitterSwitch):
    """The committer Lambda's event source mapping from the commit queue."""

    def __init__(
        self,
        lambda_client: Any,
        sqs: Any,
        function_name: str | None,
        queue_name: str,
        caller: AwsCaller | None = None,
    ) -> None:
        if not function_name:
            raise StateStoreError(
                "the instance's resources name no committer function (resources JSON from a stack deployed "
                "before pause/resume existed); redeploy the stack and use its StatestoreResources output"
            )
        self.lambda_client = lambda_client
        self.function_name = function_name
        self.call = caller or AwsCaller()
        self.queue = _Queue(sqs, queue_name, self.call)

    def _mapping(self, queue_arn: str) -> dict[str, Any]:
        def translate(code: str, _: Exception) -> StateStoreError | None:
            if code in NOT_FOUND_CODES:
                return ResourceNotFoundError(f"the committer function {self.function_name!r} does not exist")
            return None

        mappings: list[dict[str, Any]] = []
        marker: str | None = None
        while True:
            page = self.call(
                f"list the event source mappings of function {self.function_name}",
                self.lambda_client.list_event_source_mappings,
                translate=translate,
                FunctionName=self.function_name,
                **({"Marker": marker} if marker else {}),
            )
            mappings.extend(page.get("EventSourceMappings", []))
            marker = page.get("NextMarker")
            if not marker:
                break
        found = [m for m in mappings if m.get("EventSourceArn") == queue_arn]
        if len(found) != 1:
            raise StateStoreError(
                f"function {self.function_name!r} has {len(found)} event source mappings from the commit "
                f"queue {queue_arn} (expected one); check the stack"
            )
        return found[0]

    def _state(self, mapping: dict[str, Any], attributes: dict[str, str]) -> CommitterState:
        state = str(mapping.get("State", "Unknown"))
        return CommitterState(
            paused=state in ("Disabled", "Disabling"),
            state=state,
            queue=self.queue.depth(attributes),
            where=f"event source mapping {mapping['UUID']} of function {self.function_name}",
        )

    def set_paused(self, paused: bool) -> CommitterState:
        attributes = self.queue.attributes()
        mapping = self._mapping(attributes["QueueArn"])
        updated = self.call(
            f"{'disable' if paused else 'enable'} the event source mapping of function {self.function_name}",
            self.lambda_client.update_event_source_mapping,
            UUID=mapping["UUID"],
            Enabled=not paused,
        )
        return self._state(updated, self.queue.attributes())

    def state(self) -> CommitterState:
        attributes = self.queue.attributes()
        return self._state(self._mapping(attributes["QueueArn"]), attributes)


class LocalCommitterSwitch(CommitterSwitch):
    """The local runtime's poller, switched by a tag on the commit queue (see the module docstring)."""

    def __init__(self, sqs: Any, queue_name: str, caller: AwsCaller | None = None) -> None:
        self.call = caller or AwsCaller()
        self.queue = _Queue(sqs, queue_name, self.call)

    def set_paused(self, paused: bool) -> CommitterState:
        url = self.queue.url()
        if paused:
            self.call(
                "tag the commit queue", self.queue.sqs.tag_queue, QueueUrl=url, Tags={PAUSED_TAG: "true"}
            )
        else:
            self.call(
                "untag the commit queue", self.queue.sqs.untag_queue, QueueUrl=url, TagKeys=[PAUSED_TAG]
            )
        return self.state()

    def state(self) -> CommitterState:
        paused = is_paused_locally(self.queue.sqs, self.queue.url(), self.call)
        return CommitterState(
            paused=paused,
            state="Disabled" if paused else "Enabled",
            queue=self.queue.depth(),
            where=f"local runtime poller of queue {self.queue.name}",
        )


def is_paused_locally(sqs: Any, queue_url: str, caller: AwsCaller) -> bool:
    """Whether the local commit queue at ``queue_url`` carries the paused tag (the poller asks this)."""
    tags = caller("read the tags of the commit queue", sqs.list_queue_tags, QueueUrl=queue_url).get(
        "Tags", {}
    )
    return tags.get(PAUSED_TAG) == "true"
