"""The agent's sampler: jobs' progress records turned into throughput windows for
the allocator, stalls, and the eliminator's ticks (through the control loop)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from coda.control import ControlLoop
from coda.policy.framework import Action, Policy, SetCores
from coda.policy.state import CPU, DNN, Node
from coda.runtime.decision_log import DecisionLog
from coda.runtime.job_books import JobBooks
from coda.runtime.managed import AgentConfig, Managed
from coda.runtime.node_ledger import NodeLedger
from coda.runtime.progress import Progress


class SampledNode(Protocol):
    """What the sampler reads and asks of its node agent: the running jobs, their books
    (progress records, the room a job may grow into), and the agent's decision log."""

    jobs: NodeLedger
    node: Node | None
    decisions: DecisionLog
    log: Callable[[str], None]

    @property
    def source(self) -> JobBooks: ...

    def carry_out(
        self, actions: list[Action], now: float, component: str, reason: dict[str, Any] | None
    ) -> None: ...


class Sampler:
    """Reads each running job's progress once per period: a DNN job's throughput
    window goes to the control loop's job control, a silent job is marked stalled,
    and the node control ticks once per fresh sample."""

    def __init__(
        self, agent: SampledNode, config: AgentConfig, policy: Policy, loop: ControlLoop
    ) -> None:
        self.agent = agent
        self.config = config
        self.policy = policy
        self.loop = loop
        self.new_samples = False  # a DNN job produced a sample since the last control tick

    # ------------------------------------------------------------- sampling
    def sample(self, now: float) -> None:
        cfg = self.config
        jc = self.policy.job_control
        for m in list(self.agent.jobs.running.values()):
            if m.row_id not in self.agent.jobs.running:
                continue  # preempted by an action earlier in this loop
            rec = self.agent.source.read_progress(m)
            if rec is not None and (m.last is None or rec.samples != m.last.samples):
                m.last_change = now
                if m.stalled:
                    m.stalled = False
                    m.window = None
                    self.agent.decisions.record(
                        now, m.row_id, "agent", "resumed", {"samples": rec.samples}
                    )
            m.last = rec if rec is not None else m.last
            if m.job.kind == DNN and not m.stalled and now - m.last_change > cfg.stall_s:
                self._stall(m, now)
            if m.stalled or rec is None or m.job.kind != DNN or jc is None:
                if rec is not None and m.job.kind == CPU:
                    self._cpu_throughput(m, rec, now)
                continue
            if not m.controlled:
                m.controlled = True
                m.settle_until = now  # the first window opens at the next record
                self.loop.start(m.job, now)
                if m.row_id not in self.agent.jobs.running:
                    continue
            if now < m.settle_until or rec.t < m.settle_until:
                m.window = None
                continue
            if m.window is None:
                m.window = rec
                continue
            if rec.samples < m.window.samples:
                m.window = rec  # its count restarted (a new Reporter): no rate across that
                continue
            span = rec.t - m.window.t
            if span < cfg.window_s:
                continue
            m.throughput = (rec.samples - m.window.samples) / span
            m.window = rec
            m.dirty = True
            self.new_samples = True
            self.loop.sample(m.job, now, m.throughput)

    def _cpu_throughput(self, m: Managed, rec: Progress, now: float) -> None:
        if m.window is None or rec.samples < m.window.samples:
            m.window = rec  # first record, or its count restarted: a window opens here
        elif rec.t - m.window.t >= self.config.window_s:
            m.throughput = (rec.samples - m.window.samples) / (rec.t - m.window.t)
            m.window = rec
            m.dirty = True

    def _stall(self, m: Managed, now: float) -> None:
        """Silent too long: stop trusting its throughput. The allocator forgets it (a
        stalled job must neither steer a search nor trigger throttles) and it gets the
        cores it asked for back where they are free."""
        m.stalled = True
        m.window = None
        m.dirty = True
        detail: dict[str, Any] = {"silent_s": round(now - m.last_change, 1)}
        if m.controlled and self.policy.job_control is not None:
            self.loop.finish(m.job, now)
            m.controlled = False
            want = m.job.cores_pn_req
            if want > m.job.cores_pn:
                grow = min(want, m.job.cores_pn + self.agent.source.room(m))
                if grow > m.job.cores_pn:
                    self.agent.carry_out(
                        [SetCores(m.job, grow)],
                        now,
                        "agent",
                        {"why": "stalled: back to the request"},
                    )
        self.agent.decisions.record(now, m.row_id, "agent", "stalled", detail)
        self.agent.log(
            f"job {m.row_id}: no progress for {detail['silent_s']} s; its samples are not trusted"
        )

    # -------------------------------------------------------------- control
    def control(self, now: float) -> None:
        nc = self.policy.node_control
        node = self.agent.node
        if nc is None or node is None or not node.jobs:
            return
        if not nc.watching(node):
            return
        # One tick per fresh throughput sample, as in the simulator (where the control
        # period is the sample period): the eliminator counts ticks to judge a throttle,
        # and ticks that saw nothing new would judge it on too few samples.
        if any(j.kind == DNN for j in node.jobs) and not self.new_samples:
            return
        self.new_samples = False
        self.loop.tick(node, now)
