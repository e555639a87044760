"""The one parametrised fixture the file-reference store suites run on: the in-memory twin and PostgreSQL."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Iterator

import pytest

from statestore.store.memory_files import InMemoryFileReferenceStore
from statestore.store.ports import FileReferenceStore
from tests.builders import data_key

DataKey = Callable[[str], str]


class Clock:
    """A clock the test moves: the time a store records request ids at."""

    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture(params=["memory", "postgres"])
def file_store(request: pytest.FixtureRequest, clock: Clock) -> Iterator[FileReferenceStore]:
    """Each FileReferenceStore, recording request ids at ``clock``'s time."""
    if request.param == "memory":
        yield InMemoryFileReferenceStore(clock=clock)
        return
    from statestore.adapters.postgres import PostgresFileReferenceStore

    conninfo = request.getfixturevalue("postgres_conninfo")
    store = PostgresFileReferenceStore.connect(conninfo, max_connections=4, ensure_schema=False, clock=clock)
    try:
        yield store
    finally:
        store.close()


@pytest.fixture
def table_id() -> str:
    """A table id no other test uses (the PostgreSQL database is shared by the session)."""
    return f"table-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def key(table_id: str) -> DataKey:
    """``key(name)``: the key of data file ``name`` under ``table_id``'s data prefix, as a store takes it."""
    return functools.partial(data_key, table_id)
