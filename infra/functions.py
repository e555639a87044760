"""The one way this app makes a Lambda function: the shared asset, Python 3.12 on x86_64, X-Ray tracing,
its own log group and a role that starts with nothing but writing to that log group."""

from __future__ import annotations

from pathlib import Path

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from infra.asset import LAMBDA_ARCHITECTURE, LAMBDA_PYTHON_VERSION
from infra.config import LOG_RETENTION_DAYS
from infra.nag import acknowledge
from statestore.resources import ResourceNames

RUNTIME = lambda_.Runtime(f"python{LAMBDA_PYTHON_VERSION}", lambda_.RuntimeFamily.PYTHON)
ARCHITECTURE = lambda_.Architecture.X86_64 if LAMBDA_ARCHITECTURE == "x86_64" else lambda_.Architecture.ARM_64
POWERTOOLS_NAMESPACE = "statestore"
# RetentionDays members are listed shortest first, like LOG_RETENTION_DAYS; INFINITE is last.
_RETENTION = dict(zip(LOG_RETENTION_DAYS, list(logs.RetentionDays)[:-1], strict=True))


class StatestoreFunction(Construct):
    """A handler from ``lambdas/`` with ``STATESTORE_RESOURCES`` in its environment.

    Grants are added by whoever wires the function to what it uses; IAM wildcard findings that come from
    object-key patterns and X-Ray are suppressed here, once, with the reason.

    ``service`` (``statestore-<instance>-<handler module>``) is its ``POWERTOOLS_SERVICE_NAME``, the
    ``service`` dimension of the metrics it emits; the instance is in it so that two instances in one
    account keep their metrics apart. ``max_memory_used`` is the most memory an invocation used (MB).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        handler: str,
        description: str,
        asset_dir: Path,
        names: ResourceNames,
        memory_mb: int,
        timeout: Duration,
        log_retention_days: int,
        reserved_concurrency: int | None = None,
        function_name: str | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.log_group = logs.LogGroup(
            self,
            "Logs",
            retention=_RETENTION[log_retention_days],
            removal_policy=RemovalPolicy.DESTROY,
        )
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"statestore {names.instance_id}: {description}",
        )
        self.log_group.grant_write(self.role)
        self.service = f"statestore-{names.instance_id}-{handler.split('.')[1]}"
        self.memory_mb = memory_mb
        self.function = lambda_.Function(
            self,
            "Function",
            description=f"statestore {names.instance_id}: {description}",
            function_name=function_name,
            runtime=RUNTIME,
            architecture=ARCHITECTURE,
            code=lambda_.Code.from_asset(str(asset_dir)),
            handler=handler,
            role=self.role,
            memory_size=memory_mb,
            timeout=timeout,
            reserved_concurrent_executions=reserved_concurrency,
            log_group=self.log_group,
            logging_format=lambda_.LoggingFormat.JSON,
            tracing=lambda_.Tracing.ACTIVE,
            environment={
                "STATESTORE_RESOURCES": names.to_json(),
                "POWERTOOLS_SERVICE_NAME": self.service,
                "POWERTOOLS_METRICS_NAMESPACE": POWERTOOLS_NAMESPACE,
            },
        )
        # Max memory used comes from the report Lambda writes after each invocation (the REPORT line; with the
        # JSON log format, a "platform.report" event). A metric filter makes it a metric, which an alarm can
        # watch; a Logs Insights widget could only be looked at. No Lambda Insights extension is needed. A
        # filter's dimensions can only come from the log event, so the service is in the metric's name.
        memory_metric_name = f"{self.service}-MaxMemoryUsedMB"
        logs.MetricFilter(
            self,
            "MaxMemoryUsed",
            log_group=self.log_group,
            filter_pattern=logs.FilterPattern.string_value("$.type", "=", "platform.report"),
            metric_namespace=POWERTOOLS_NAMESPACE,
            metric_name=memory_metric_name,
            metric_value="$.record.metrics.maxMemoryUsedMB",
            unit=cloudwatch.Unit.MEGABYTES,
        )
        self.max_memory_used = cloudwatch.Metric(
            namespace=POWERTOOLS_NAMESPACE,
            metric_name=memory_metric_name,
            statistic="Maximum",
            period=Duration.minutes(5),
            label=f"{self.service} max memory used (MB)",
        )
        acknowledge(
            self.role,
            "X-Ray's PutTraceSegments and PutTelemetryRecords support no resource-level permissions.",
            "AwsSolutions-IAM5[Resource::*]",
        )
        acknowledge(
            self.function,
            f"Python {LAMBDA_PYTHON_VERSION} on purpose: the asset's wheels (pyarrow) are built for it; "
            "move runtime and asset together (infra/asset.py).",
            "AwsSolutions-L1",
        )
