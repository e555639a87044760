"""Pausing Python's cycle collector around work that makes many short-lived, acyclic objects."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused(freeze_survivors: bool = False) -> Iterator[None]:
    """Pause the cycle collector while many tuples are made (a snapshot's rows, a bulk AddFiles' files, a
    fold of the state's changes): none of them can form a cycle, and the collector's passes over the
    growing heap otherwise take as long as the work. The collector is put back as it was found (a pause,
    not a setting: nothing of the host's tuning outlives the call).

    With ``freeze_survivors`` (see :func:`statestore.codec.parquet.freeze_loaded_states`), what the process
    holds is moved to the collector's permanent generation before it is switched back on.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if freeze_survivors:
            gc.freeze()
        if was_enabled:
            gc.enable()
