"""Real-shaped Lambda inputs: SQS FIFO events and a Lambda context."""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from typing import Any

from statestore.engine.requests import CommitRequest, encode_request

_ids = itertools.count(1)
QUEUE_ARN = "arn:aws:sqs:eu-west-2:123456789012:statestore-test-commits.fifo"


def sqs_record(
    body: str | CommitRequest,
    group_id: str | None = None,
    *,
    receive_count: int = 1,
    sent_timestamp: int = 1_700_000_000_000,
    message_id: str | None = None,
) -> dict[str, Any]:
    """One record as the SQS event source mapping delivers it from a FIFO queue."""
    if isinstance(body, CommitRequest):
        group_id = group_id or body.table_id
        dedup = body.request_id
        body = encode_request(body)
    else:
        dedup = f"dedup-{next(_ids)}"
    n = next(_ids)
    return {
        "messageId": message_id or f"059f36b4-87a3-44ab-83d2-{n:012d}",
        "receiptHandle": f"AQEBwJnKyrHigUMZj6rYigCgxlaS3SLy0a-{n}",
        "body": body,
        "attributes": {
            "ApproximateReceiveCount": str(receive_count),
            "SentTimestamp": str(sent_timestamp),
            "SequenceNumber": f"{18849496460467696128 + n}",
            "MessageGroupId": group_id or "",
            "SenderId": "AIDAIO23YVJENQZJOL4VO",
            "MessageDeduplicationId": dedup,
            "ApproximateFirstReceiveTimestamp": str(sent_timestamp + 5),
        },
        "messageAttributes": {},
        "md5OfBody": "e4e68fb7bd0e697a0ae8f1bb342846b3",
        "eventSource": "aws:sqs",
        "eventSourceARN": QUEUE_ARN,
        "awsRegion": "eu-west-2",
    }


def sqs_event(*records: dict[str, Any]) -> dict[str, Any]:
    return {"Records": list(records)}


def redelivered(record: dict[str, Any]) -> dict[str, Any]:
    count = int(record["attributes"]["ApproximateReceiveCount"]) + 1
    return {**record, "attributes": {**record["attributes"], "ApproximateReceiveCount": str(count)}}


@dataclass
class LambdaContext:
    function_name: str = "statestore-test-committer"
    memory_limit_in_mb: int = 512
    invoked_function_arn: str = "arn:aws:lambda:eu-west-2:123456789012:function:statestore-test-committer"
    aws_request_id: str = "52fdfc07-2182-154f-163f-5f0f9a621d72"
    function_version: str = "$LATEST"

    def get_remaining_time_in_millis(self) -> int:
        return 60_000


def failures(response: dict[str, Any]) -> list[str]:
    return [f["itemIdentifier"] for f in response["batchItemFailures"]]


def upkeep_records(queue: Any) -> list[dict[str, Any]]:
    """Every message an upkeep plan left on the in-memory work ``queue``, taken off it as SQS records
    delivered now (so none has waited long enough to be superseded)."""
    now = time.time_ns() // 1_000_000
    return [sqs_record(m.body, m.group_id, sent_timestamp=now) for m in queue.take(10_000)]
