"""The one way this app makes a Lambda function: the shared asset, Python 3.12 on x86_64, X-Ray tracing,
its own log group and a role that starts with nothing but writing to that log group."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from infra.asset import LAMBDA_ARCHITECTURE, LAMBDA_PYTHON_VERSION
from infra.config import LOG_RETENTION_DAYS
from infra.nag import acknowledge
from statestore.instance import ResourceNames

RUNTIME = lambda_.Runtime(f"python{LAMBDA_PYTHON_VERSION}", lambda_.RuntimeFamily.PYTHON)
ARCHITECTURE = lambda_.Architecture.X86_64 if LAMBDA_ARCHITECTURE == "x86_64" else lambda_.Architecture.ARM_64
POWERTOOLS_NAMESPACE = "statestore"
# The EC2 actions of AWS's AWSLambdaVPCAccessExecutionRole: Lambda manages a VPC function's network
# interfaces with its execution role.
VPC_ACCESS_ACTIONS = (
    "ec2:AssignPrivateIpAddresses",
    "ec2:CreateNetworkInterface",
    "ec2:DeleteNetworkInterface",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeSubnets",
    "ec2:UnassignPrivateIpAddresses",
)
# RetentionDays members are listed shortest first, like LOG_RETENTION_DAYS; INFINITE is last.
_RETENTION = dict(zip(LOG_RETENTION_DAYS, list(logs.RetentionDays)[:-1], strict=True))


def log_retention(days: int) -> logs.RetentionDays:
    """CloudWatch's retention of ``days`` (one of :data:`infra.config.LOG_RETENTION_DAYS`)."""
    return _RETENTION[days]


@dataclass(frozen=True)
class FunctionNetwork:
    """A VPC placement for a function: its subnets and security groups (infra/postgres.py)."""

    vpc: ec2.IVpc
    subnets: ec2.SubnetSelection
    security_groups: tuple[ec2.ISecurityGroup, ...]


class StatestoreFunction(Construct):
    """A handler from ``lambdas/`` with ``STATESTORE_RESOURCES`` in its environment.

    Grants are added by whoever wires the function to what it uses; IAM wildcard findings that come from
    object-key patterns and X-Ray are suppressed here, once, with the reason.

    ``network`` (optional) places it in a VPC (only the functions that use PostgreSQL, infra/postgres.py).

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
        network: FunctionNetwork | None = None,
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
            vpc=network.vpc if network else None,
            vpc_subnets=network.subnets if network else None,
            security_groups=list(network.security_groups) if network else None,
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
        wildcard_reason = (
            "X-Ray's PutTraceSegments and PutTelemetryRecords support no resource-level permissions."
        )
        if network is not None:
            # What AWSLambdaVPCAccessExecutionRole gives for the function's network interfaces, less its
            # log actions (the function's own log group is granted above). CDK attaches nothing to a role
            # it did not create.
            self.role.add_to_principal_policy(
                iam.PolicyStatement(actions=list(VPC_ACCESS_ACTIONS), resources=["*"])
            )
            wildcard_reason += (
                " Nor do the EC2 network-interface actions Lambda needs to run the function in a VPC "
                "(its ENIs are created and described before they exist to be named)."
            )
        acknowledge(self.role, wildcard_reason, "AwsSolutions-IAM5[Resource::*]")
        acknowledge(
            self.function,
            f"Python {LAMBDA_PYTHON_VERSION} on purpose: the asset's wheels (pyarrow) are built for it; "
            "move runtime and asset together (infra/asset.py).",
            "AwsSolutions-L1",
        )
