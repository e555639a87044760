"""Every setting both the stack and the embedded mode use has one definition (``statestore.instance``, or
``statestore.services.cleanup`` for the cleanup's delays): the synthesized template holds exactly those
values, and so do the queues the embedded mode creates (``statestore.adapters.aws.sqs_queue``, checked on
moto)."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest
from moto import mock_aws

from statestore import instance as resources
from statestore.adapters.aws.commit_status import DEFAULT_RETENTION_SECONDS, MAX_REASON_CHARS
from statestore.adapters.aws.sqs_queue import provision_queues, provision_upkeep_queues
from statestore.instance import ResourceNames
from statestore.services.cleanup_policy import (
    CLAIM_EXPIRY_ENV,
    DEFAULT_CLAIM_EXPIRY_MS,
    DEFAULT_GC_DELAY_MS,
    GC_DELAY_ENV,
    CleanupPolicy,
)

pytestmark = pytest.mark.infra

NAMES = ResourceNames.for_instance("main")
HANDLERS = {
    "committer": ("lambdas.committer.handler", resources.COMMITTER_TIMEOUT_SECONDS),
    "snapshot": ("lambdas.snapshot.handler", resources.SNAPSHOT_TIMEOUT_SECONDS),
    "cleanup": ("lambdas.cleanup.handler", resources.CLEANUP_TIMEOUT_SECONDS),
}


def queue(template: Any, name: str) -> dict[str, Any]:
    [found] = template.find_resources("AWS::SQS::Queue", {"Properties": {"QueueName": name}}).values()
    properties: dict[str, Any] = found["Properties"]
    return properties


def function(template: Any, handler: str) -> dict[str, Any]:
    [found] = template.find_resources("AWS::Lambda::Function", {"Properties": {"Handler": handler}}).values()
    properties: dict[str, Any] = found["Properties"]
    return properties


def local_queue_attributes() -> dict[str, dict[str, str]]:
    """The attributes of every queue the embedded mode creates, by queue name (on moto)."""
    with mock_aws():
        sqs = boto3.client("sqs", region_name="eu-west-2")
        urls = [*provision_queues(NAMES, sqs), *provision_upkeep_queues(NAMES, sqs).values()]
        return {
            url.rsplit("/", 1)[-1]: sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])[
                "Attributes"
            ]
            for url in urls
        }


@pytest.mark.parametrize("kind", HANDLERS)
def test_function_timeouts_are_the_definitions(template: Any, kind: str) -> None:
    handler, seconds = HANDLERS[kind]
    assert function(template, handler)["Timeout"] == seconds


def test_the_stacks_queues_and_the_embedded_modes_hold_the_same_defined_settings(template: Any) -> None:
    expected = {
        NAMES.commit_queue: (
            resources.COMMIT_QUEUE_VISIBILITY_TIMEOUT_SECONDS,
            resources.COMMIT_QUEUE_RETENTION_SECONDS,
            resources.COMMIT_MAX_RECEIVE_COUNT,
        ),
        NAMES.upkeep_queue("snapshot"): (
            resources.WORK_QUEUE_VISIBILITY_TIMEOUT_SECONDS["snapshot"],
            resources.WORK_QUEUE_RETENTION_SECONDS,
            resources.WORK_MAX_RECEIVE_COUNT,
        ),
        NAMES.upkeep_queue("cleanup"): (
            resources.WORK_QUEUE_VISIBILITY_TIMEOUT_SECONDS["cleanup"],
            resources.WORK_QUEUE_RETENTION_SECONDS,
            resources.WORK_MAX_RECEIVE_COUNT,
        ),
    }
    local = local_queue_attributes()
    for name, (visibility, retention, receives) in expected.items():
        deployed = queue(template, name)
        assert (
            deployed["VisibilityTimeout"],
            deployed["MessageRetentionPeriod"],
            deployed["RedrivePolicy"]["maxReceiveCount"],
        ) == (visibility, retention, receives), name
        here = local[name]
        assert (
            int(here["VisibilityTimeout"]),
            int(here["MessageRetentionPeriod"]),
            json.loads(here["RedrivePolicy"])["maxReceiveCount"],
        ) == (visibility, retention, receives), name
    for name in (NAMES.dead_letter_queue, str(NAMES.upkeep_dead_letter_queue)):
        assert queue(template, name)["MessageRetentionPeriod"] == resources.DEAD_LETTER_RETENTION_SECONDS
        assert int(local[name]["MessageRetentionPeriod"]) == resources.DEAD_LETTER_RETENTION_SECONDS


def test_visibility_timeouts_are_six_times_their_functions_timeout() -> None:
    assert resources.COMMIT_QUEUE_VISIBILITY_TIMEOUT_SECONDS == 6 * resources.COMMITTER_TIMEOUT_SECONDS
    assert resources.WORK_QUEUE_VISIBILITY_TIMEOUT_SECONDS == {
        "snapshot": 6 * resources.SNAPSHOT_TIMEOUT_SECONDS,
        "cleanup": 6 * resources.CLEANUP_TIMEOUT_SECONDS,
    }


def test_request_bodies_outlive_the_dead_letter_queue_in_the_bucket_and_in_cleanup(template: Any) -> None:
    rules = {
        rule["Id"]: rule
        for found in template.find_resources("AWS::S3::Bucket").values()
        for rule in found["Properties"].get("LifecycleConfiguration", {}).get("Rules", [])
        if "Id" in rule
    }
    days = resources.REQUEST_BODY_EXPIRY_DAYS
    assert rules["expire-commit-request-bodies"]["ExpirationInDays"] == days
    # Longer than a request can be in flight: on the queue, then its dead-letter queue, then redriven.
    assert days * 24 * 3600 > resources.REQUEST_MAX_LIFETIME_SECONDS
    assert resources.REQUEST_MAX_LIFETIME_SECONDS == (
        2 * resources.COMMIT_QUEUE_RETENTION_SECONDS + resources.DEAD_LETTER_RETENTION_SECONDS
    )
    assert CleanupPolicy().request_body_max_age_ms == days * 24 * 3600 * 1000


def test_the_cleanup_functions_delays_are_the_librarys_defaults(template: Any) -> None:
    variables = function(template, "lambdas.cleanup.handler")["Environment"]["Variables"]
    assert int(variables[GC_DELAY_ENV]) * 60_000 == DEFAULT_GC_DELAY_MS
    assert int(variables[CLAIM_EXPIRY_ENV]) * 60_000 == DEFAULT_CLAIM_EXPIRY_MS


def test_commit_statuses_and_reasons_use_the_definitions() -> None:
    assert DEFAULT_RETENTION_SECONDS == resources.COMMIT_STATUS_RETENTION_SECONDS
    # A status outlives every message that can carry its request (so a resend or redrive finds it).
    assert resources.COMMIT_STATUS_RETENTION_SECONDS > resources.REQUEST_MAX_LIFETIME_SECONDS
    assert MAX_REASON_CHARS == resources.MAX_STATUS_REASON_CHARS


def test_a_dead_letters_reason_is_cut_to_the_definition() -> None:
    from statestore.services.committer import MAX_REASON_CHARS as DEAD_LETTER_REASON_CHARS

    assert DEAD_LETTER_REASON_CHARS == resources.MAX_DEAD_LETTER_REASON_CHARS
