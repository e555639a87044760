"""Paged Query and Scan reads (``clients.pages``): every page in order, each asked for from the last key."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import EndpointConnectionError

from statestore.adapters.aws.clients import AwsCaller, pages
from statestore.errors import StateStoreError


class PagedTable:
    """A Query answering ``items`` in pages of the request's ``Limit`` (default 2); records each request."""

    def __init__(self, items: list[int]) -> None:
        self.items = items
        self.requests: list[dict[str, Any]] = []

    def query(self, **request: Any) -> dict[str, Any]:
        self.requests.append(request)
        start = request.get("ExclusiveStartKey", {"at": -1})["at"] + 1
        page = self.items[start : start + request.get("Limit", 2)]
        response: dict[str, Any] = {"Items": page}
        if start + len(page) < len(self.items):
            response["LastEvaluatedKey"] = {"at": start + len(page) - 1}
        return response


def test_every_page_is_read_in_order_each_from_the_last_ones_key() -> None:
    table = PagedTable(list(range(7)))
    request = {"TableName": "t"}

    read = [item for r in pages(AwsCaller(), "read t", table.query, request) for item in r["Items"]]

    assert read == list(range(7))
    assert [r.get("ExclusiveStartKey") for r in table.requests] == [None, {"at": 1}, {"at": 3}, {"at": 5}]
    assert request == {"TableName": "t"}  # the caller's request is not changed


def test_page_limits_are_taken_in_turn_the_last_one_repeated() -> None:
    table = PagedTable(list(range(10)))

    responses = list(pages(AwsCaller(), "read t", table.query, {"TableName": "t"}, limits=(1, 4)))

    assert [len(r["Items"]) for r in responses] == [1, 4, 4, 1]
    assert [r["Limit"] for r in table.requests] == [1, 4, 4, 4]


def test_an_empty_read_is_one_page_and_a_failure_is_translated() -> None:
    table = PagedTable([])
    assert [r["Items"] for r in pages(AwsCaller(), "read t", table.query, {})] == [[]]

    def failing(**_: Any) -> dict[str, Any]:
        raise EndpointConnectionError(endpoint_url="http://x")

    with pytest.raises(StateStoreError, match="read t"):
        list(pages(AwsCaller(), "read t", failing, {}))
