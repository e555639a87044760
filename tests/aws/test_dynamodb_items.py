"""DynamoDB's items read without botocore's model walk (``statestore.adapters.aws.dynamodb_items``): the
client returns exactly what botocore's own parse gives, for every attribute type, nested or not."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import boto3
import pytest
from botocore.parsers import create_parser
from hypothesis import given
from hypothesis import strategies as st
from moto import mock_aws

from statestore.adapters.aws import dynamodb_items
from statestore.adapters.aws.clients import make_client


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


names = st.text(min_size=1, max_size=4)
scalars = st.one_of(
    st.builds(lambda s: {"S": s}, st.text(max_size=6)),
    st.builds(lambda n: {"N": str(n)}, st.integers()),
    st.builds(lambda b: {"B": b64(b)}, st.binary(max_size=8)),
    st.builds(lambda b: {"BOOL": b}, st.booleans()),
    st.just({"NULL": True}),
    st.builds(lambda s: {"SS": sorted(s)}, st.sets(st.text(max_size=3), min_size=1, max_size=3)),
    st.builds(lambda s: {"NS": [str(n) for n in sorted(s)]}, st.sets(st.integers(), min_size=1, max_size=3)),
    st.builds(
        lambda s: {"BS": [b64(b) for b in sorted(s)]}, st.sets(st.binary(max_size=4), min_size=1, max_size=3)
    ),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.builds(lambda v: {"L": v}, st.lists(inner, max_size=3)),
        st.builds(lambda v: {"M": v}, st.dictionaries(names, inner, max_size=3)),
    ),
    max_leaves=8,
)
items = st.dictionaries(names, values, min_size=1, max_size=5)


def bodies() -> st.SearchStrategy[tuple[str, dict[str, Any]]]:
    key = st.dictionaries(st.sampled_from(["t", "n"]), scalars, min_size=1, max_size=2)
    return st.one_of(
        st.tuples(
            st.sampled_from(["Query", "Scan"]),
            st.fixed_dictionaries(
                {"Items": st.lists(items, max_size=4), "Count": st.integers(0, 4)},
                optional={"LastEvaluatedKey": key},
            ),
        ),
        st.tuples(st.just("GetItem"), st.one_of(st.just({}), st.fixed_dictionaries({"Item": items}))),
        st.tuples(
            st.just("BatchGetItem"),
            st.fixed_dictionaries(
                {"Responses": st.dictionaries(st.sampled_from(["a", "b"]), st.lists(items, max_size=3))},
                optional={"UnprocessedKeys": st.just({})},
            ),
        ),
    )


SERVICE = boto3.session.Session().client("dynamodb", region_name="eu-west-2").meta.service_model


def parse(operation: str, response: dict[str, Any], *, fast: bool) -> dict[str, Any]:
    """The client's parse of ``response`` as botocore's endpoint does it, with or without the handler."""
    model = SERVICE.operation_model(operation)
    response = copy.deepcopy(response)
    customized: dict[str, Any] = {}
    if fast:
        dynamodb_items.take_items(
            operation_model=model, response_dict=response, customized_response_dict=customized
        )
    parsed = create_parser("json").parse(response, model.output_shape)
    parsed.update(customized)
    return parsed


def response(body: dict[str, Any], status: int = 200) -> dict[str, Any]:
    return {"status_code": status, "headers": {"x-amzn-requestid": "r"}, "body": json.dumps(body).encode()}


@given(bodies())
def test_the_items_read_past_botocores_parse_equal_what_botocore_parses(
    drawn: tuple[str, dict[str, Any]],
) -> None:
    operation, body = drawn
    assert parse(operation, response(body), fast=True) == parse(operation, response(body), fast=False)


def test_an_error_response_is_left_to_botocore() -> None:
    error = response({"__type": "com.amazonaws.dynamodb#ResourceNotFoundException", "message": "gone"}, 400)
    untouched = copy.deepcopy(error)
    dynamodb_items.take_items(
        operation_model=SERVICE.operation_model("Query"), response_dict=error, customized_response_dict={}
    )
    assert error == untouched


@pytest.fixture
def table() -> Any:
    with mock_aws():
        client = make_client("dynamodb", region="eu-west-2")
        client.create_table(
            TableName="t",
            KeySchema=[{"AttributeName": "k", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "k", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        yield client


def test_a_client_reads_binary_values_nested_or_not_as_bytes(table: Any) -> None:
    item = {
        "k": {"S": "a"},
        "b": {"B": b"\x00\xffbody"},
        "bs": {"BS": [b"x", b"y"]},
        "l": {"L": [{"B": b"in list"}, {"N": "7"}]},
        "m": {"M": {"inner": {"B": b"in map"}, "flag": {"BOOL": True}}},
    }
    table.put_item(TableName="t", Item=item)

    got = table.get_item(TableName="t", Key={"k": {"S": "a"}})["Item"]
    queried = table.query(
        TableName="t", KeyConditionExpression="k = :k", ExpressionAttributeValues={":k": {"S": "a"}}
    )["Items"]
    batch = table.batch_get_item(RequestItems={"t": {"Keys": [{"k": {"S": "a"}}]}})["Responses"]["t"]

    for read in (got, queried[0], batch[0]):
        assert {**read, "bs": {"BS": sorted(read["bs"]["BS"])}} == item
