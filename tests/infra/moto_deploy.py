"""Deploying a synthesized template into moto's CloudFormation, as ``cdk deploy`` would into a
bootstrapped account: what stands in for what moto cannot create, and what the deploy reports.

moto's CloudFormation creates each resource through the service model it has for the type (EC2 refuses a
duplicate security-group rule there as it does on AWS, Lambda needs its code's zip in S3, SQS its
dead-letter queue's ARN...). A type it has no model for it skips with a warning, which would pass
silently: such types are replaced in the template copy with a stub
(``AWS::CloudFormation::WaitConditionHandle``, which creates nothing), listed by name in
:data:`NO_MOTO_MODEL`, and every ``Ref``/``Fn::GetAtt`` to a stubbed resource is replaced with a
placeholder value of the right shape (an ARN, or the port the resource is given).

An Aurora cluster's instance (``AWS::RDS::DBInstance`` with a ``DBClusterIdentifier``) is stubbed with its
cluster: moto's instance model is of a stand-alone instance (it knows no Aurora engine version and needs
the cluster, which it cannot create from a template). Custom resources (``Custom::*``) are stubbed too:
moto would run their provider function, which needs Docker, and wait for its answer. Their provider
functions themselves are created like any other function.
"""

from __future__ import annotations

import copy
import io
import json
import re
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3

ACCOUNT = "123456789012"  # moto's default account
REGION = "us-east-1"
STUB_TYPE = "AWS::CloudFormation::WaitConditionHandle"
# Resource types of the stacks that moto's CloudFormation (the version the lock pins) has no model for.
NO_MOTO_MODEL = frozenset(
    {
        "AWS::CloudWatch::Alarm",
        "AWS::EC2::SecurityGroupEgress",
        "AWS::EMRServerless::Application",
        "AWS::Lambda::EventInvokeConfig",
        "AWS::Logs::MetricFilter",
        "AWS::RDS::DBCluster",
        "AWS::RDS::DBClusterParameterGroup",
        "AWS::RDS::DBProxy",
        "AWS::RDS::DBProxyTargetGroup",
        "AWS::S3::BucketPolicy",
        "AWS::SNS::TopicPolicy",
        "AWS::SQS::QueuePolicy",
        "AWS::SecretsManager::Secret",
        "AWS::SecretsManager::SecretTargetAttachment",
    }
)
# What ``cdk bootstrap`` leaves in the account: the bootstrap version the template's rule checks, and the
# asset bucket (qualifier ``hnb659fds``, CDK's default).
BOOTSTRAP_VERSION_PARAMETER = "/cdk-bootstrap/hnb659fds/version"
BOOTSTRAP_VERSION = "21"
ASSET_BUCKET = f"cdk-hnb659fds-assets-{ACCOUNT}-{REGION}"


CLUSTER_MEMBER = "AWS::RDS::DBInstance"


def is_stubbed(resource: dict[str, Any]) -> bool:
    kind = resource["Type"]
    if kind == CLUSTER_MEMBER:
        return "DBClusterIdentifier" in resource.get("Properties", {})
    return kind in NO_MOTO_MODEL or kind.startswith("Custom::")


def stubbed_types(template: dict[str, Any]) -> set[str]:
    return {r["Type"] for r in template["Resources"].values() if is_stubbed(r)}


def _placeholder(logical_id: str, attribute: str | None = None) -> str:
    suffix = f"/{attribute}" if attribute else ""
    return f"arn:aws:cloudformation:{REGION}:{ACCOUNT}:stub/{logical_id}{suffix}"


def resolve(value: Any, resources: dict[str, Any], replaced: set[str]) -> Any:
    """``value`` with each ``Ref`` and ``Fn::GetAtt`` to a resource in ``replaced`` made a literal: the
    resource's ``Port`` property for ``Endpoint.Port``, else a placeholder ARN naming it."""
    if isinstance(value, list):
        return [resolve(item, resources, replaced) for item in value]
    if not isinstance(value, dict):
        return value
    if set(value) == {"Ref"} and value["Ref"] in replaced:
        return _placeholder(value["Ref"])
    if set(value) == {"Fn::GetAtt"}:
        target, attribute = value["Fn::GetAtt"]
        if target in replaced:
            port = resources[target].get("Properties", {}).get("Port")
            if attribute == "Endpoint.Port" and port is not None:
                return port
            return _placeholder(target, attribute)
    if "Fn::Sub" in value and isinstance(value["Fn::Sub"], str):
        names = set(re.findall(r"\$\{([^}.!]+)", value["Fn::Sub"]))
        if names & replaced:
            raise AssertionError(f"Fn::Sub names stubbed resources {sorted(names & replaced)}: resolve them")
    return {key: resolve(item, resources, replaced) for key, item in value.items()}


def deployable_copy(template: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``template`` with the types moto cannot create stubbed (see the module's docstring)."""
    result = copy.deepcopy(template)
    original = result["Resources"]
    stubbed = {logical_id for logical_id, r in original.items() if is_stubbed(r)}
    resolved = {
        logical_id: resolve(resource, original, stubbed)
        for logical_id, resource in original.items()
        if logical_id not in stubbed
    }
    result["Resources"] = {**resolved, **{logical_id: {"Type": STUB_TYPE} for logical_id in stubbed}}
    if "Outputs" in result:
        result["Outputs"] = resolve(result["Outputs"], original, stubbed)
    return result


def asset_keys(template: dict[str, Any]) -> set[str]:
    """The zip keys the template's functions take their code from in the bootstrap asset bucket."""
    return {
        r["Properties"]["Code"]["S3Key"]
        for r in template["Resources"].values()
        if r["Type"] == "AWS::Lambda::Function" and "S3Key" in r["Properties"].get("Code", {})
    }


def _stub_zip() -> bytes:
    # A placeholder for the asset's *content* (the handlers are not run here), not for any resource.
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("lambdas/__init__.py", "")
    return buffer.getvalue()


def bootstrap(template: dict[str, Any]) -> None:
    """What ``cdk bootstrap`` and ``cdk deploy``'s asset upload leave behind, in the mocked account."""
    boto3.client("ssm", region_name=REGION).put_parameter(
        Name=BOOTSTRAP_VERSION_PARAMETER, Value=BOOTSTRAP_VERSION, Type="String"
    )
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket=ASSET_BUCKET)
    body = _stub_zip()
    for key in asset_keys(template):
        s3.put_object(Bucket=ASSET_BUCKET, Key=key, Body=body)


@dataclass(frozen=True)
class Deployment:
    stack_status: str
    resource_status: dict[str, str]  # logical id -> status, of the resources moto reports
    expected: frozenset[str]  # logical ids of the template's resources that are not stubbed

    def not_created(self) -> dict[str, str]:
        """Each expected resource that did not reach CREATE_COMPLETE, with its status (or ``missing``)."""
        return {
            logical_id: self.resource_status.get(logical_id, "missing")
            for logical_id in sorted(self.expected)
            if self.resource_status.get(logical_id) != "CREATE_COMPLETE"
        }


def deploy(template: dict[str, Any], stack_name: str) -> Deployment:
    """Create ``template`` (stubbed) as ``stack_name`` in the mocked account; call inside ``mock_aws``."""
    deployable = deployable_copy(template)
    bootstrap(deployable)
    cloudformation = boto3.client("cloudformation", region_name=REGION)
    cloudformation.create_stack(
        StackName=stack_name,
        TemplateBody=json.dumps(deployable),
        Capabilities=["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"],
    )
    [stack] = cloudformation.describe_stacks(StackName=stack_name)["Stacks"]
    statuses = {
        r["LogicalResourceId"]: r["ResourceStatus"]
        for page in cloudformation.get_paginator("list_stack_resources").paginate(StackName=stack_name)
        for r in page["StackResourceSummaries"]
    }
    expected = frozenset(k for k, r in template["Resources"].items() if not is_stubbed(r))
    return Deployment(stack_status=stack["StackStatus"], resource_status=statuses, expected=expected)


def security_group_rules(template: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """Each security-group rule of ``template`` as (direction, canonical JSON), descriptions left out: EC2
    compares rules by group, protocol, ports and peer. Standalone rules and those inline in a group alike;
    a port given as a cluster's ``Endpoint.Port`` is that cluster's ``Port``."""
    resources = template["Resources"]
    clusters = {k for k, r in resources.items() if "Port" in r.get("Properties", {})}
    for logical_id, resource in resources.items():
        properties = resolve(resource.get("Properties", {}), resources, clusters)
        kind = resource["Type"]
        if kind in ("AWS::EC2::SecurityGroupIngress", "AWS::EC2::SecurityGroupEgress"):
            direction = "ingress" if kind.endswith("Ingress") else "egress"
            rule = {k: v for k, v in properties.items() if k != "Description"}
            yield direction, json.dumps(rule, sort_keys=True)
        elif kind == "AWS::EC2::SecurityGroup":
            for direction, key in (("ingress", "SecurityGroupIngress"), ("egress", "SecurityGroupEgress")):
                for inline in properties.get(key, []):
                    rule = {k: v for k, v in inline.items() if k != "Description"}
                    rule["GroupId"] = {"Fn::GetAtt": [logical_id, "GroupId"]}
                    yield direction, json.dumps(rule, sort_keys=True)
