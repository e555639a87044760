"""The stack option ``queryable_views`` and the snapshot function's upkeep of the views under its synthesized
role, IAM enforced in moto (``tests/infra/deployed_iam.py``): with the option on (the default) the role
suffices to build and keep a table's view, and nothing less does; off, the role cannot write the view and the
function keeps none."""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk import assertions

from infra.config import InstanceConfig
from statestore.engine.queryable_view import QueryableView
from statestore.services.view_upkeep import QUERYABLE_VIEWS_ENV
from statestore.transactions import AddFiles, AssignJobIdRequest, AssignJobIds
from statestore.views import view_answers
from tests.builders import INT_SCHEMA, data_key, ref
from tests.infra.conftest import SynthStack
from tests.infra.deployed_iam import function_environment, iam_enforced
from tests.infra.test_deployed_permissions import (  # noqa: F401  (fixtures)
    SCHEDULED_EVENT,
    SNAPSHOT,
    Deployed,
    deployed,
    statement,
    template_json,
)
from tests.infra.test_stack import NAMES, actions_on, table_id

pytestmark = pytest.mark.infra

VIEW_ON = {"queryable_view": "true"}


def snapshot_period(deployed: Deployed, *, without: dict[str, Any] | None = None) -> dict[str, Any]:  # noqa: F811
    """One period of the snapshot function: its plan, then its work on the one table queued, acknowledged
    as the event source does; returns the work's summary."""
    deployed.invoke(SNAPSHOT, SCHEDULED_EVENT)
    event, source = deployed.work_event(SNAPSHOT, "snapshot")
    summary = deployed.invoke(SNAPSHOT, event, without=without)
    with iam_enforced():
        source.delete([r["receiptHandle"] for r in event["Records"]])
    return summary


def test_the_snapshot_functions_role_builds_and_keeps_a_tables_view(deployed: Deployed) -> None:  # noqa: F811
    store = deployed.create_table("orders", VIEW_ON)
    table_id_ = store.table_id
    a = data_key(table_id_, "a.parquet")
    store.commit(AddFiles((ref(a), ref(data_key(table_id_, "b.parquet")))))

    built = snapshot_period(deployed)
    store.commit(AssignJobIds((AssignJobIdRequest("job-1", "root", (a,)),)))
    kept = snapshot_period(deployed)

    assert built["views"] == {table_id_: 2} and built["view_errors"] == {}
    assert kept["written"] == {table_id_: 3} and kept["views"] == {table_id_: 3} and kept["view_errors"] == {}
    state = store.load()
    view = QueryableView(table_id_, INT_SCHEMA, deployed.admin.log, deployed.backend.queryable_view)
    assert view.references_in_partition("root").value == view_answers.references_in_partition(state, "root")
    assert view.claimed_references("job-1").value == view_answers.claimed_references(state, "job-1")


def test_without_batch_writes_on_the_snapshots_table_the_view_fails_and_the_snapshot_stands(
    deployed: Deployed,  # noqa: F811
) -> None:
    store = deployed.create_table("orders", VIEW_ON)
    store.commit(AddFiles((ref(data_key(store.table_id, "a.parquet")),)))
    missing = statement(
        deployed.template, SNAPSHOT, "dynamodb:BatchWriteItem", "table/statestore-main-snapshots"
    )

    summary = snapshot_period(deployed, without=missing)

    assert summary["written"] == {store.table_id: 2} and summary["errors"] == {}
    assert "AccessDenied" in summary["view_errors"][store.table_id]
    latest = deployed.admin.snapshots.metadata.latest(store.table_id)
    assert latest is not None and latest.transaction_number == 2


def test_the_option_decides_the_functions_setting_and_its_alarm(
    template: Any, synth_stack: SynthStack
) -> None:
    off = assertions.Template.from_stack(synth_stack(queryable_views="false"))
    snapshots_on, snapshots_off = (table_id(t, NAMES.snapshots_table) for t in (template, off))

    # Batch writes either way: the view's items, and a table's snapshot records deleted again when the
    # table's delete began while the function wrote its snapshot (statestore.services.cleanup).
    assert "dynamodb:BatchWriteItem" in actions_on(template, SNAPSHOT, snapshots_on)
    assert {"dynamodb:BatchWriteItem", "dynamodb:Query"} <= actions_on(off, SNAPSHOT, snapshots_off)
    assert "dynamodb:PutItem" in actions_on(off, SNAPSHOT, snapshots_off)  # its snapshot records
    assert function_environment(dict(template.to_json()), SNAPSHOT)[QUERYABLE_VIEWS_ENV] == "true"
    assert function_environment(dict(off.to_json()), SNAPSHOT)[QUERYABLE_VIEWS_ENV] == "false"
    alarm = {"Properties": {"AlarmName": "statestore-main-queryable-view-failures"}}
    assert len(template.find_resources("AWS::CloudWatch::Alarm", alarm)) == 1
    assert off.find_resources("AWS::CloudWatch::Alarm", alarm) == {}


def test_a_bad_option_value_is_refused_naming_the_key() -> None:
    class Context:
        def try_get_context(self, key: str) -> Any:
            return "maybe" if key == "queryable_views" else None

    with pytest.raises(ValueError, match="queryable_views='maybe' must be true or false"):
        InstanceConfig.from_context(Context())
