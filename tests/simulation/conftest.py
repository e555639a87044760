"""The simulation schedules its actors itself, one at a time, interleaving them at port calls: a load's
overlapped reads run in turn on the acting thread here, so its RNG and its actors stay its own. Its tables
are tiny: a guard's fixed overhead is not counted, so an evicted table's guard is smaller than its state
and kept (see ``world.GUARD_BUDGET_BYTES``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from statestore.engine import overlap
from statestore.state import file_guard


@pytest.fixture(autouse=True)
def loads_read_in_turn(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(overlap, "both", overlap.in_turn)
    monkeypatch.setattr(file_guard, "GUARD_OVERHEAD_BYTES", 0)
    yield
