"""The snapshot codec leaves a host process's garbage collector as it found it, unless the process opts in.

``gc.freeze`` freezes everything a process holds, so the library never calls it on its own: a Spark driver
or a user's application that loads a state keeps its collector untouched. A Lambda container (a process of
ours) opts in through :func:`freeze_loaded_states`.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest

from lambdas import _runtime
from statestore.codec import parquet
from statestore.codec.parquet import freeze_loaded_states, state_from_parquet, state_to_parquet
from tests.builders import LONG_SCHEMA, new_state


@pytest.fixture(autouse=True)
def _restore_collector() -> Iterator[None]:
    was_enabled, opted_in = gc.isenabled(), parquet._freeze_loaded_states
    yield
    freeze_loaded_states(opted_in)
    gc.unfreeze()
    if was_enabled:
        gc.enable()
    else:
        gc.disable()


def _load() -> None:
    written = state_to_parquet(new_state(LONG_SCHEMA, [0, 10, 20]))
    state_from_parquet(LONG_SCHEMA, *written, transaction_number=1)


def test_a_library_load_freezes_nothing_and_puts_the_collector_back_as_it_was() -> None:
    freeze_loaded_states(False)
    gc.unfreeze()
    for enabled in (True, False):
        gc.enable() if enabled else gc.disable()
        _load()
        assert gc.get_freeze_count() == 0
        assert gc.isenabled() is enabled


def test_a_process_that_opts_in_freezes_what_it_loaded() -> None:
    gc.unfreeze()
    gc.enable()
    freeze_loaded_states()
    _load()
    assert gc.get_freeze_count() > 0
    assert gc.isenabled()


def test_a_lambda_container_opts_in_when_it_builds_its_runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    freeze_loaded_states(False)
    built: list[Any] = []

    def for_aws(cls: type, names: Any) -> str:
        built.append(names)
        return "rt"

    monkeypatch.setattr(_runtime.Runtime, "for_aws", classmethod(for_aws))
    monkeypatch.setattr(_runtime.ResourceNames, "from_environment", classmethod(lambda cls: "names"))
    monkeypatch.setattr(_runtime, "_runtime", None)
    assert _runtime.runtime() == "rt"
    assert built == ["names"]
    assert parquet._freeze_loaded_states is True
