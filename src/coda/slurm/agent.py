"""The node agent for a Slurm node: CODA's allocator and eliminator on the jobs
Slurm runs there.

It is the node runtime's ``NodeAgent`` with Slurm as its job source (``SlurmJobs``):
Slurm starts, tracks and ends the jobs; the agent only finds each running job's cgroup,
reads the job's progress, and applies the policies' decisions to the job's own
cpuset (``SetCores``) and CPU time (``SetQuota``). Differences from the
stand-alone agent, and why:

- A job may use only the CPUs Slurm granted it (its *grant*): narrowing frees
  nothing Slurm could give away, but widening beyond the grant would take CPUs
  Slurm may hand to the next job. Growth past the grant is refused, and the
  allocator treats that like any refusal. Cores are freed for other jobs at
  placement instead: the controller grants later jobs of a model what this
  agent found (``settled=<cores>`` in the job's AdminComment).
- No reclaim: CPU jobs keep their grants (Slurm owns them).
- The grant is the job's cpuset when the agent first sees it, kept in the
  agent's state so that a restarted agent knows it after narrowing.

Progress: Slurm's TaskProlog points ``CODA_PROGRESS_FILE`` at
``<progress dir>/job_<id>``; the agent trusts the file only if it is a regular file
owned by the job's user.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from coda.policy.framework import SetCores
from coda.policy.state import CPU, Job, Node
from coda.runtime.agent import AgentConfig, Managed, NodeAgent
from coda.runtime.cgroups import CgroupError, format_cpus, parse_cpus
from coda.runtime.job_source import AgentHost
from coda.runtime.progress import Progress, read_progress
from coda.runtime.store import Store
from coda.slurm.cgroups import SlurmJobCgroups
from coda.slurm.client import (
    SlurmClient,
    SlurmError,
    SlurmJob,
    mark_count,
    model_key,
)
from coda.slurm.reports import SlurmJobInfo, SlurmReports

GRANTS_KEY = "slurm_grants"


class SlurmJobs:
    """The jobs Slurm runs on one node, as a node agent's job source: found by their
    cgroups, booked against their grants, reported back through their marks."""

    preempts = False  # no reclaim here: CPU jobs keep their grants (Slurm owns them)

    def __init__(
        self,
        host: AgentHost,
        client: SlurmClient,
        cgroups: SlurmJobCgroups,
        progress_dir: Path,
        restore_on_exit: bool = False,
    ) -> None:
        assert host.policy.reclaim is None  # built so (PolicyOptions.reclaim "none")
        self.host = host
        self.slurm = client
        self.sg = cgroups
        self.progress_dir = progress_dir
        self.restore_on_exit = restore_on_exit  # leave every job its whole grant again
        self.node: Node | None = None
        self.cpus: list[int] = []
        self.info: dict[int, SlurmJobInfo] = {}
        self.reports = SlurmReports(host, client)  # settled cores, status.json
        self._failed_lookups: dict[int, float] = {}
        self._kept: set[str] = set()  # quota groups that could not be removed yet
        self._not_running: dict[int, int] = {}  # lookups that found a job not running yet

    # ------------------------------------------------------------ lifecycle
    def open(self) -> Node:
        """The node's CPUs from the cgroup tree, its GPUs as Slurm declares them."""
        host = self.host
        cpus = self.sg.node_cpus()
        gpus = host.config.gpus
        try:
            for n in self.slurm.nodes():
                if n.name == host.node_name:
                    gpus = n.gpus
                    break
            else:
                raise CgroupError(f"Slurm has no node named {host.node_name!r}")
        except SlurmError as e:
            host.log(f"cannot ask Slurm about {host.node_name} ({e}); assuming {gpus} GPUs")
        self.cpus = cpus
        self.node = Node(0, host.node_name, gpus, len(cpus), 0, 0.0)
        self.node.free_cores = 0  # here: CPUs granted to jobs but not in their cpusets
        # Slurm places jobs here (the controller runs the cycle): no scheduler of its own.
        return self.node

    def resume(self, now: float) -> None:
        host, node = self.host, self.node
        assert node is not None
        record = {
            "pid": os.getpid(),
            "node": host.node_name,
            "slurm": True,
            "cgroups": self.sg.describe(),
            "cpus": format_cpus(self.cpus),
            "gpus": node.gpus,
            "policy": host.policy.name,
            "period_s": host.config.period_s,
            "started": host.wall(),
        }
        host.store.set_meta("agent", json.dumps(record))
        self._discover(now)
        self.remove_orphan_cgroups()

    def intake(self, now: float) -> None:
        self._discover(now)
        self._resync_cpusets(now)
        for m in self.host.jobs.running.values():
            if m.job.quota < 1.0:
                try:
                    self.sg.sync_quota_members(m.cgroup)  # a new step's tasks
                except CgroupError as e:
                    self.host.log(f"job {m.row_id}: {e}")

    def after_control(self, now: float) -> None:
        self.remove_orphan_cgroups()
        self.reports.report(self.info)
        self.reports.write_status(self.info)

    def leave(self, stop_jobs: bool, now: float) -> None:
        """Jobs keep running (stopping them is Slurm's business: scancel); with
        ``restore_on_exit`` every job is widened back to its grant (CODA switched off).
        The agent lifts every throttle after this."""
        if not self.restore_on_exit:
            return
        for m in list(self.host.jobs.running.values()):
            want = len(self.info[m.row_id].grant)
            if len(m.cpus) < want:
                self.host.actuator.carry_out(
                    [SetCores(m.job, want)], now, "agent", reason={"why": "agent leaving"}
                )

    def close(self) -> None:
        self.remove_orphan_cgroups()
        self._save_grants()

    def remove_orphan_cgroups(self) -> None:
        """Remove quota groups of jobs no longer running. A job's last processes may
        still be exiting when its cpuset group goes: such a group is retried every
        tick (and reported once)."""
        try:
            kept = self.sg.cleanup(keep=[m.cgroup for m in self.host.jobs.running.values()])
        except CgroupError as e:
            kept = [str(e)]
        for why in sorted(set(kept) - self._kept):
            self.host.log(f"quota group kept for now: {why}")
        self._kept = set(kept)

    # ------------------------------------------------------------ discovery
    def _discover(self, now: float) -> None:
        groups = self.sg.jobs()
        changed = False
        for jid, m in list(self.host.jobs.running.items()):
            if jid not in groups or not self.sg.exists(m.cgroup):
                self.host.release(m, now)
                self.host.decisions.record(
                    now, jid, "agent", "finish", {"throughput": m.throughput}
                )
                self.host.log(f"job {jid} ({m.job.job_id}) ended")
                self.info.pop(jid, None)
                self.reports.forget(jid)
                self._remove_progress(jid)
                changed = True
        self._failed_lookups = {j: t for j, t in self._failed_lookups.items() if j in groups}
        self._not_running = {j: n for j, n in self._not_running.items() if j in groups}
        new = [
            (jid, name)
            for jid, name in sorted(groups.items())
            if jid not in self.host.jobs.running and now >= self._failed_lookups.get(jid, -1.0)
        ]
        if new:
            try:
                # squeue's JSON, not `scontrol show job`: a job's name cannot pose as
                # one of its other fields there. One call for every new job.
                known = {j.job_id: j for j in self.slurm.jobs()}
            except SlurmError as e:
                known = {}
                self.host.log(f"cannot ask Slurm about new jobs ({e})")
            grants = self._load_grants()
            for jid, name in new:
                try:
                    sj = known.get(jid)
                    if sj is None:
                        raise ValueError("Slurm does not list it")
                    if self._adopt_slurm_job(sj, name, now, grants.get(jid)):
                        changed = True
                    else:  # starting or completing: ask again, less often each time
                        n = self._not_running[jid] = self._not_running.get(jid, 0) + 1
                        wait = min(30.0, self.host.config.period_s * 2 ** (n - 1))
                        self._failed_lookups[jid] = now + wait
                except (CgroupError, ValueError) as e:
                    self._failed_lookups[jid] = now + 5.0  # ending, or Slurm busy
                    self.host.log(f"job {jid}: not adopted yet ({e})")
        if changed:
            self._save_grants()

    def _adopt_slurm_job(
        self, sj: SlurmJob, name: str, now: float, saved_grant: list[int] | None
    ) -> bool:
        if sj.state not in ("RUNNING", "SUSPENDED"):
            return False
        jid = sj.job_id
        comment = sj.admin_comment.strip()
        mark = dict(sj.mark) if sj.mark is not None else None
        if mark is None:
            # Not placed by CODA (a --hold job Slurm placed itself). Its AdminComment is
            # the admin's: report into it only if it is empty.
            mark = {"state": "seen"} if not comment else {"state": ""}
        nodes = max(1, sj.node_count)
        cpus = self.sg.granted(name, -(-sj.cpus // nodes))
        grant = sorted(set(saved_grant or cpus) | set(cpus))
        req = sj.requested_cores_pn if mark_count(mark, "req") is not None else len(grant)
        gpus_pn = sj.gpus_per_node
        model = model_key(sj)
        # Its owner, as the controller's view: the eliminator bounds what one user's
        # training job may cost another's CPU job (policy/eliminator.py).
        job = Job(jid, f"{sj.name}#{jid}", now, gpus_pn * nodes, req * nodes, 0, nodes,
                  float("inf"), model=model, user=str(sj.user_id))  # fmt: skip
        m = Managed(jid, job, name, self.host.state_dir / "jobs" / str(jid), cpus,
                    list(range(gpus_pn)), None, None)  # fmt: skip
        self.info[jid] = SlurmJobInfo(sj.user_id, mark, grant)
        self.reports.seen(jid, mark)
        self.host.place(m, now)
        if job.kind == CPU and self.sg.quota(name) is not None:
            self.sg.set_quota(name, None)  # a throttle left by an agent that died
        self.host.decisions.record(now, jid, "agent", "adopt",
                     {"kind": job.kind, "requested": req, "grant": format_cpus(grant),
                      "cpus": format_cpus(cpus), "gpus": gpus_pn, "model": model})  # fmt: skip
        self.host.log(
            f"job {jid} ({sj.name}, {job.kind}) on CPUs {format_cpus(cpus)}, "
            f"grant {format_cpus(grant)}, asked {req}"
        )
        return True

    def _resync_cpusets(self, now: float) -> None:
        """Slurm may rewrite a job's cpuset (a new step): put the agent's back, so
        the books and the kernel agree."""
        for jid, m in list(self.host.jobs.running.items()):
            try:
                cur = self.sg.cpus(m.cgroup)
            except CgroupError:
                continue  # ending: the next discovery releases it
            if set(cur) == set(m.cpus):
                continue
            try:
                self.sg.set_cpus(m.cgroup, m.cpus)
            except CgroupError as e:
                self.host.log(f"job {jid}: cpuset changed to {format_cpus(cur)}; not restored: {e}")
                continue
            detail = {"found": format_cpus(cur), "cpus": format_cpus(m.cpus)}
            self.host.decisions.record(now, jid, "agent", "restore-cpuset", detail)

    # ------------------------------------------------------------ CPUs
    def _spare(self, m: Managed) -> list[int]:
        return sorted(set(self.info[m.row_id].grant) - set(m.cpus))

    def room(self, m: Managed) -> int:
        return len(self._spare(m))

    def take(self, m: Managed, k: int) -> list[int]:
        return self._spare(m)[:k]

    def hold(self, m: Managed, sign: int) -> None:
        """Books of a Slurm node: free cores are those granted but not in cpusets."""
        node = self.node
        assert node is not None
        job = m.job
        node.free_cores += sign * (len(self.info[m.row_id].grant) - len(m.cpus))
        node.free_gpus -= sign * len(m.gpu_ids)
        if job.kind == CPU:
            node.cpu_job_cores += sign * len(m.cpus)
        node.version += 1
        harm = self.host.policy.harm
        if sign > 0:
            job.placement = [node]
            job.cores_pn = len(m.cpus)
            node.jobs[job] = None
            for r in self.host.policy.reserve:
                r.reserve(job, [node], self.host.clock())
            if harm is not None and job.kind == CPU:
                harm.started(job, self.host.clock())  # the eliminator asks its bucket
        else:
            node.jobs.pop(job, None)
            job.placement = []
            for r in self.host.policy.reserve:
                r.unreserve(job, self.host.clock())
            if harm is not None:
                harm.forget(job)  # Slurm requeues or ends it: this node's part is over

    # ------------------------------------------------------------ progress
    def books_changed(self, grew: bool) -> None:
        """Nothing to tell: the controller reads the node's free cores from Slurm."""

    def freeze(self, m: Managed) -> str | None:
        """Never asked (the agent preempts no job here); Slurm suspends its own jobs."""
        return "Slurm's jobs are suspended by Slurm"

    def bus_eased(self) -> None:
        """Nothing to retry: the controller places, from Slurm's books."""

    def requeue(self, job_id: int, job: Job) -> None:
        """Never asked: with no reclaim here, the agent preempts no job; Slurm requeues
        its own."""
        raise AssertionError(f"job {job_id}: the Slurm agent does not preempt")

    def read_progress(self, m: Managed) -> Progress | None:
        """The job's record, if the file is a regular file its own user owns."""
        path = self.progress_dir / f"job_{m.row_id}"
        return read_progress(path, owner=self.info[m.row_id].uid)

    def _remove_progress(self, jid: int) -> None:
        try:
            (self.progress_dir / f"job_{jid}").unlink()
        except OSError:
            pass

    # ------------------------------------------------------------ persistence
    def _load_grants(self) -> dict[int, list[int]]:
        raw = self.host.store.meta(GRANTS_KEY)
        try:
            return {int(k): parse_cpus(v) for k, v in json.loads(raw or "{}").items()}
        except (ValueError, AttributeError):
            return {}

    def _save_grants(self) -> None:
        """Grants of adopted jobs, plus stored ones of jobs whose group still exists
        but were not adopted yet (a lookup that failed): never lose a grant."""
        grants = {j: i.grant for j, i in self.info.items()}
        present = self.sg.jobs()
        for j, g in self._load_grants().items():
            if j not in grants and j in present:
                grants[j] = g
        self.host.store.set_meta(
            GRANTS_KEY, json.dumps({str(j): format_cpus(g) for j, g in sorted(grants.items())})
        )


def slurm_node_agent(
    node: str,
    client: SlurmClient,
    cgroups: SlurmJobCgroups,
    store: Store,
    state_dir: str | os.PathLike[str],
    progress_dir: str | os.PathLike[str],
    config: AgentConfig | None = None,
    clock: Callable[[], float] = time.monotonic,
    wall: Callable[[], float] = time.time,
    log: Callable[[str], None] | None = None,
    restore_on_exit: bool = False,
) -> NodeAgent[SlurmJobs]:
    """A node agent whose jobs are those Slurm runs on ``node``."""
    # Slurm owns every job's grant: nothing to reclaim, nothing to grow into.
    config = dataclasses.replace(config or AgentConfig(), reclaim="none")

    def source(host: AgentHost) -> SlurmJobs:
        return SlurmJobs(host, client, cgroups, Path(progress_dir), restore_on_exit)

    return NodeAgent(store, cgroups, state_dir, source, config, None, clock, wall, log,
                     node_name=node)  # fmt: skip
