"""wait_until_drained: how long the local runtime waits for its commit queue to empty. Its deadline moves with
each message that leaves the queue, so a loaded machine that drains slowly is waited for, and a queue that
stops draining is reported after ``timeout`` seconds of no progress. Driven on a fake clock."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from statestore.local.draining import wait_until_drained


class FakeTime:
    """A clock that only the fake ``sleep`` moves; a wait past ``limit`` fake seconds is a failure, not a
    hang."""

    def __init__(self, limit: float = 1000.0) -> None:
        self.now = 0.0
        self.limit = limit

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        assert self.now < self.limit, f"still waiting after {self.limit} s"


def draining(time: FakeTime, counts: Callable[[float], int]) -> Callable[[], int]:
    """A queue holding ``counts(t)`` messages at fake time ``t``."""
    return lambda: counts(time.now)


def test_a_queue_that_keeps_draining_is_waited_for_past_the_timeout() -> None:
    time = FakeTime()
    # 100 messages, one leaving every 2 s: 200 s in all, far past a 10 s timeout.
    queued = draining(time, lambda t: max(0, 100 - int(t // 2)))
    wait_until_drained("the queue", queued, lambda: False, 10, clock=time.clock, sleep=time.sleep)
    assert 200 <= time.now < 201


def test_a_queue_that_stops_draining_raises_once_the_timeout_passes_without_progress() -> None:
    time = FakeTime()
    # Drains from 50 to 30 in the first 20 s, then nothing leaves it.
    queued = draining(time, lambda t: max(30, 50 - int(t)))
    message = r"the queue still holds 30 message\(s\): none has left it for 10s"
    with pytest.raises(TimeoutError, match=message):
        wait_until_drained("the queue", queued, lambda: False, 10, clock=time.clock, sleep=time.sleep)
    assert 30 <= time.now < 30.5  # the last message left at 20 s


def test_new_messages_do_not_count_as_progress() -> None:
    time = FakeTime()
    # Producers keep the queue between 5 and 9 messages: it never falls below its first count for good.
    queued = draining(time, lambda t: 5 + int(t * 10) % 5)
    with pytest.raises(TimeoutError, match="still holds"):
        wait_until_drained("the queue", queued, lambda: False, 3, clock=time.clock, sleep=time.sleep)
    assert time.now < 3.5


def test_an_empty_queue_waits_for_the_batch_in_hand() -> None:
    time = FakeTime()
    busy_until = 4.0
    wait_until_drained(
        "the queue", lambda: 0, lambda: time.now < busy_until, 60, clock=time.clock, sleep=time.sleep
    )
    assert busy_until <= time.now < busy_until + 0.2


def test_a_batch_held_too_long_with_an_empty_queue_times_out() -> None:
    time = FakeTime()
    with pytest.raises(TimeoutError, match="still holds 0 message"):
        wait_until_drained("the queue", lambda: 0, lambda: True, 2, clock=time.clock, sleep=time.sleep)
