"""Each synthesized template deploys: created in moto's CloudFormation, every resource reaches
CREATE_COMPLETE (tests/infra/moto_deploy.py says what is stubbed and why), and no security-group rule is
given twice (EC2 refuses a duplicate rule, ``InvalidPermission.Duplicate``, failing the deploy)."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
from cfnlint.api import ManualArgs, lint
from moto import mock_aws

from tests.infra.moto_deploy import NO_MOTO_MODEL, REGION, deploy, security_group_rules, stubbed_types

pytestmark = pytest.mark.infra


# What each template's deploy test stubs, by type (docs/deploy.md lists them): what moto has no model for,
# the Aurora cluster's instance (stubbed with its cluster), the custom resource that runs the schema
# migration. A new type here is a decision, not a drift.
STUBBED_DEFAULT = {
    "AWS::CloudWatch::Alarm",
    "AWS::EMRServerless::Application",
    "AWS::Lambda::EventInvokeConfig",
    "AWS::Logs::MetricFilter",
    "AWS::S3::BucketPolicy",
    "AWS::SNS::TopicPolicy",
    "AWS::SQS::QueuePolicy",
}
STUBBED = {
    "default": STUBBED_DEFAULT,
    "postgres": STUBBED_DEFAULT
    | {
        "AWS::EC2::SecurityGroupEgress",
        "AWS::RDS::DBCluster",
        "AWS::RDS::DBClusterParameterGroup",
        "AWS::RDS::DBInstance",
        "AWS::RDS::DBProxy",
        "AWS::RDS::DBProxyTargetGroup",
        "AWS::SecretsManager::Secret",
        "AWS::SecretsManager::SecretTargetAttachment",
        "Custom::Trigger",
    },
}

# cfn-lint's W3005, a DependsOn that a Ref or GetAtt already implies: CDK writes a function's DependsOn on
# its role (and on the role's default policy, which nothing references) on purpose, and the redundant half
# changes nothing. Every other finding, error or warning, fails.
CFN_LINT_IGNORED = ["W3005"]


@pytest.fixture(params=["default", "postgres"])
def variant(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
def template_json(request: pytest.FixtureRequest, variant: str) -> dict[str, Any]:
    fixture = "template" if variant == "default" else "postgres_template"
    template: dict[str, Any] = request.getfixturevalue(fixture).to_json()
    return template


def test_every_resource_of_the_template_is_created(template_json: dict[str, Any]) -> None:
    with mock_aws():
        deployment = deploy(template_json, "statestore-main")
    assert deployment.not_created() == {}
    assert deployment.stack_status == "CREATE_COMPLETE"


def test_only_what_moto_cannot_create_is_stubbed(template_json: dict[str, Any], variant: str) -> None:
    assert stubbed_types(template_json) == STUBBED[variant]
    assert STUBBED[variant] - {"AWS::RDS::DBInstance", "Custom::Trigger"} <= NO_MOTO_MODEL


def test_no_security_group_rule_is_given_twice(template_json: dict[str, Any]) -> None:
    repeated = {rule: n for rule, n in Counter(security_group_rules(template_json)).items() if n > 1}
    assert repeated == {}


def test_cfn_lint_finds_nothing(template_json: dict[str, Any]) -> None:
    config = ManualArgs(regions=[REGION], ignore_checks=CFN_LINT_IGNORED)
    findings = lint(json.dumps(template_json), config=config)
    assert [f"{m.rule.id} {m.message} at {'/'.join(map(str, m.path))}" for m in findings] == []
