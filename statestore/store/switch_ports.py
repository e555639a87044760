"""The committer switch's port: pausing and resuming the committer. Requests sent while the switch has the
committer paused wait on the commit queue (SQS keeps them for the queue's retention period) and are
committed in order once it resumes. The AWS adapter is ``statestore.adapters.aws.committer_switch``."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass


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
