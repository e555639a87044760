"""What `cdk deploy` would create, asserted on the synthesised template by properties (never logical ids)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import assertions

from infra.asset import AssetError
from infra.committer import COMMITTER_TIMEOUT
from infra.config import InstanceConfig
from infra.data_bucket import REQUEST_BODY_TAG_KEY, REQUEST_BODY_TAG_VALUE
from statestore import instance as resources
from statestore.instance import ResourceNames
from statestore.services.cleanup_policy import (
    CLAIM_EXPIRY_ENV,
    GC_DELAY_ENV,
    CleanupPolicy,
    policy_from_environment,
)
from statestore.services.warm_cache import WARM_CACHE_MB_ENV
from tests.infra.conftest import SynthStack

Match = assertions.Match
Capture = assertions.Capture

pytestmark = pytest.mark.infra

NAMES = ResourceNames.for_instance("main")
COMMITTER = "lambdas.committer.handler"
SNAPSHOT = "lambdas.snapshot.handler"
CLEANUP = "lambdas.cleanup.handler"


def only_id(template: Any, resource_type: str, properties: dict[str, Any]) -> str:
    """The logical id of the one resource of ``resource_type`` with ``properties`` (found, not hard-coded)."""
    found = template.find_resources(resource_type, {"Properties": properties})
    assert len(found) == 1, f"expected one {resource_type} with {properties}, found {len(found)}"
    return next(iter(found))


def mentions(value: Any, logical_id: str) -> bool:
    return f'"{logical_id}"' in json.dumps(value)


def statements_of(template: Any, handler: str) -> list[dict[str, Any]]:
    """Every IAM statement attached to the role of the function running ``handler``."""
    function = template.find_resources("AWS::Lambda::Function", {"Properties": {"Handler": handler}})
    assert len(function) == 1
    role_id = next(iter(function.values()))["Properties"]["Role"]["Fn::GetAtt"][0]
    policies = template.find_resources("AWS::IAM::Policy", {"Properties": {"Roles": [{"Ref": role_id}]}})
    assert policies, f"no policy attached to the role of {handler}"
    return [s for p in policies.values() for s in p["Properties"]["PolicyDocument"]["Statement"]]


def actions_on(template: Any, handler: str, logical_id: str, key_pattern: str | None = None) -> set[str]:
    """Actions ``handler``'s role may take on the resource ``logical_id`` (or its objects under a pattern)."""
    granted: set[str] = set()
    for statement in statements_of(template, handler):
        resources = (
            statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        )
        hits = [r for r in resources if mentions(r, logical_id)]
        if key_pattern is not None:
            hits = [r for r in hits if key_pattern in json.dumps(r)]
        if hits:
            actions = statement["Action"]
            granted.update([actions] if isinstance(actions, str) else actions)
    return granted


def table_id(template: Any, name: str) -> str:
    return only_id(template, "AWS::DynamoDB::Table", {"TableName": name})


def queue_id(template: Any, name: str) -> str:
    return only_id(template, "AWS::SQS::Queue", {"QueueName": name})


def bucket_id(template: Any) -> str:
    return only_id(template, "AWS::S3::Bucket", {"BucketName": Match.any_value()})


# --- DynamoDB ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(NAMES.table_key_schemas))
def test_each_table_has_the_key_schema_from_resources_on_demand_with_pitr(template: Any, name: str) -> None:
    keys = NAMES.table_key_schemas[name]
    key_schema = [{"AttributeName": keys.hash_key[0], "KeyType": "HASH"}]
    attributes = [{"AttributeName": keys.hash_key[0], "AttributeType": keys.hash_key[1]}]
    if keys.range_key:
        key_schema.append({"AttributeName": keys.range_key[0], "KeyType": "RANGE"})
        attributes.append({"AttributeName": keys.range_key[0], "AttributeType": keys.range_key[1]})
    template.has_resource_properties(
        "AWS::DynamoDB::Table",
        {
            "TableName": name,
            "KeySchema": key_schema,
            "AttributeDefinitions": Match.array_equals(attributes),
            "BillingMode": "PAY_PER_REQUEST",
            "PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": True},
            "DeletionProtectionEnabled": True,
        },
    )


def test_there_are_exactly_the_five_tables_of_the_instance(template: Any) -> None:
    template.resource_count_is("AWS::DynamoDB::Table", len(NAMES.table_key_schemas))


def test_commit_statuses_expire_by_ttl_on_expires_at(template: Any) -> None:
    template.has_resource_properties(
        "AWS::DynamoDB::Table",
        {
            "TableName": NAMES.commit_status_table,
            "TimeToLiveSpecification": {"AttributeName": "expires_at", "Enabled": True},
        },
    )


def test_protected_tables_are_retained_and_a_disposable_instance_deletes_them(
    synth_stack: SynthStack,
) -> None:
    protected = assertions.Template.from_stack(synth_stack())
    protected.has_resource("AWS::DynamoDB::Table", {"DeletionPolicy": "Retain"})
    disposable = assertions.Template.from_stack(synth_stack(deletion_protection="false"))
    disposable.has_resource(
        "AWS::DynamoDB::Table",
        {"DeletionPolicy": "Delete", "Properties": Match.object_like({"DeletionProtectionEnabled": False})},
    )
    assert not disposable.find_resources("AWS::DynamoDB::Table", {"DeletionPolicy": "Retain"})


def test_instance_id_from_context_names_everything(synth_stack: SynthStack) -> None:
    stack = synth_stack(instance_id="dev2")
    assert stack.stack_name == "statestore-dev2"
    other = ResourceNames.for_instance("dev2")
    template = assertions.Template.from_stack(stack)
    for name in [*other.table_key_schemas, other.commit_queue, other.dead_letter_queue]:
        assert mentions(template.to_json(), name)


# --- the commit queue -------------------------------------------------------------------------------


def test_commit_queue_is_fifo_deduplicated_per_group_by_request_id_encrypted_with_a_fifo_dlq(
    template: Any,
) -> None:
    dead_letter_arn = Capture()
    template.has_resource_properties(
        "AWS::SQS::Queue",
        {
            "QueueName": NAMES.commit_queue,
            "FifoQueue": True,
            "ContentBasedDeduplication": False,
            "DeduplicationScope": "messageGroup",
            "FifoThroughputLimit": "perMessageGroupId",
            "SqsManagedSseEnabled": True,
            "RedrivePolicy": {"deadLetterTargetArn": dead_letter_arn, "maxReceiveCount": 5},
        },
    )
    template.has_resource_properties(
        "AWS::SQS::Queue",
        {"QueueName": NAMES.dead_letter_queue, "FifoQueue": True, "SqsManagedSseEnabled": True},
    )
    assert mentions(dead_letter_arn.as_object(), queue_id(template, NAMES.dead_letter_queue))


def test_dlq_max_receive_count_comes_from_context(synth_stack: SynthStack) -> None:
    template = assertions.Template.from_stack(synth_stack(dlq_max_receive_count="2"))
    template.has_resource_properties(
        "AWS::SQS::Queue",
        {"QueueName": NAMES.commit_queue, "RedrivePolicy": Match.object_like({"maxReceiveCount": 2})},
    )


def test_queues_refuse_requests_without_tls(template: Any) -> None:
    for name in (NAMES.commit_queue, NAMES.dead_letter_queue):
        template.has_resource_properties(
            "AWS::SQS::QueuePolicy",
            {
                "Queues": [{"Ref": queue_id(template, name)}],
                "PolicyDocument": {
                    "Statement": Match.array_with(
                        [
                            Match.object_like(
                                {"Effect": "Deny", "Condition": {"Bool": {"aws:SecureTransport": "false"}}}
                            )
                        ]
                    )
                },
            },
        )


def test_visibility_timeout_is_at_least_six_times_the_committer_timeout(template: Any) -> None:
    timeout, visibility = Capture(), Capture()
    template.has_resource_properties("AWS::Lambda::Function", {"Handler": COMMITTER, "Timeout": timeout})
    template.has_resource_properties(
        "AWS::SQS::Queue", {"QueueName": NAMES.commit_queue, "VisibilityTimeout": visibility}
    )
    assert timeout.as_number() == COMMITTER_TIMEOUT.to_seconds()
    assert visibility.as_number() >= 6 * timeout.as_number()


# --- Lambdas ------------------------------------------------------------------------------------------


def test_committer_consumes_the_commit_queue_ten_at_a_time_reporting_partial_failures(template: Any) -> None:
    source = Capture()
    template.has_resource_properties(
        "AWS::Lambda::EventSourceMapping",
        {"BatchSize": 10, "FunctionResponseTypes": ["ReportBatchItemFailures"], "EventSourceArn": source},
    )
    assert mentions(source.as_object(), queue_id(template, NAMES.commit_queue))
    # The others feed the snapshot and cleanup functions their work.
    template.resource_count_is("AWS::Lambda::EventSourceMapping", 3)


def test_the_committer_function_has_the_name_the_resources_json_gives_it(template: Any) -> None:
    # `statestore committer pause` finds the function, and so its event source mapping, by this name.
    resources = Capture()
    template.has_resource_properties(
        "AWS::Lambda::Function",
        {
            "Handler": COMMITTER,
            "FunctionName": "statestore-main-committer",
            "Environment": {"Variables": Match.object_like({"STATESTORE_RESOURCES": resources})},
        },
    )
    assert NAMES.committer_function == "statestore-main-committer"
    assert "committer_function" in json.dumps(resources.as_object())  # the CLI reads it from there


@pytest.mark.parametrize("handler", [COMMITTER, SNAPSHOT, CLEANUP])
def test_functions_run_python_312_on_x86_64_with_resource_names_and_tracing(
    template: Any, handler: str
) -> None:
    resources = Capture()
    template.has_resource_properties(
        "AWS::Lambda::Function",
        {
            "Handler": handler,
            "Runtime": "python3.12",
            "Architectures": ["x86_64"],
            "TracingConfig": {"Mode": "Active"},
            "Environment": {"Variables": Match.object_like({"STATESTORE_RESOURCES": resources})},
        },
    )
    # The bucket name holds the account and region (tokens), so the JSON is joined at deploy time.
    joined = json.dumps(resources.as_object())
    for name in (NAMES.transaction_log_table, NAMES.commit_queue, "statestore-main-data-"):
        assert name in joined


def test_the_committer_is_capped_by_its_event_source_and_reserves_as_much_concurrency_by_default(
    template: Any,
) -> None:
    template.has_resource_properties(
        "AWS::Lambda::EventSourceMapping", {"ScalingConfig": {"MaximumConcurrency": 10}}
    )
    # 10 of an account's default 1,000: other functions keep 990, and the event source never runs more.
    template.has_resource_properties(
        "AWS::Lambda::Function", {"Handler": COMMITTER, "ReservedConcurrentExecutions": 10}
    )
    for handler in (SNAPSHOT, CLEANUP):
        template.has_resource_properties(
            "AWS::Lambda::Function", {"Handler": handler, "ReservedConcurrentExecutions": Match.absent()}
        )


@pytest.mark.parametrize(
    ("context", "reserved"),
    [
        ({"committer_max_concurrency": "4", "committer_reserved_concurrency": "6"}, 6),
        ({"committer_max_concurrency": "20"}, 20),  # the default follows the event source's cap
        ({"committer_reserved_concurrency": "none"}, None),  # for an account whose quota is too small
        ({"committer_reserved_concurrency": "NONE"}, None),
    ],
)
def test_the_committers_reserved_concurrency_is_a_setting(
    synth_stack: SynthStack, context: dict[str, str], reserved: int | None
) -> None:
    configured = assertions.Template.from_stack(synth_stack(**context))
    configured.has_resource_properties(
        "AWS::Lambda::Function",
        {
            "Handler": COMMITTER,
            "ReservedConcurrentExecutions": Match.absent() if reserved is None else reserved,
        },
    )


@pytest.mark.parametrize("value", ["0", "-3", "ten", "2.5", " ", "1001"])
def test_a_reserved_concurrency_that_is_not_a_positive_whole_number_is_refused(value: str) -> None:
    context = {"committer_reserved_concurrency": value}

    class Context:
        def try_get_context(self, key: str) -> Any:
            return context.get(key)

    with pytest.raises(ValueError, match="committer_reserved_concurrency") as refused:
        InstanceConfig.from_context(Context())
    assert "none" in str(refused.value) or "between 1 and 1000" in str(refused.value)


@pytest.mark.parametrize(("handler", "kind"), [(SNAPSHOT, "snapshot"), (CLEANUP, "cleanup")])
def test_a_scheduled_function_plans_on_its_schedule_and_works_one_table_per_message_from_its_queue(
    template: Any, handler: str, kind: str
) -> None:
    function = only_id(template, "AWS::Lambda::Function", {"Handler": handler})
    queue = queue_id(template, NAMES.upkeep_queue(kind))
    rate_minutes = 15 if handler == SNAPSHOT else 60
    # No concurrency reserved: tables run in parallel, capped by the event source.
    template.has_resource_properties(
        "AWS::Lambda::Function",
        {
            "Handler": handler,
            "ReservedConcurrentExecutions": Match.absent(),
            "Environment": {
                "Variables": Match.object_like(
                    {f"STATESTORE_{kind.upper()}_PERIOD_MINUTES": str(rate_minutes)}
                )
            },
        },
    )
    template.has_resource_properties(
        "AWS::Lambda::EventSourceMapping",
        {
            "FunctionName": {"Ref": function},
            "EventSourceArn": {"Fn::GetAtt": [queue, "Arn"]},
            "BatchSize": 1,
            "ScalingConfig": {"MaximumConcurrency": 10},
        },
    )
    # A plan that cannot start is dropped, not retried: the next one plans again.
    template.has_resource_properties(
        "AWS::Lambda::EventInvokeConfig",
        {
            "FunctionName": {"Ref": function},
            "MaximumRetryAttempts": 0,
            "MaximumEventAgeInSeconds": rate_minutes * 60,
        },
    )


@pytest.mark.parametrize(("kind", "timeout_s"), [("snapshot", 300), ("cleanup", 600)])
def test_work_queues_are_fifo_outlast_their_function_and_dead_letter_after_three_failures(
    template: Any, kind: str, timeout_s: int
) -> None:
    redrive = Capture()
    template.has_resource_properties(
        "AWS::SQS::Queue",
        {
            "QueueName": NAMES.upkeep_queue(kind),
            "FifoQueue": True,
            "DeduplicationScope": "messageGroup",
            "VisibilityTimeout": 6 * timeout_s,
            "RedrivePolicy": redrive,
        },
    )
    assert redrive.as_object()["maxReceiveCount"] == 3
    assert mentions(redrive.as_object(), queue_id(template, str(NAMES.upkeep_dead_letter_queue)))


def test_at_most_the_configured_number_of_tables_are_worked_on_at_once(synth_stack: SynthStack) -> None:
    template = assertions.Template.from_stack(synth_stack(upkeep_max_concurrency="50"))
    mappings = template.find_resources(
        "AWS::Lambda::EventSourceMapping", {"Properties": {"ScalingConfig": {"MaximumConcurrency": 50}}}
    )
    assert len(mappings) == 2


def test_the_removed_exclusive_scheduled_runs_key_is_refused_saying_what_replaced_it(
    synth_stack: SynthStack,
) -> None:
    with pytest.raises(
        ValueError, match="exclusive_scheduled_runs is no longer used.*upkeep_max_concurrency"
    ):
        synth_stack(exclusive_scheduled_runs="true")


def test_memory_and_log_retention_come_from_context(synth_stack: SynthStack) -> None:
    template = assertions.Template.from_stack(
        synth_stack(committer_memory_mb="512", snapshot_memory_mb=3008, log_retention_days="7")
    )
    template.has_resource_properties("AWS::Lambda::Function", {"Handler": COMMITTER, "MemorySize": 512})
    template.has_resource_properties("AWS::Lambda::Function", {"Handler": SNAPSHOT, "MemorySize": 3008})
    logs = template.find_resources("AWS::Logs::LogGroup")
    assert len(logs) == 3
    assert {g["Properties"]["RetentionInDays"] for g in logs.values()} == {7}


@pytest.mark.parametrize(("handler", "rate"), [(SNAPSHOT, "rate(15 minutes)"), (CLEANUP, "rate(1 hour)")])
def test_scheduled_functions_run_on_an_eventbridge_rate(template: Any, handler: str, rate: str) -> None:
    target = Capture()
    template.has_resource_properties(
        "AWS::Events::Rule",
        {"ScheduleExpression": rate, "State": "ENABLED", "Targets": [Match.object_like({"Arn": target})]},
    )
    function_id = only_id(template, "AWS::Lambda::Function", {"Handler": handler})
    assert mentions(target.as_object(), function_id)


@pytest.mark.parametrize("handler", [SNAPSHOT, CLEANUP])
def test_the_schedule_is_allowed_to_start_its_function(template: Any, handler: str) -> None:
    function = only_id(template, "AWS::Lambda::Function", {"Handler": handler})
    rules = [
        logical_id
        for logical_id, rule in template.find_resources("AWS::Events::Rule").items()
        if mentions(rule["Properties"]["Targets"], function)
    ]
    assert len(rules) == 1
    template.has_resource_properties(
        "AWS::Lambda::Permission",
        {
            "Action": "lambda:InvokeFunction",
            "Principal": "events.amazonaws.com",
            "FunctionName": {"Fn::GetAtt": [function, "Arn"]},
            "SourceArn": {"Fn::GetAtt": [rules[0], "Arn"]},
        },
    )


def test_schedule_rates_come_from_context(synth_stack: SynthStack) -> None:
    template = assertions.Template.from_stack(synth_stack(snapshot_rate_minutes="5", cleanup_rate_minutes=1))
    template.has_resource_properties("AWS::Events::Rule", {"ScheduleExpression": "rate(5 minutes)"})
    template.has_resource_properties("AWS::Events::Rule", {"ScheduleExpression": "rate(1 minute)"})


def test_the_cleanup_function_gets_the_gc_delay_and_claim_expiry_from_context(
    synth_stack: SynthStack, template: Any
) -> None:
    def cleanup_variables(of: Any) -> dict[str, str]:
        [function] = of.find_resources("AWS::Lambda::Function", {"Properties": {"Handler": CLEANUP}}).values()
        variables: dict[str, str] = function["Properties"]["Environment"]["Variables"]
        return variables

    configured = assertions.Template.from_stack(
        synth_stack(gc_delay_minutes="1440", claim_expiry_minutes=900)
    )

    defaults = cleanup_variables(template)
    assert policy_from_environment(defaults) == CleanupPolicy()  # the library's defaults, hours not minutes
    assert (defaults[GC_DELAY_ENV], defaults[CLAIM_EXPIRY_ENV]) == ("720", "780")
    given = cleanup_variables(configured)
    assert (given[GC_DELAY_ENV], given[CLAIM_EXPIRY_ENV]) == ("1440", "900")
    # Only the cleanup reads them.
    for handler in (COMMITTER, SNAPSHOT):
        [function] = template.find_resources(
            "AWS::Lambda::Function", {"Properties": {"Handler": handler}}
        ).values()
        assert GC_DELAY_ENV not in function["Properties"]["Environment"]["Variables"]


def test_the_warm_budget_setting_reaches_the_committer_and_the_snapshot_function_only(
    synth_stack: SynthStack, template: Any
) -> None:
    def variables(of: Any, handler: str) -> dict[str, str]:
        [function] = of.find_resources("AWS::Lambda::Function", {"Properties": {"Handler": handler}}).values()
        found: dict[str, str] = function["Properties"]["Environment"]["Variables"]
        return found

    configured = assertions.Template.from_stack(synth_stack(warm_cache_mb="300"))

    for handler in (COMMITTER, SNAPSHOT):
        assert variables(configured, handler)[WARM_CACHE_MB_ENV] == "300"
        assert WARM_CACHE_MB_ENV not in variables(template, handler)  # unset: each follows its memory
    assert WARM_CACHE_MB_ENV not in variables(configured, CLEANUP)  # it keeps no table warm


# --- the bucket -------------------------------------------------------------------------------------


def test_data_bucket_is_encrypted_private_logged_and_named_for_account_and_region(template: Any) -> None:
    name = Capture()
    template.has_resource_properties(
        "AWS::S3::Bucket",
        {
            "BucketName": name,
            "BucketEncryption": {
                "ServerSideEncryptionConfiguration": [
                    {"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}
                ]
            },
            "PublicAccessBlockConfiguration": {
                "BlockPublicAcls": True,
                "BlockPublicPolicy": True,
                "IgnorePublicAcls": True,
                "RestrictPublicBuckets": True,
            },
            "LoggingConfiguration": Match.object_like({"DestinationBucketName": Match.any_value()}),
        },
    )
    joined = json.dumps(name.as_object())
    assert "statestore-main-data-" in joined and "AWS::AccountId" in joined and "AWS::Region" in joined


def test_data_bucket_denies_requests_without_tls(template: Any) -> None:
    template.has_resource_properties(
        "AWS::S3::BucketPolicy",
        {
            "Bucket": {"Ref": bucket_id(template)},
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {
                                "Effect": "Deny",
                                "Action": "s3:*",
                                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                            }
                        )
                    ]
                )
            },
        },
    )


def test_request_bodies_expire_by_tag_under_tables(template: Any) -> None:
    template.has_resource_properties(
        "AWS::S3::Bucket",
        {
            "BucketName": Match.any_value(),
            "LifecycleConfiguration": {
                "Rules": Match.array_with(
                    [
                        Match.object_like(
                            {
                                "Prefix": "tables/",
                                "TagFilters": [
                                    {"Key": REQUEST_BODY_TAG_KEY, "Value": REQUEST_BODY_TAG_VALUE}
                                ],
                                "ExpirationInDays": resources.REQUEST_BODY_EXPIRY_DAYS,
                                "Status": "Enabled",
                            }
                        )
                    ]
                )
            },
        },
    )


def test_buckets_are_retained_when_the_stack_is_destroyed(template: Any) -> None:
    buckets = template.find_resources("AWS::S3::Bucket")
    assert len(buckets) == 2
    assert {b["DeletionPolicy"] for b in buckets.values()} == {"Retain"}


# --- alarms and outputs -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "metric", "namespace", "threshold"),
    [
        ("statestore-main-dlq-not-empty", "ApproximateNumberOfMessagesVisible", "AWS/SQS", 1),
        ("statestore-main-upkeep-dlq-not-empty", "ApproximateNumberOfMessagesVisible", "AWS/SQS", 1),
        ("statestore-main-committer-errors", "Errors", "AWS/Lambda", 1),
        ("statestore-main-oldest-commit-request-age", "ApproximateAgeOfOldestMessage", "AWS/SQS", 300),
        ("statestore-main-snapshot-errors", "Errors", "AWS/Lambda", 1),
        ("statestore-main-cleanup-errors", "Errors", "AWS/Lambda", 1),
    ],
)
def test_alarms_watch_the_commit_path_and_notify_the_topic(
    template: Any, name: str, metric: str, namespace: str, threshold: int
) -> None:
    template.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {
            "AlarmName": name,
            "MetricName": metric,
            "Namespace": namespace,
            "Threshold": threshold,
            "ComparisonOperator": "GreaterThanOrEqualToThreshold",
            "TreatMissingData": "notBreaching",
            "AlarmActions": [{"Ref": Match.any_value()}],
        },
    )


def test_dlq_alarm_watches_the_dead_letter_queue(template: Any) -> None:
    dimensions = Capture()
    template.has_resource_properties(
        "AWS::CloudWatch::Alarm", {"AlarmName": "statestore-main-dlq-not-empty", "Dimensions": dimensions}
    )
    assert mentions(dimensions.as_array(), queue_id(template, NAMES.dead_letter_queue))


def test_upkeep_dlq_alarm_watches_the_upkeep_dead_letter_queue(template: Any) -> None:
    dimensions = Capture()
    template.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {"AlarmName": "statestore-main-upkeep-dlq-not-empty", "Dimensions": dimensions},
    )
    assert mentions(dimensions.as_array(), queue_id(template, str(NAMES.upkeep_dead_letter_queue)))


def test_alarm_email_subscribes_to_the_topic(synth_stack: SynthStack, template: Any) -> None:
    template.resource_count_is("AWS::SNS::Subscription", 0)
    with_email = assertions.Template.from_stack(synth_stack(alarm_email="ops@example.com"))
    with_email.has_resource_properties(
        "AWS::SNS::Subscription", {"Protocol": "email", "Endpoint": "ops@example.com"}
    )


def test_outputs_give_the_cli_and_jobs_every_name(template: Any) -> None:
    outputs = template.find_outputs("*")
    assert {
        "StatestoreResources",
        "TransactionLogTable",
        "SnapshotsTable",
        "TablesByIdTable",
        "TablesByNameTable",
        "CommitStatusTable",
        "DataBucket",
        "CommitQueueUrl",
        "DeadLetterQueueUrl",
        "AlarmTopicArn",
    } <= set(outputs)
    assert outputs["TransactionLogTable"]["Value"] == {"Ref": table_id(template, NAMES.transaction_log_table)}
    assert outputs["CommitQueueUrl"]["Value"] == {"Ref": queue_id(template, NAMES.commit_queue)}
    resources_json = json.dumps(outputs["StatestoreResources"]["Value"])
    assert all(name in resources_json for name in NAMES.table_key_schemas)


# --- least privilege ----------------------------------------------------------------------------------


def test_committer_consumes_the_queue_appends_to_the_log_and_records_statuses(template: Any) -> None:
    log = table_id(template, NAMES.transaction_log_table)
    statuses = table_id(template, NAMES.commit_status_table)
    snapshots = table_id(template, NAMES.snapshots_table)
    assert {"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility"} <= actions_on(
        template, COMMITTER, queue_id(template, NAMES.commit_queue)
    )
    assert "sqs:SendMessage" in actions_on(template, COMMITTER, queue_id(template, NAMES.dead_letter_queue))
    assert {"dynamodb:Query", "dynamodb:PutItem"} <= actions_on(template, COMMITTER, log)
    assert "dynamodb:DeleteItem" not in actions_on(template, COMMITTER, log)
    # statuses are conditional puts inside TransactWriteItems (a final status is never overwritten)
    status_actions = actions_on(template, COMMITTER, statuses)
    assert "dynamodb:PutItem" in status_actions
    assert not {"dynamodb:BatchWriteItem", "dynamodb:DeleteItem"} & status_actions
    assert not {"dynamodb:PutItem", "dynamodb:DeleteItem", "dynamodb:BatchWriteItem"} & actions_on(
        template, COMMITTER, snapshots
    )


def test_committer_reads_request_bodies_and_writes_log_bodies_but_never_touches_data(template: Any) -> None:
    bucket = bucket_id(template)
    assert "s3:GetObject*" in actions_on(template, COMMITTER, bucket, "/tables/*/requests/*")
    assert "s3:PutObject" in actions_on(template, COMMITTER, bucket, "/tables/*/log/*")
    assert not actions_on(template, COMMITTER, bucket, "/tables/*/data/*")
    assert "s3:PutObject" not in actions_on(template, COMMITTER, bucket, "/tables/*/snapshots/*")


def test_snapshot_function_reads_the_log_and_writes_only_snapshots(template: Any) -> None:
    log = table_id(template, NAMES.transaction_log_table)
    log_actions = actions_on(template, SNAPSHOT, log)
    assert "dynamodb:Query" in log_actions
    assert not {"dynamodb:DeleteItem", "dynamodb:PutItem", "dynamodb:BatchWriteItem"} & log_actions
    assert "dynamodb:PutItem" in actions_on(template, SNAPSHOT, table_id(template, NAMES.snapshots_table))
    bucket = bucket_id(template)
    assert "s3:PutObject" in actions_on(template, SNAPSHOT, bucket, "/tables/*/snapshots/*")
    assert "s3:PutObject" not in actions_on(template, SNAPSHOT, bucket, "/tables/*/log/*")
    assert not actions_on(template, SNAPSHOT, bucket, "/tables/*/data/*")
    assert not actions_on(template, SNAPSHOT, queue_id(template, NAMES.commit_queue))


def test_cleanup_deletes_log_entries_snapshots_and_data_files_and_commits_through_the_log(
    template: Any,
) -> None:
    log = table_id(template, NAMES.transaction_log_table)
    assert {"dynamodb:PutItem", "dynamodb:BatchWriteItem"} <= actions_on(template, CLEANUP, log)
    assert "dynamodb:DeleteItem" in actions_on(template, CLEANUP, table_id(template, NAMES.snapshots_table))
    bucket = bucket_id(template)
    # Any object of a table (its log bodies, snapshots, data files, request bodies, and whatever late
    # writers left under a deleted table's prefix), and the tombstones of deleted tables.
    assert "s3:DeleteObject" in actions_on(template, CLEANUP, bucket, '/tables/*"')
    assert "s3:DeleteObject" in actions_on(template, CLEANUP, bucket, '/deleted-tables/*"')
    assert "s3:DeleteObjectVersion" not in actions_on(template, CLEANUP, bucket)
    assert "s3:PutObject" not in actions_on(template, CLEANUP, bucket, "/tables/*/data/*")
    assert "s3:PutObject" not in actions_on(template, CLEANUP, bucket, "/deleted-tables/*")
    # The orphan sweep's progress per table: read and written (deleted as any object of a table) under its
    # own prefix only.
    upkeep = actions_on(template, CLEANUP, bucket, "/tables/*/upkeep/*")
    assert {"s3:GetObject*", "s3:PutObject"} <= upkeep


def test_no_function_may_write_the_table_index_or_use_wildcard_actions(template: Any) -> None:
    for name in (NAMES.tables_by_id_table, NAMES.tables_by_name_table):
        index = table_id(template, name)
        for handler in (COMMITTER, SNAPSHOT, CLEANUP):
            assert not {
                a for a in actions_on(template, handler, index) if "Put" in a or "Delete" in a or "Write" in a
            }
    for handler in (COMMITTER, SNAPSHOT, CLEANUP):
        for statement in statements_of(template, handler):
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            assert not [a for a in actions if a.endswith(":*") or a == "*"]


# --- configuration errors -------------------------------------------------------------------------------


def test_missing_asset_fails_synth_telling_to_run_make_lambda_asset(
    synth_stack: SynthStack, tmp_path: Path
) -> None:
    with pytest.raises(AssetError, match="make lambda-asset"):
        synth_stack(lambda_asset=str(tmp_path / "not-built"))


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("instance_id", "Has_Capitals"),
        ("snapshot_rate_minutes", "often"),
        ("committer_memory_mb", "64"),
        ("log_retention_days", "42"),
        ("deletion_protection", "maybe"),
        ("gc_delay_minutes", "0"),
        ("gc_delay_minutes", "9"),  # below the clock skew cleanup assumes (10 minutes)
        ("claim_expiry_minutes", "5"),
        ("gc_delay_minutes", "12h"),
        ("claim_expiry_minutes", 43_201),
        ("committer_max_concurrency", "1"),
        ("committer_reserved_concurrency", "5"),  # below the default committer_max_concurrency of 10
        ("upkeep_max_concurrency", "1"),
        ("warm_cache_mb", "-1"),
        ("warm_cache_mb", "lots"),
        ("warm_cache_mb", "1024"),  # not below the default committer's memory
    ],
)
def test_bad_context_values_are_rejected_naming_the_key(
    synth_stack: SynthStack, key: str, value: str
) -> None:
    with pytest.raises(ValueError, match=key.split("_")[0]):
        synth_stack(**{key: value})
