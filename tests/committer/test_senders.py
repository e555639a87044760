"""A table that lists its allowed senders gets commits through the shared queue from them only: a request
from anyone else is dead-lettered with the reason, changes nothing and claims no request id."""

from __future__ import annotations

from dataclasses import replace

import pytest

from statestore.errors import StateStoreError
from statestore.services.committer import ReceivedMessage
from statestore.store.memory import InMemoryCommitQueue
from statestore.store.tables import TableInfo
from statestore.transactions import InitialisePartitions
from tests.builders import INT_SCHEMA, data_key, data_keys, tree
from tests.committer.harness import Harness, add_files, message, outcomes

JOB_ROLE = "AROAJOBROLEOFTABLEA01"
OTHER_ROLE = "AROAJOBROLEOFTABLEB02"


def restricted_table(h: Harness, *senders: str) -> str:
    info = TableInfo.new("orders", INT_SCHEMA, allowed_senders=senders)
    h.tables.create(info)
    h.store(info.table_id).commit(InitialisePartitions(tuple(tree(INT_SCHEMA))))
    return info.table_id


def sent_by(m: ReceivedMessage, sender: str | None) -> ReceivedMessage:
    return replace(m, sender_id=sender)


def test_a_request_from_an_allowed_role_s_session_commits() -> None:
    h = Harness()
    table = restricted_table(h, JOB_ROLE)
    request = add_files(table, "a.parquet")

    results = h.committer().process([sent_by(message(request), f"{JOB_ROLE}:emr-job-run-1")])

    assert outcomes(results) == ["committed"]
    assert set(h.state(table).files_by_name) == {data_key(table, "a.parquet")}


@pytest.mark.parametrize("sender", [OTHER_ROLE + ":session", None], ids=["another role", "unknown sender"])
def test_a_request_from_anyone_else_is_dead_lettered_and_claims_nothing(sender: str | None) -> None:
    h = Harness()
    table = restricted_table(h, JOB_ROLE)
    forged = add_files(table, "forged.parquet")

    results = h.committer().process([sent_by(message(forged), sender)])

    assert outcomes(results) == ["dead_lettered"]
    assert "not among the table's allowed senders" in (results[0].reason or "")
    assert h.state(table).files_by_name == {}
    assert h.statuses.get(table, forged.request_id) is None, "a refusal must not claim the request id"
    assert isinstance(h.dead_letters, InMemoryCommitQueue)
    [letter] = h.dead_letters.messages
    assert letter.body == message(forged).body

    # The table's own sender, later, with the same request id: committed, not a duplicate of the refusal.
    genuine = add_files(table, "genuine.parquet", request_id=forged.request_id)
    again = h.committer().process([sent_by(message(genuine), JOB_ROLE + ":job")])
    assert outcomes(again) == ["committed"]
    assert set(h.state(table).files_by_name) == {data_key(table, "genuine.parquet")}


def test_refusals_and_commits_of_one_batch_are_decided_each_on_its_sender() -> None:
    h = Harness()
    table = restricted_table(h, JOB_ROLE, "AIDAOPERATORUSER0001")
    batch = [
        sent_by(message(add_files(table, "a.parquet")), JOB_ROLE + ":s"),
        sent_by(message(add_files(table, "b.parquet")), OTHER_ROLE + ":s"),
        sent_by(message(add_files(table, "c.parquet")), "AIDAOPERATORUSER0001"),
    ]

    assert outcomes(h.committer().process(batch)) == ["committed", "dead_lettered", "committed"]
    assert set(h.state(table).files_by_name) == set(data_keys(table, "a.parquet", "c.parquet"))


def test_a_table_without_allowed_senders_takes_requests_from_anyone() -> None:
    h = Harness()
    table = h.create_table("open")
    results = h.committer().process([sent_by(message(add_files(table, "a.parquet")), OTHER_ROLE)])
    assert outcomes(results) == ["committed"]


def test_the_sender_comes_from_the_sqs_record_s_sender_id() -> None:
    record = {
        "messageId": "m-1",
        "body": "{}",
        "attributes": {"MessageGroupId": "t", "SenderId": f"{JOB_ROLE}:session"},
    }
    assert ReceivedMessage.from_sqs_record(record).sender_id == f"{JOB_ROLE}:session"
    del record["attributes"]["SenderId"]  # type: ignore[attr-defined]
    assert ReceivedMessage.from_sqs_record(record).sender_id is None


def test_allowed_senders_are_kept_with_the_table_and_can_be_changed() -> None:
    h = Harness()
    table = restricted_table(h, JOB_ROLE)
    assert h.tables.get(table).allowed_senders == (JOB_ROLE,)
    assert h.tables.set_allowed_senders(table, []).allowed_senders == ()
    assert TableInfo.from_json(h.tables.get(table).to_json()) == h.tables.get(table)
    with pytest.raises(StateStoreError, match="not its ARN"):
        h.tables.set_allowed_senders(table, ["arn:aws:iam::123456789012:role/job"])
