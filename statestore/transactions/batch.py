"""The committer's group commit: several requests written as one log entry."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar

from statestore.errors import InvalidTransactionError
from statestore.state.table_state import TableState
from statestore.transactions.base import Transaction


@dataclass(frozen=True)
class BatchItem:
    """One commit request inside a :class:`TransactionBatch`.

    ``body_key`` names the object (an attachment of the log entry) that holds the transaction's JSON when
    the entry points at it instead of holding it: a request whose body was in the bucket.
    """

    request_id: str
    transaction: Transaction
    body_key: str | None = None


@dataclass(frozen=True)
class TransactionBatch(Transaction):
    """Several independently validated requests written as one log entry (the committer's group commit).

    Each item was validated against the state as changed by the items before it, so applying them in order
    is valid. ``validate`` checks exactly that, applying each item to the state and undoing them all after
    (the state is left as it was, whatever happens).
    """

    TYPE: ClassVar[str] = "Batch"
    items: tuple[BatchItem, ...]

    def most_added(self) -> tuple[int, int]:
        added = [item.transaction.most_added() for item in self.items]
        return sum(references for references, _ in added), sum(partitions for _, partitions in added)

    def validate(self, state: TableState) -> None:
        if not self.items:
            raise InvalidTransactionError("a batch needs at least one request")
        for item in self.items:
            if not isinstance(item.request_id, str) or not item.request_id:
                raise InvalidTransactionError(
                    f"a request id must be a non-empty string, got {item.request_id!r}"
                )
        if len({item.request_id for item in self.items}) != len(self.items):
            raise InvalidTransactionError("a batch lists a request id more than once")
        # Tried on the state itself and undone after, so validating costs what the batch changes.
        mark = state.begin_changes()
        try:
            for item in self.items:
                if isinstance(item.transaction, TransactionBatch):
                    raise InvalidTransactionError("batches cannot be nested")
                item.transaction.validate(state)
                item.transaction.apply(state, 0)
        finally:
            state.undo_changes(mark)

    def apply(self, state: TableState, update_time: int) -> None:
        for item in self.items:
            item.transaction.apply(state, update_time)

    @property
    def request_ids(self) -> tuple[str, ...]:
        return tuple(item.request_id for item in self.items)


def request_ids_of(transaction: Transaction) -> Iterable[str]:
    """The commit request ids a log entry's transaction carries (only batches carry any)."""
    return transaction.request_ids if isinstance(transaction, TransactionBatch) else ()
