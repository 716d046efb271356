"""The agent's actuator: the policies' actions carried out on the node, cpuset
changes (SetCores), CFS quota and MBA (SetQuota) and preemptions (Preempt)."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable
from typing import Any, Protocol

from coda.policy.framework import Action, ExplainsSearch, Preempt, SetCores, SetQuota
from coda.policy.state import CPU, DNN, Node
from coda.runtime.cgroups import CgroupError, JobGroups, format_cpus
from coda.runtime.decision_log import DecisionLog
from coda.runtime.job_books import JobBooks
from coda.runtime.managed import AgentConfig, Managed
from coda.runtime.node_ledger import NodeLedger
from coda.runtime.processes import JobProcesses, quietly, send_signal
from coda.runtime.resctrl import ResctrlControl
from coda.runtime.shim import alive
from coda.runtime.store import Store


class ActuatedNode(Protocol):
    """What the actuator reads and books on the node it acts on (the node agent)."""

    node: Node | None
    jobs: NodeLedger
    store: Store
    decisions: DecisionLog
    processes: JobProcesses

    @property
    def source(self) -> JobBooks: ...

    @property
    def search(self) -> ExplainsSearch | None: ...

    def release(self, m: Managed, now: float) -> None: ...

    def suspend(self, m: Managed, now: float) -> None: ...


class Actuator:
    """Carries actions out through the cgroup driver (and resctrl where MBA is there)."""

    def __init__(
        self,
        node: ActuatedNode,
        cgroups: JobGroups,
        resctrl: ResctrlControl,
        config: AgentConfig,
        log: Callable[[str], None],
    ) -> None:
        self.node = node
        self.cg = cgroups
        self.resctrl = resctrl
        self.config = config
        self.log = log

    def carry_out(
        self,
        acts: list[Action],
        now: float,
        source: str,
        reason: dict[str, Any] | None = None,
    ) -> None:
        for a in acts:
            m = self.node.jobs.running.get(a.job.idx)
            if m is None:
                continue
            if isinstance(a, SetCores):
                self.set_cores(m, a.cores_pn, now, source, reason)
            elif isinstance(a, SetQuota):
                self.set_quota(m, a.quota, now, source, reason)
            elif isinstance(a, Preempt):
                self.preempt(m, now, source, reason)

    def set_cores(
        self, m: Managed, n: int, now: float, source: str, reason: dict[str, Any] | None
    ) -> None:
        agent = self.node
        node = agent.node
        assert node is not None
        job = m.job
        cur = len(m.cpus)
        n = max(1, n)
        if n == cur:
            return
        # Growth (a probe, a climb back, a stalled job's regrow) takes free cores only:
        # cores CPU jobs hold are reclaimed for a DNN job's start, never to measure one.
        books = agent.source
        add: list[int] | None = []
        if n > cur:
            add = books.take(m, n - cur) if books.room(m) >= n - cur else None
        if add is None:
            agent.decisions.record(
                now,
                m.row_id,
                source,
                "refused",
                {"asked": n, "holds": cur, "free": node.free_cores},
            )
            return  # the allocator sees cores_pn != asked and treats it as a refusal
        old = list(m.cpus)
        table = agent.jobs
        if n < cur:
            # DNN jobs give back their highest CPUs, CPU jobs their lowest: both stay packed.
            keep = sorted(m.cpus)[:n] if job.kind == DNN else sorted(m.cpus)[cur - n :]
            table.give_back(sorted(set(m.cpus) - set(keep)), [])
            new = keep
        else:
            new = sorted(m.cpus + add)
        try:
            self.cg.set_cpus(m.cgroup, new)
        except CgroupError as e:
            table.give_back(sorted(set(new) - set(old)), [])
            table.claim(old, [])
            # The cpuset may have been written before the failure (a widening whose
            # sched_setaffinity failed): put the kernel back where the books are.
            quietly(lambda: self.cg.set_cpus(m.cgroup, old))
            agent.decisions.record(now, m.row_id, source, "error", {"error": str(e)})
            return
        m.cpus = new
        job.cores_pn = n
        node.free_cores -= n - cur
        if job.kind == CPU:
            node.cpu_job_cores += n - cur
        books.books_changed(grew=n < cur)
        if job.kind == CPU and job.quota < 1.0:
            self.write_quota(m)
        m.settle_until = now + self.config.settle_s
        m.window = None
        m.dirty = True
        detail: dict[str, Any] = {
            "from": cur,
            "to": n,
            "cpus": format_cpus(new),
            **(reason or {}),
        }
        alloc = agent.search
        if source == "allocator" and alloc is not None:
            detail["why"] = alloc.explain(job)
        agent.decisions.record(now, m.row_id, source, "set-cores", detail)
        self.log(f"job {m.row_id}: cores {cur} -> {n} ({source})")

    def set_quota(
        self, m: Managed, q: float, now: float, source: str, reason: dict[str, Any] | None
    ) -> None:
        agent = self.node
        q = min(1.0, max(0.0, float(q)))
        if abs(q - m.job.quota) < 1e-9:
            return
        old = m.job.quota
        m.job.quota = q
        try:
            self.write_quota(m)
        except CgroupError as e:
            m.job.quota = old
            agent.decisions.record(now, m.row_id, source, "error", {"error": str(e)})
            return
        # Co-runners' samples straddling the change describe neither quota.
        for other in agent.jobs.running.values():
            if other.job.kind == DNN:
                other.window = None
                other.settle_until = max(other.settle_until, now + self.config.settle_s)
        m.dirty = True
        key = f"quota_{'down' if q < old else 'up'}"
        agent.decisions.count(key)
        agent.decisions.record(
            now,
            m.row_id,
            source,
            "set-quota",
            {"from": round(old, 3), "to": round(q, 3), "mb": m.mb, **(reason or {})},
        )
        self.log(f"job {m.row_id}: quota {old:.2f} -> {q:.2f} ({source})")

    def suspend(self, m: Managed, now: float, source: str, reason: dict[str, Any] | None) -> bool:
        """Freeze a CPU job (the cgroup freezer) and give its cores away; it loses no work
        and is thawed where it was once the cycle starts it again. False if the freezer
        refused: the job is then requeued as without suspension."""
        agent = self.node
        # The row first: an agent that dies before the freeze finds a job "suspended"
        # and freezes it (Suspensions.adopt), never a frozen one it thinks runs.
        agent.store.update(m.row_id, state="suspended")
        why = agent.source.freeze(m)
        if why is not None:
            agent.store.update(m.row_id, state="running")
            agent.decisions.record(now, m.row_id, source, "suspend-failed", {"error": why})
            self.log(f"job {m.row_id}: not frozen ({why}): requeued instead")
            return False
        agent.suspend(m, now)
        row = agent.store.job(m.row_id)
        pre = (row.preemptions if row else 0) + 1
        m.job.preemptions = pre
        agent.store.update(
            m.row_id, cpus="", quota=1.0, preemptions=pre,
            message=f"suspended {pre}x for a DNN job",
        )  # fmt: skip
        agent.source.requeue(m.row_id, m.job)
        agent.decisions.record(now, m.row_id, source, "suspend", dict(reason or {}))
        self.log(f"job {m.row_id}: suspended ({source})")
        return True

    def write_quota(self, m: Managed) -> None:
        q = m.job.quota
        self.cg.set_quota(m.cgroup, None if q >= 1.0 else q * len(m.cpus))
        if self.resctrl.mba_available:
            # Memory bandwidth follows the quota where the hardware can cap it.
            pct = max(10, int(round(q * 100)))
            if m.mb is None:
                self.resctrl.create(m.cgroup)
                self.resctrl.assign(m.cgroup, self.node.processes.pids(m))
            self.resctrl.set_mb(m.cgroup, pct)
            m.mb = pct

    def preempt(self, m: Managed, now: float, source: str, reason: dict[str, Any] | None) -> None:
        """Stop a CPU job and queue it again. A job that says it checkpoints is told
        first, as Slurm tells a job it requeues: SIGTERM, and its cores come back once
        it stops or ``kill_grace_s`` later (meanwhile the DNN job waits); any other job
        is stopped at once (it restarts from scratch). Killed before the database says
        queued, so a crash in between leaves it 'lost', never running twice."""
        agent = self.node
        if not agent.source.preempts:  # its source could not queue it again: never kill it
            agent.decisions.record(now, m.row_id, source, "preempt-refused", {"why": "no requeue"})
            return
        if self.config.take_back == "suspend" and m.kill_at is None and m.warned_at is None:
            if self.suspend(m, now, source, reason):
                return
        grace = self.config.kill_grace_s
        if m.job.checkpoints and grace > 0 and m.kill_at is None:
            if m.warned_at is None:
                agent.processes.signal(m, signal.SIGTERM)
                m.warned_at = now
                detail = {"signal": "SIGTERM", "grace_s": grace, **(reason or {})}
                agent.decisions.record(now, m.row_id, source, "preempt-warned", detail)
                self.log(f"job {m.row_id}: told to checkpoint before a preemption ({source})")
                return
            if now < m.warned_at + grace and agent.processes.pids(m):
                return  # still writing its checkpoint
        agent.processes.kill_until_gone(m)
        if m.shim_pid is not None and alive(m.shim_pid, m.shim_start):
            send_signal(m.shim_pid, signal.SIGKILL)
        try:
            if m.popen is not None:
                m.popen.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        if agent.processes.pids(m) or alive(m.shim_pid, m.shim_start):
            # Not gone (a process stuck in the kernel): requeuing now could run it twice.
            # It keeps its cores; the DNN job waits; the next tick reaps it as usual.
            agent.decisions.record(
                now, m.row_id, source, "preempt-failed", {"why": "still running"}
            )
            return
        agent.release(m, now)
        row = agent.store.job(m.row_id)
        pre = (row.preemptions if row else 0) + 1
        m.job.preemptions = pre
        agent.store.update(
            m.row_id,
            state="queued",
            shim_pid=None,
            shim_start=None,
            cpus="",
            preemptions=pre,
            message=f"preempted {pre}x for a DNN job",
        )
        agent.source.requeue(m.row_id, m.job)
        agent.decisions.record(now, m.row_id, source, "preempt", dict(reason or {}))
        self.log(f"job {m.row_id}: preempted ({source})")
