"""What a caller of the local runtime waits on and takes: a queue drained of its messages
(:func:`wait_until_drained`, which ``LocalRuntime.wait_idle`` uses), and the dead letters taken off its
dead-letter queue (:class:`LocalDeadLetter`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class LocalDeadLetter:
    """A message on the dead-letter queue. ``reason`` is the committer's, None if the queue's redrive
    policy moved it (received too often without being acknowledged)."""

    body: str
    group_id: str
    reason: str | None
    source_message_id: str | None
    receive_count: int


def wait_until_drained(
    what: str,
    queued: Callable[[], int],
    busy: Callable[[], bool],
    timeout: float,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Wait until ``queued()`` is 0 and ``busy()`` is false. The deadline is ``timeout`` seconds after the
    count last fell (to fewer messages than ever seen in this wait), not after the call: raises TimeoutError
    once that long passes with no message leaving ``what``."""
    count = fewest = queued()
    deadline = clock() + timeout
    while True:
        # Messages stay counted (in flight) until the poller deletes them, and it is busy until it has
        # counted them: so an empty queue, then a poller not busy, means every earlier request is done.
        if count == 0 and not busy():
            return
        if clock() > deadline:
            raise TimeoutError(f"{what} still holds {count} message(s): none has left it for {timeout:.0f}s")
        sleep(0.1)  # each count scans the whole queue on moto: do not ask too often
        count = queued()
        if count < fewest:
            fewest, deadline = count, clock() + timeout
