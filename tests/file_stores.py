"""The file-reference stores every row-files suite runs against: one fixture, ``file_store``, to import.

The in-memory twin and PostgreSQL (a database of the test's own on the session's throwaway server, so
suites may reuse table ids).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from statestore.store.memory_files import InMemoryFileReferenceStore
from statestore.store.ports import FileReferenceStore


@pytest.fixture(params=["memory", "postgres"])
def file_store(request: pytest.FixtureRequest) -> Iterator[FileReferenceStore]:
    """A fresh, empty file-reference store."""
    if request.param == "memory":
        yield InMemoryFileReferenceStore()
        return
    from statestore.adapters.postgres import PostgresFileReferenceStore

    store = PostgresFileReferenceStore.connect(request.getfixturevalue("fresh_postgres_conninfo"))
    try:
        yield store
    finally:
        store.close()
