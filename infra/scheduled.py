"""A Lambda run on an EventBridge schedule: snapshot creation and cleanup."""

from __future__ import annotations

from pathlib import Path

from aws_cdk import Duration
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from constructs import Construct

from infra.functions import StatestoreFunction
from statestore.resources import ResourceNames

# Lambda keeps an asynchronous event it could not run (throttled) for at most this long.
_MAX_EVENT_AGE = Duration.hours(6)


class ScheduledFunction(Construct):
    """``handler`` invoked every ``rate_minutes`` minutes with EventBridge's scheduled event.

    ``exclusive`` reserves a concurrency of 1, so two runs never overlap: a run due while the last one still
    works is throttled, and Lambda keeps the event no longer than one period (then the next run is due
    anyway). Without it, runs longer than the period overlap; that is safe (a snapshot losing a race deletes
    its objects, the log's conditional put orders cleanups' commits) but duplicates work.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        handler: str,
        description: str,
        rate_minutes: int,
        timeout: Duration,
        asset_dir: Path,
        names: ResourceNames,
        memory_mb: int,
        log_retention_days: int,
        exclusive: bool,
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
            reserved_concurrency=1 if exclusive else None,
        )
        self.function = self.lambda_.function
        # A failed or throttled run is not retried: the next scheduled run does the same work.
        period = Duration.minutes(rate_minutes)
        self.function.configure_async_invoke(
            retry_attempts=0,
            max_event_age=period if period.to_seconds() < _MAX_EVENT_AGE.to_seconds() else _MAX_EVENT_AGE,
        )
        self.schedule = events.Rule(
            self,
            "Schedule",
            description=f"statestore {names.instance_id}: {description}",
            schedule=events.Schedule.rate(Duration.minutes(rate_minutes)),
            # A missed run is made up by the next one; retrying would only pile runs on top of each other.
            targets=[targets.LambdaFunction(self.function, retry_attempts=0)],
        )
