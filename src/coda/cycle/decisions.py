"""What a scheduling cycle decides, and the interface a driver carries it out by.

The cycle books every decision on the ``Job``/``Node`` objects itself (so the
next decision sees it), then hands it to the driver's ``Executor``: the
simulator changes speeds and finish events, the node agent launches a process,
the Slurm controller writes a placement. The same state gives the same list.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from coda.policy.framework import Action, SetCores
from coda.policy.state import Job, Node


@dataclass(frozen=True, slots=True)
class Start:
    """Start ``job`` on ``nodes`` with ``cores_pn`` cores on each."""

    job: Job
    nodes: tuple[Node, ...]
    cores_pn: int


@dataclass(frozen=True, slots=True)
class Reclaimed:
    """A reclaim action taken on ``node`` so that ``for_job`` can start there."""

    for_job: Job
    node: Node
    action: Action


@dataclass(frozen=True, slots=True)
class Returned:
    """Cores given back to a shrunk CPU job as they freed up (``action``: its SetCores)."""

    action: SetCores


Decision = Start | Reclaimed | Returned


class Executor(Protocol):
    """A driver's side of the cycle (kube: the bind extension point).

    ``bind``: the start is booked; carry it out. False: it could not be (a launch
    failed); the cycle then undoes the booking and drops the job from the queue.
    ``apply``: carry out a reclaim action, booking it through the scheduler
    (``vacate`` for a ``Preempt``, ``resize`` for a ``SetCores``), exactly as the
    driver applies the same action from a node control. It returns False if it could
    not (the job then waits; anything else it returns is not looked at).
    """

    def bind(self, start: Start) -> bool: ...

    def apply(self, action: Action) -> object: ...  # False: it could not be carried out


def describe(d: Decision) -> tuple[Any, ...]:
    """A decision as plain values, to compare drivers (the differential test)."""
    if isinstance(d, Start):
        return ("start", d.job.job_id, tuple(n.name for n in d.nodes), d.cores_pn)
    if isinstance(d, Returned):
        return ("return", d.action.job.job_id, d.action.cores_pn)
    act = d.action
    detail = act.cores_pn if isinstance(act, SetCores) else None
    return ("reclaim", d.for_job.job_id, d.node.name, type(act).__name__, act.job.job_id, detail)
