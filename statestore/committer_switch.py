"""Pausing the committer for maintenance: stop taking commit requests off the queue, and start again.

Requests sent while the committer is paused wait on the commit queue (SQS keeps them for the queue's
retention period) and are committed in order once it resumes. :class:`CommitterSwitch` is the port; the
adapters are :class:`statestore.aws.committer_switch.LambdaCommitterSwitch` (the committer Lambda's SQS
event source mapping) and :class:`statestore.aws.committer_switch.LocalCommitterSwitch` (the local
runtime's poller), with :class:`InMemoryCommitterSwitch` for tests. No AWS imports here.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class QueueDepth:
    """The commit queue's approximate message counts (as SQS reports them, a few seconds behind)."""

    waiting: int  # visible: not yet taken by the committer
    in_flight: int  # taken by a committer invocation and not yet acknowledged
    delayed: int = 0


@dataclass(frozen=True)
class CommitterState:
    """Whether the committer takes requests off the queue, and how full the queue is.

    ``state`` is what the mechanism itself reports (an event source mapping's ``Enabled``, ``Disabled``,
    ``Disabling``, ...); ``paused`` is True once it is disabled or disabling.
    """

    paused: bool
    state: str
    queue: QueueDepth
    where: str  # what was switched: the mapping's id and function, or the local runtime's queue


class CommitterSwitch(ABC):
    """Pauses and resumes one instance's committer."""

    @abstractmethod
    def set_paused(self, paused: bool) -> CommitterState:
        """Stop (``True``) or restart (``False``) taking commit requests off the queue; returns the new state.

        Idempotent. Raises :class:`statestore.errors.StateStoreError` naming what could not be found or
        changed (no committer function or mapping, no permission, an unreachable endpoint).
        """

    @abstractmethod
    def state(self) -> CommitterState:
        """Whether the committer is paused and the queue's depth. Raises as :meth:`set_paused`."""


@dataclass
class InMemoryCommitterSwitch(CommitterSwitch):
    """A switch with no committer behind it, for tests: set the queue's depth by hand."""

    paused: bool = False
    queue: QueueDepth = QueueDepth(0, 0)

    def set_paused(self, paused: bool) -> CommitterState:
        self.paused = paused
        return self.state()

    def state(self) -> CommitterState:
        return CommitterState(
            self.paused, "Disabled" if self.paused else "Enabled", replace(self.queue), "memory"
        )
