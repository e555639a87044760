"""The codecs leave a host process's garbage collector as they found it; the snapshot codec may freeze it.

``gc.freeze`` freezes everything a process holds, so the library never calls it on its own: a Spark driver
or a user's application that loads a state keeps its collector untouched. A Lambda container (a process of
ours) opts in through :func:`freeze_loaded_states`.
"""

from __future__ import annotations

import gc
import json
import zlib
from collections.abc import Iterator
from typing import Any

import pytest

from lambdas import _runtime
from statestore.codec import parquet
from statestore.codec.parquet import freeze_loaded_states, state_from_parquet, state_to_parquet
from statestore.codec.transaction_json import (
    decode_entry,
    decode_transaction,
    encode_transaction,
    transaction_to_json,
)
from statestore.engine.requests import RequestEnvelope
from statestore.errors import CodecError
from statestore.model.files import FileReference
from statestore.state.cycle_collector import MANY_OBJECTS_BODY_BYTES
from statestore.store.memory import InMemoryBlobStore
from statestore.store.ports import LogEntry
from statestore.transactions import AddFiles, BatchItem, TransactionBatch
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


def _bulk_add_files(count: int) -> AddFiles:
    return AddFiles(
        tuple(FileReference(f"tables/t/data/p/{i:06d}.parquet", "root", 1 + i) for i in range(count))
    )


class _Collections:
    """Counts the cycle collector's runs while it is installed."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        self.count += phase == "start"

    def __enter__(self) -> _Collections:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self)


def test_a_big_body_is_written_and_read_with_the_collector_paused_and_put_back_as_it_was() -> None:
    transaction = _bulk_add_files(20_000)  # an object per reference each way: ~30 collections unpaused
    envelope = RequestEnvelope("r", "t", "AddFiles", body_key="k")
    for enabled in (True, False):
        gc.enable() if enabled else gc.disable()
        with _Collections() as collections:
            body, compressed = encode_transaction(transaction)
        # At most the one a paused collector owes when it is switched back on, and none if it was off.
        assert collections.count <= enabled
        with _Collections() as collections:
            decoded = decode_transaction(body, compressed)
        assert collections.count <= enabled
        with _Collections() as collections:
            from_the_bucket = envelope.transaction(InMemoryBlobStore(), zlib.decompress(body))
        assert collections.count <= enabled
        assert decoded == from_the_bucket == transaction
        assert gc.isenabled() is enabled


def test_a_big_body_that_is_not_a_transaction_is_refused_and_the_collector_is_back_on() -> None:
    gc.enable()
    body, compressed = encode_transaction(_bulk_add_files(5_000))
    broken = zlib.decompress(body)[:-2] if compressed else body[:-2]
    assert len(broken) >= MANY_OBJECTS_BODY_BYTES
    with pytest.raises(CodecError, match="not valid JSON"):
        decode_transaction(broken, compressed=False)
    with pytest.raises(CodecError, match="is not JSON"):
        RequestEnvelope("r", "t", "AddFiles", body_key="k").transaction(InMemoryBlobStore(), broken)
    assert gc.isenabled()


def test_a_log_entry_whose_bulk_body_is_attached_is_read_with_the_collector_paused() -> None:
    # A group commit's entry holds a bulk request by its key: the entry is small, its attachment is not.
    bulk, key = _bulk_add_files(20_000), "tables/t/log/requests/r2.json"
    entry_body, compressed = encode_transaction(TransactionBatch((BatchItem("r2", bulk, key),)))
    attached = json.dumps(transaction_to_json(bulk)).encode()
    assert len(entry_body) < MANY_OBJECTS_BODY_BYTES <= len(attached)
    entry = LogEntry(7, 1_700_000_000_000, "Batch", entry_body, compressed, "w", ((key, attached),))
    gc.enable()
    with _Collections() as collections:
        decoded = decode_entry(entry)
    assert collections.count <= 1  # at most the one owed when the collector is switched back on
    assert isinstance(decoded, TransactionBatch) and decoded.items[0].transaction == bulk
    assert gc.isenabled()
