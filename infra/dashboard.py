"""The instance's CloudWatch dashboard: the commit path, the state's size, the scheduled jobs, the functions
and the tables, in that order, with the alarms' states on top."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Aws, Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.functions import StatestoreFunction
from infra.observability import FIVE_MINUTES, TABLE_ID_PROPERTY, function_metric
from infra.scheduled import UpkeepQueues

WIDTH = 8  # three graphs a row (the dashboard is 24 units wide)
HEIGHT = 6
COMMITTER_COUNTS = (
    "RequestsCommitted",
    "RequestsRejected",
    "RequestsDuplicate",
    "RequestsDeadLettered",
    "RequestsRetry",
)
SNAPSHOT_COUNTS = ("SnapshotTablesPlanned", "SnapshotsWritten", "SnapshotTablesSkipped")
CLEANUP_COUNTS = (
    "CleanupTablesPlanned",
    "LogEntriesDeleted",
    "SnapshotsDeleted",
    "DataFilesDeleted",
    "RefusedFiles",
    "ClaimsReleased",
    "OrphanFilesDeleted",
)

LARGEST_TABLES_TITLE = "Largest tables (file references, latest in the time range)"
# Each table's latest size from the committer's per-table documents (lambdas/committer.py), largest first.
LARGEST_TABLES_QUERY = (
    f"fields {TABLE_ID_PROPERTY}, StateReferences, StatePartitions",
    f"filter ispresent({TABLE_ID_PROPERTY}) and ispresent(StateReferences)",
    "stats latest(StateReferences) as references, latest(StatePartitions) as partitions"
    f" by {TABLE_ID_PROPERTY}",
    "sort references desc",
    "limit 25",
)


def _graph(
    title: str,
    left: Sequence[cloudwatch.IMetric],
    *,
    right: Sequence[cloudwatch.IMetric] = (),
    right_y_axis: cloudwatch.YAxisProps | None = None,
    left_y_axis: cloudwatch.YAxisProps | None = None,
    left_annotations: Sequence[cloudwatch.HorizontalAnnotation] = (),
    period: Duration | None = None,
) -> cloudwatch.GraphWidget:
    return cloudwatch.GraphWidget(
        title=title,
        left=list(left),
        right=list(right),
        right_y_axis=right_y_axis,
        left_y_axis=left_y_axis,
        left_annotations=list(left_annotations),
        period=period,
        width=WIDTH,
        height=HEIGHT,
    )


class Dashboard(Construct):
    """Dashboard ``statestore-<instance>-<region>`` (dashboard names are global to the account).

    ``functions`` maps ``committer``, ``snapshot`` and ``cleanup`` to their functions; ``timeouts`` gives
    each one's timeout, drawn on its duration graph.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        instance_id: str,
        functions: dict[str, StatestoreFunction],
        timeouts: dict[str, Duration],
        commit_queue: sqs.IQueue,
        dead_letter_queue: sqs.IQueue,
        upkeep: UpkeepQueues,
        tables: Sequence[dynamodb.Table],
        alarms: Sequence[cloudwatch.IAlarm],
    ) -> None:
        super().__init__(scope, construct_id)
        committer, snapshot, cleanup = functions["committer"], functions["snapshot"], functions["cleanup"]
        minute = Duration.minutes(1)
        self.dashboard = cloudwatch.Dashboard(
            self, "Dashboard", dashboard_name=f"statestore-{instance_id}-{Aws.REGION}"
        )
        self.dashboard.add_widgets(
            cloudwatch.AlarmStatusWidget(title="Alarms", alarms=list(alarms), width=24, height=3)
        )
        # The commit path: requests by outcome, batches, table loads, the queues.
        self.dashboard.add_widgets(
            _graph("Commit requests by outcome", [function_metric(committer, n) for n in COMMITTER_COUNTS]),
            _graph(
                "Committer batches",
                [
                    function_metric(committer, "BatchSize", "Average"),
                    function_metric(committer, "BatchSize", "Maximum"),
                ],
                right=[function_metric(committer, "LogAppendConflicts")],
            ),
            _graph(
                "Table loads (warm: from the cache; cold: read in full; guarded: committed without a state, "
                "its guard read from the snapshot when cold)",
                [
                    function_metric(committer, "TableLoadsWarm"),
                    function_metric(committer, "TableLoadsCold"),
                    function_metric(committer, "TableCommitsGuarded"),
                    function_metric(committer, "TableGuardsCold"),
                ],
                right=[
                    function_metric(committer, "TableLoadTime", "Average"),
                    function_metric(committer, "TableLoadTime", "Maximum"),
                    function_metric(committer, "TableGuardReadTime", "Maximum"),
                ],
                right_y_axis=cloudwatch.YAxisProps(label="ms", show_units=False),
            ),
            _graph(
                "Warm cache: tables evicted to stay within the budget, and what it keeps",
                [
                    function_metric(committer, "WarmCacheEvictions"),
                    function_metric(committer, "WarmCacheDemotions"),
                    function_metric(committer, "WarmCacheOversized"),
                    function_metric(committer, "WarmCacheTables", "Maximum"),
                ],
                right=[function_metric(committer, "WarmCacheBytes", "Maximum")],
                right_y_axis=cloudwatch.YAxisProps(label="bytes (estimated)", show_units=False),
            ),
        )
        self.dashboard.add_widgets(
            _graph(
                "Commit queue: depth and oldest message",
                [
                    commit_queue.metric_approximate_number_of_messages_visible(
                        period=minute, statistic="Maximum"
                    ),
                    commit_queue.metric_approximate_number_of_messages_not_visible(
                        period=minute, statistic="Maximum"
                    ),
                ],
                right=[
                    commit_queue.metric_approximate_age_of_oldest_message(period=minute, statistic="Maximum")
                ],
                right_y_axis=cloudwatch.YAxisProps(label="seconds", show_units=False),
            ),
            _graph(
                "Dead-letter queue depth (commit requests; upkeep work)",
                [
                    queue.metric_approximate_number_of_messages_visible(period=minute, statistic="Maximum")
                    for queue in (dead_letter_queue, upkeep.dead_letter_queue)
                ],
            ),
            _graph("DynamoDB throttle events", self._throttles(tables)),
        )
        # The state's size: the largest table a batch touched (a metric), and the largest tables by name (the
        # committer logs each table's size with its id as a property, not a metric per table).
        self.dashboard.add_widgets(
            _graph(
                "State: the largest table touched",
                [function_metric(committer, "StateReferences", "Maximum")],
                right=[function_metric(committer, "StatePartitions", "Maximum")],
            ),
            cloudwatch.LogQueryWidget(
                title=LARGEST_TABLES_TITLE,
                log_group_names=[committer.log_group.log_group_name],
                query_lines=list(LARGEST_TABLES_QUERY),
                view=cloudwatch.LogQueryVisualizationType.TABLE,
                width=WIDTH,
                height=HEIGHT,
            ),
            _graph(
                "Upkeep work queues: tables waiting and oldest wait",
                [
                    queue.metric_approximate_number_of_messages_visible(period=minute, statistic="Maximum")
                    for queue in (upkeep.snapshot_queue, upkeep.cleanup_queue)
                ],
                right=[
                    queue.metric_approximate_age_of_oldest_message(period=minute, statistic="Maximum")
                    for queue in (upkeep.snapshot_queue, upkeep.cleanup_queue)
                ],
                right_y_axis=cloudwatch.YAxisProps(label="seconds", show_units=False),
            ),
            _graph(
                "Snapshot and cleanup work",
                [function_metric(snapshot, n) for n in SNAPSHOT_COUNTS]
                + [function_metric(cleanup, n) for n in CLEANUP_COUNTS],
                period=Duration.hours(1),
            ),
        )
        # Each function: errors, duration against its timeout, max memory used against its memory size.
        for name, function in functions.items():
            timeout = timeouts[name]
            self.dashboard.add_widgets(
                _graph(
                    f"{name}: errors and throttles",
                    [
                        function.function.metric_errors(period=FIVE_MINUTES, statistic="Sum"),
                        function.function.metric_throttles(period=FIVE_MINUTES, statistic="Sum"),
                    ],
                ),
                _graph(
                    f"{name}: duration (timeout {int(timeout.to_seconds())} s)",
                    [
                        function.function.metric_duration(period=FIVE_MINUTES, statistic="Average"),
                        function.function.metric_duration(period=FIVE_MINUTES, statistic="Maximum"),
                    ],
                    left_annotations=[
                        cloudwatch.HorizontalAnnotation(value=timeout.to_milliseconds(), label="timeout")
                    ],
                ),
                _graph(
                    f"{name}: max memory used (MB) of {function.memory_mb}",
                    [function.max_memory_used],
                    left_annotations=[
                        cloudwatch.HorizontalAnnotation(value=function.memory_mb, label="memory size")
                    ],
                    left_y_axis=cloudwatch.YAxisProps(min=0, max=function.memory_mb, show_units=False),
                ),
            )

    @staticmethod
    def _throttles(tables: Sequence[dynamodb.Table]) -> list[cloudwatch.IMetric]:
        return [
            table.metric(
                f"{kind}ThrottleEvents", statistic="Sum", period=FIVE_MINUTES, label=f"{table.node.id} {kind}"
            )
            for table in tables
            for kind in ("Read", "Write")
        ]
