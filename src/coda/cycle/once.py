"""One cycle over a snapshot: what the scheduler would start on these nodes now.

For callers that hold no queue of their own between cycles (tests, what-if
tools): the same ``Scheduler`` every driver runs, with an executor that only
books. Reclaim actions are booked too (a preempted job is not queued again).
"""

from __future__ import annotations

from collections.abc import Sequence

from coda.cycle.decisions import Start
from coda.cycle.scheduler import Scheduler
from coda.policy.framework import Action, Policy, Preempt, SetCores
from coda.policy.state import Job, Node


class Booking:
    """An executor that carries nothing out: the cycle's books are the result."""

    def __init__(self, sched: Scheduler, now: float = 0.0) -> None:
        self.sched = sched
        self.now = now

    def bind(self, start: Start) -> bool:
        return True

    def apply(self, action: Action) -> None:
        if isinstance(action, Preempt):
            self.sched.vacate(action.job, self.now)
        elif isinstance(action, SetCores):
            self.sched.resize(action.job, action.cores_pn)


def plan(
    policy: Policy, nodes: Sequence[Node], queued: Sequence[Job], now: float = 0.0
) -> list[Start]:
    """The starts one cycle makes; ``nodes`` are updated as jobs are booked."""
    policy.observe_cluster(nodes)
    sched = Scheduler(policy, nodes)
    for job in queued:
        sched.submit(job)
    decisions = sched.cycle(now, Booking(sched, now))
    return [d for d in decisions if isinstance(d, Start)]
