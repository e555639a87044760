"""CloudWatch alarms on the commit path and the scheduled jobs, published to an SNS topic."""

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


class Alarms(Construct):
    """Alarms named ``statestore-<instance>-<what>``; subscribe to ``topic`` (or pass ``alarm_email``).

    ``functions`` maps ``committer``, ``snapshot`` and ``cleanup`` to their functions. Rates are counts per
    five minutes; ``memory_percent`` is of each function's memory size.
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
        functions: dict[str, StatestoreFunction],
        tables: Sequence[dynamodb.Table],
        oldest_message_seconds: int,
        retries_per_5_minutes: int,
        throttles_per_5_minutes: int,
        memory_percent: int,
        alarm_email: str | None,
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
            created.add_alarm_action(actions.SnsAction(self.topic))
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
        for name in ("snapshot", "cleanup"):
            alarm(
                f"{name.title()}Errors",
                f"{name}-errors",
                f"The {name} Lambda failed a plan or a table's work (retried from its queue): see its logs.",
                functions[name].function.metric_errors(period=Duration.minutes(5), statistic="Sum"),
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
