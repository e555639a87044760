"""Two reads at once: the round trips of a load that do not depend on each other overlap.

A cold load waits for its stores one call after another: the snapshot's two objects, then the log after
it. Neither object depends on the other, and the log's read depends only on the snapshot's number, known
from its record before either object is asked for. :func:`both` runs two such reads at the same time,
one here and one on a thread of its own made for the call (no pool outlives it, or a fork of the process),
and gives each one's outcome, its value or what it raised, for the caller to take in its own order.

Callers reach it as ``overlap.both`` (the module's attribute), so a harness that schedules concurrency
itself (the fault simulation interleaves its actors at port calls) can set it to :func:`in_turn`.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

A = TypeVar("A")
B = TypeVar("B")


@dataclass(frozen=True)
class Outcome(Generic[A]):
    """What a call returned, or the exception it raised."""

    value: A | None = None
    error: Exception | None = None

    def get(self) -> A:
        """The value, or the call's exception raised again."""
        if self.error is not None:
            raise self.error
        return self.value  # type: ignore[return-value]


def outcome(call: Callable[[], A]) -> Outcome[A]:
    try:
        return Outcome(call())
    except Exception as e:
        return Outcome(error=e)


def both(here: Callable[[], A], beside: Callable[[], B]) -> tuple[Outcome[A], Outcome[B]]:
    """``here()`` on this thread while ``beside()`` runs on another; returns when both have ended."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="statestore-overlap") as pool:
        other = pool.submit(outcome, beside)
        first = outcome(here)
        return first, other.result()


def each(*calls: Callable[[], Any]) -> list[Outcome[Any]]:
    """The outcomes of ``calls``, all made at once (through :func:`both`, as the module's attribute)."""
    if len(calls) <= 1:
        return [outcome(call) for call in calls]
    first, rest = both(calls[0], lambda: each(*calls[1:]))
    return [first, *rest.get()]


def in_turn(here: Callable[[], A], beside: Callable[[], B]) -> tuple[Outcome[A], Outcome[B]]:
    """What :func:`both` returns, the calls made one after the other on this thread (``beside`` first)."""
    second = outcome(beside)
    return outcome(here), second
