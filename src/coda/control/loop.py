"""The control loops, run once for every body: a DNN job's throughput samples go to the
policy's job control (CODA's adaptive allocator), a node's ticks to its node control
(the contention eliminator), and the actions they return go to the body's sink with
the component that decided and why. The simulator, the node agent and the Slurm node
agent call this one runner; they differ only in how they measure (virtual speeds or
progress records) and in how they carry actions out (books or cgroups).

Pure: no I/O, no clock (the time is passed in).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from coda.policy.framework import Action, Policy, decisions_of
from coda.policy.state import DNN, Job, Node

ALLOCATOR = "allocator"
ELIMINATOR = "eliminator"


class ControlSink(Protocol):
    """A body's side of the control loop: carry these actions out, in order.
    ``component``: which control decided; ``reason``: why, where it says (None for the
    allocator's steps, whose reason is the job's search itself)."""

    def carry_out(
        self, actions: list[Action], now: float, component: str, reason: dict[str, Any] | None
    ) -> None: ...


class ControlLoop:
    """``heard``: called with the job after each of its job control's calls, before its
    actions are carried out (a driver that keeps the control's answers reads them anew)."""

    def __init__(
        self, policy: Policy, sink: ControlSink, heard: Callable[[Job], None] | None = None
    ) -> None:
        self.policy = policy  # its controls are read at each call: a driver may swap one
        self.sink = sink
        self.heard = heard

    # ------------------------------------------------------------ job control
    def start(self, job: Job, now: float) -> None:
        """A DNN job started (or began to be watched): its control's first step."""
        jc = self.policy.job_control
        if jc is not None:
            acts = jc.on_start(job, now)
            if self.heard is not None:
                self.heard(job)
            if acts:
                self.sink.carry_out(acts, now, ALLOCATOR, None)

    def sample(self, job: Job, now: float, throughput: float) -> None:
        """One throughput window of a DNN job (samples/s in its own units)."""
        jc = self.policy.job_control
        if jc is not None:
            acts = jc.on_sample(job, now, throughput)
            if self.heard is not None:
                self.heard(job)
            if acts:
                self.sink.carry_out(acts, now, ALLOCATOR, None)

    def finish(self, job: Job, now: float) -> None:
        """A DNN job ended, or its samples are no longer trusted: its control forgets it."""
        jc = self.policy.job_control
        if jc is not None:
            jc.on_finish(job, now)
            if self.heard is not None:
                self.heard(job)

    def needs_sample(self, job: Job) -> bool:
        """Whether a DNN job's next window is wanted: by its own control (a search in
        progress), or by the node control watching one of its nodes where a CPU job
        runs (the eliminator judges throttles by it; not below its bandwidth gate)."""
        jc = self.policy.job_control
        return (jc is not None and jc.wants_samples(job)) or self.node_control_needs(job)

    def node_control_needs(self, job: Job) -> bool:
        """Whether the node control needs a DNN job's next window: it watches one of the
        job's nodes where a CPU job runs."""
        nc = self.policy.node_control
        if nc is not None:
            for n in job.placement:
                if n.cpu_job_cores and nc.watching(n):
                    return True
        return False

    def watches(self, node: Node) -> bool:
        """Whether the node needs ticks and its DNN jobs samples."""
        return self.jobs_want(node) or self.node_control_watches(node)

    def jobs_want(self, node: Node) -> bool:
        """Whether the job control wants samples of a DNN job on the node."""
        jc = self.policy.job_control
        if jc is not None:
            wants = jc.wants_samples
            for j in node.jobs:  # a loop, not a generator: called on every change
                if j.kind == DNN and wants(j):
                    return True
        return False

    def node_control_watches(self, node: Node) -> bool:
        """Whether the node control wants the node ticked."""
        nc = self.policy.node_control
        return nc is not None and nc.watching(node)

    # ----------------------------------------------------------- node control
    def tick(self, node: Node, now: float) -> None:
        """One step of the node control on a node; its actions carry the reason the
        control recorded for them (an empty one where it recorded none)."""
        nc = self.policy.node_control
        if nc is None:
            return
        harm = self.policy.harm
        if harm is not None:
            harm.advance(now)
        history = decisions_of(nc)  # the explanations it keeps, if it keeps any
        last = history[-1] if history else None
        acts = nc.control(node, now)
        if not acts:
            return
        reason: dict[str, Any] = {}
        if history and history[-1] is not last:  # the control's own record of why
            d = history[-1]
            reason = {"decision": d.get("action"), **d.get("reason", {})}
        self.sink.carry_out(acts, now, ELIMINATOR, reason)
        if harm is not None:
            for a in acts:  # their new quotas (as the body set them) cost from now on
                harm.changed(a.job)
