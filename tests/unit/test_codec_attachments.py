"""Batch items whose transaction is an attachment of the log entry (a request body kept in the bucket)."""

from __future__ import annotations

import json

import pytest

from statestore.codec.transaction_json import decode_entry, encode_transaction, transaction_to_json
from statestore.errors import UnreadableLogEntryError
from statestore.store.ports import LogEntry
from statestore.transactions import AddFiles, BatchItem, ClearFiles, TransactionBatch
from tests.builders import ref

KEY = "tables/t/log/requests/r2-abc.json"
BIG = AddFiles(tuple(ref(f"tables/t/data/{i}.parquet", "root") for i in range(50)))


def request_body(txn: AddFiles | ClearFiles | TransactionBatch) -> bytes:
    """A request body as ``CommitSender`` writes it."""
    return json.dumps(transaction_to_json(txn)).encode("utf-8")


def entry_of(batch: TransactionBatch, attachments: dict[str, bytes]) -> LogEntry:
    body, compressed = encode_transaction(batch)
    return LogEntry(7, 1_700_000_000_000, "Batch", body, compressed, "w", tuple(attachments.items()))


def test_a_batch_item_kept_aside_is_written_as_its_key_and_read_back_from_the_attachment() -> None:
    batch = TransactionBatch(
        (BatchItem("r1", ClearFiles()), BatchItem("r2", BIG, KEY), BatchItem("r3", ClearFiles()))
    )
    body, compressed = encode_transaction(batch)

    assert not compressed and len(body) < 300  # the entry holds the key, not the 50 references
    assert "tables/t/data/" not in body.decode()
    decoded = decode_entry(entry_of(batch, {KEY: request_body(BIG)}))

    assert isinstance(decoded, TransactionBatch)
    assert decoded.request_ids == ("r1", "r2", "r3")
    assert [item.transaction for item in decoded.items] == [ClearFiles(), BIG, ClearFiles()]
    assert all(item.body_key is None for item in decoded.items)  # the same batch however it was held


def test_an_entry_without_the_attachment_its_item_names_is_rejected_naming_the_key() -> None:
    batch = TransactionBatch((BatchItem("r2", BIG, KEY),))

    with pytest.raises(UnreadableLogEntryError, match=f"request 'r2'.*{KEY}.* is not attached"):
        decode_entry(entry_of(batch, {}))


@pytest.mark.parametrize(
    ("attachment", "message"),
    [
        (b"not json", "is not JSON"),
        (request_body(ClearFiles()), "is said to be a 'AddFiles' but its body .* is a 'ClearFiles'"),
        (request_body(TransactionBatch((BatchItem("x", ClearFiles()),))), "one transaction, not a batch"),
        (json.dumps({"version": 1, "type": "AddFiles"}).encode(), "missing field 'references'"),
    ],
    ids=["not json", "other type", "a batch", "malformed"],
)
def test_a_malformed_attachment_is_rejected_naming_what_is_wrong(attachment: bytes, message: str) -> None:
    batch = TransactionBatch((BatchItem("r2", BIG, KEY),))

    with pytest.raises(UnreadableLogEntryError, match=message):
        decode_entry(entry_of(batch, {KEY: attachment}))


def test_an_item_with_both_a_key_and_a_transaction_is_rejected() -> None:
    data = transaction_to_json(TransactionBatch((BatchItem("r2", BIG, KEY),)))
    data["items"][0]["transaction"] = transaction_to_json(ClearFiles())
    body = json.dumps(data).encode()

    with pytest.raises(UnreadableLogEntryError, match=r"unexpected field\(s\) \['transaction'\]"):
        decode_entry(LogEntry(7, 1, "Batch", body, False, "w", ((KEY, request_body(BIG)),)))
