"""Prometheus metrics of CODA's Slurm daemons: the Slurm node agent's (the node
agent's families, and each job's grant) and the controller's (cycles, placements,
marks, waits). Served and written as the node agent's are (coda.runtime.metrics)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from coda.cycle.reasons import CODES
from coda.runtime.metrics import JOB_LABELS, AgentCollector, label_value
from coda.slurm.client import MARK_STATES

if TYPE_CHECKING:
    from coda.runtime.agent import NodeAgent
    from coda.slurm.agent import SlurmJobs
    from coda.slurm.controller import Controller


class SlurmAgentCollector(AgentCollector):
    """A Slurm node agent's state: the node agent's families, and each job's grant
    (the CPUs Slurm gave it, which its cpuset is narrowed within)."""

    def __init__(self, agent: NodeAgent[SlurmJobs]) -> None:
        super().__init__(agent)
        self.slurm_jobs = agent.source

    def _collect(self) -> Iterable[Metric]:
        yield from super()._collect()
        granted = GaugeMetricFamily(
            "coda_job_granted_cores", "CPUs Slurm granted a running job.", labels=JOB_LABELS
        )
        for m in list(self.agent.jobs.running.values()):
            info = self.slurm_jobs.info.get(m.row_id)
            if info is not None:
                lv = [str(m.row_id), label_value(m.job.job_id), label_value(m.job.kind)]
                granted.add_metric(lv, len(info.grant))
        yield granted


def slurm_agent_registry(agent: NodeAgent[SlurmJobs]) -> CollectorRegistry:
    """``agent_registry`` for a Slurm node agent (with each job's grant)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SlurmAgentCollector(agent))
    return registry


# ------------------------------------------------------------ the Slurm controller
class ControllerCollector(Collector):
    """The Slurm controller's counts as metric families (see ``ControllerStats``)."""

    def __init__(self, controller: Controller) -> None:
        self.controller = controller

    def collect(self) -> Iterable[Metric]:
        with self.controller.lock:  # between two cycles: one consistent picture
            return list(self._collect())

    def _collect(self) -> Iterable[Metric]:
        ctl = self.controller
        s = ctl.stats
        yield CounterMetricFamily(
            "coda_controller_cycles_total", "Scheduling cycles run.", value=s.cycles
        )
        yield CounterMetricFamily(
            "coda_controller_cycle_errors_total",
            "Cycles cut short because Slurm did not answer.",
            value=s.cycle_errors,
        )
        yield GaugeMetricFamily(
            "coda_controller_last_cycle_seconds",
            "Duration of the last scheduling cycle.",
            value=s.times.last,
        )
        yield GaugeMetricFamily(
            "coda_controller_last_cycle_end_timestamp_seconds",
            "Unix time the last whole scheduling cycle ended (0: none yet).",
            value=s.last_cycle_end,
        )
        yield GaugeMetricFamily(
            "coda_controller_active",
            "1 while this controller holds the lease and places jobs; 0 on a standby.",
            value=1.0 if s.active else 0.0,
        )
        yield GaugeMetricFamily(
            "coda_controller_lease_epoch",
            "The lease epoch this controller holds (0: none); raised at every takeover.",
            value=s.lease_epoch,
        )
        yield GaugeMetricFamily(
            "coda_controller_oldest_held_seconds",
            "How long the longest-waiting job CODA holds has waited, at the last cycle.",
            value=s.oldest_held_s,
        )
        hist = HistogramMetricFamily(
            "coda_controller_cycle_seconds", "Durations of scheduling cycles."
        )
        hist.add_metric([], s.times.buckets(), s.times.sum)
        yield hist
        jobs = GaugeMetricFamily(
            "coda_controller_jobs",
            "Jobs Slurm listed, not ended, by CODA's mark, at the start of the last cycle.",
            labels=("coda",),
        )
        for state in MARK_STATES:
            jobs.add_metric([state], s.jobs_by_mark.get(state, 0))
        yield jobs
        yield _by_label(
            "coda_controller_placements_total", "Jobs placed and released.", "kind", s.placements
        )
        yield _by_label(
            "coda_controller_cores_requested_total",
            "Cores the placed jobs asked for (all nodes).",
            "kind",
            s.cores_requested,
        )
        yield _by_label(
            "coda_controller_cores_granted_total",
            "Cores the placed jobs were granted (all nodes).",
            "kind",
            s.cores_granted,
        )
        yield _by_label(
            "coda_controller_refusals_total",
            "Slurm commands that failed, or placements Slurm did not take whole, by reason.",
            "reason",
            s.refusals,
        )
        yield _by_label(
            "coda_controller_passed_total",
            "Held jobs passed to Slurm's own scheduler, by why.",
            "why",
            s.passed,
        )
        waiting = GaugeMetricFamily(
            "coda_controller_waiting_jobs",
            "Jobs CODA holds, by why each waits (the reason code of its mark), at the last cycle.",
            labels=("reason",),
        )
        for code in sorted({*CODES, *s.waits}):
            waiting.add_metric([label_value(code)], s.waits.get(code, 0))
        yield waiting
        yield CounterMetricFamily(
            "coda_controller_requeues_total",
            "CPU jobs requeued so that a DNN job could have their cores.",
            value=s.requeues,
        )
        yield CounterMetricFamily(
            "coda_controller_requeue_lost_core_seconds_total",
            "Core-seconds of work the requeued CPU jobs had done and lost.",
            value=s.lost_core_s,
        )
        yield CounterMetricFamily(
            "coda_controller_reholds_total",
            "Placed jobs held again because their nodes became unusable.",
            value=s.reholds,
        )
        yield CounterMetricFamily(
            "coda_controller_learned_jobs_total",
            "DNN jobs whose settled core count was learned.",
            value=s.learned_jobs,
        )
        alloc = ctl.allocator
        yield GaugeMetricFamily(
            "coda_controller_learned_shapes",
            "Job shapes (user:model, GPUs per node, nodes) with a learned core count.",
            value=len(alloc.learned.shapes()) if alloc is not None else 0,
        )


def _by_label(name: str, help_: str, label: str, counts: dict[str, int]) -> Metric:
    fam = CounterMetricFamily(name, help_, labels=(label,))
    for value, n in sorted(counts.items()):
        fam.add_metric([label_value(value)], n)
    return fam


def controller_registry(controller: Controller) -> CollectorRegistry:
    """A registry of its own that reads ``controller``'s counts at every collection."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ControllerCollector(controller))
    return registry
