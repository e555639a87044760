"""Wire and storage formats: versioned JSON for transactions, Parquet for whole-state snapshots."""

from statestore.codec.transaction_json import (
    decode_entry,
    decode_transaction,
    encode_transaction,
    transaction_from_json,
    transaction_to_json,
)

__all__ = [
    "decode_entry",
    "decode_transaction",
    "encode_transaction",
    "transaction_from_json",
    "transaction_to_json",
]
