"""The committer: a Lambda fed by the commit queue, ten requests at a time, reporting partial failures."""

from __future__ import annotations

from pathlib import Path

from aws_cdk import Duration
from aws_cdk import aws_lambda_event_sources as event_sources
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.functions import FunctionNetwork, StatestoreFunction
from statestore import instance
from statestore.instance import ResourceNames

COMMITTER_TIMEOUT = Duration.seconds(instance.COMMITTER_TIMEOUT_SECONDS)
# Six times the function's timeout, as AWS recommends (statestore.instance.visibility_timeout_seconds).
COMMIT_QUEUE_VISIBILITY_TIMEOUT = Duration.seconds(instance.COMMIT_QUEUE_VISIBILITY_TIMEOUT_SECONDS)
# SQS's maximum batch for FIFO queues; the committer writes a table's valid requests as one log entry.
BATCH_SIZE = 10


class Committer(Construct):
    """``lambdas.committer.handler`` consuming ``queue``; its event source grants it the consume actions.

    ``max_concurrency`` caps the concurrent invocations the event source makes. ``reserved_concurrency``
    (optional) still has one role: it keeps that much of the account's concurrency for the committer, so
    other functions cannot starve it; it must then be at least ``max_concurrency`` (the config checks).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        queue: sqs.IQueue,
        asset_dir: Path,
        names: ResourceNames,
        memory_mb: int,
        max_concurrency: int,
        reserved_concurrency: int | None,
        log_retention_days: int,
        network: FunctionNetwork | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.lambda_ = StatestoreFunction(
            self,
            "Lambda",
            handler="lambdas.committer.handler",
            description="applies commit requests from the FIFO queue to the transaction log",
            asset_dir=asset_dir,
            names=names,
            memory_mb=memory_mb,
            timeout=COMMITTER_TIMEOUT,
            log_retention_days=log_retention_days,
            reserved_concurrency=reserved_concurrency,
            # Named, so the CLI finds it (and its event source mapping) from the resources JSON alone.
            function_name=names.committer_function,
            network=network,
        )
        self.function = self.lambda_.function
        # Kept: `statestore committer pause|resume` disables and enables this mapping (the admin grant).
        self.event_source = event_sources.SqsEventSource(
            queue,
            batch_size=BATCH_SIZE,
            report_batch_item_failures=True,
            # The event source's own cap, as AWS recommends for SQS: its pollers stop taking batches at the
            # cap, so messages wait in the queue. Capping with reserved concurrency alone throttles
            # invocations instead, and each throttled batch goes back to the queue as a receive that counts
            # towards the dead-letter queue. A FIFO queue is also bounded by its message groups (one table
            # is processed by at most one invocation at a time).
            max_concurrency=max_concurrency,
        )
        self.function.add_event_source(self.event_source)
