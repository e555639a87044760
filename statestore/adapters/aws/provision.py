"""Create an instance's DynamoDB tables and bucket from :mod:`statestore.instance`, for the embedded mode and
tests (a deployment gets them from the CDK stacks instead). Idempotent: what exists is left alone."""

from __future__ import annotations

from typing import Any

from statestore import instance
from statestore.adapters.aws.clients import AwsCaller, Translate
from statestore.errors import StateStoreError
from statestore.instance import KeySchema, ResourceNames


def provision(resources_: ResourceNames, dynamodb_client: Any, s3_client: Any) -> None:
    """Create every table (on-demand billing, TTL on the commit status table) and the bucket, if absent."""
    call = AwsCaller()
    existing = set(_table_names(call, dynamodb_client))
    created = []
    for table_name, keys in resources_.table_key_schemas.items():
        if table_name not in existing:
            try:
                call(
                    f"create DynamoDB table {table_name!r}",
                    dynamodb_client.create_table,
                    _exists_if("ResourceInUseException"),
                    **_create_table_request(table_name, keys),
                )
            except _Exists:
                pass  # created meanwhile by someone else
            created.append(table_name)
    waiter = dynamodb_client.get_waiter("table_exists")
    for table_name in created:
        call(f"wait for {table_name!r}", waiter.wait, TableName=table_name, WaiterConfig={"Delay": 1})
    if resources_.commit_status_table in created:
        call(
            f"enable TTL on {resources_.commit_status_table!r}",
            dynamodb_client.update_time_to_live,
            TableName=resources_.commit_status_table,
            TimeToLiveSpecification={"Enabled": True, "AttributeName": instance.EXPIRES_AT},
        )
    _create_bucket(call, s3_client, resources_.bucket)


def _table_names(call: AwsCaller, dynamodb_client: Any) -> list[str]:
    names: list[str] = []
    kwargs: dict[str, Any] = {}
    while True:
        response = call("list DynamoDB tables", dynamodb_client.list_tables, **kwargs)
        names.extend(response.get("TableNames", []))
        if not response.get("LastEvaluatedTableName"):
            return names
        kwargs["ExclusiveStartTableName"] = response["LastEvaluatedTableName"]


def _create_table_request(table_name: str, keys: KeySchema) -> dict[str, Any]:
    key_schema = [{"AttributeName": keys.hash_key[0], "KeyType": "HASH"}]
    attributes = [{"AttributeName": keys.hash_key[0], "AttributeType": keys.hash_key[1]}]
    if keys.range_key is not None:
        key_schema.append({"AttributeName": keys.range_key[0], "KeyType": "RANGE"})
        attributes.append({"AttributeName": keys.range_key[0], "AttributeType": keys.range_key[1]})
    return {
        "TableName": table_name,
        "KeySchema": key_schema,
        "AttributeDefinitions": attributes,
        "BillingMode": "PAY_PER_REQUEST",
    }


def _create_bucket(call: AwsCaller, s3_client: Any, bucket: str) -> None:
    region = s3_client.meta.region_name
    kwargs: dict[str, Any] = {"Bucket": bucket}
    if region and region != "us-east-1":
        kwargs["CreateBucketConfiguration"] = {"LocationConstraint": region}

    try:
        call(
            f"create bucket {bucket!r}",
            s3_client.create_bucket,
            _exists_if("BucketAlreadyOwnedByYou"),
            **kwargs,
        )
    except _Exists:
        pass


class _Exists(StateStoreError):
    """The resource is already there: fine for an idempotent provision."""


def _exists_if(expected_code: str) -> Translate:
    return lambda code, _error: _Exists() if code == expected_code else None
