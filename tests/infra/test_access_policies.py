"""The reusable grants, exported as managed policies: exactly what each allows, on exactly which resources."""

from __future__ import annotations

from typing import Any

import pytest

from statestore.instance import ResourceNames
from statestore.model import layout
from tests.infra.permissions import (
    OBJECT_DELETE,
    OBJECT_PUT,
    OBJECT_READ,
    QUEUE_CONSUME,
    QUEUE_SEND,
    TABLE_READ,
    Permissions,
    allows,
    managed_policy,
    role_permissions,
)

pytestmark = pytest.mark.infra

NAMES = ResourceNames.for_instance("main")
ANY_TABLE = "*"


def table(name: str) -> str:
    return f"table:{name}"


def objects(prefix: str) -> str:
    """The key pattern of ``prefix``'s objects, for any table id."""
    return f"bucket/{prefix}*"


PUT_ITEM, UPDATE_ITEM, DELETE_ITEM = "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"
BATCH_WRITE = "dynamodb:BatchWriteItem"

READ_STATE = allows(
    TABLE_READ,
    table(NAMES.tables_by_id_table),
    table(NAMES.tables_by_name_table),
    table(NAMES.transaction_log_table),
    table(NAMES.snapshots_table),
) | allows(
    OBJECT_READ,
    "bucket",
    objects(layout.snapshot_prefix(ANY_TABLE)),
    objects(layout.log_body_prefix(ANY_TABLE)),
)
COMMIT = (
    allows(QUEUE_SEND, f"queue:{NAMES.commit_queue}")
    | allows(OBJECT_PUT, objects(layout.request_body_prefix(ANY_TABLE)))
    | allows(TABLE_READ, table(NAMES.commit_status_table))
)
DATA = allows(OBJECT_READ, "bucket", objects(layout.data_prefix(ANY_TABLE))) | allows(
    OBJECT_PUT + OBJECT_DELETE, objects(layout.data_prefix(ANY_TABLE))
)
ADMIN = (
    READ_STATE
    | COMMIT
    | allows((PUT_ITEM, UPDATE_ITEM, DELETE_ITEM), table(NAMES.tables_by_id_table))
    | allows((PUT_ITEM, DELETE_ITEM), table(NAMES.tables_by_name_table))
    | allows((PUT_ITEM, UPDATE_ITEM, BATCH_WRITE), table(NAMES.transaction_log_table))
    | allows((PUT_ITEM, DELETE_ITEM, BATCH_WRITE), table(NAMES.snapshots_table))
    | allows(
        OBJECT_PUT,
        objects(layout.snapshot_prefix(ANY_TABLE)),
        objects(layout.log_body_prefix(ANY_TABLE)),
        objects(layout.upkeep_prefix(ANY_TABLE)),
        objects(layout.DELETED_TABLES_PREFIX),  # a deleted table's tombstone
    )
    | allows(
        OBJECT_READ, "bucket", objects(layout.upkeep_prefix(ANY_TABLE))
    )  # cleanup's orphan sweep progress
    # every object of every table; the tombstones, once cleanup deleted what was left of their tables
    | allows(OBJECT_DELETE, objects(layout.TABLES_PREFIX), objects(layout.DELETED_TABLES_PREFIX))
    | allows(QUEUE_CONSUME, f"queue:{NAMES.dead_letter_queue}")  # dead-letters list/redrive/purge
    # dead-letters --queue upkeep: list/purge on its dead-letter queue, redrive to the work queues
    | allows(QUEUE_CONSUME, f"queue:{NAMES.upkeep_dead_letter_queue}")
    | allows(QUEUE_SEND, f"queue:{NAMES.snapshot_queue}", f"queue:{NAMES.cleanup_queue}")
    # committer pause|resume|status: listing supports no resource-level permissions; switching is scoped
    | allows(("lambda:ListEventSourceMappings",), "*")
    | allows(("lambda:UpdateEventSourceMapping",), f"event-source-mapping:{NAMES.committer_function}")
)
EXPECTED = {"read-state": READ_STATE, "commit": COMMIT, "data": DATA, "admin": ADMIN}
OUTPUTS = {
    "read-state": "ReadStatePolicyArn",
    "commit": "CommitPolicyArn",
    "data": "DataPolicyArn",
    "admin": "AdminPolicyArn",
}


@pytest.fixture(scope="module")
def template_json(template: Any) -> dict[str, Any]:
    result: dict[str, Any] = template.to_json()
    return result


def policy_id(template_json: dict[str, Any], grant: str) -> str:
    """The logical id of the managed policy named ``statestore-main-<grant>-<region>``."""
    found = [
        logical_id
        for logical_id, r in template_json["Resources"].items()
        if r["Type"] == "AWS::IAM::ManagedPolicy"
        and r["Properties"]["ManagedPolicyName"]
        == {"Fn::Join": ["", [f"statestore-main-{grant}-", {"Ref": "AWS::Region"}]]}
    ]
    assert len(found) == 1, f"expected one managed policy for {grant}, found {len(found)}"
    return found[0]


@pytest.mark.parametrize("grant", sorted(EXPECTED))
def test_each_managed_policy_allows_exactly_its_grant(template_json: dict[str, Any], grant: str) -> None:
    allowed = managed_policy(template_json, policy_id(template_json, grant))
    assert sorted(allowed - EXPECTED[grant]) == [], "more than the grant"
    assert sorted(EXPECTED[grant] - allowed) == [], "less than the grant"


def test_there_are_exactly_the_four_managed_policies_and_the_spark_submit_one(template: Any) -> None:
    # The fifth submits Spark jobs to the stack's EMR Serverless application (tests/infra/test_spark_jobs.py).
    template.resource_count_is("AWS::IAM::ManagedPolicy", len(EXPECTED) + 1)


@pytest.mark.parametrize("grant", sorted(EXPECTED))
def test_each_managed_policy_arn_is_an_output(template_json: dict[str, Any], grant: str) -> None:
    output = template_json["Outputs"][OUTPUTS[grant]]
    assert output["Value"] == {"Ref": policy_id(template_json, grant)}


def test_reading_the_state_writes_nothing_and_only_admin_manages_tables(
    template_json: dict[str, Any],
) -> None:
    writes = {"Put", "Update", "Delete", "Write", "Abort"}

    def writing(allowed: Permissions) -> Permissions:
        return {(a, r) for a, r in allowed if any(w in a for w in writes)}

    assert writing(managed_policy(template_json, policy_id(template_json, "read-state"))) == set()
    index = {table(NAMES.tables_by_id_table), table(NAMES.tables_by_name_table)}
    for grant in ("read-state", "commit", "data"):
        allowed = writing(managed_policy(template_json, policy_id(template_json, grant)))
        assert not {r for _, r in allowed} & (index | {table(NAMES.transaction_log_table)})
    assert {r for _, r in writing(managed_policy(template_json, policy_id(template_json, "admin")))} >= index


@pytest.mark.parametrize(
    "handler", ["lambdas.committer.handler", "lambdas.snapshot.handler", "lambdas.cleanup.handler"]
)
def test_every_lambda_reads_state_through_the_shared_grant(
    template_json: dict[str, Any], handler: str
) -> None:
    [function] = [
        r
        for r in template_json["Resources"].values()
        if r["Type"] == "AWS::Lambda::Function" and r["Properties"]["Handler"] == handler
    ]
    role = function["Properties"]["Role"]["Fn::GetAtt"][0]
    assert role_permissions(template_json, role) >= READ_STATE
