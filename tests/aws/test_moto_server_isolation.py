"""The session's moto server keeps what tests provision on it whatever else runs in the test process."""

from __future__ import annotations

import uuid

from moto import mock_aws

from tests.fixtures.aws_servers import aws_client


def test_a_mock_started_in_the_test_process_leaves_the_session_servers_queues_alone(moto_server: str) -> None:
    sqs = aws_client("sqs", moto_server)
    name = f"kept-{uuid.uuid4().hex[:12]}"
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    with mock_aws():  # what an in-process test does before or after a test of the session server
        pass
    assert url in aws_client("sqs", moto_server).list_queues(QueueNamePrefix=name).get("QueueUrls", [])
