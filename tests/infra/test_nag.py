"""cdk-nag's AwsSolutions pack finds nothing unacknowledged, and every acknowledgment says why."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aws_cdk
import pytest
from aws_cdk import aws_s3 as s3
from cdk_nag import AwsSolutionsChecks

from infra.config import InstanceConfig
from infra.stack import StatestoreStack
from tests.infra.conftest import cdk_json_context

pytestmark = pytest.mark.infra

ACKNOWLEDGED = "aws:cdk:acknowledged-rules"


def checked_app(tmp_path: Path, fake_asset: Path, **overrides: str) -> tuple[aws_cdk.App, StatestoreStack]:
    context = {**cdk_json_context(), "lambda_asset": str(fake_asset), **overrides}
    app = aws_cdk.App(outdir=str(tmp_path), context=context)
    stack = StatestoreStack(app, "statestore-main", config=InstanceConfig.from_context(app.node))
    aws_cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return app, stack


def violations(outdir: Path) -> list[Any]:
    report = json.loads((outdir / "validation-report.json").read_text())
    return [v for plugin in report.get("pluginReports", []) for v in plugin.get("violations", [])]


def test_aws_solutions_checks_find_nothing_unacknowledged(tmp_path: Path, fake_asset: Path) -> None:
    app, _ = checked_app(tmp_path, fake_asset)
    app.synth()  # raises if the plugin reports a violation
    assert violations(tmp_path) == []


# The PostgreSQL option (infra/postgres.py) with its proxy, without it (auto-pause), and disposable.
POSTGRES_CONTEXTS = [
    {"postgres": "true"},
    {"postgres": "true", "postgres_proxy": "false"},
    {"postgres": "true", "deletion_protection": "false"},
]


@pytest.mark.parametrize("overrides", POSTGRES_CONTEXTS, ids=["proxy", "no-proxy", "disposable"])
def test_the_postgres_option_leaves_nothing_unacknowledged(
    tmp_path: Path, fake_asset: Path, overrides: dict[str, str]
) -> None:
    app, _ = checked_app(tmp_path, fake_asset, **overrides)
    app.synth()
    assert violations(tmp_path) == []


def test_scoped_tables_leave_nothing_unacknowledged(tmp_path: Path, fake_asset: Path) -> None:
    """Each table's own policies, job role and submit policy (infra/table_access.py)."""
    tables = "0a0a0a0a-1111-4222-8333-444444444444,0b0b0b0b-1111-4222-8333-444444444444"
    app, _ = checked_app(tmp_path, fake_asset, scoped_tables=tables)
    app.synth()
    assert violations(tmp_path) == []


@pytest.mark.parametrize(
    "overrides", [{}, *POSTGRES_CONTEXTS], ids=["default", "proxy", "no-proxy", "disposable"]
)
def test_every_acknowledgment_names_an_aws_solutions_rule_and_gives_a_reason(
    tmp_path: Path, fake_asset: Path, overrides: dict[str, str]
) -> None:
    _, stack = checked_app(tmp_path, fake_asset, **overrides)
    acknowledged = {
        finding: reason
        for construct in stack.node.find_all()
        for entry in construct.node.metadata
        if entry.type == ACKNOWLEDGED
        for finding, reason in entry.data.items()
    }
    assert acknowledged, "expected the stack's known findings to be acknowledged"
    for finding, reason in acknowledged.items():
        # aws-cdk-lib acknowledges findings of CDK's own template validator on the VPC it builds (postgres).
        assert finding.startswith(("AwsSolutions::AwsSolutions-", "CloudFormation-Validate::")), finding
        assert len(reason.split()) >= 5, f"{finding}: the reason {reason!r} does not explain anything"


def test_the_check_does_fail_on_an_unacknowledged_finding(tmp_path: Path, fake_asset: Path) -> None:
    app, stack = checked_app(tmp_path, fake_asset)
    s3.Bucket(stack, "CarelessBucket")  # no TLS policy, no access logs
    with pytest.raises(Exception, match="AwsSolutions-S1"):
        app.synth()
