"""The scheduling framework: a cycle split into small named extension points.

Modelled on the kube-scheduler framework. For each queued job the cycle runs:

  arrays -> queue sort -> pools (pre-filter) -> core count -> filter -> score
  -> reserve -> bind (the driver's)

and, every ``NodeControl.period_s``, a node control step per busy node that may
return actions (throttle a job, change its cores). A policy is a bundle of
plugins; a new policy is a few small classes, not a fork of the driver.

The cycle that runs them is ``coda.cycle``, one runner for every driver (the
simulator, the node agent, the Slurm controller). Capacity (GPUs, cores,
memory) and backfill reservations are checked by the cycle itself: no plugin
can over-commit a node. Each extension point is a Protocol below; a plugin
implements every method of the points it is used for (no optional hooks found
by probing), and one that needs the cluster's shape declares ``ClusterAware``
(a filter that can bound the cores it lets in declares ``CoreBound``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from coda.policy.harm_budget import HarmBudget
from coda.policy.learned_profiles import LearnedProfiles
from coda.policy.state import Job, Node


class ClusterAware:
    """Declared by a plugin that wants the cluster's nodes (kube: the framework's
    node lister). Every driver calls ``observe_cluster`` once it knows its nodes and
    again when they change (a node drained or added), before the next cycle."""

    def observe_cluster(self, nodes: Sequence[Node]) -> None:
        raise NotImplementedError


class Arrays(Protocol):
    """Which queues (arrays) there are and which one a job joins. Each array is
    ordered by the queue sort, has one head and holds at most one reservation."""

    names: tuple[str, ...]

    def array_of(self, job: Job) -> str: ...


class QueueSort(Protocol):
    """Orders each queue (array). Smaller key runs first.

    ``band`` comes before fair share: a job of a lower band goes before every job of a
    higher band, whatever its tenant's share (CODA: a CPU job aborted for a DNN job
    re-enters the head of its array). Inside a band, tenants by share, then the key."""

    def key(self, job: Job) -> tuple[Any, ...]: ...

    def band(self, job: Job) -> int: ...


class FairShare(Protocol):
    """Order between tenants (DRF): the queued job of the tenant with the smallest
    share of its dominant resource goes first; inside a tenant, the queue sort.
    ``share`` is read at each pick, so it follows starts and finishes as they
    happen (a ``Reserve`` plugin keeps the usage)."""

    def tenant(self, job: Job) -> str: ...

    def share(self, tenant: str) -> float: ...


class PoolSelect(Protocol):
    """Pre-filter: which node pools a job may use, in the order to try them.

    ``generation`` is bumped whenever a queued job's answer may have changed (the
    cycle keeps jobs with equal pools together, and files them again then)."""

    generation: int

    def pools(self, job: Job) -> tuple[str, ...]: ...


class CoreCount(Protocol):
    """How many cores per node to grant a job when it starts.

    Jobs with equal GPUs per node, node count and ``group_key`` must get equal
    answers at any one moment: the cycle queues such jobs together and judges them
    by the first. ``generation`` is bumped whenever answers change (a plugin that
    learns); the cycle then re-asks each queue bucket instead of trusting the count
    it failed with.
    """

    generation: int

    def cores_per_node(self, job: Job) -> int: ...

    def group_key(self, job: Job) -> tuple[Any, ...]: ...


class Filter(Protocol):
    """Rejects nodes a job must not use (beyond capacity, which the cycle checks).

    ``static``: the answer depends on the job and the node only, never on what is
    free (a partition list): the cycle then also uses it to tell a job that can
    never run from one that waits.

    ``by_shape``: the answer depends on the job only through its kind, GPUs per node
    and core count (never its memory, length, owner or id), so alike queued jobs are
    refused alike: once one is, backfill does not try the others on the same nodes."""

    static: bool
    by_shape: bool

    def filter(self, job: Job, node: Node, cores_pn: int) -> bool: ...


class CoreBound:
    """Declared by a filter that can also say the most cores a job of ``kind`` could
    take on a node past it (``node.cores`` where it sets no bound). The cycle's backfill then
    holds back the jobs no changed node would let in, instead of trying each of them:
    the same starts, with fewer attempts."""

    def most_cores(self, kind: str, node: Node) -> int:
        raise NotImplementedError


class Score(Protocol):
    """Ranks feasible nodes; higher is better."""

    def score(self, job: Job, node: Node, cores_pn: int) -> float: ...


class Reserve(Protocol):
    """Told when a job takes resources and when it gives them back."""

    def reserve(self, job: Job, nodes: Sequence[Node], now: float) -> None: ...

    def unreserve(self, job: Job, now: float) -> None: ...


class RuntimeEstimate(Protocol):
    """What backfill knows about run times (Slurm: time limits).

    ``runtime``: how long a queued job would run at ``cores_pn`` cores (inf: not
    known); ``end_of``: when a running job is expected to end (inf: not known).
    ``backfills``: without estimates there is no backfill: each array is strict
    FIFO and a blocked head holds back every job behind it.
    """

    name: str
    backfills: bool

    def runtime(self, job: Job, cores_pn: int) -> float: ...

    def end_of(self, job: Job, now: float) -> float: ...


class StatsSource(Protocol):
    """A plugin with counters reported per run (``stats()``)."""

    def stats(self) -> dict[str, Any]: ...


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


class NodeControl(Protocol):
    """A periodic controller per node (e.g. the contention eliminator).

    ``watching(node)``: whether the node needs ticks (and its DNN jobs samples);
    drivers re-ask whenever a node's jobs change. ``at_rest(node)``: nothing is
    held there (no throttle in force), so an unchanged node may stop being ticked.
    ``forget_job``: the job is gone (drop its state).
    """

    period_s: float

    def control(self, node: Node, now: float) -> list[Action]: ...

    def watching(self, node: Node) -> bool: ...

    def at_rest(self, node: Node) -> bool: ...

    def forget_job(self, job: Job) -> None: ...


class JobControl(Protocol):
    """A feedback loop per running DNN job (the adaptive CPU allocator).

    The driver calls ``on_start`` when the job starts, ``on_sample`` with one
    throughput sample per measurement window (samples/s as the job reports them:
    noisy, in the job's own units) while the job's node is watched, and
    ``on_finish`` when it ends. ``wants_samples`` says whether the job still
    needs samples for its own sake (a search in progress); ``waiting_for_room``
    that it waits for free cores to probe with (its samples cannot change that).
    """

    def on_start(self, job: Job, now: float) -> list[Action]: ...

    def on_sample(self, job: Job, now: float, throughput: float) -> list[Action]: ...

    def on_finish(self, job: Job, now: float) -> None: ...

    def wants_samples(self, job: Job) -> bool: ...

    def waiting_for_room(self, job: Job) -> bool: ...


class Reclaim(Protocol):
    """Frees cores that CPU jobs hold on a node so that a DNN job can start there.

    Called only when the node has the DNN job's GPUs and memory free and enough
    cores once what its CPU jobs may give is counted (``takeable`` of each). Must
    return actions (shrink with ``SetCores`` where ``shrinks``, or ``Preempt``) that
    free at least ``cores_needed`` cores. ``takeable(job)``: the cores per node this
    CPU job may give now, 0 for none (Slurm: only jobs it may requeue; with a harm
    budget, only what the job's bucket allows).
    """

    shrinks: bool

    def takeable(self, job: Job) -> int: ...

    def reclaim(self, job: Job, node: Node, cores_needed: int, now: float) -> list[Action]: ...


# Optional capabilities of a control, which drivers read where a plugin has them. They
# are asked by attribute (``learner_of`` ...), never by class: a driver must not know
# the concrete plugin, and a compiled Protocol cannot be checked with isinstance.
class LearnsProfiles(Protocol):
    """Learns per job shape the cores a job settles on (the adaptive allocator), for a
    driver to persist: ``generation`` is bumped whenever ``learned`` changes."""

    learned: LearnedProfiles
    generation: int


class ReferenceThroughputs(Protocol):
    """Each job's reference throughput, where one was measured."""

    def reference(self, job: Job) -> float | None: ...


class ExplainsSearch(Protocol):
    """Says where a job's core search stands (``state``: e.g. "converged"), why it took
    its last step (``explain``), and the job's reference throughput (``book``)."""

    @property
    def book(self) -> ReferenceThroughputs: ...

    def state(self, job: Job) -> str: ...

    def explain(self, job: Job) -> dict[str, Any]: ...


class RecordsDecisions(Protocol):
    """Records each decision it takes with its reason (``{"action": ..., "reason":
    {...}}``), newest last (the contention eliminator)."""

    @property
    def decisions(self) -> Sequence[dict[str, Any]]: ...


def learner_of(plugin: object) -> LearnsProfiles | None:
    if hasattr(plugin, "learned") and hasattr(plugin, "generation"):
        return cast(LearnsProfiles, plugin)
    return None


def search_of(plugin: object) -> ExplainsSearch | None:
    if hasattr(plugin, "explain") and hasattr(plugin, "state") and hasattr(plugin, "book"):
        return cast(ExplainsSearch, plugin)
    return None


def decisions_of(plugin: object) -> Sequence[dict[str, Any]] | None:
    """The decisions the plugin records, or None where it records none."""
    if hasattr(plugin, "decisions"):
        return cast(RecordsDecisions, plugin).decisions
    return None


def answers_on_calls(plugin: object) -> bool:
    """Whether a job control's ``wants_samples(job)`` changes only inside its own calls
    for that job (``on_start``, ``on_sample``, ``on_finish``), as it declares with a
    class attribute ``answers_on_calls = True``: a driver may keep its answer from the
    last such call instead of asking again at every change (the simulator does)."""
    return getattr(plugin, "answers_on_calls", False) is True


# Whom backfill plans a start for: each array's first blocked job (EASY backfill, the
# default), or every job it looks at, as Slurm's sched/backfill does (cycle/every_job.py).
RESERVATIONS = ("heads", "every-job")
# Which feasible node a job goes to: the fewest free GPUs, then cores (best fit, the
# default), or the fewest free cores whatever the GPUs, then node order (Slurm's).
NODE_ORDERS = ("best-fit", "fewest-cores")
# Where an every-job plan begins: the exact earliest start, or where Slurm 22.05's
# will-run test puts it, at the end of the batch of running jobs that made room
# (cycle/every_job.py, batch_ends).
PLAN_TIMES = ("exact", "slurm-windows")


CHECKPOINT_S = 600.0  # a policy's default checkpoint interval of CPU jobs


@dataclass
class Policy:
    """A named bundle of plugins plus the cycle's knobs for backfill and scoring.

    Built once, from typed arguments (``coda.policy.make_policy``); drivers never
    patch a policy after it is built."""

    name: str
    arrays: Arrays
    queue_sort: QueueSort
    pools: PoolSelect
    core_count: CoreCount
    estimates: RuntimeEstimate
    filters: list[Filter] = field(default_factory=list)
    scores: list[tuple[Score, float]] = field(default_factory=list)  # (plugin, weight)
    reserve: list[Reserve] = field(default_factory=list)
    node_control: NodeControl | None = None
    # Per-job feedback (the allocator); its samples come every `sample_period_s`.
    job_control: JobControl | None = None
    sample_period_s: float = 10.0
    # Cores CPU jobs hold on GPU nodes count as free for DNN jobs, reclaimed on start.
    reclaim: Reclaim | None = None
    # Each CPU job's harm budget, which reclaim and the node control ask before they
    # slow it (coda.policy.harm_budget); the drivers' shared code tells it what changes.
    harm: HarmBudget | None = None
    # Tenants' order (DRF) over the queue sort; None: the queue sort alone.
    fair_share: FairShare | None = None
    checkpoint_s: float = CHECKPOINT_S  # a preempted CPU job loses at most this much work
    # Upper-bound runs only: the driver leaves out interference between co-runners.
    ideal_isolation: bool = False
    backfill_depth: int = 500  # jobs examined per array per cycle (Slurm: bf_max_job_test)
    reservations: str = "heads"  # whom backfill plans a start for (RESERVATIONS)
    node_order: str = "best-fit"  # where a job goes among feasible nodes (NODE_ORDERS)
    plan_times: str = "exact"  # where an every-job plan begins (PLAN_TIMES)
    # Feasible nodes gathered before scoring (kube: percentageOfNodesToScore).
    # 1 = take the first feasible node in best-fit order.
    candidates_to_score: int = 1
    description: str = ""

    def __post_init__(self) -> None:
        for f in self.filters:
            for flag in ("static", "by_shape"):
                if not isinstance(getattr(f, flag, None), bool):
                    # The Filter protocol's declarations: checked once here, so a filter
                    # written without them fails at build time, not at its first refusal.
                    raise TypeError(f"filter {type(f).__name__} does not declare {flag}: bool")
        if self.node_order not in NODE_ORDERS:
            raise ValueError(
                f"node_order must be one of {', '.join(NODE_ORDERS)}, got {self.node_order!r}"
            )
        if self.reservations not in RESERVATIONS:
            raise ValueError(
                f"reservations must be one of {', '.join(RESERVATIONS)}, got {self.reservations!r}"
            )
        if self.plan_times not in PLAN_TIMES:
            raise ValueError(
                f"plan_times must be one of {', '.join(PLAN_TIMES)}, got {self.plan_times!r}"
            )
        if self.plan_times != "exact" and self.reservations != "every-job":
            raise ValueError("plan_times other than exact need every-job reservations")

    @property
    def backfill(self) -> bool:
        """Backfill runs only where there are runtime estimates to plan with."""
        return self.estimates.backfills

    @property
    def reserves_every_job(self) -> bool:
        """Backfill plans a start for every job it looks at (Slurm's sched/backfill)."""
        return self.reservations == "every-job" and self.estimates.backfills

    def plugins(self) -> list[object]:
        """Every plugin object, each once (a plugin may implement several points)."""
        parts: list[object] = [self.arrays, self.queue_sort, self.pools, self.core_count,
                               self.estimates, *self.filters, *(s for s, _ in self.scores),
                               *self.reserve, self.node_control, self.job_control,
                               self.reclaim, self.fair_share]  # fmt: skip
        out: list[object] = []
        for p in parts:
            if p is not None and all(p is not q for q in out):
                out.append(p)
        return out

    def observe_cluster(self, nodes: Sequence[Node]) -> None:
        """Show the nodes to every plugin that declared ``ClusterAware``."""
        for p in self.plugins():
            if isinstance(p, ClusterAware):
                p.observe_cluster(nodes)

    def refusing_filter(self, job: Job, node: Node, cores_pn: int) -> Filter | None:
        """The first filter that refuses the node, or None if all allow it."""
        for f in self.filters:
            if not f.filter(job, node, cores_pn):
                return f
        return None

    def allows(self, job: Job, node: Node, cores_pn: int) -> bool:
        return self.refusing_filter(job, node, cores_pn) is None

    def pick(self, job: Job, nodes: list[Node], cores_pn: int, count: int) -> list[Node]:
        """The best ``count`` of the feasible ``nodes`` (kept in best-fit order on ties)."""
        if not self.scores or len(nodes) <= count:
            return nodes[:count]
        ranked = sorted(
            range(len(nodes)),
            key=lambda i: (-sum(w * s.score(job, nodes[i], cores_pn) for s, w in self.scores), i),
        )
        return [nodes[i] for i in ranked[:count]]
