"""The agent's executor: the policies' actions carried out on the node, cpuset
changes (SetCores), CFS quota and MBA (SetQuota) and preemptions (Preempt)."""

from __future__ import annotations

import signal
import subprocess
from typing import TYPE_CHECKING, Any

from coda.policy.framework import Action, Preempt, SetCores, SetQuota
from coda.policy.state import CPU, DNN, Job
from coda.runtime.cgroups import CgroupError, format_cpus
from coda.runtime.managed import Managed
from coda.runtime.shim import alive
from coda.runtime.supervisor import quietly, send_signal

if TYPE_CHECKING:
    from coda.runtime.agent import NodeAgent


# -------------------------------------------------------------- actions
def _by_job(self: NodeAgent, job: Job) -> Managed | None:
    return self.running.get(job.idx)


def _apply(
    self: NodeAgent,
    acts: list[Action],
    now: float,
    source: str,
    reason: dict[str, Any] | None = None,
) -> None:
    for a in acts:
        m = self._by_job(a.job)
        if m is None:
            continue
        if isinstance(a, SetCores):
            self._set_cores(m, a.cores_pn, now, source, reason)
        elif isinstance(a, SetQuota):
            self._set_quota(m, a.quota, now, source, reason)
        elif isinstance(a, Preempt):
            self._preempt(m, now, source, reason)


def _set_cores(
    self: NodeAgent, m: Managed, n: int, now: float, source: str, reason: dict[str, Any] | None
) -> None:
    node = self.node
    assert node is not None
    job = m.job
    cur = len(m.cpus)
    n = max(1, n)
    if n == cur:
        return
    # Growth (a probe, a climb back, a stalled job's regrow) takes free cores only:
    # cores CPU jobs hold are reclaimed for a DNN job's start, never to measure one.
    add = self._cpus_to_add(m, n - cur) if n > cur else []
    if add is None:
        self.decide(
            now,
            m.row_id,
            source,
            "refused",
            {"asked": n, "holds": cur, "free": node.free_cores},
        )
        return  # the allocator sees cores_pn != asked and treats it as a refusal
    old = list(m.cpus)
    if n < cur:
        # DNN jobs give back their highest CPUs, CPU jobs their lowest: both stay packed.
        keep = sorted(m.cpus)[:n] if job.kind == DNN else sorted(m.cpus)[cur - n :]
        self._free_cpus.update(set(m.cpus) - set(keep))
        new = keep
    else:
        new = sorted(m.cpus + add)
    try:
        self.cg.set_cpus(m.cgroup, new)
    except CgroupError as e:
        self._free_cpus.update(set(new) - set(old))
        self._free_cpus.difference_update(old)
        # The cpuset may have been written before the failure (a widening whose
        # sched_setaffinity failed): put the kernel back where the books are.
        quietly(lambda: self.cg.set_cpus(m.cgroup, old))
        self.decide(now, m.row_id, source, "error", {"error": str(e)})
        return
    m.cpus = new
    job.cores_pn = n
    node.free_cores -= n - cur
    if job.kind == CPU:
        node.cpu_job_cores += n - cur
    self._books_changed(grew=n < cur)
    if job.kind == CPU and job.quota < 1.0:
        self._write_quota(m)
    m.settle_until = now + self.config.settle_s
    m.window = None
    m.dirty = True
    detail: dict[str, Any] = {"from": cur, "to": n, "cpus": format_cpus(new), **(reason or {})}
    alloc = self.search
    if source == "allocator" and alloc is not None:
        detail["why"] = alloc.explain(job)
    self.decide(now, m.row_id, source, "set-cores", detail)
    self.log(f"job {m.row_id}: cores {cur} -> {n} ({source})")


def _set_quota(
    self: NodeAgent, m: Managed, q: float, now: float, source: str, reason: dict[str, Any] | None
) -> None:
    q = min(1.0, max(0.0, float(q)))
    if abs(q - m.job.quota) < 1e-9:
        return
    old = m.job.quota
    m.job.quota = q
    try:
        self._write_quota(m)
    except CgroupError as e:
        m.job.quota = old
        self.decide(now, m.row_id, source, "error", {"error": str(e)})
        return
    # Co-runners' samples straddling the change describe neither quota.
    for other in self.running.values():
        if other.job.kind == DNN:
            other.window = None
            other.settle_until = max(other.settle_until, now + self.config.settle_s)
    m.dirty = True
    self.counters[f"quota_{'down' if q < old else 'up'}"] = (
        self.counters.get(f"quota_{'down' if q < old else 'up'}", 0) + 1
    )
    self.decide(
        now,
        m.row_id,
        source,
        "set-quota",
        {"from": round(old, 3), "to": round(q, 3), "mb": m.mb, **(reason or {})},
    )
    self.log(f"job {m.row_id}: quota {old:.2f} -> {q:.2f} ({source})")


def _write_quota(self: NodeAgent, m: Managed) -> None:
    q = m.job.quota
    self.cg.set_quota(m.cgroup, None if q >= 1.0 else q * len(m.cpus))
    if self.resctrl is not None and getattr(self.resctrl, "mba_available", False):
        # Memory bandwidth follows the quota where the hardware can cap it.
        pct = max(10, int(round(q * 100)))
        if m.mb is None:
            self.resctrl.create(m.cgroup)
            self.resctrl.assign(m.cgroup, self._cgroup_pids(m))
        self.resctrl.set_mb(m.cgroup, pct)
        m.mb = pct


def _preempt(
    self: NodeAgent, m: Managed, now: float, source: str, reason: dict[str, Any] | None
) -> None:
    """Stop a CPU job at once and queue it again (it restarts from scratch: its own
    checkpoints are its business). Killed before the database says queued, so a
    crash in between leaves it 'lost', never running twice."""
    self._kill_until_gone(m)
    if m.shim_pid is not None and alive(m.shim_pid, m.shim_start):
        send_signal(m.shim_pid, signal.SIGKILL)
    try:
        if m.popen is not None:
            m.popen.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    if self._cgroup_pids(m) or alive(m.shim_pid, m.shim_start):
        # Not gone (a process stuck in the kernel): requeuing now could run it twice.
        # It keeps its cores; the DNN job waits; the next tick reaps it as usual.
        self.decide(now, m.row_id, source, "preempt-failed", {"why": "still running"})
        return
    self._release(m, now)
    row = self.store.job(m.row_id)
    pre = (row.preemptions if row else 0) + 1
    m.job.preemptions = pre
    self.store.update(
        m.row_id,
        state="queued",
        shim_pid=None,
        shim_start=None,
        cpus="",
        preemptions=pre,
        message=f"preempted {pre}x for a DNN job",
    )
    if self.sched is not None:
        # Queued again at once, as the simulator does: the same job, behind no one.
        self._queued_jobs[m.row_id] = m.job
        self.sched.requeue(m.job)
    self.decide(now, m.row_id, source, "preempt", dict(reason or {}))
    self.log(f"job {m.row_id}: preempted ({source})")
