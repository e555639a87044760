"""Scheduled upkeep fanned out per table: an EventBridge schedule invokes the function to *plan* (one message
per table that needs work, on its FIFO work queue), and the queue's event source invokes the same function
with one message at a time to *work* on that table (``statestore/services/upkeep.py``)."""

from __future__ import annotations

from pathlib import Path

from aws_cdk import Duration
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_lambda_event_sources as event_sources
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.commit_queue import fifo_dead_letter_queue, per_table_fifo_queue
from infra.functions import FunctionNetwork, StatestoreFunction
from statestore import instance
from statestore.instance import ResourceNames

# Lambda keeps an asynchronous event it could not run (throttled) for at most this long.
_MAX_EVENT_AGE = Duration.hours(6)
# A table's work is retried this often before its message moves to the dead-letter queue.
WORK_MAX_RECEIVE_COUNT = instance.WORK_MAX_RECEIVE_COUNT
WORK_RETENTION = Duration.seconds(instance.WORK_QUEUE_RETENTION_SECONDS)


def work_visibility_timeout(function_timeout: Duration) -> Duration:
    """Six times the consuming function's timeout, as AWS recommends (see
    :func:`statestore.instance.visibility_timeout_seconds`)."""
    return Duration.seconds(instance.visibility_timeout_seconds(int(function_timeout.to_seconds())))


class UpkeepQueues(Construct):
    """The snapshot and cleanup work queues (FIFO, ``MessageGroupId = table_id``) and their shared FIFO
    dead-letter queue, where a table's work goes after failing :data:`WORK_MAX_RECEIVE_COUNT` times."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        names: ResourceNames,
        snapshot_timeout: Duration,
        cleanup_timeout: Duration,
    ) -> None:
        super().__init__(scope, construct_id)
        self.dead_letter_queue = fifo_dead_letter_queue(
            self,
            queue_name=names.upkeep_dead_letter_queue,
            what="the snapshot and cleanup work queues",
        )
        dead_letters = sqs.DeadLetterQueue(
            queue=self.dead_letter_queue, max_receive_count=WORK_MAX_RECEIVE_COUNT
        )

        def work_queue(construct_id: str, kind: str, timeout: Duration) -> sqs.Queue:
            # The plan's deduplication id names the table and the schedule's period.
            return per_table_fifo_queue(
                self,
                construct_id,
                queue_name=names.upkeep_queue(kind),
                visibility_timeout=work_visibility_timeout(timeout),
                retention_period=WORK_RETENTION,
                dead_letter_queue=dead_letters,
            )

        self.snapshot_queue = work_queue("SnapshotWork", "snapshot", snapshot_timeout)
        self.cleanup_queue = work_queue("CleanupWork", "cleanup", cleanup_timeout)


class ScheduledFunction(Construct):
    """``handler`` invoked every ``rate_minutes`` minutes with EventBridge's scheduled event (it plans,
    filling ``work_queue``), and by ``work_queue``'s event source with one message at a time (it works on
    that table).

    Two runs never work on one table at once: the work queue is FIFO with one message group per table, and
    SQS hands out a group's next message only after the last one is done. Different tables run in parallel,
    up to ``max_concurrency`` invocations (the event source's cap: at it, messages wait in the queue). The
    plan learns the period from ``period_variable``: a message that waited longer than that behind its
    table's is superseded by the next plan's and dropped unloaded. A failed or throttled *plan* is not
    retried: the next scheduled run plans again.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        handler: str,
        description: str,
        rate_minutes: int,
        period_variable: str,
        timeout: Duration,
        asset_dir: Path,
        names: ResourceNames,
        memory_mb: int,
        log_retention_days: int,
        work_queue: sqs.IQueue,
        max_concurrency: int,
        network: FunctionNetwork | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.lambda_ = StatestoreFunction(
            self,
            "Lambda",
            handler=handler,
            description=description,
            asset_dir=asset_dir,
            names=names,
            memory_mb=memory_mb,
            timeout=timeout,
            log_retention_days=log_retention_days,
            network=network,
        )
        self.function = self.lambda_.function
        self.function.add_environment(period_variable, str(rate_minutes))
        period = Duration.minutes(rate_minutes)
        self.function.configure_async_invoke(
            retry_attempts=0,
            max_event_age=period if period.to_seconds() < _MAX_EVENT_AGE.to_seconds() else _MAX_EVENT_AGE,
        )
        self.schedule = events.Rule(
            self,
            "Schedule",
            description=f"statestore {names.instance_id}: plan: {description}",
            schedule=events.Schedule.rate(period),
            # A missed plan is made up by the next one; retrying would only queue the same work again.
            targets=[targets.LambdaFunction(self.function, retry_attempts=0)],
        )
        # One table per invocation: each gets the whole timeout and memory, and a failure (which fails the
        # invocation, for the errors alarm) sends only its own message back to the queue.
        self.event_source = event_sources.SqsEventSource(
            work_queue, batch_size=1, max_concurrency=max_concurrency
        )
        self.function.add_event_source(self.event_source)
