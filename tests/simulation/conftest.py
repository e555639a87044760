"""The simulation schedules its actors itself, one at a time, interleaving them at port calls: a load's
overlapped reads run in turn on the acting thread here, so its RNG and its actors stay its own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from statestore.engine import overlap


@pytest.fixture(autouse=True)
def loads_read_in_turn(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(overlap, "both", overlap.in_turn)
    yield
