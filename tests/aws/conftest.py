"""Fixtures for the AWS adapter tests: ``ports`` over every implementation, ``aws`` over the AWS ones, and
``view_store``, the queryable view's store over every implementation."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from statestore.adapters.aws.backend import AwsBackend
from statestore.store.memory_view import InMemoryQueryableViewStore
from statestore.store.view_ports import QueryableViewStore
from tests.aws.backends import Ports, open_ports
from tests.fixtures.aws_servers import *  # noqa: F403  (session fixtures: moto_server, dynamodb_local)

DYNAMODB_LOCAL = pytest.param("dynamodb_local", marks=pytest.mark.dynamodb_local)


@pytest.fixture(params=["memory", "moto", DYNAMODB_LOCAL])
def ports(request: pytest.FixtureRequest) -> Iterator[Ports]:
    """The same ports, in memory, on moto in-process and on DynamoDB Local (+ S3 on a moto server)."""
    with open_ports(request.param, request) as opened:
        yield opened


@pytest.fixture(params=["moto", DYNAMODB_LOCAL])
def aws(request: pytest.FixtureRequest) -> Iterator[AwsBackend]:
    """The AWS adapters alone (for behaviour the in-memory ports have no counterpart of)."""
    with open_ports(request.param, request) as opened:
        assert opened.backend is not None
        yield opened.backend


@pytest.fixture(params=["memory", "moto", DYNAMODB_LOCAL])
def view_store(request: pytest.FixtureRequest) -> Iterator[QueryableViewStore]:
    if request.param == "memory":
        yield InMemoryQueryableViewStore()
        return
    with open_ports(request.param, request) as opened:
        assert opened.backend is not None
        yield opened.backend.queryable_view
