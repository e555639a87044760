"""The FIFO queue of commit requests and its dead-letter queue."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.nag import acknowledge
from statestore import instance
from statestore.instance import ResourceNames

# A request waits in the queue at most this long; the DLQ keeps a failed one for the longest SQS allows.
COMMIT_RETENTION = Duration.seconds(instance.COMMIT_QUEUE_RETENTION_SECONDS)
DEAD_LETTER_RETENTION = Duration.seconds(instance.DEAD_LETTER_RETENTION_SECONDS)


def fifo_dead_letter_queue(scope: Construct, *, queue_name: str | None, what: str) -> sqs.Queue:
    """A FIFO dead-letter queue (SQS-managed encryption, TLS only) keeping a message 14 days: the dead-letter
    queue of ``what``, acknowledged as such for cdk-nag."""
    queue = sqs.Queue(
        scope,
        "DeadLetters",
        queue_name=queue_name,
        fifo=True,
        content_based_deduplication=False,
        encryption=sqs.QueueEncryption.SQS_MANAGED,
        enforce_ssl=True,
        retention_period=DEAD_LETTER_RETENTION,
    )
    acknowledge(queue, f"This is the dead-letter queue of {what}.", "AwsSolutions-SQS3")
    return queue


def per_table_fifo_queue(
    scope: Construct,
    construct_id: str,
    *,
    queue_name: str,
    visibility_timeout: Duration,
    retention_period: Duration,
    dead_letter_queue: sqs.DeadLetterQueue,
) -> sqs.Queue:
    """A FIFO queue whose senders set ``MessageGroupId = table_id`` and their own deduplication ids:
    deduplication and throughput are per message group, so tables never slow each other down."""
    return sqs.Queue(
        scope,
        construct_id,
        queue_name=queue_name,
        fifo=True,
        content_based_deduplication=False,
        deduplication_scope=sqs.DeduplicationScope.MESSAGE_GROUP,
        fifo_throughput_limit=sqs.FifoThroughputLimit.PER_MESSAGE_GROUP_ID,
        encryption=sqs.QueueEncryption.SQS_MANAGED,
        enforce_ssl=True,
        visibility_timeout=visibility_timeout,
        retention_period=retention_period,
        dead_letter_queue=dead_letter_queue,
    )


class CommitQueue(Construct):
    """Senders set ``MessageGroupId = table_id`` and ``MessageDeduplicationId = request_id``.

    Deduplication is per message group and throughput is per group, so tables never slow each other down.
    A request received ``max_receive_count`` times without success moves to the dead-letter queue.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        names: ResourceNames,
        visibility_timeout: Duration,
        max_receive_count: int,
    ) -> None:
        super().__init__(scope, construct_id)
        self.dead_letter_queue = fifo_dead_letter_queue(
            self, queue_name=names.dead_letter_queue, what="the commit queue"
        )
        # Request ids are the deduplication ids: two different requests with equal bodies are both wanted.
        self.queue = per_table_fifo_queue(
            self,
            "Commits",
            queue_name=names.commit_queue,
            visibility_timeout=visibility_timeout,
            retention_period=COMMIT_RETENTION,
            dead_letter_queue=sqs.DeadLetterQueue(
                queue=self.dead_letter_queue, max_receive_count=max_receive_count
            ),
        )
