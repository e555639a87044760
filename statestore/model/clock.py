"""The one wall clock of the library: milliseconds since the epoch, as every stored time is.

Components that need time take a clock (a ``Callable[[], int]``) defaulting to :func:`now_millis`, so tests
and the simulation can move time by hand.
"""

from __future__ import annotations

import time


def now_millis() -> int:
    """Milliseconds since the epoch (the unit of every time the state, the log and the statuses hold)."""
    return time.time_ns() // 1_000_000
