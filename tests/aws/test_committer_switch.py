"""Pausing and resuming the committer: the same behaviour from the in-memory switch, the Lambda event source
mapping (on moto) and the local runtime's queue tag (on moto), and clear errors when there is nothing to
switch."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Iterator

import boto3
import pytest
from moto import mock_aws

from statestore.adapters.aws.committer_switch import LambdaCommitterSwitch, LocalCommitterSwitch
from statestore.adapters.aws.sqs_queue import provision_queues
from statestore.errors import StateStoreError
from statestore.instance import ResourceNames
from statestore.store.memory import InMemoryCommitterSwitch
from statestore.store.switch_ports import CommitterSwitch, QueueDepth

REGION = "us-east-1"
NAMES = ResourceNames.for_instance("switch")


WAITING = 3  # commit requests each switch's queue holds


def _send(sqs: object, queue_url: str, n: int) -> None:
    for i in range(n):
        sqs.send_message(  # type: ignore[attr-defined]
            QueueUrl=queue_url, MessageBody="{}", MessageGroupId="t", MessageDeduplicationId=f"m{i}"
        )


def _committer_function(iam: object, lambda_client: object, name: str) -> None:
    role = iam.create_role(  # type: ignore[attr-defined]
        RoleName="committer",
        AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": []}),
    )["Role"]["Arn"]
    code = io.BytesIO()
    with zipfile.ZipFile(code, "w") as z:
        z.writestr("handler.py", "def handler(event, context):\n    return {}\n")
    lambda_client.create_function(  # type: ignore[attr-defined]
        FunctionName=name, Runtime="python3.12", Role=role, Handler="handler.handler",
        Code={"ZipFile": code.getvalue()},
    )  # fmt: skip


@pytest.fixture(params=["memory", "lambda", "local"])
def switch(request: pytest.FixtureRequest) -> Iterator[CommitterSwitch]:
    """A running committer's switch, with ``WAITING`` requests on its queue."""
    if request.param == "memory":
        yield InMemoryCommitterSwitch(queue=QueueDepth(WAITING, 0))
        return
    with mock_aws():
        sqs = boto3.client("sqs", region_name=REGION)
        queue_url, _ = provision_queues(NAMES, sqs)
        # moto would run the function for messages sent after its mapping exists: send them first.
        _send(sqs, queue_url, WAITING)
        if request.param == "local":
            yield LocalCommitterSwitch(sqs, NAMES.commit_queue)
            return
        lambda_client = boto3.client("lambda", region_name=REGION)
        assert NAMES.committer_function is not None
        _committer_function(boto3.client("iam", region_name=REGION), lambda_client, NAMES.committer_function)
        arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
        lambda_client.create_event_source_mapping(
            EventSourceArn=arn, FunctionName=NAMES.committer_function, BatchSize=10
        )
        yield LambdaCommitterSwitch(lambda_client, sqs, NAMES.committer_function, NAMES.commit_queue)


def test_the_committer_runs_until_paused_and_runs_again_once_resumed(switch: CommitterSwitch) -> None:
    assert not switch.state().paused

    paused = switch.set_paused(True)
    assert paused.paused and paused.state == "Disabled"
    assert switch.state().paused
    assert switch.set_paused(True).paused  # pausing twice is harmless

    resumed = switch.set_paused(False)
    assert not resumed.paused and resumed.state == "Enabled"
    assert not switch.state().paused


def test_the_state_shows_the_requests_waiting_on_the_queue(switch: CommitterSwitch) -> None:
    state = switch.set_paused(True)

    assert (state.queue.waiting, state.queue.in_flight) == (WAITING, 0)
    assert switch.state().queue.waiting == WAITING


def test_resources_from_before_the_committer_was_named_get_a_clear_error() -> None:
    old_json = json.loads(NAMES.to_json())
    del old_json["committer_function"]
    old = ResourceNames.from_json(json.dumps(old_json))  # still readable

    assert old.committer_function is None
    with pytest.raises(StateStoreError, match="redeploy the stack"):
        LambdaCommitterSwitch(object(), object(), old.committer_function, old.commit_queue)


@mock_aws
def test_a_missing_function_or_mapping_is_named_in_the_error() -> None:
    sqs = boto3.client("sqs", region_name=REGION)
    provision_queues(NAMES, sqs)
    lambda_client = boto3.client("lambda", region_name=REGION)
    assert NAMES.committer_function is not None

    no_mapping = LambdaCommitterSwitch(lambda_client, sqs, NAMES.committer_function, NAMES.commit_queue)
    with pytest.raises(StateStoreError, match=r"has 0 event source mappings from the commit queue"):
        no_mapping.state()
    other_queue = LambdaCommitterSwitch(lambda_client, sqs, NAMES.committer_function, "no-such-queue.fifo")
    with pytest.raises(StateStoreError, match="'no-such-queue.fifo' does not exist"):
        other_queue.set_paused(True)
