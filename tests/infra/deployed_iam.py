"""Running a Lambda handler in moto with exactly the IAM permissions the synthesised stack gives its role.

:func:`role_statements` takes a function's policy statements from the template and resolves their
``Resource`` references (Ref, Fn::GetAtt, Fn::Join, Fn::Sub) to the ARNs of same-named resources in moto;
:func:`create_user` makes an IAM user holding exactly those statements; inside :func:`iam_enforced` every
request moto receives is authorised against the caller's policies.

moto 5.2.5 enforces IAM for DynamoDB, S3, SQS and Secrets Manager, but for some kinds of request it checks
a different resource or action than AWS does, which would deny calls the deployed stack allows.
:func:`iam_enforced` makes moto check what AWS checks:

* DynamoDB: moto authorises every request against resource ``*`` (it never names the table), so no
  table-scoped statement would ever match. Here each request is checked against the ARN of every table it
  touches, and TransactWriteItems/TransactGetItems by the per-item actions (PutItem, ConditionCheckItem, ...)
  AWS checks instead of an action of their own.
* SQS: moto checks GetQueueUrl against ``*`` (here: the named queue's ARN), and a batch request by an action
  of its own, sqs:SendMessageBatch say, that IAM does not have (here: by its single-message action, as AWS).
* Lambda: moto checks every request against ``*``; here UpdateEventSourceMapping is checked against the
  mapping's ARN, as AWS does (a Ref to the stack's mapping resolves to the one moto holds for its function).
  moto also fails the signature of a GET with query parameters (it hashes them as a body): fixed here.
* Secrets Manager: moto checks every request against ``*``; here a request naming a secret (by name or
  ARN) is checked against the secret's ARN, as AWS does.
* S3 DeleteObjects: moto checks s3:DeleteObject on the bucket's ARN; AWS checks it on each object's key.
  Here each key is checked (a denied key denies the whole request). A PutObject with tags also needs
  s3:PutObjectTagging, as in AWS.

Conditions are evaluated as IAM does for the keys the per-table grants use (``infra/table_grants.py``):
``dynamodb:LeadingKeys`` (every partition key a request names, per table), ``s3:prefix`` (a listing's
prefix), with ``StringEquals``, ``StringLike`` and their ``ForAllValues:``/``ForAnyValue:`` forms. As in
IAM, a missing key fails a plain condition and passes a ``ForAllValues`` one, and an Allow whose condition
fails allows nothing (moto's own evaluation ignores what it does not know and turns a failed condition
into an explicit deny). An operator or key this module does not know fails the test, never passes it.

SQS: a message sent inside :func:`iam_enforced` carries its sender as AWS reports it (``SenderId``: the
IAM user's id), not moto's fixed one, so the committer's sender check can be shown.

Not enforced: CloudWatch Logs and X-Ray (the handlers do not call them in tests), and trust policies.
"""

from __future__ import annotations

import contextlib
import contextvars
import fnmatch
import json
import re
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlparse

from moto.awslambda.models import lambda_backends
from moto.awslambda.responses import LambdaResponse
from moto.core.authorization import enable_iam_authentication
from moto.dynamodb.responses import DynamoHandler
from moto.iam.access_control import IAMPolicyStatement, IAMRequest, PermissionResult, S3IAMRequest
from moto.s3.responses import S3Response
from moto.secretsmanager.models import secretsmanager_backends
from moto.secretsmanager.responses import SecretsManagerResponse
from moto.sqs import models as sqs_models
from moto.sqs.exceptions import QueueDoesNotExist
from moto.sqs.responses import SQSResponse

ACCOUNT_ID = "123456789012"  # moto's default account
REGION = "eu-west-2"  # tests/conftest.py's region
# The endpoint of the stack's database proxy or cluster: the PostgreSQL server a test starts on loopback.
DATABASE_HOST = "127.0.0.1"

_SUB_VARIABLE = re.compile(r"\$\{([^}]+)\}")


# --- the template's statements, resolved ------------------------------------------------------------------


def handler_function(template: dict[str, Any], handler: str) -> dict[str, Any]:
    """The ``AWS::Lambda::Function`` resource running ``handler``."""
    found = [
        r
        for r in template["Resources"].values()
        if r["Type"] == "AWS::Lambda::Function" and r["Properties"].get("Handler") == handler
    ]
    assert len(found) == 1, f"expected one function running {handler}, found {len(found)}"
    return found[0]


def role_statements(template: dict[str, Any], handler: str) -> list[dict[str, Any]]:
    """Every statement of the policies attached to ``handler``'s role, with resources resolved to ARNs."""
    role = handler_function(template, handler)["Properties"]["Role"]["Fn::GetAtt"][0]
    return attached_statements(template, role)


def service_role(template: dict[str, Any], service: str) -> str:
    """The logical id of the one role ``service`` (``emr-serverless.amazonaws.com``) may assume."""
    found = [
        logical_id
        for logical_id, r in template["Resources"].items()
        if r["Type"] == "AWS::IAM::Role"
        and any(
            s.get("Principal", {}).get("Service") == service
            for s in r["Properties"]["AssumeRolePolicyDocument"]["Statement"]
        )
    ]
    assert len(found) == 1, f"expected one role for {service}, found {len(found)}"
    return found[0]


def attached_statements(template: dict[str, Any], role: str) -> list[dict[str, Any]]:
    """Every statement of the role ``role`` (a logical id): its inline policies and its managed policies."""
    resources = template["Resources"]
    managed = [ref["Ref"] for ref in resources[role]["Properties"].get("ManagedPolicyArns", [])]
    statements = [
        statement
        for resource in resources.values()
        if resource["Type"] == "AWS::IAM::Policy" and {"Ref": role} in resource["Properties"]["Roles"]
        for statement in resource["Properties"]["PolicyDocument"]["Statement"]
    ] + [
        statement
        for policy in managed
        for statement in resources[policy]["Properties"]["PolicyDocument"]["Statement"]
    ]
    assert statements, f"no policy is attached to the role {role}"
    return [resolve(template, s) for s in statements]


def managed_policy_statements(template: dict[str, Any], name: str) -> list[dict[str, Any]]:
    """The statements of the managed policy called ``name`` (as deployed, the region in it), resolved."""
    found = [
        r["Properties"]["PolicyDocument"]["Statement"]
        for r in template["Resources"].values()
        if r["Type"] == "AWS::IAM::ManagedPolicy"
        and resolve(template, r["Properties"]["ManagedPolicyName"]) == name
    ]
    assert len(found) == 1, f"expected one managed policy called {name}, found {len(found)}"
    return [resolve(template, s) for s in found[0]]


def function_environment(template: dict[str, Any], handler: str) -> dict[str, str]:
    """``handler``'s environment variables as the deployed function would see them."""
    variables = handler_function(template, handler)["Properties"]["Environment"]["Variables"]
    return {name: str(resolve(template, value)) for name, value in variables.items()}


def resolve(template: dict[str, Any], value: Any) -> Any:
    """``value`` with every intrinsic function replaced by what CloudFormation would put there."""
    if isinstance(value, list):
        return [resolve(template, v) for v in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        [(key, argument)] = value.items()
        if key == "Ref":
            return _ref(template, argument)
        if key == "Fn::GetAtt":
            logical_id, attribute = argument if isinstance(argument, list) else argument.split(".", 1)
            return _get_att(template, logical_id, attribute)
        if key == "Fn::Join":
            separator, parts = argument
            return separator.join(str(resolve(template, p)) for p in parts)
        if key == "Fn::Sub":
            text, variables = (argument, {}) if isinstance(argument, str) else argument
            return _sub(template, text, {k: resolve(template, v) for k, v in variables.items()})
        if key.startswith("Fn::") or key == "Condition":
            raise ValueError(f"cannot resolve {key} in {value}: teach tests/infra/deployed_iam.py")
    return {k: resolve(template, v) for k, v in value.items()}


def _ref(template: dict[str, Any], name: str) -> str:
    pseudo = {
        "AWS::AccountId": ACCOUNT_ID,
        "AWS::Region": REGION,
        "AWS::Partition": "aws",
        "AWS::URLSuffix": "amazonaws.com",
    }
    if name in pseudo:
        return pseudo[name]
    resource = template["Resources"][name]
    properties = resource.get("Properties", {})
    kind = resource["Type"]
    if kind == "AWS::DynamoDB::Table":
        return str(resolve(template, properties["TableName"]))
    if kind == "AWS::S3::Bucket":
        return str(resolve(template, properties["BucketName"]))
    if kind == "AWS::SQS::Queue":
        return f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT_ID}/{resolve(template, properties['QueueName'])}"
    if kind == "AWS::Lambda::EventSourceMapping":  # its UUID: moto's mapping for the same function
        function = template["Resources"][properties["FunctionName"]["Ref"]]["Properties"]["FunctionName"]
        mappings = list(lambda_backends[ACCOUNT_ID][REGION].list_event_source_mappings("", function))
        if len(mappings) > 1:
            raise ValueError(f"{len(mappings)} event source mappings of {function} in moto; expected one")
        # A test that created none gets an id no mapping has: the statement then allows nothing.
        return str(mappings[0].uuid) if mappings else f"{name}-not-created-in-moto"
    if kind == "AWS::SecretsManager::SecretTargetAttachment":  # the attached secret's ARN
        return str(resolve(template, properties["SecretId"]))
    if kind == "AWS::SecretsManager::Secret":  # CloudFormation names it: the one secret moto holds
        secrets = [secret.arn for secret in secretsmanager_backends[ACCOUNT_ID][REGION].secrets.values()]
        if len(secrets) > 1:
            raise ValueError(f"{len(secrets)} secrets in moto; expected one")
        return secrets[0] if secrets else f"arn:aws:secretsmanager:{REGION}:{ACCOUNT_ID}:secret:{name}-none"
    raise ValueError(f"cannot resolve Ref to {kind} {name}")


def _get_att(template: dict[str, Any], logical_id: str, attribute: str) -> str:
    resource = template["Resources"][logical_id]
    properties = resource.get("Properties", {})
    kind = resource["Type"]
    if (kind, attribute) in (("AWS::RDS::DBProxy", "Endpoint"), ("AWS::RDS::DBCluster", "Endpoint.Address")):
        return DATABASE_HOST
    if attribute != "Arn":
        raise ValueError(f"cannot resolve {logical_id}.{attribute}")
    if kind == "AWS::DynamoDB::Table":
        return f"arn:aws:dynamodb:{REGION}:{ACCOUNT_ID}:table/{resolve(template, properties['TableName'])}"
    if kind == "AWS::S3::Bucket":
        return f"arn:aws:s3:::{resolve(template, properties['BucketName'])}"
    if kind == "AWS::SQS::Queue":
        return f"arn:aws:sqs:{REGION}:{ACCOUNT_ID}:{resolve(template, properties['QueueName'])}"
    if kind == "AWS::Logs::LogGroup":  # CloudFormation names it; no test calls CloudWatch Logs
        return f"arn:aws:logs:{REGION}:{ACCOUNT_ID}:log-group:{logical_id}:*"
    raise ValueError(f"cannot resolve the ARN of {kind} {logical_id}")


def _sub(template: dict[str, Any], text: str, variables: dict[str, Any]) -> str:
    def one(match: re.Match[str]) -> str:
        name = match[1]
        if name in variables:
            return str(variables[name])
        if "." in name and not name.startswith("AWS::"):
            logical_id, attribute = name.split(".", 1)
            return _get_att(template, logical_id, attribute)
        return _ref(template, name)

    return _SUB_VARIABLE.sub(one, text)


# --- IAM users ------------------------------------------------------------------------------------------


def create_user(iam: Any, name: str, statements: list[dict[str, Any]]) -> dict[str, str]:
    """An IAM user allowed exactly ``statements``; returns its credentials as environment variables."""
    iam.create_user(UserName=name)
    iam.put_user_policy(
        UserName=name,
        PolicyName="role-policy",
        PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": statements}),
    )
    key = iam.create_access_key(UserName=name)["AccessKey"]
    return {"AWS_ACCESS_KEY_ID": key["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"]}


def sender_id(user_id: str) -> str:
    """The ``SenderId`` SQS reports for the IAM user whose moto id is ``user_id``: AWS's form of a user's
    unique id (``AIDA`` and upper-case letters and digits), which moto's ids are not."""
    return "AIDA" + user_id.upper()


# --- enforcement ----------------------------------------------------------------------------------------


@contextlib.contextmanager
def iam_enforced() -> Iterator[None]:
    """Within: moto authorises every request against the caller's IAM policies, as AWS would (see above)."""
    with contextlib.ExitStack() as stack:
        for cls, name, replacement in (
            (DynamoHandler, "_authenticate_and_authorize_normal_action", _authorize_dynamodb),
            (SQSResponse, "_authenticate_and_authorize_normal_action", _authorize_sqs),
            (S3Response, "_authenticate_and_authorize_s3_action", _authorize_s3),
            (LambdaResponse, "_authenticate_and_authorize_normal_action", _authorize_lambda),
            (SecretsManagerResponse, "_authenticate_and_authorize_normal_action", _authorize_secrets),
        ):
            stack.enter_context(_patched(cls, name, replacement))
        stack.enter_context(_patched(IAMPolicyStatement, "is_action_permitted", _statement_permits))
        stack.enter_context(_patched(sqs_models.Message, "__init__", _message_with_sender))
        stack.enter_context(enable_iam_authentication())
        yield


@contextlib.contextmanager
def _patched(cls: type, name: str, replacement: Callable[..., Any]) -> Iterator[None]:
    original = getattr(cls, name)

    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        return replacement(original, self, *args, **kwargs)

    setattr(cls, name, method)
    try:
        yield
    finally:
        setattr(cls, name, original)


# The condition keys of the request being authorised, and the IAM id of the caller sending to SQS.
_CONTEXT: contextvars.ContextVar[dict[str, list[str]] | None] = contextvars.ContextVar(
    "iam_context", default=None
)
_SENDER: contextvars.ContextVar[str | None] = contextvars.ContextVar("sqs_sender", default=None)
_OPERATORS = {
    "StringEquals": lambda value, pattern: value == pattern,
    "StringLike": lambda value, pattern: fnmatch.fnmatchcase(value, pattern),
}


def _statement_permits(
    original: Any, statement: Any, action: str, resource: str = "*", principal: Any = None, *rest: Any
) -> PermissionResult:
    """moto's evaluation of one statement, with its conditions evaluated as IAM does."""
    conditions = statement._statement.get("Condition")
    if not conditions:
        return original(statement, action, resource, principal, *rest)
    result = original(
        IAMPolicyStatement({k: v for k, v in statement._statement.items() if k != "Condition"}),
        action, resource, principal, *rest,
    )  # fmt: skip
    if result is PermissionResult.NEUTRAL or _conditions_hold(conditions, _CONTEXT.get() or {}):
        return result
    return PermissionResult.NEUTRAL if statement._statement["Effect"] == "Allow" else result


def _conditions_hold(conditions: dict[str, dict[str, Any]], context: dict[str, list[str]]) -> bool:
    for operator, keys in conditions.items():
        qualifier, _, name = operator.rpartition(":")
        if name not in _OPERATORS or qualifier not in ("", "ForAllValues", "ForAnyValue"):
            raise AssertionError(f"teach tests/infra/deployed_iam.py the condition operator {operator}")
        for key, expected in keys.items():
            patterns = expected if isinstance(expected, list) else [expected]
            values = context.get(key)
            if values is None and key not in _KNOWN_KEYS:
                raise AssertionError(f"teach tests/infra/deployed_iam.py the condition key {key}")
            values = values or []

            def any_pattern(
                value: str, patterns: list[str] = patterns, match: Any = _OPERATORS[name]
            ) -> bool:
                return any(match(value, p) for p in patterns)

            if qualifier == "ForAllValues":
                holds = all(any_pattern(v) for v in values)  # true for no values, as in IAM
            elif qualifier == "ForAnyValue":
                holds = any(any_pattern(v) for v in values)
            else:
                holds = len(values) == 1 and any_pattern(values[0])
            if not holds:
                return False
    return True


_KNOWN_KEYS = frozenset(
    {"dynamodb:LeadingKeys", "s3:prefix", "iam:PassedToService", "aws:SourceAccount", "aws:SourceArn"}
)


def _message_with_sender(original: Any, message: Any, *args: Any, **kwargs: Any) -> None:
    original(message, *args, **kwargs)
    sender = _SENDER.get()
    if sender is not None:
        message.sender_id = sender


def _authorize(
    handler: Any,
    request_cls: type,
    action: str,
    resource: str,
    context: dict[str, list[str]] | None = None,
) -> None:
    """What moto's ActionAuthenticatorMixin does, for an action and resource of our choosing."""
    path = handler.raw_path
    if urlparse(handler.uri).query:
        path += "?" + urlparse(handler.uri).query
    request = request_cls(
        account_id=handler.current_account,
        method=handler.method,
        path=path,
        data=handler.data,
        body=handler.raw_body,
        headers=handler.headers,
        action=action,
    )
    request.check_signature()
    token = _CONTEXT.set(context or {})
    try:
        request.check_action_permitted(resource)
    finally:
        _CONTEXT.reset(token)
    if request_cls is IAMRequest and action == "SendMessage":
        access_key = request._access_key
        _SENDER.set(sender_id(access_key.backend.get_user(access_key._owner_user_name).id))


_TRANSACT_ITEM_ACTIONS = {
    "Put": "PutItem",
    "Update": "UpdateItem",
    "Delete": "DeleteItem",
    "ConditionCheck": "ConditionCheckItem",
    "Get": "GetItem",
}


def _authorize_dynamodb(_original: Any, handler: Any, resource: str = "*") -> None:
    action, params = handler._get_action(), getattr(handler, "params", {}) or {}
    checks: list[tuple[str, str | None, list[dict[str, Any]]]]  # action, table, items naming keys
    if action in ("TransactWriteItems", "TransactGetItems"):
        checks = [
            (_TRANSACT_ITEM_ACTIONS[kind], request["TableName"], [request.get("Key") or request.get("Item")])
            for item in params["TransactItems"]
            for kind, request in item.items()
        ]
    elif "RequestItems" in params:  # BatchGetItem, BatchWriteItem
        checks = [(action, table, _batch_keys(request)) for table, request in params["RequestItems"].items()]
    elif "TableName" in params:
        index = f"/index/{params['IndexName']}" if params.get("IndexName") else ""
        checks = [(action, params["TableName"] + index, [params.get("Key") or params.get("Item") or {}])]
    else:
        checks = [(action, None, [])]
    for checked_action, table, items in checks:
        arn = f"arn:aws:dynamodb:{handler.region}:{handler.current_account}:table/{table}" if table else "*"
        context = {}
        if table is not None:
            leading = _leading_keys(handler, table.split("/index/")[0], action, params, items)
            if leading is not None:
                context["dynamodb:LeadingKeys"] = leading
        _authorize(handler, IAMRequest, checked_action, arn, context)


def _batch_keys(request: Any) -> list[dict[str, Any]]:
    if isinstance(request, dict):  # BatchGetItem
        return list(request.get("Keys", []))
    return [  # BatchWriteItem
        (write.get("PutRequest") or {}).get("Item") or (write.get("DeleteRequest") or {}).get("Key") or {}
        for write in request
    ]


def _leading_keys(
    handler: Any, table: str, action: str, params: dict[str, Any], items: list[dict[str, Any]]
) -> list[str] | None:
    """The partition key values a request names on ``table`` (None: the request names none, as a Scan)."""
    try:
        hash_key = handler.dynamodb_backend.get_table(table).hash_key_attr
    except Exception:  # a table moto does not have: the request fails on its own
        return None
    if action == "Query":
        names = params.get("ExpressionAttributeNames") or {}
        values = params.get("ExpressionAttributeValues") or {}
        for clause in re.split(r"\s+AND\s+", params.get("KeyConditionExpression", ""), flags=re.IGNORECASE):
            match = re.fullmatch(r"\s*(#?\w+)\s*=\s*(:\w+)\s*", clause)
            if match and names.get(match[1], match[1]) == hash_key:
                return [str(next(iter(values[match[2]].values())))]
        return None
    keys = [str(next(iter(item[hash_key].values()))) for item in items if item and hash_key in item]
    return keys or None


# SQS authorises a batch request by the permission of its single-message action.
_SQS_BATCH_ACTIONS = {
    "SendMessageBatch": "SendMessage",
    "DeleteMessageBatch": "DeleteMessage",
    "ChangeMessageVisibilityBatch": "ChangeMessageVisibility",
}


def _authorize_sqs(_original: Any, handler: Any, resource: str = "*") -> None:
    action = handler._get_action()
    name = handler._get_param("QueueName")
    if action == "GetQueueUrl" and name:
        try:
            resource = str(handler.sqs_backend.get_queue(name).queue_arn)
        except QueueDoesNotExist:
            resource = "*"
    _authorize(handler, IAMRequest, _SQS_BATCH_ACTIONS.get(action, action), resource)


def _authorize_lambda(_original: Any, handler: Any, resource: str = "*") -> None:
    action = handler._get_action()
    if action == "UpdateEventSourceMapping":
        uuid = handler.path.rstrip("/").split("/")[-1]
        resource = f"arn:aws:lambda:{handler.region}:{handler.current_account}:event-source-mapping:{uuid}"
    if handler.method == "GET":
        # moto signs a GET's query parameters again as a form body; botocore signed an empty body.
        query = urlparse(handler.uri).query
        request = IAMRequest(
            account_id=handler.current_account, method="GET",
            path=handler.raw_path + (f"?{query}" if query else ""), data={}, body=b"",
            headers=handler.headers, action=action,
        )  # fmt: skip
        request.check_signature()
        request.check_action_permitted(resource)
        return
    _authorize(handler, IAMRequest, action, resource)


def _authorize_secrets(_original: Any, handler: Any, resource: str = "*") -> None:
    secret_id = handler._get_param("SecretId")
    if secret_id:  # named by name or ARN: AWS checks the secret's full ARN
        secret = handler.backend.secrets.get(secret_id)
        resource = secret.arn if secret is not None else secret_id
    _authorize(handler, IAMRequest, handler._get_action(), resource)


def _authorize_s3(
    original: Any, handler: Any, bucket_name: str | None = None, key_name: str | None = None
) -> None:
    action = handler.data.get("Action")
    if action == "ListBucket" and bucket_name:
        prefix = handler.querystring.get("prefix")
        context = {"s3:prefix": [prefix[0]]} if prefix else {}
        _authorize(handler, S3IAMRequest, "ListBucket", f"arn:aws:s3:::{bucket_name}", context)
        return
    if action == "DeleteObject" and key_name is None and bucket_name and handler.is_delete_keys():
        for key in ElementTree.fromstring(handler.body).iterfind("{*}Object/{*}Key"):
            _authorize(handler, S3IAMRequest, "DeleteObject", f"arn:aws:s3:::{bucket_name}/{key.text}")
        return
    original(handler, bucket_name=bucket_name, key_name=key_name)
    if action == "PutObject" and key_name and handler.headers.get("x-amz-tagging"):
        _authorize(handler, S3IAMRequest, "PutObjectTagging", f"arn:aws:s3:::{bucket_name}/{key_name}")
