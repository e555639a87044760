"""IAM statements of a synthesised template as a set of ``(action, resource)`` pairs with readable resources.

A resource reads ``table:<name>``, ``queue:<name>``, ``bucket`` (the data bucket), ``bucket/<key pattern>``
or ``event-source-mapping:<function name>``, so a test can state exactly what a policy allows, however CDK
groups the statements.
"""

from __future__ import annotations

from itertools import product
from typing import Any

# What CDK's grant_* give (the actions and families), spelled out: the tests pin them.
TABLE_READ = (
    "dynamodb:BatchGetItem",
    "dynamodb:ConditionCheckItem",
    "dynamodb:DescribeTable",
    "dynamodb:GetItem",
    "dynamodb:GetRecords",
    "dynamodb:GetShardIterator",
    "dynamodb:Query",
    "dynamodb:Scan",
)
OBJECT_READ = ("s3:GetBucket*", "s3:GetObject*", "s3:List*")
OBJECT_PUT = (
    "s3:Abort*",
    "s3:PutObject",
    "s3:PutObjectLegalHold",
    "s3:PutObjectRetention",
    "s3:PutObjectTagging",
    "s3:PutObjectVersionTagging",
)
OBJECT_DELETE = ("s3:DeleteObject",)  # not s3:DeleteObject*: no version may be deleted
QUEUE_SEND = ("sqs:GetQueueAttributes", "sqs:GetQueueUrl", "sqs:SendMessage")
QUEUE_CONSUME = (
    "sqs:ChangeMessageVisibility",
    "sqs:DeleteMessage",
    "sqs:GetQueueAttributes",
    "sqs:GetQueueUrl",
    "sqs:ReceiveMessage",
)

Permissions = set[tuple[str, str]]


def allows(actions: tuple[str, ...], *resources: str) -> Permissions:
    """Every action on every resource."""
    return set(product(actions, resources))


def permissions(template: dict[str, Any], statements: list[dict[str, Any]]) -> Permissions:
    """What ``statements`` (as in the template, unresolved) allow."""
    allowed: Permissions = set()
    for statement in statements:
        assert statement["Effect"] == "Allow" and "Condition" not in statement, statement
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        resources = (
            statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        )
        allowed |= set(product(actions, (describe(template, r) for r in resources)))
    return allowed


def managed_policy(template: dict[str, Any], logical_id: str) -> Permissions:
    statements = template["Resources"][logical_id]["Properties"]["PolicyDocument"]["Statement"]
    return permissions(template, statements)


def role_permissions(template: dict[str, Any], role: str) -> Permissions:
    """What the role ``role`` (a logical id) may do: its inline policies and its managed policies."""
    resources = template["Resources"]
    allowed: Permissions = set()
    for resource in resources.values():
        if resource["Type"] == "AWS::IAM::Policy" and {"Ref": role} in resource["Properties"]["Roles"]:
            allowed |= permissions(template, resource["Properties"]["PolicyDocument"]["Statement"])
    for policy in resources[role]["Properties"].get("ManagedPolicyArns", []):
        allowed |= managed_policy(template, policy["Ref"])
    return allowed


def describe(template: dict[str, Any], resource: Any) -> str:
    if resource == "*":
        return "*"
    if isinstance(resource, dict) and "Fn::GetAtt" in resource:
        logical_id, attribute = resource["Fn::GetAtt"]
        assert attribute in ("Arn", "EventSourceMappingArn"), resource
        return _name(template, logical_id)
    if isinstance(resource, dict) and "Fn::Join" in resource:
        separator, parts = resource["Fn::Join"]
        mapping = _event_source_mapping_arn(template, separator, parts)
        if mapping is not None:
            return mapping
        return separator.join(p if isinstance(p, str) else describe(template, p) for p in parts)
    raise AssertionError(f"teach tests/infra/permissions.py to describe {resource}")


def _event_source_mapping_arn(template: dict[str, Any], separator: str, parts: list[Any]) -> str | None:
    """The name of the mapping whose ARN CDK joins as ``arn:<partition>:lambda:<region>:<account>:
    event-source-mapping:<Ref mapping>``, or None if ``parts`` are something else."""
    last = parts[-1]
    if separator != "" or not isinstance(last, dict) or "Ref" not in last:
        return None
    target = template["Resources"].get(last["Ref"], {})
    if target.get("Type") != "AWS::Lambda::EventSourceMapping":
        return None
    assert isinstance(parts[-2], str) and parts[-2].endswith(":event-source-mapping:"), parts
    return _name(template, last["Ref"])


def _name(template: dict[str, Any], logical_id: str) -> str:
    resource = template["Resources"][logical_id]
    properties = resource.get("Properties", {})
    kind = resource["Type"]
    if kind == "AWS::DynamoDB::Table":
        return f"table:{properties['TableName']}"
    if kind == "AWS::SQS::Queue":
        return f"queue:{properties['QueueName']}"
    if kind == "AWS::S3::Bucket" and "BucketName" in properties:
        return "bucket"
    if kind == "AWS::Lambda::EventSourceMapping":  # named by the function it feeds
        function = template["Resources"][properties["FunctionName"]["Ref"]]
        return f"event-source-mapping:{function['Properties']['FunctionName']}"
    if kind == "AWS::Logs::LogGroup":  # a Lambda's own, named by CloudFormation
        return f"log-group:{logical_id}"
    if kind == "AWS::EMRServerless::Application":
        return f"emr-application:{properties['Name']}"
    if kind == "AWS::IAM::Role":  # named by CloudFormation
        return f"role:{logical_id}"
    raise AssertionError(f"teach tests/infra/permissions.py to name {kind} {logical_id}")
