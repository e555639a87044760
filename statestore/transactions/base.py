"""The base of every transaction: validate against a state, then apply to it."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from statestore.errors import TransactionValidationError
from statestore.state.table_state import TableState


class Transaction(ABC):
    """A change to a table's state."""

    TYPE: ClassVar[str]

    @abstractmethod
    def validate(self, state: TableState) -> None:
        """Raise a TransactionValidationError if this cannot be applied to ``state``. Never changes it."""

    @abstractmethod
    def apply(self, state: TableState, update_time: int) -> None:
        """Apply to ``state`` (which ``validate`` accepted), stamping changes with ``update_time``."""

    def most_added(self) -> tuple[int, int]:
        """At most how many file references and partitions applying this adds to a state: what a reader
        replaying the log makes room for before applying it. (0, 0) where it only changes or removes."""
        return 0, 0

    def rejected_parts(self, state: TableState) -> list[tuple[str, TransactionValidationError]]:
        """Parts that ``apply`` will skip on ``state`` (only transactions with independent parts have any)."""
        return []
