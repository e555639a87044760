"""The request ids in a table's newest log entries, so that a redelivered request is found without a read."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from statestore.ports import LogEntry
from statestore.transactions import Transaction, request_ids_of


class FollowedRequests:
    """Request ids of the newest log entries of a table this committer followed or wrote, oldest first.

    The entries held are consecutive, so any request written from ``first_number`` on is found here.
    """

    def __init__(self, max_entries: int) -> None:
        self._max_entries = max_entries
        self._entries: deque[tuple[int, int, tuple[str, ...]]] = deque()
        self._numbers: dict[str, int] = {}

    def add(self, number: int, update_time: int, request_ids: Iterable[str]) -> None:
        if self._entries:
            last = self._entries[-1][0]
            if number <= last:
                return
            if number != last + 1:  # entries were skipped (loaded from a newer snapshot): start again
                self._entries.clear()
                self._numbers.clear()
        ids = tuple(request_ids)
        self._entries.append((number, update_time, ids))
        for request_id in ids:
            self._numbers[request_id] = number
        while len(self._entries) > self._max_entries:
            old_number, _, old_ids = self._entries.popleft()
            for request_id in old_ids:
                if self._numbers.get(request_id) == old_number:
                    del self._numbers[request_id]

    def follow(self, entry: LogEntry, transaction: Transaction) -> None:
        self.add(entry.transaction_number, entry.update_time, request_ids_of(transaction))

    def remember(self, request_id: str, number: int) -> None:
        """Note a request found in an older entry (read back from the log, outside the held entries)."""
        self._numbers.setdefault(request_id, number)

    def number_of(self, request_id: str) -> int | None:
        return self._numbers.get(request_id)

    def covers_since(self, since: int) -> bool:
        """Whether every entry written at or after ``since`` (epoch ms) up to the newest held is held."""
        return bool(self._entries) and self._entries[0][1] < since

    def follow_to(self, transaction_number: int) -> None:
        """Forget the held entries unless they end at ``transaction_number`` (the state's).

        A state brought up to date from a newer snapshot skips entries without following them; held
        entries that stop before it would claim to cover entries they never saw.
        """
        if self._entries and self._entries[-1][0] != transaction_number:
            self._entries.clear()
            self._numbers.clear()

    @property
    def first_number(self) -> int | None:
        return self._entries[0][0] if self._entries else None
