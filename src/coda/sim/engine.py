"""The discrete-event core: one loop over an event kernel, driving collaborators that
each own their state.

Events are arrivals (streamed from the sorted job table, never all in the heap),
job finishes and periodic control ticks. After every batch of events at one instant
the scheduling cycle (``coda.cycle``, the runner every body calls) runs the policy's
extension points over the queues, and the executor carries its decisions out.
Whenever a node's set of co-runners changes, every job on it gets its speed
recomputed from the performance model (the speed model) and its finish time
rescheduled; stale finish events are recognised by a per-job version number and
retired from the heap in bulk (``EventKernel.compact``).

- ``EventKernel`` (kernel.py): the virtual clock and the event heap.
- ``ClusterExecutor`` (executor.py): starts, reclaims, core and quota changes,
  arrivals, launches, finishes and preemptions on the simulated cluster.
- ``SpeedModel`` (physics.py): job speeds, work done, checkpoints, interference.
- ``Controls`` (controls.py): when the job and node controls are sampled and ticked.
- ``Meters`` (meters.py): what the run reports, from the ``Gauges`` (gauges.py) and
  the ``JobOutcomes`` (outcomes.py).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np

from coda.collector import collector_off
from coda.cycle import Scheduler
from coda.policy.estimates import ExactProjection
from coda.policy.framework import Policy
from coda.policy.options import MIN_CONTROL_PERIOD_S, checked_seconds
from coda.policy.state import DNN, Node
from coda.sim.constants import BUDGET, CYCLE, FINISH, GRANTS, LAUNCH, TICK
from coda.sim.executor import ClusterExecutor
from coda.sim.gauges import Gauges
from coda.sim.kernel import EventKernel
from coda.sim.meters import Meters
from coda.sim.outcomes import JobOutcomes
from coda.sim.physics import SpeedModel
from coda.sim.result import SimResult
from coda.workload.cluster import ClusterSpec
from coda.workload.perf import Workload
from coda.workload.tenants import users_of

# Python's cyclic collector costs a run some 8% (its passes walk every new object,
# and the full ones every live one: jobs, nodes, the heap), while a run leaves
# little cyclic garbage: it is off for the run.


class Simulator:
    """Runs one policy over one workload on one cluster.

    ``horizon``: stop at this simulated time (seconds, same origin as the
    trace); jobs not finished by then are reported unfinished.
    ``check_invariants``: verify capacity and work conservation after every
    change (slow; for tests).
    ``noise``: relative standard deviation of each throughput sample handed to
    the policy's job control (a real job's samples are noisy); ``seed`` seeds it.
    ``start_delay_s``: a started job holds its GPUs and cores at once but works only
    this long after (a real stack's launch: Slurm's scheduler pass, prolog,
    slurmstepd, the job's own start-up); 0 starts it working the instant it fits.
    ``cycle_period_s``: the scheduling cycle runs only every this many seconds (at
    whole multiples of it), as a periodic scheduler does (CODA's Slurm controller);
    jobs that arrive or fit meanwhile wait for it, holding nothing. 0: the cycle runs
    after every event that could start something.
    ``grants``: ``elastic`` (CODA's node agent: cores a job is narrowed away from are
    free for the next job at once) or ``fixed`` (a cluster manager's books, as Slurm's:
    a running job keeps the cores it was granted at its start until it ends; the
    allocator narrows its cpuset inside them, and may grow it back only as far as the
    grant). Fixed grants need a reclaim that requeues, not one that shrinks.
    """

    def __init__(
        self,
        workload: Workload,
        cluster: ClusterSpec,
        policy: Policy,
        *,
        horizon: float | None = None,
        window: tuple[float, float] | None = None,
        window_basis: str = "first to last arrival",
        samples: int = 1000,
        check_invariants: bool = False,
        progress: Callable[[int, int], None] | None = None,
        noise: float = 0.0,
        seed: int = 0,
        start_delay_s: float = 0.0,
        cycle_period_s: float = 0.0,
        grants: str = "elastic",
    ) -> None:
        if grants not in GRANTS:
            raise ValueError(f"grants must be one of {', '.join(GRANTS)}, got {grants!r}")
        if grants == "fixed" and policy.reclaim is not None and policy.reclaim.shrinks:
            raise ValueError(
                "fixed grants need a reclaim that requeues: a shrunk CPU job would keep "
                "its grant (Slurm never changes a running job's allocation)"
            )
        fixed_grants = grants == "fixed"
        self.workload = workload
        self.policy = policy
        self.horizon = math.inf if horizon is None else float(horizon)
        self.check = check_invariants
        self.progress = progress
        self.nodes = [
            Node(i, s.name, s.gpus, s.cores, s.mem_mib, s.bw_gbps)
            for i, s in enumerate(cluster.nodes)
        ]
        for node in self.nodes:
            node.fixed_grants = fixed_grants
        self.cluster = cluster
        # Plugins that want the cluster's shape (kube: the framework's node lister) get it.
        policy.observe_cluster(self.nodes)
        # The scheduling cycle (coda.cycle): the same runner the node agent and the
        # Slurm controller call; the executor carries its decisions out (bind, apply).
        self.sched = Scheduler(policy, self.nodes)

        jobs = workload.jobs
        self.n = len(jobs)
        self.submit: list[float] = jobs.submit.tolist()
        # Time limits the trace gives (NaN = none), for the time-limit estimates.
        limits = jobs.time_limit
        limits_s = (
            np.where(np.isnan(limits), math.inf, limits).tolist() if limits is not None else None
        )
        if any(b < a for a, b in zip(self.submit, self.submit[1:], strict=False)):
            raise ValueError("workload jobs must be sorted by submit time")
        # Measurement window: by default first to last arrival.
        if window is None:
            window = (self.submit[0], self.submit[-1]) if self.n else (0.0, 0.0)
        w0, w1 = float(window[0]), float(window[1])
        if w1 < w0:
            raise ValueError(f"window ends before it starts: {window}")
        if noise < 0:
            raise ValueError(f"noise must be >= 0, got {noise}")
        start_delay = checked_seconds("start_delay_s", start_delay_s)
        est = policy.estimates
        if isinstance(est, ExactProjection) and est.start_delay_s != start_delay:
            # Backfill would plan every start as if it worked at once (or late).
            raise ValueError(
                f"the policy's exact estimates plan with a start delay of "
                f"{est.start_delay_s} s, the simulator has {start_delay} s: build the "
                "policy with PolicyOptions(start_delay_s=...) alike"
            )
        self.cycle_period = checked_seconds(
            "cycle_period_s", cycle_period_s, at_least=MIN_CONTROL_PERIOD_S, or_zero=True
        )
        self._cycle_armed = False  # a CYCLE event is in the heap
        self._budget_at = math.inf  # the BUDGET event in the heap (inf: none)
        self._cycle_due = False  # this instant is one of the periodic cycle's

        self.kernel = EventKernel(min(self.submit[0], w0) if self.n else 0.0)
        self.gauges = Gauges()
        self.speed = SpeedModel(
            self.kernel,
            self.gauges,
            ideal_isolation=policy.ideal_isolation,
            pcie_pair=workload.profiles.pcie_pair_slowdown,
            checkpoint_s=policy.checkpoint_s,
            checkpoints=policy.reclaim is not None,
        )
        self.outcomes = JobOutcomes(self.n, users_of(jobs, seed))
        self.executor = ClusterExecutor(
            workload, policy, self.sched, self.kernel, self.speed, self.gauges,
            self.outcomes, submit=self.submit, noise=float(noise),
            rng=np.random.default_rng([seed, 11]), limits=limits_s, start_delay=start_delay,
            fixed_grants=fixed_grants, check=check_invariants,
        )  # fmt: skip
        self.controls = self.executor.controls
        self.meters = Meters(
            self.gauges, self.sched, policy,
            total_gpus=sum(n.gpus for n in self.nodes),
            total_cores=sum(n.cores for n in self.nodes),
            window=(w0, w1), window_basis=window_basis, horizon=self.horizon,
            samples=max(2, samples), start=self.kernel.now, any_jobs=self.n > 0,
        )  # fmt: skip

    @property
    def now(self) -> float:
        return self.kernel.now

    # ------------------------------------------------------------------ loop
    def run(self) -> SimResult:
        with collector_off():
            result = self._run()
        # The paper's metrics (coda.sim.paper_metrics), so summary.json carries them.
        from coda.sim.paper_metrics import summary_block

        result.summary["paper"] = summary_block(result)
        return result

    def _advance(self, t: float) -> None:
        """Move the clock to t, the meters integrating up to it."""
        if t > self.kernel.now:
            self.meters.advance(t)
            self.kernel.move_to(t)

    def _run(self) -> SimResult:
        wall0 = time.perf_counter()
        next_i = 0
        n = self.n
        submit = self.submit
        kernel = self.kernel
        executor = self.executor
        controls = self.controls
        armed = controls.armed
        control = self.policy.node_control
        harm = self.policy.harm
        report_every = max(1, n // 200)
        sched = self.sched
        while True:
            t_arr = submit[next_i] if next_i < n else math.inf
            t_evt = kernel.next_time()
            t = t_arr if t_arr <= t_evt else t_evt
            if t == math.inf or t > self.horizon:
                break
            self._advance(t)
            while next_i < n and submit[next_i] <= t:
                executor.arrive(next_i)
                next_i += 1
                if self.progress is not None and next_i % report_every == 0:
                    self.progress(next_i, n)
            while True:
                event = kernel.pop(t)
                if event is None:
                    break
                _, _, kind, obj, version = event
                if kind == FINISH:
                    assert obj is not None  # a finish event names its job
                    if obj.version == version and obj.running:
                        kernel.events += 1
                        executor.finish(obj)
                elif kind == LAUNCH:
                    assert obj is not None  # a launch event names its job
                    executor.launch(obj, t)
                elif kind == CYCLE:
                    self._cycle_armed = False
                    self._cycle_due = True
                elif kind == BUDGET:
                    if t == self._budget_at:
                        self._budget_at = math.inf
                    if harm is not None:
                        harm.advance(t)  # its due buckets make the scheduler look again
                else:
                    kernel.events += 1
                    armed[kind] = False
                    if kind == TICK:
                        controls.tick()
                        assert control is not None  # armed only where there is one
                        period = control.period_s
                    else:
                        controls.sample_all()
                        period = self.policy.sample_period_s
                    # Ticks run only while some node is watched (the first node
                    # watched re-arms them), so an idle cluster costs no events.
                    if controls.watched and not armed[kind]:
                        armed[kind] = True
                        kernel.push(t + period, kind, None, 0)
            kernel.passed(t)
            if sched.pending():
                period = self.cycle_period
                if period > 0.0 and not self._cycle_due:
                    # A periodic scheduler: its passes are at whole multiples of the period.
                    nxt = math.ceil(t / period) * period
                    self._cycle_due = nxt <= t
                    if not self._cycle_due and not self._cycle_armed:
                        self._cycle_armed = True
                        kernel.push(nxt, CYCLE, None, 0)
                if period <= 0.0 or self._cycle_due:
                    sched.cycle(kernel.now, executor)
                    if self.check:
                        sched.check_no_waiting_fit()
            self._cycle_due = False
            if harm is not None and sched.queued[DNN]:
                # A DNN job waits: wake when some CPU job's bucket next allows more (a
                # real body's periodic cycle finds it then too).
                nxt = harm.next_due()
                # One due already waits for the periodic cycle's next pass (armed above).
                if kernel.now < nxt < self._budget_at:
                    self._budget_at = nxt
                    kernel.push(nxt, BUDGET, None, 0)
        # Stopped by the horizon or out of events: integrate up to where we stopped.
        w1 = self.meters.w1
        self._advance(self.horizon if math.isfinite(self.horizon) else max(kernel.now, w1))
        if self.progress is not None:
            self.progress(n, n)
        return self.meters.result(
            self.workload, self.outcomes, self.speed, now=kernel.now,
            wall=time.perf_counter() - wall0, events=kernel.events,
        )  # fmt: skip
