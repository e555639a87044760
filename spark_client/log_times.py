"""Transaction numbers by time: which transaction was the table's latest at a moment, and which came first
after one. What ``timestampAsOf``, ``startingTimestamp`` and ``endingTimestamp`` read by.

A log entry's ``update_time`` is stamped by its writer and never runs backwards along the log (design
invariant 8), so the entries are sorted by time as they are by number, and a binary search over numbers
finds a moment with one read of one entry per step: about ``2 * log2(entries)`` small reads, however long
the log. Entries that cleanup deleted (always the oldest: the log keeps a suffix) cannot be searched: a
moment before the oldest entry kept is an error saying so, unless the log still starts at transaction 1
(the table did not exist yet).
"""

from __future__ import annotations

import datetime
import re

from statestore.errors import StateStoreError
from statestore.store.ports import TransactionLogStore

_DIGITS = re.compile(r"^-?[0-9]+$")
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def parse_timestamp(text: str, option: str) -> int:
    """``text`` as epoch milliseconds: ISO 8601 with a time zone (``2026-11-22T14:00:00Z``,
    ``2026-11-22 15:00:00+01:00``), or a whole number of epoch milliseconds.

    A time without a zone is refused rather than guessed (a Spark session's zone is not known where the
    options are read). Raises ValueError naming ``option``.
    """
    text = text.strip()
    if _DIGITS.match(text):
        return int(text)
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"option {option!r} is {text!r}: give an ISO 8601 time with its zone, e.g. "
            "'2026-11-22T14:00:00Z' or '2026-11-22 15:00:00+01:00', or epoch milliseconds"
        ) from None
    if moment.tzinfo is None:
        raise ValueError(
            f"option {option!r} is {text!r}, which has no time zone: add one, e.g. {text + 'Z'!r} for UTC "
            "or an offset such as '+01:00'"
        )
    return (moment - _EPOCH) // datetime.timedelta(milliseconds=1)  # exact: no float in between


def format_time(epoch_ms: int) -> str:
    """Epoch milliseconds as ISO 8601 in UTC, to the millisecond."""
    moment = datetime.datetime.fromtimestamp(epoch_ms / 1000, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class LogTimes:
    """Searches one table's log by time. Reads entries only; holds what it read for its own lifetime."""

    def __init__(self, log: TransactionLogStore, table_id: str) -> None:
        self.log = log
        self.table_id = table_id
        self.latest = log.latest_number(table_id)
        self._times: dict[int, int | None] = {}
        self._oldest: int | None = None

    def time_of(self, number: int) -> int | None:
        """The update time of entry ``number``, None if it is not in the log (deleted by cleanup)."""
        if number not in self._times:
            entries = list(self.log.read(self.table_id, number, number))
            self._times[number] = entries[0].update_time if entries else None
        return self._times[number]

    def oldest(self) -> int:
        """The number of the oldest entry the log keeps (the log always keeps its latest)."""
        if self._oldest is None:
            low, high = 1, self.latest  # the kept entries are numbers oldest..latest
            while low < high:
                middle = (low + high) // 2
                if self.time_of(middle) is None:
                    low = middle + 1
                else:
                    high = middle
            self._oldest = low
        return self._oldest

    def latest_at(self, moment: int, option: str) -> int:
        """The table's latest transaction at ``moment`` (epoch ms): the last entry with a time <= it.

        Raises StateStoreError naming ``option`` when no entry is that old: the table did not exist yet, or
        cleanup deleted the entries of that time.
        """
        oldest = self.oldest()
        if self.latest == 0 or self._time(oldest) > moment:
            raise StateStoreError(self._too_early(moment, oldest, option))
        low, high = oldest, self.latest  # time(low) <= moment
        while low < high:
            middle = (low + high + 1) // 2
            if self._time(middle) <= moment:
                low = middle
            else:
                high = middle - 1
        return low

    def latest_at_or_none(self, moment: int, option: str) -> int:
        """:meth:`latest_at`, or 0 when the table did not exist yet at ``moment`` (nothing was added by
        then). Still raises when cleanup deleted the entries of that time."""
        if self.latest == 0:
            return 0
        oldest = self.oldest()
        if oldest == 1 and self._time(1) > moment:
            return 0
        return self.latest_at(moment, option)

    def first_from(self, moment: int) -> int | None:
        """The first transaction committed at or after ``moment``, None if none is (yet).

        Raises StateStoreError when entries from ``moment`` on were deleted by cleanup.
        """
        if self.latest == 0 or self._time(self.latest) < moment:
            return None
        oldest = self.oldest()
        if oldest > 1 and self._time(oldest) >= moment:
            raise StateStoreError(
                f"table {self.table_id!r}: the log before transaction {oldest} "
                f"({format_time(self._time(oldest))}) was deleted by cleanup, so the transactions from "
                f"{format_time(moment)} cannot all be found; start at transaction {oldest} or later"
            )
        low, high = oldest, self.latest  # time(high) >= moment
        while low < high:
            middle = (low + high) // 2
            if self._time(middle) >= moment:
                high = middle
            else:
                low = middle + 1
        return low

    def _time(self, number: int) -> int:
        time = self.time_of(number)
        if time is None:  # deleted while searched: cleanup moved on between two reads
            raise StateStoreError(
                f"table {self.table_id!r}: transaction {number} was deleted by cleanup during the search; "
                "read again"
            )
        return time

    def _too_early(self, moment: int, oldest: int, option: str) -> str:
        if self.latest == 0:
            return f"table {self.table_id!r} has no transactions yet"
        first = format_time(self._time(oldest))
        if oldest == 1:
            return (
                f"option {option!r}: table {self.table_id!r} did not exist yet at {format_time(moment)}; its "
                f"first transaction is at {first}"
            )
        return (
            f"option {option!r}: {format_time(moment)} is before the oldest transaction the log keeps "
            f"({oldest}, at {first}): cleanup deleted the older ones"
        )
