"""Checks of the commit path's invariants (DESIGN.md, "Invariants"), shared by the regression tests and the
fault-injection simulation. Each raises AssertionError naming the entry or request that breaks it."""

from __future__ import annotations

from collections.abc import Mapping

from statestore.codec.transaction_json import decode_entry
from statestore.errors import TransactionValidationError
from statestore.model.schema import Schema
from statestore.state.table_state import TableState
from statestore.store.ports import CommitOutcome, CommitStatus, TransactionLogStore
from statestore.transactions import request_ids_of


def replay_checking_each_entry(log: TransactionLogStore, table_id: str, schema: Schema) -> TableState:
    """The state from replaying the whole log, checking on the way that every entry is valid against
    exactly the state after the entry before it (invariant 1) and that numbers have no gaps (invariant 4).

    Needs the log from its first entry (no cleanup).
    """
    state = TableState(schema)
    for entry in log.read(table_id, 1):
        assert entry.transaction_number == state.transaction_number + 1, (
            f"log of {table_id!r} jumps from {state.transaction_number} to {entry.transaction_number}"
        )
        transaction = decode_entry(entry)
        try:
            transaction.validate(state)
        except TransactionValidationError as e:
            raise AssertionError(
                f"entry {entry.transaction_number} of {table_id!r} ({entry.transaction_type}) is not valid "
                f"against the state before it: {e}"
            ) from e
        transaction.apply(state, entry.update_time)
        state.transaction_number = entry.transaction_number
    return state


def request_entries(log: TransactionLogStore, table_id: str, from_number: int = 1) -> dict[str, list[int]]:
    """Every commit request id in the log, with the entries that hold it."""
    found: dict[str, list[int]] = {}
    for entry in log.read(table_id, from_number):
        for request_id in request_ids_of(decode_entry(entry)):
            found.setdefault(request_id, []).append(entry.transaction_number)
    return found


def check_exactly_once(
    log: TransactionLogStore, table_id: str, statuses: Mapping[str, CommitStatus], from_number: int = 1
) -> None:
    """Invariant 2: a request is in at most one entry, and one reported committed at N is in entry N."""
    held = request_entries(log, table_id, from_number)
    for request_id, numbers in held.items():
        assert len(numbers) == 1, f"request {request_id!r} of {table_id!r} is in entries {numbers}"
    for status in statuses.values():
        if status.table_id != table_id or status.outcome is not CommitOutcome.COMMITTED:
            continue
        number = status.transaction_number
        assert number is not None, f"request {status.request_id!r} is committed at no number"
        if number < from_number:
            continue  # cleanup deleted the entry
        assert held.get(status.request_id) == [number], (
            f"request {status.request_id!r} is reported committed at {number} but the log holds it in "
            f"{held.get(status.request_id, [])}"
        )
