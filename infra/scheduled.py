"""A Lambda run on an EventBridge schedule: snapshot creation and cleanup."""

from __future__ import annotations

from pathlib import Path

from aws_cdk import Duration
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from constructs import Construct

from infra.functions import StatestoreFunction
from statestore.resources import ResourceNames


class ScheduledFunction(Construct):
    """``handler`` invoked every ``rate_minutes`` minutes with EventBridge's scheduled event."""

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
        )
        self.function = self.lambda_.function
        self.schedule = events.Rule(
            self,
            "Schedule",
            description=f"statestore {names.instance_id}: {description}",
            schedule=events.Schedule.rate(Duration.minutes(rate_minutes)),
            # A missed run is made up by the next one; retrying would only pile runs on top of each other.
            targets=[targets.LambdaFunction(self.function, retry_attempts=0)],
        )
