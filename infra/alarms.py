"""CloudWatch alarms on the commit path and the scheduled jobs, published to an SNS topic.

Every alarm sends its OK to the topic that got its ALARM, so whoever was told of trouble is also told it
passed. Queue ages: a dead letter is kept 14 days, so besides the alarm on the first one, an alarm on the
oldest one's age (``dead_letter_age_hours``, a day by default) tells again while most of the retention is
left; a work queue's oldest message alarms once it has waited a whole period of its schedule (the next plan
queues the same table again: upkeep is falling behind). Throttles: every function is capped by its event
source, below its reserved concurrency (the committer) or the account's; any throttle means the account's
concurrency ran out, so one is enough to tell.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.functions import StatestoreFunction
from infra.nag import acknowledge
from infra.observability import function_metric, table_throttles
from statestore.instance import DEAD_LETTER_RETENTION_SECONDS
from statestore.services.view_upkeep import VIEW_FAILURES_METRIC

DEAD_LETTER_RETENTION_DAYS = DEAD_LETTER_RETENTION_SECONDS // 86_400


class Alarms(Construct):
    """Alarms named ``statestore-<instance>-<what>``; subscribe to ``topic`` (or pass ``alarm_email``).

    ``functions`` maps ``committer``, ``snapshot`` and ``cleanup`` to their functions; ``work_queues`` maps
    ``snapshot`` and ``cleanup`` to their work queue and their schedule's period in minutes. Rates are
    counts per five minutes; ``memory_percent`` is of each function's memory size. ``queryable_views``: the
    snapshot function keeps tables' queryable views, and a failed update alarms.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        instance_id: str,
        commit_queue: sqs.IQueue,
        dead_letter_queue: sqs.IQueue,
        upkeep_dead_letter_queue: sqs.IQueue,
        work_queues: dict[str, tuple[sqs.IQueue, int]],
        functions: dict[str, StatestoreFunction],
        tables: Sequence[dynamodb.Table],
        oldest_message_seconds: int,
        dead_letter_age_hours: int,
        retries_per_5_minutes: int,
        throttles_per_5_minutes: int,
        memory_percent: int,
        alarm_email: str | None,
        queryable_views: bool = False,
    ) -> None:
        super().__init__(scope, construct_id)
        self.topic = sns.Topic(self, "Topic", topic_name=f"statestore-{instance_id}-alarms", enforce_ssl=True)
        acknowledge(
            self.topic,
            "Alarm notifications carry no data. CloudWatch cannot publish to a topic encrypted "
            "with the AWS-managed SNS key, and a customer-managed key would cost $1 a month at rest.",
            "AwsSolutions-SNS2",
        )
        if alarm_email:
            self.topic.add_subscription(subscriptions.EmailSubscription(alarm_email))
        prefix = f"statestore-{instance_id}"
        minute = Duration.minutes(1)
        self.alarms: list[cloudwatch.Alarm] = []

        def alarm(
            construct_id: str,
            name: str,
            description: str,
            metric: cloudwatch.IMetric,
            threshold: float,
            evaluation_periods: int = 1,
        ) -> None:
            created = cloudwatch.Alarm(
                self,
                construct_id,
                alarm_name=f"{prefix}-{name}",
                alarm_description=description,
                metric=metric,
                threshold=threshold,
                evaluation_periods=evaluation_periods,
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            )
            notify = actions.SnsAction(self.topic)
            created.add_alarm_action(notify)
            created.add_ok_action(notify)
            self.alarms.append(created)

        alarm(
            "DeadLettersNotEmpty",
            "dlq-not-empty",
            "Commit requests failed repeatedly and wait in the DLQ: read the reasons, fix, redrive.",
            dead_letter_queue.metric_approximate_number_of_messages_visible(
                period=minute, statistic="Maximum"
            ),
            1,
        )
        alarm(
            "UpkeepDeadLettersNotEmpty",
            "upkeep-dlq-not-empty",
            "A table's snapshot or cleanup failed every retry and its work waits in the upkeep DLQ: the "
            "message names the table; see the function's logs, fix, then delete the message (the next "
            "scheduled plan queues the table again).",
            upkeep_dead_letter_queue.metric_approximate_number_of_messages_visible(
                period=minute, statistic="Maximum"
            ),
            1,
        )
        for construct_id, name, queue, what in (
            ("DeadLettersAge", "dlq-age", dead_letter_queue, "A commit request"),
            ("UpkeepDeadLettersAge", "upkeep-dlq-age", upkeep_dead_letter_queue, "A table's upkeep work"),
        ):
            alarm(
                construct_id,
                name,
                f"{what} has waited in the dead-letter queue for {dead_letter_age_hours} h: it is deleted "
                f"after {DEAD_LETTER_RETENTION_DAYS} days. Read the reason, fix, redrive or delete it.",
                queue.metric_approximate_age_of_oldest_message(period=minute, statistic="Maximum"),
                dead_letter_age_hours * 3600,
            )
        alarm(
            "CommitterErrors",
            "committer-errors",
            "The committer Lambda failed whole invocations (not single rejected requests): see its logs.",
            functions["committer"].function.metric_errors(period=Duration.minutes(5), statistic="Sum"),
            1,
        )
        alarm(
            "OldestCommitRequest",
            "oldest-commit-request-age",
            f"A commit request has waited over {oldest_message_seconds} s: the committer is behind or stuck.",
            commit_queue.metric_approximate_age_of_oldest_message(period=minute, statistic="Maximum"),
            oldest_message_seconds,
            evaluation_periods=3,
        )
        for name, (queue, period_minutes) in work_queues.items():
            alarm(
                f"Oldest{name.title()}Work",
                f"oldest-{name}-work-age",
                f"A table's {name} work has waited {period_minutes} minutes, a whole period of its schedule: "
                f"the {name} function is behind or stuck (see its throttles, errors and duration).",
                queue.metric_approximate_age_of_oldest_message(period=minute, statistic="Maximum"),
                period_minutes * 60,
                evaluation_periods=3,
            )
        for name in ("snapshot", "cleanup"):
            alarm(
                f"{name.title()}Errors",
                f"{name}-errors",
                f"The {name} Lambda failed a plan or a table's work (retried from its queue): see its logs.",
                functions[name].function.metric_errors(period=Duration.minutes(5), statistic="Sum"),
                1,
            )
        if queryable_views:
            alarm(
                "QueryableViewFailures",
                "queryable-view-failures",
                "The snapshot function could not update a table's queryable view (the snapshot was written): "
                "queries through the view merge more of the log until it is retried next period, and fail "
                "once cleanup trims what they need. See the function's logs for the table and the error.",
                function_metric(functions["snapshot"], VIEW_FAILURES_METRIC),
                1,
            )
        alarm(
            "CommitRetries",
            "commit-retries",
            f"At least {retries_per_5_minutes} commit requests in 5 minutes went back to the queue to be "
            "retried: each blocks its table for the visibility timeout. See the committer's logs.",
            function_metric(functions["committer"], "RequestsRetry"),
            retries_per_5_minutes,
        )
        alarm(
            "DynamoDbThrottles",
            "dynamodb-throttles",
            f"DynamoDB throttled at least {throttles_per_5_minutes} requests in 5 minutes on the instance's "
            "tables: commits and loads slow down and retry. See the tables' throttle metrics.",
            table_throttles(tables),
            throttles_per_5_minutes,
        )
        for name, function in functions.items():
            alarm(
                f"{name.title()}Throttles",
                f"{name}-throttles",
                f"Lambda throttled the {name} function: the account's (or its reserved) concurrency ran out, "
                "and its work waits or is retried. See the account's ConcurrentExecutions.",
                function.function.metric_throttles(period=Duration.minutes(5), statistic="Sum"),
                1,
            )
        for name, function in functions.items():
            # The state a function loads grows with the table; near its memory size it is killed.
            limit = function.memory_mb * memory_percent // 100
            alarm(
                f"{name.title()}Memory",
                f"{name}-memory",
                f"The {name} Lambda used {limit} MB or more, {memory_percent}% of its "
                f"{function.memory_mb} MB: raise {name}_memory_mb before it runs out.",
                function.max_memory_used,
                limit,
            )
