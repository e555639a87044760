"""What an operator sees of a deployed instance: the functions' max-memory metrics, the alarms on real trouble
(with their thresholds from the config) and the dashboard's widgets."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk import assertions

from statestore.instance import ResourceNames
from tests.infra.conftest import SynthStack

NAMES = ResourceNames.for_instance("main")
Match = assertions.Match
Capture = assertions.Capture

pytestmark = pytest.mark.infra

# name: (handler, memory MB, timeout s)
FUNCTIONS = {
    "committer": ("lambdas.committer.handler", 1024, 60),
    "snapshot": ("lambdas.snapshot.handler", 1024, 300),
    "cleanup": ("lambdas.cleanup.handler", 1024, 600),
}
# The metric contract the handlers emit (namespace statestore, dimension service).
CONTRACT = {
    "committer": (
        "RequestsCommitted",
        "RequestsRejected",
        "RequestsDuplicate",
        "RequestsDeadLettered",
        "RequestsRetry",
        "BatchSize",
        "LogAppendConflicts",
        "TableLoadsWarm",
        "TableLoadsCold",
        "TableCommitsGuarded",
        "TableLoadTime",
        "TableGuardsCold",
        "TableGuardReadTime",
        "WarmCacheEvictions",
        "WarmCacheDemotions",
        "WarmCacheOversized",
        "WarmCacheTables",
        "WarmCacheBytes",
    ),
    "snapshot": ("SnapshotTablesPlanned", "SnapshotsWritten", "SnapshotTablesSkipped"),
    "cleanup": (
        "CleanupTablesPlanned",
        "LogEntriesDeleted",
        "SnapshotsDeleted",
        "DataFilesDeleted",
        "RefusedFiles",
        "ClaimsReleased",
        "OrphanFilesDeleted",
    ),
}


def function_log_group(template: Any, handler: str) -> str:
    found = template.find_resources("AWS::Lambda::Function", {"Properties": {"Handler": handler}})
    [function] = found.values()
    log_group: str = function["Properties"]["LoggingConfig"]["LogGroup"]["Ref"]
    return log_group


def function_id(template: Any, handler: str) -> str:
    found = template.find_resources("AWS::Lambda::Function", {"Properties": {"Handler": handler}})
    assert len(found) == 1
    return next(iter(found))


def alarm(template: Any, name: str) -> dict[str, Any]:
    found = template.find_resources("AWS::CloudWatch::Alarm", {"Properties": {"AlarmName": name}})
    assert len(found) == 1, f"no alarm {name}"
    properties: dict[str, Any] = next(iter(found.values()))["Properties"]
    [action] = properties["AlarmActions"]
    assert action == {"Ref": next(iter(template.find_resources("AWS::SNS::Topic")))}
    assert properties["OKActions"] == [action]
    return properties


def queue_id(template: Any, name: str) -> str:
    found = template.find_resources("AWS::SQS::Queue", {"Properties": {"QueueName": name}})
    assert len(found) == 1, f"no queue {name}"
    return next(iter(found))


def watched_metrics(properties: dict[str, Any]) -> list[dict[str, Any]]:
    """The metrics (MetricStat.Metric) an alarm on a Metrics array reads."""
    return [m["MetricStat"]["Metric"] for m in properties["Metrics"] if "MetricStat" in m]


def dashboard_widgets(template: Any) -> list[dict[str, Any]]:
    """The dashboard body's widgets, deploy-time values (queue names, function names) read as TOKEN."""
    dashboards = template.find_resources("AWS::CloudWatch::Dashboard")
    assert len(dashboards) == 1
    body = next(iter(dashboards.values()))["Properties"]["DashboardBody"]
    parts = body["Fn::Join"][1] if isinstance(body, dict) else [body]
    text = "".join(part if isinstance(part, str) else "TOKEN" for part in parts)
    widgets: list[dict[str, Any]] = json.loads(text)["widgets"]
    return widgets


def graph_metrics(widget: dict[str, Any]) -> list[list[Any]]:
    return list(widget["properties"].get("metrics", []))


def widget_titled(widgets: list[dict[str, Any]], start: str) -> dict[str, Any]:
    found = [w for w in widgets if w["properties"].get("title", "").startswith(start)]
    assert len(found) == 1, f"expected one widget titled {start!r}, found {len(found)}"
    return found[0]


# --- max memory used, from the functions' reports ----------------------------------------------------


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_each_function_turns_its_report_into_a_max_memory_metric(template: Any, name: str) -> None:
    handler = FUNCTIONS[name][0]
    function = template.find_resources("AWS::Lambda::Function", {"Properties": {"Handler": handler}})
    properties = next(iter(function.values()))["Properties"]
    log_group = properties["LoggingConfig"]["LogGroup"]["Ref"]
    assert properties["LoggingConfig"]["LogFormat"] == "JSON"  # the report is a platform.report event
    template.has_resource_properties(
        "AWS::Logs::MetricFilter",
        {
            "LogGroupName": {"Ref": log_group},
            "FilterPattern": '{ $.type = "platform.report" }',
            "MetricTransformations": [
                Match.object_like(
                    {
                        "MetricNamespace": "statestore",
                        "MetricName": f"statestore-main-{name}-MaxMemoryUsedMB",
                        "MetricValue": "$.record.metrics.maxMemoryUsedMB",
                    }
                )
            ],
        },
    )


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_each_function_emits_metrics_as_a_service_named_for_the_instance(
    synth_stack: SynthStack, template: Any, name: str
) -> None:
    handler = FUNCTIONS[name][0]
    variables = Match.object_like({"POWERTOOLS_SERVICE_NAME": f"statestore-main-{name}"})
    template.has_resource_properties(
        "AWS::Lambda::Function", {"Handler": handler, "Environment": {"Variables": variables}}
    )
    dev = assertions.Template.from_stack(synth_stack(instance_id="dev"))
    variables = Match.object_like({"POWERTOOLS_SERVICE_NAME": f"statestore-dev-{name}"})
    dev.has_resource_properties(
        "AWS::Lambda::Function", {"Handler": handler, "Environment": {"Variables": variables}}
    )


# --- alarms ------------------------------------------------------------------------------------------


def test_retries_alarm_watches_the_committers_retried_requests(template: Any) -> None:
    properties = alarm(template, "statestore-main-commit-retries")
    assert properties["Threshold"] == 5
    assert properties["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    [metric] = watched_metrics(properties)
    assert metric == {
        "Namespace": "statestore",
        "MetricName": "RequestsRetry",
        "Dimensions": [{"Name": "service", "Value": "statestore-main-committer"}],
    }
    [stat] = [m["MetricStat"] for m in properties["Metrics"]]
    assert (stat["Stat"], stat["Period"]) == ("Sum", 300)


def test_throttle_alarm_sums_read_and_write_throttles_of_every_table(template: Any) -> None:
    properties = alarm(template, "statestore-main-dynamodb-throttles")
    assert properties["Threshold"] == 10
    [expression] = [m for m in properties["Metrics"] if "Expression" in m]
    assert expression["ReturnData"] is True and "METRICS()" in expression["Expression"]
    metrics = watched_metrics(properties)
    assert len(metrics) <= 10  # CloudWatch's limit for an alarm on a math expression
    tables = set(template.find_resources("AWS::DynamoDB::Table"))
    for kind in ("ReadThrottleEvents", "WriteThrottleEvents"):
        watched = {m["Dimensions"][0]["Value"]["Ref"] for m in metrics if m["MetricName"] == kind}
        assert watched == tables, kind


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_memory_alarm_fires_near_each_functions_memory_size(template: Any, name: str) -> None:
    _, memory_mb, timeout_s = FUNCTIONS[name]
    properties = alarm(template, f"statestore-main-{name}-memory")
    assert properties["Threshold"] == memory_mb * 90 // 100
    [metric] = watched_metrics(properties)
    assert metric == {"Namespace": "statestore", "MetricName": f"statestore-main-{name}-MaxMemoryUsedMB"}
    assert [m["MetricStat"]["Stat"] for m in properties["Metrics"]] == ["Maximum"]


def test_every_alarm_tells_the_topic_both_when_it_fires_and_when_it_is_ok(template: Any) -> None:
    [topic] = template.find_resources("AWS::SNS::Topic")
    alarms = template.find_resources("AWS::CloudWatch::Alarm").values()
    assert len(alarms) == 19  # with the queryable views, on by default
    for found in alarms:
        properties = found["Properties"]
        assert properties["AlarmActions"] == properties["OKActions"] == [{"Ref": topic}], properties[
            "AlarmName"
        ]


@pytest.mark.parametrize(("name", "queue"), [("dlq-age", "dead-letters"), ("upkeep-dlq-age", "upkeep-dlq")])
def test_a_dead_letter_left_a_day_alarms_well_before_its_14_day_retention(
    template: Any, name: str, queue: str
) -> None:
    properties = alarm(template, f"statestore-main-{name}")
    queue_name = NAMES.dead_letter_queue if queue == "dead-letters" else NAMES.upkeep_dead_letter_queue
    assert queue_name is not None
    assert properties["MetricName"] == "ApproximateAgeOfOldestMessage"
    assert properties["Dimensions"] == [
        {"Name": "QueueName", "Value": {"Fn::GetAtt": [queue_id(template, queue_name), "QueueName"]}}
    ]
    assert properties["Threshold"] == 24 * 3600 < 14 * 24 * 3600
    assert properties["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"


@pytest.mark.parametrize(("kind", "period_minutes"), [("snapshot", 15), ("cleanup", 60)])
def test_upkeep_work_waiting_a_whole_period_of_its_schedule_alarms(
    template: Any, kind: str, period_minutes: int
) -> None:
    properties = alarm(template, f"statestore-main-oldest-{kind}-work-age")
    assert properties["MetricName"] == "ApproximateAgeOfOldestMessage"
    assert properties["Dimensions"] == [
        {
            "Name": "QueueName",
            "Value": {"Fn::GetAtt": [queue_id(template, NAMES.upkeep_queue(kind)), "QueueName"]},
        }
    ]
    assert properties["Threshold"] == period_minutes * 60


def test_the_commit_queues_oldest_request_alarms(template: Any) -> None:
    properties = alarm(template, "statestore-main-oldest-commit-request-age")
    assert properties["Dimensions"][0]["Value"] == {
        "Fn::GetAtt": [queue_id(template, NAMES.commit_queue), "QueueName"]
    }
    assert properties["Threshold"] == 300


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_any_throttle_of_a_function_alarms(template: Any, name: str) -> None:
    properties = alarm(template, f"statestore-main-{name}-throttles")
    assert (properties["Namespace"], properties["MetricName"], properties["Statistic"]) == (
        "AWS/Lambda",
        "Throttles",
        "Sum",
    )
    assert properties["Dimensions"] == [
        {"Name": "FunctionName", "Value": {"Ref": function_id(template, FUNCTIONS[name][0])}}
    ]
    assert properties["Threshold"] == 1


def test_age_alarm_thresholds_come_from_context(synth_stack: SynthStack) -> None:
    template = assertions.Template.from_stack(
        synth_stack(dead_letter_age_alarm_hours="48", snapshot_rate_minutes="30")
    )
    assert alarm(template, "statestore-main-dlq-age")["Threshold"] == 48 * 3600
    assert alarm(template, "statestore-main-oldest-snapshot-work-age")["Threshold"] == 30 * 60


def test_alarm_thresholds_come_from_context(synth_stack: SynthStack) -> None:
    template = assertions.Template.from_stack(
        synth_stack(
            retries_alarm_per_5_minutes="20",
            throttles_alarm_per_5_minutes=3,
            memory_alarm_percent="80",
            committer_memory_mb="512",
        )
    )
    assert alarm(template, "statestore-main-commit-retries")["Threshold"] == 20
    assert alarm(template, "statestore-main-dynamodb-throttles")["Threshold"] == 3
    assert alarm(template, "statestore-main-committer-memory")["Threshold"] == 409  # 80% of 512, rounded down
    assert (
        alarm(template, "statestore-main-snapshot-memory")["Threshold"] == 819
    )  # 80% of 1,024, rounded down


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("retries_alarm_per_5_minutes", "0"),
        ("throttles_alarm_per_5_minutes", "many"),
        ("memory_alarm_percent", "40"),
        ("memory_alarm_percent", "101"),
        ("dead_letter_age_alarm_hours", "0"),
        ("dead_letter_age_alarm_hours", "336"),  # the retention itself: the letter would be gone
    ],
)
def test_bad_alarm_thresholds_are_rejected_naming_the_key(
    synth_stack: SynthStack, key: str, value: str
) -> None:
    with pytest.raises(ValueError, match=f"context key {key}="):
        synth_stack(**{key: value})


# --- the dashboard -----------------------------------------------------------------------------------


def test_the_dashboard_is_named_for_instance_and_region_and_is_an_output(template: Any) -> None:
    name = Capture()
    template.has_resource_properties("AWS::CloudWatch::Dashboard", {"DashboardName": name})
    joined = json.dumps(name.as_object())
    assert "statestore-main-" in joined and "AWS::Region" in joined
    assert "DashboardName" in template.find_outputs("*")


def test_the_dashboard_shows_the_state_of_every_alarm(template: Any) -> None:
    [status] = [w for w in dashboard_widgets(template) if w["type"] == "alarm"]
    assert len(status["properties"]["alarms"]) == len(template.find_resources("AWS::CloudWatch::Alarm"))


@pytest.mark.parametrize("name", list(CONTRACT))
def test_the_dashboard_graphs_every_metric_of_the_contract(template: Any, name: str) -> None:
    graphed = {
        tuple(m[:4])
        for w in dashboard_widgets(template)
        for m in graph_metrics(w)
        if m[0] == "statestore" and all(isinstance(part, str) for part in m[:4])
    }
    for metric in CONTRACT[name]:
        assert ("statestore", metric, "service", f"statestore-main-{name}") in graphed, metric


def test_no_dashboard_metric_is_per_table(template: Any) -> None:
    body = json.dumps(dashboard_widgets(template))
    assert "TableId}" not in body and "SEARCH(" not in body


def test_the_dashboard_ranks_the_largest_tables_from_the_committers_log(template: Any) -> None:
    [widget] = [w for w in dashboard_widgets(template) if w["type"] == "log"]
    query = widget["properties"]["query"]
    # The log group is named at deploy time: the query's source is the committer's log group.
    assert query.startswith("SOURCE 'TOKEN'")
    assert "stats latest(StateReferences) as references" in query and "by TableId" in query
    assert "sort references desc" in query
    committer_logs = function_log_group(template, "lambdas.committer.handler")
    dashboard = next(iter(template.find_resources("AWS::CloudWatch::Dashboard").values()))
    body_parts = dashboard["Properties"]["DashboardBody"]["Fn::Join"][1]
    assert {"Ref": committer_logs} in body_parts


def test_the_table_id_property_the_query_reads_is_the_one_the_committer_writes() -> None:
    from infra.observability import TABLE_ID_PROPERTY
    from lambdas.committer import TABLE_ID_PROPERTY as WRITTEN

    assert TABLE_ID_PROPERTY == WRITTEN


def test_the_dashboard_shows_queue_depth_oldest_message_and_dead_letters(template: Any) -> None:
    widgets = dashboard_widgets(template)
    queue = [m[1] for m in graph_metrics(widget_titled(widgets, "Commit queue")) if m[0] == "AWS/SQS"]
    assert {"ApproximateNumberOfMessagesVisible", "ApproximateAgeOfOldestMessage"} <= set(queue)
    dead = graph_metrics(widget_titled(widgets, "Dead-letter queue"))
    # The commit requests' and the upkeep work's.
    assert [m[:2] for m in dead] == [["AWS/SQS", "ApproximateNumberOfMessagesVisible"]] * 2
    upkeep = graph_metrics(widget_titled(widgets, "Upkeep work queues"))
    assert (
        sorted(m[1] for m in upkeep)
        == ["ApproximateAgeOfOldestMessage"] * 2 + ["ApproximateNumberOfMessagesVisible"] * 2
    )


def test_the_dashboard_shows_throttles_of_every_table(template: Any) -> None:
    metrics = graph_metrics(widget_titled(dashboard_widgets(template), "DynamoDB throttle"))
    tables = len(template.find_resources("AWS::DynamoDB::Table"))
    assert sorted(m[1] for m in metrics) == ["ReadThrottleEvents"] * tables + ["WriteThrottleEvents"] * tables


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_each_function_has_errors_duration_and_memory_against_its_limit(template: Any, name: str) -> None:
    _, memory_mb, timeout_s = FUNCTIONS[name]
    widgets = dashboard_widgets(template)
    errors = graph_metrics(widget_titled(widgets, f"{name}: errors"))
    assert {m[1] for m in errors} == {"Errors", "Throttles"}
    duration = widget_titled(widgets, f"{name}: duration")
    assert {m[1] for m in graph_metrics(duration)} == {"Duration"}
    [timeout] = duration["properties"]["annotations"]["horizontal"]
    assert (timeout["label"], timeout["value"]) == ("timeout", timeout_s * 1000)
    memory = widget_titled(widgets, f"{name}: max memory used")
    assert [m[:2] for m in graph_metrics(memory)] == [
        ["statestore", f"statestore-main-{name}-MaxMemoryUsedMB"]
    ]
    assert memory["properties"]["annotations"]["horizontal"][0]["value"] == memory_mb
