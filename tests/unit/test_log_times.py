"""Transactions by time: the latest at a moment and the first from one, over every retained prefix of a log,
and the times options accept."""

from __future__ import annotations

import pytest

from spark_client.log_times import LogTimes, format_time, parse_timestamp
from statestore.errors import StateStoreError
from statestore.store.memory import InMemoryTransactionLog
from statestore.store.ports import LogEntry

# Entry n's time; equal times side by side (two commits in one millisecond) and a long gap.
TIMES = [1_000, 1_010, 1_010, 1_020, 5_000, 5_001, 5_001, 9_000]


def log_with(times: list[int], deleted_up_to: int = 0) -> LogTimes:
    log = InMemoryTransactionLog()
    for number, time in enumerate(times, start=1):
        log.append("t", LogEntry(number, time, "AddFiles", b"{}"))
    if deleted_up_to:
        log.delete_up_to("t", deleted_up_to)
    return LogTimes(log, "t")


def latest_at_by_scan(times: list[int], moment: int) -> int:
    return max(n for n, t in enumerate(times, start=1) if t <= moment)


def first_from_by_scan(times: list[int], moment: int) -> int | None:
    return next((n for n, t in enumerate(times, start=1) if t >= moment), None)


@pytest.mark.parametrize("moment", sorted({t + d for t in TIMES for d in (-1, 0, 1)} | {20_000}))
def test_the_latest_transaction_at_a_moment_and_the_first_from_it_are_those_a_scan_finds(moment: int) -> None:
    times = log_with(TIMES)
    if moment < TIMES[0]:
        with pytest.raises(StateStoreError, match="did not exist yet"):
            times.latest_at(moment, "timestampAsOf")
        assert times.latest_at_or_none(moment, "endingTimestamp") == 0
    else:
        assert times.latest_at(moment, "timestampAsOf") == latest_at_by_scan(TIMES, moment)
    assert times.first_from(moment) == first_from_by_scan(TIMES, moment)


def test_a_moment_before_the_entries_cleanup_kept_is_refused_saying_so() -> None:
    times = log_with(TIMES, deleted_up_to=4)
    assert times.oldest() == 5
    with pytest.raises(StateStoreError, match=r"before the oldest transaction the log keeps \(5, at"):
        times.latest_at(1_020, "timestampAsOf")
    assert times.latest_at(5_000, "timestampAsOf") == 5
    with pytest.raises(StateStoreError, match="the log before transaction 5 .* was deleted by cleanup"):
        times.first_from(1_015)
    assert times.first_from(5_001) == 6


def test_only_the_latest_entry_kept_is_still_searched() -> None:
    times = log_with(TIMES, deleted_up_to=len(TIMES))  # the log always keeps its latest entry
    assert times.oldest() == len(TIMES)
    assert times.latest_at(9_000, "timestampAsOf") == len(TIMES)
    assert times.first_from(9_001) is None


def test_times_are_iso_8601_with_a_zone_or_epoch_milliseconds_and_print_in_utc() -> None:
    assert parse_timestamp("2026-11-22T14:00:00Z", "o") == 1_795_356_000_000
    assert parse_timestamp("2026-11-22 15:00:00.123456+01:00", "o") == 1_795_356_000_123
    assert parse_timestamp(" 1795356000000 ", "o") == 1_795_356_000_000
    assert format_time(1_795_356_000_123) == "2026-11-22T14:00:00.123Z"
    with pytest.raises(ValueError, match="option 'o' is '2026-11-22 14:00', which has no time zone"):
        parse_timestamp("2026-11-22 14:00", "o")
    with pytest.raises(ValueError, match="give an ISO 8601 time with its zone"):
        parse_timestamp("last tuesday", "o")
