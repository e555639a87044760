"""The metrics the dashboard and the alarms share: the functions' own (Powertools, namespace ``statestore``,
dimension ``service``) and the DynamoDB tables' throttles."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_dynamodb as dynamodb

from infra.functions import POWERTOOLS_NAMESPACE, StatestoreFunction

FIVE_MINUTES = Duration.minutes(5)
# CloudWatch's quota: an alarm on a metric math expression reads at most 10 metrics.
MAX_METRICS_PER_ALARM = 10
# The committer's per-table state sizes name their table in this property of the log record, not in a
# dimension (a dimension would make a custom metric per table): lambdas.committer.TABLE_ID_PROPERTY.
TABLE_ID_PROPERTY = "TableId"


def function_metric(
    function: StatestoreFunction, name: str, statistic: str = "Sum", period: Duration = FIVE_MINUTES
) -> cloudwatch.Metric:
    """The metric ``name`` that ``function``'s handler emits (embedded metric format)."""
    return cloudwatch.Metric(
        namespace=POWERTOOLS_NAMESPACE,
        metric_name=name,
        dimensions_map={"service": function.service},
        statistic=statistic,
        period=period,
        label=name,
    )


def table_throttles(
    tables: Sequence[dynamodb.Table], period: Duration = FIVE_MINUTES
) -> cloudwatch.MathExpression:
    """Read and write throttle events of all ``tables`` together (missing points count as none)."""
    using: dict[str, cloudwatch.IMetric] = {}
    for index, table in enumerate(tables):
        for kind in ("Read", "Write"):
            using[f"{kind.lower()}{index}"] = table.metric(
                f"{kind}ThrottleEvents", statistic="Sum", period=period
            )
    if len(using) > MAX_METRICS_PER_ALARM:
        raise ValueError(
            f"{len(tables)} tables make {len(using)} throttle metrics, over the {MAX_METRICS_PER_ALARM} an "
            "alarm on a math expression may read: split the throttle alarm"
        )
    return cloudwatch.MathExpression(
        expression="SUM(FILL(METRICS(), 0))",
        using_metrics=using,
        label="DynamoDB throttle events, all tables",
        period=period,
    )
