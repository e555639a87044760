"""The file-reference stores every row-files suite runs against: one fixture, ``file_store``, to import.

Only the in-memory twin here; a real store (PostgreSQL) joins by adding a parameter that yields one.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from statestore.memory import InMemoryFileReferenceStore
from statestore.ports import FileReferenceStore


@pytest.fixture(params=["memory"])
def file_store(request: pytest.FixtureRequest) -> Iterator[FileReferenceStore]:
    """A fresh, empty file-reference store."""
    if request.param == "memory":
        yield InMemoryFileReferenceStore()
    else:  # pragma: no cover - a kind added later must say how it is made
        raise AssertionError(f"no file store of kind {request.param!r}")
