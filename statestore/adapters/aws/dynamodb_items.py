"""DynamoDB's items read without botocore's per-attribute parse.

botocore turns a response into Python by walking the service model for every value: each attribute of
each item is a structure of ten possible members, so a Query of 1,000 log entries spends most of its
time there rather than on the wire (boto/boto3#2928). The JSON DynamoDB sends is already what the low-level
client returns, but for binary values (base64 on the wire, ``bytes`` once parsed). So for the reads that
return many items, a ``before-parse`` handler (botocore's event, registered on one client) takes the items
out of the response body, converts them here, and hands them back through the parser's
``customized_response_dict``; botocore parses the rest (counts, ``LastEvaluatedKey``, consumed capacity)
as usual. Error responses are left to botocore whole.
"""

from __future__ import annotations

import base64
import json
from typing import Any


def whole_number(item: dict[str, Any], attribute: str) -> int | None:
    """The non-negative whole number ``item``'s ``attribute`` holds (an ``N``), None when it has none;
    raises ValueError naming the attribute and its value when it holds something else."""
    value = item.get(attribute)
    if value is None:
        return None
    try:
        number = int(value["N"])
    except (KeyError, TypeError, ValueError):
        number = -1
    if number < 0:
        raise ValueError(f"its attribute {attribute!r} is not a whole number: {value!r}")
    return number


# The operations whose responses carry many items, and the member that holds them.
ITEM_MEMBERS = {"Query": "Items", "Scan": "Items", "GetItem": "Item", "BatchGetItem": "Responses"}


def register(client: Any) -> None:
    """Read the items of ``client``'s (a DynamoDB client) Query, Scan, GetItem and BatchGetItem responses
    without botocore's model walk; the client returns the same values as before."""
    for operation in ITEM_MEMBERS:
        client.meta.events.register(f"before-parse.dynamodb.{operation}", take_items)


def take_items(
    operation_model: Any, response_dict: dict[str, Any], customized_response_dict: dict[str, Any], **_: Any
) -> None:
    """botocore's ``before-parse`` event: move the operation's items from the body of a successful
    response into ``customized_response_dict``, converted; leave an error response whole."""
    if response_dict.get("status_code", 500) >= 300 or not response_dict.get("body"):
        return
    member = ITEM_MEMBERS.get(operation_model.name)
    body = json.loads(response_dict["body"])
    if member is None or not isinstance(body, dict) or member not in body:
        return
    found = body.pop(member)
    if member == "Responses":
        customized_response_dict[member] = {
            table: [item_value(item) for item in items] for table, items in found.items()
        }
    elif member == "Items":
        customized_response_dict[member] = [item_value(item) for item in found]
    else:
        customized_response_dict[member] = item_value(found)
    response_dict["body"] = json.dumps(body).encode("utf-8")


def item_value(item: dict[str, Any]) -> dict[str, Any]:
    """An item (attribute name -> wire attribute value) as botocore parses it."""
    return {name: attribute_value(value) for name, value in item.items()}


def attribute_value(value: dict[str, Any]) -> dict[str, Any]:
    """One wire attribute value as botocore parses it: binaries decoded, lists and maps recursed into,
    every other type (strings, numbers as strings, booleans, null, string and number sets) as sent."""
    if "B" in value:
        return {"B": base64.b64decode(value["B"])}
    if "L" in value:
        return {"L": [attribute_value(v) for v in value["L"]]}
    if "M" in value:
        return {"M": item_value(value["M"])}
    if "BS" in value:
        return {"BS": [base64.b64decode(v) for v in value["BS"]]}
    return value
