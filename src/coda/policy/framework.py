"""The scheduling framework: a cycle split into small named extension points.

Modelled on the kube-scheduler framework. For each queued job the driver runs:

  queue sort -> pools (pre-filter) -> core count -> filter -> score -> reserve -> bind

and, every ``NodeControl.period_s``, a node control step per busy node that may
return actions (throttle a job, change its cores). A policy is a bundle of
plugins; a new policy is a few small classes, not a fork of the driver.

Capacity (GPUs, cores, memory) and backfill reservations are checked by the
driver itself: no plugin can over-commit a node. A plugin that needs the
cluster's shape defines ``observe_cluster(nodes)``; the driver calls it once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from coda.policy.state import Job, Node


class QueueSort(Protocol):
    """Orders each queue (array). Smaller key runs first."""

    def key(self, job: Job) -> tuple: ...


class PoolSelect(Protocol):
    """Pre-filter: which node pools a job may use, in the order to try them."""

    def pools(self, job: Job) -> tuple[str, ...]: ...


class CoreCount(Protocol):
    """How many cores per node to grant a job when it starts.

    Jobs with equal GPUs per node, node count and ``group_key`` must get equal
    answers at any one moment: the driver queues such jobs together and judges
    them by the first. A plugin without ``group_key`` is taken to depend on the
    job's requested cores per node only. A plugin whose answers change over time
    (one that learns) exposes an int ``generation`` bumped on each change: the
    driver then retries queued jobs everywhere, not only where room grew.
    """

    def cores_per_node(self, job: Job) -> int: ...


@runtime_checkable
class Filter(Protocol):
    """Rejects nodes a job must not use (beyond capacity, which the driver checks)."""

    def filter(self, job: Job, node: Node, cores_pn: int) -> bool: ...


@runtime_checkable
class Score(Protocol):
    """Ranks feasible nodes; higher is better."""

    def score(self, job: Job, node: Node, cores_pn: int) -> float: ...


@runtime_checkable
class Reserve(Protocol):
    """Told when a job takes resources and when it gives them back."""

    def reserve(self, job: Job, nodes: Sequence[Node], now: float) -> None: ...

    def unreserve(self, job: Job, now: float) -> None: ...


# Actions a node control step may return. The driver applies them.
@dataclass(frozen=True, slots=True)
class SetQuota:
    """Limit a job to ``quota`` x its granted cores (CFS quota / cpu.max)."""

    job: Job
    quota: float


@dataclass(frozen=True, slots=True)
class SetCores:
    """Change a running job's granted cores per node (cpuset size)."""

    job: Job
    cores_pn: int


@dataclass(frozen=True, slots=True)
class Preempt:
    """Stop a running CPU job and requeue it; it loses the work done since its
    last checkpoint (the policy's ``checkpoint_s``)."""

    job: Job


Action = SetQuota | SetCores | Preempt


@runtime_checkable
class NodeControl(Protocol):
    """A periodic controller per node (e.g. the contention eliminator).

    It may also define ``watching(node) -> bool``: the driver then ticks (and
    samples the DNN jobs of) only the nodes it watches, re-asking whenever a
    node's jobs change; without it every busy node is ticked.
    """

    period_s: float

    def control(self, node: Node, now: float) -> list[Action]: ...


@runtime_checkable
class JobControl(Protocol):
    """A feedback loop per running DNN job (the adaptive CPU allocator).

    The driver calls ``on_start`` when the job starts, ``on_sample`` with one
    throughput sample per measurement window (samples/s as the job reports them:
    noisy, in the job's own units) while the job's node is watched, and
    ``on_finish`` when it ends. ``wants_samples`` says whether the job still
    needs samples for its own sake (a search in progress).
    """

    def on_start(self, job: Job, now: float) -> list[Action]: ...

    def on_sample(self, job: Job, now: float, throughput: float) -> list[Action]: ...

    def on_finish(self, job: Job, now: float) -> None: ...

    def wants_samples(self, job: Job) -> bool: ...


@runtime_checkable
class Reclaim(Protocol):
    """Frees cores that CPU jobs hold on a node so that a DNN job can start there.

    Called only when the node has the DNN job's GPUs and memory free and enough
    cores once its CPU jobs are counted out. Must return actions (shrink with
    ``SetCores``, or ``Preempt``) that free at least ``cores_needed`` cores.
    """

    def reclaim(self, job: Job, node: Node, cores_needed: int, now: float) -> list[Action]: ...


@dataclass
class Policy:
    """A named bundle of plugins plus the driver's knobs for backfill and scoring."""

    name: str
    queue_sort: QueueSort
    pools: PoolSelect
    core_count: CoreCount
    filters: list[Filter] = field(default_factory=list)
    scores: list[tuple[Score, float]] = field(default_factory=list)  # (plugin, weight)
    reserve: list[Reserve] = field(default_factory=list)
    node_control: NodeControl | None = None
    # Per-job feedback (the allocator); its samples come every `sample_period_s`.
    job_control: JobControl | None = None
    sample_period_s: float = 10.0
    # Cores CPU jobs hold on GPU nodes count as free for DNN jobs, reclaimed on start.
    reclaim: Reclaim | None = None
    checkpoint_s: float = 600.0  # a preempted CPU job loses at most this much work
    # Upper-bound runs only: the driver leaves out interference between co-runners.
    ideal_isolation: bool = False
    stats: object | None = None  # anything with .stats() -> dict, reported per run
    # Backfill: the first blocked job of each array holds a reservation; later
    # jobs may start if they do not delay it (Slurm's sched/backfill, simplified).
    backfill: bool = True
    backfill_depth: int = 500  # jobs examined per array per cycle (Slurm: bf_max_job_test)
    # Feasible nodes gathered before scoring (kube: percentageOfNodesToScore).
    # 1 = take the first feasible node in best-fit order.
    candidates_to_score: int = 1
    description: str = ""

    def allows(self, job: Job, node: Node, cores_pn: int) -> bool:
        for f in self.filters:
            if not f.filter(job, node, cores_pn):
                return False
        return True

    def pick(self, job: Job, nodes: list[Node], cores_pn: int, count: int) -> list[Node]:
        """The best ``count`` of the feasible ``nodes`` (kept in best-fit order on ties)."""
        if not self.scores or len(nodes) <= count:
            return nodes[:count]
        ranked = sorted(
            range(len(nodes)),
            key=lambda i: (-sum(w * s.score(job, nodes[i], cores_pn) for s, w in self.scores), i),
        )
        return [nodes[i] for i in ranked[:count]]
