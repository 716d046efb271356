"""What a Slurm node agent tells the outside: each converged DNN job's settled cores,
written into its mark (AdminComment) for the controller, and the node's status file."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from typing import Any

from coda.policy.state import DNN
from coda.runtime.cgroups import format_cpus
from coda.runtime.job_source import AgentHost
from coda.runtime.shim import write_atomic
from coda.slurm.client import SlurmClient, SlurmError, format_mark, mark_count, mark_fields


@dataclasses.dataclass
class SlurmJobInfo:
    """A Slurm job as its node agent knows it: owner, CODA's mark, the CPUs granted."""

    uid: int
    mark: dict[str, str]
    grant: list[int]


class SlurmReports:
    """Settled core counts reported into jobs' marks (once per value), and status.json."""

    def __init__(self, host: AgentHost, client: SlurmClient) -> None:
        self.host = host
        self.slurm = client
        self.reported: dict[int, int] = {}  # settled cores written to the job's mark

    def seen(self, job_id: int, mark: Mapping[str, str]) -> None:
        """A job found: what its mark says was reported already (by an earlier agent)."""
        settled = mark_count(mark, "settled")
        if settled is not None:
            self.reported[job_id] = settled

    def forget(self, job_id: int) -> None:
        self.reported.pop(job_id, None)

    def report(self, info: Mapping[int, SlurmJobInfo]) -> None:
        """Tell the controller (through the job's AdminComment) what a converged DNN
        job settled on: later jobs of its model are granted that many cores."""
        host = self.host
        alloc = host.search
        if alloc is None:
            return
        for jid, m in host.jobs.running.items():
            if m.job.kind != DNN or m.stalled or not m.controlled:
                continue
            if alloc.state(m.job) != "converged" or self.reported.get(jid) == len(m.cpus):
                continue
            job = info[jid]
            if not job.mark.get("state"):
                continue  # someone else's AdminComment: never overwritten
            fields = mark_fields(job.mark)
            fields["settled"] = str(len(m.cpus))
            try:
                text = format_mark(job.mark.get("state", "seen"), **fields)
            except ValueError as e:  # a state someone hand-edited: not CODA's to rewrite
                host.log(f"job {jid}: its mark cannot be rewritten ({e})")
                self.reported[jid] = len(m.cpus)
                continue
            try:
                self.slurm.update(jid, AdminComment=text)
            except SlurmError as e:
                host.log(f"job {jid}: could not report settled cores ({e}); will retry")
                continue
            job.mark["settled"] = fields["settled"]
            self.reported[jid] = len(m.cpus)
            host.decisions.record(host.clock(), jid, "agent", "report", {"settled": len(m.cpus)})

    def status(self, info: Mapping[int, SlurmJobInfo]) -> dict[str, Any]:
        """The node's jobs as `coda slurm status` and people read them."""
        host = self.host
        jobs = []
        for jid, m in sorted(host.jobs.running.items()):
            jobs.append(
                {
                    "job": jid,
                    "model": m.job.model,
                    "kind": m.job.kind,
                    "requested": m.job.cores_pn_req,
                    "grant": format_cpus(info[jid].grant),
                    "cpus": format_cpus(m.cpus),
                    "quota": round(m.job.quota, 3),
                    "throughput": m.throughput,
                    "phase": host.phase(m),
                    "settled": self.reported.get(jid),
                }
            )
        return {"node": host.node_name, "pid": os.getpid(), "time": host.wall(), "jobs": jobs}

    def write_status(self, info: Mapping[int, SlurmJobInfo]) -> None:
        try:
            # Every tick: no fsync (a snapshot for people; the next tick rewrites it).
            text = json.dumps(self.status(info), indent=1)
            write_atomic(self.host.state_dir / "status.json", text, durable=False)
        except OSError as e:
            self.host.log(f"status not written: {e}")
