"""Pausing Python's cycle collector around work that makes many short-lived, acyclic objects."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

# A JSON body this big holds about a thousand file references or more: decoding it makes an object (a list,
# a tuple) per reference, as many as a bulk AddFiles (statestore.transactions.file_changes) pauses for.
MANY_OBJECTS_BODY_BYTES = 64 * 1024


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


def collector_paused_for_body(size: int) -> AbstractContextManager[None]:
    """:func:`collector_paused` while a JSON body of ``size`` bytes is decoded, if it is big enough for the
    collector's passes to matter (half the time of decoding a 100,000-reference AddFiles); else nothing."""
    return collector_paused() if size >= MANY_OBJECTS_BODY_BYTES else nullcontext()
