"""The discrete-event core: one loop, plain data, no hidden global state.

Events are arrivals (streamed from the sorted job table, never all in the heap),
job finishes and periodic node-control ticks. After every batch of events at one
instant the scheduling cycle runs the policy's extension points over the queues.
Whenever a node's set of co-runners changes, every job on it gets its speed
recomputed from the performance model and its finish time rescheduled; stale
finish events are recognised by a per-job version number. Stale ones far outnumber
the live, and the loop wakes at their times too (a cycle runs there when jobs wait):
when they fill the heap, their times move to a sorted array (``_compact``), so the
heap stays the size of the live events and the loop wakes at the same instants.
"""

from __future__ import annotations

import gc
import heapq
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from coda.cycle import InvariantError, Reason, Scheduler, Start
from coda.cycle import reasons as R
from coda.policy.estimates import ExactProjection
from coda.policy.framework import Action, Policy, Preempt, SetQuota
from coda.policy.options import MIN_CONTROL_PERIOD_S, checked_seconds
from coda.policy.state import DNN, Job, Node
from coda.sim import controls, meters, physics
from coda.sim.constants import CYCLE, EPS, FINISH, GRANTS, LAUNCH, SAMPLE, TICK
from coda.sim.result import TIMESERIES_COLUMNS, SimResult
from coda.workload.cluster import ClusterSpec
from coda.workload.perf import Workload
from coda.workload.tenants import users_of

# Kept under their old names: tests read the heap's event kinds.
_FINISH, _TICK, _SAMPLE = FINISH, TICK, SAMPLE
_CYCLE = Reason(R.CYCLE)
# The heap is compacted once it holds this many events and twice as many as after
# the last compaction. Each compaction walks the heap and sorts in the retired times
# still ahead (several per live event): a constant share of the pushes since the last.
COMPACT_MIN = 4096


# Python's cyclic collector costs a run some 8% (its passes walk every new object,
# and the full ones every live one: jobs, nodes, the heap), while a run leaves
# little cyclic garbage (5,713 objects in a 30,000-job run): it is off for the run
# and back on after, where it was on.
@contextmanager
def _collector_off() -> Iterator[None]:
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


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
        self.fixed_grants = grants == "fixed"
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
            node.fixed_grants = self.fixed_grants
        self.cluster = cluster
        self.total_gpus = sum(n.gpus for n in self.nodes)
        # Plugins that want the cluster's shape (kube: the framework's node lister) get it.
        policy.observe_cluster(self.nodes)
        # The scheduling cycle (coda.cycle): the same runner the node agent and the
        # Slurm controller call; this engine is its executor (bind, apply).
        self.sched = Scheduler(policy, self.nodes)
        self.total_cores = sum(n.cores for n in self.nodes)

        jobs = workload.jobs
        self.n = len(jobs)
        self.submit = jobs.submit.tolist()
        # Time limits the trace gives (NaN = none), for the time-limit estimates.
        limits = jobs.time_limit
        self._limits = (
            np.where(np.isnan(limits), math.inf, limits).tolist() if limits is not None else None
        )
        if any(b < a for a, b in zip(self.submit, self.submit[1:], strict=False)):
            raise ValueError("workload jobs must be sorted by submit time")
        # Measurement window: by default first to last arrival.
        if window is None:
            window = (self.submit[0], self.submit[-1]) if self.n else (0.0, 0.0)
        self.w0, self.w1 = float(window[0]), float(window[1])
        if self.w1 < self.w0:
            raise ValueError(f"window ends before it starts: {window}")
        self.samples = max(2, samples)
        self.window_basis = window_basis

        self.now = min(self.submit[0], self.w0) if self.n else 0.0
        self.heap: list[tuple[float, int, int, Job | None, int]] = []
        # Times of retired finish events taken out of the heap (``_compact``), sorted:
        # a flat array, as it holds several times per live event and is merged at
        # every compaction (a list's float objects, scattered, cost a cache miss each).
        self._retired: np.ndarray = np.empty(0)
        self.seq = 0
        self.events = 0
        self.busy: dict[Node, None] = {}  # nodes with at least one job
        # Nodes the job/node controls want ticked (and their DNN jobs sampled).
        self.watched: dict[Node, None] = {}
        self._quiet: dict[Node, tuple[tuple[int, ...], float]] = {}  # signature, since when
        self.rests = 0  # times a watched node went to rest
        if noise < 0:
            raise ValueError(f"noise must be >= 0, got {noise}")
        self.noise = float(noise)
        self.rng = np.random.default_rng([seed, 11])
        self.start_delay = checked_seconds("start_delay_s", start_delay_s)
        est = policy.estimates
        if isinstance(est, ExactProjection) and est.start_delay_s != self.start_delay:
            # Backfill would plan every start as if it worked at once (or late).
            raise ValueError(
                f"the policy's exact estimates plan with a start delay of "
                f"{est.start_delay_s} s, the simulator has {self.start_delay} s: build the "
                "policy with PolicyOptions(start_delay_s=...) alike"
            )
        self.cycle_period = checked_seconds(
            "cycle_period_s", cycle_period_s, at_least=MIN_CONTROL_PERIOD_S, or_zero=True
        )
        self._cycle_armed = False  # a CYCLE event is in the heap
        self._cycle_due = False  # this instant is one of the periodic cycle's
        # Jobs started but not yet working: job -> when it begins (physics gives it no
        # speed until then; see bind and _launch).
        self._launching: dict[Job, float] = {}
        self._noise_buf = np.zeros(0)
        self._noise_i = 0
        # Checkpoints of preemptable CPU jobs are tracked only where preemption exists.
        self._checkpoints = policy.reclaim is not None
        self._armed = {_TICK: False, _SAMPLE: False}  # a tick of this kind is in the heap
        self.running = 0

        # Aggregates, updated incrementally; integrated over the window.
        self.gpu_eff = 0.0
        self.gpu_base = 0.0  # sum of GPUs x speed from cores alone (no interference)
        self.gpu_busy = 0.0  # sum of GPUs x their busy share (the paper's utilisation)
        self.gpu_busy_base = 0.0  # ... at the speed from cores alone (no interference)
        self.gpu_busy_full = 0.0  # ... at full speed
        self.gpu_alloc = 0
        self.gpu_launching = 0  # GPUs of DNN jobs placed but not working yet
        self.cores_alloc = 0
        self.cores_useful = 0.0
        self.count = {"dnn_running": 0, "cpu_running": 0}
        self.area = {
            "gpu_eff": 0.0,
            "gpu_base": 0.0,
            "gpu_busy": 0.0,
            "gpu_busy_base": 0.0,
            "gpu_busy_full": 0.0,
            "gpu_alloc": 0.0,
            "cores_alloc": 0.0,
            "cores_useful": 0.0,
        }
        self.last_t = self.now
        w_end = min(self.w1, self.horizon)
        self.sample_times = (
            np.linspace(self.w0, w_end, self.samples)
            if self.n and w_end >= self.w0
            else np.zeros(0)
        )
        self.sample_i = 0
        self.series = {c: np.zeros(len(self.sample_times)) for c in TIMESERIES_COLUMNS}

        # Per-job outcomes, by workload row.
        self.start = np.full(self.n, np.nan)
        self.end = np.full(self.n, np.nan)
        self.granted = np.zeros(self.n, dtype=np.int32)
        self.settled = np.zeros(self.n, dtype=np.int32)  # cores held at the last change
        self.unschedulable = np.zeros(self.n, dtype=bool)
        self.waited = np.zeros(self.n)  # time queued, summed over requeues
        self.preempted = np.zeros(self.n, dtype=np.int32)
        self.shrunk = np.zeros(self.n, dtype=np.int32)  # times a CPU job gave cores back
        self.users = users_of(jobs, seed)
        # The last reason each job waited (its Reason's token; "" = never waited).
        self.wait_reason: list[str] = [""] * self.n
        self._requeued_at: dict[Job, float] = {}
        self._ckpt: dict[Job, tuple[float, float]] = {}  # CPU job -> its last checkpoint
        self.lost_core_s = 0.0  # CPU-job work lost to preemption, core-seconds
        # Interference episodes: job -> [onset, first throttle on its nodes or None].
        self._episodes: dict[Job, list[Any]] = {}  # [onset, first throttle or None]
        self.episode_log: list[tuple[float, float | None, float | None]] = []
        self.episodes_open_at_finish = 0
        self.work_done_error = 0.0  # largest |remaining| at finish, relative to work

    # ------------------------------------------------------------------ loop
    def run(self) -> SimResult:
        with _collector_off():
            return self._run()

    def _run(self) -> SimResult:
        wall0 = time.perf_counter()
        next_i = 0
        n = self.n
        submit = self.submit
        heap = self.heap
        control = self.policy.node_control
        report_every = max(1, n // 200)
        sched = self.sched
        retired = self._retired
        ri = 0  # retired[:ri] are past
        nr = float(retired[0]) if len(retired) else math.inf  # retired[ri], or none left
        compact_at = COMPACT_MIN
        while True:
            t_arr = submit[next_i] if next_i < n else math.inf
            t_evt = heap[0][0] if heap else math.inf
            if nr < t_evt:
                t_evt = nr
            t = t_arr if t_arr <= t_evt else t_evt
            if t == math.inf or t > self.horizon:
                break
            self._advance(t)
            while next_i < n and submit[next_i] <= t:
                self._arrive(next_i)
                next_i += 1
                if self.progress is not None and next_i % report_every == 0:
                    self.progress(next_i, n)
            while heap and heap[0][0] <= t:
                _, _, kind, obj, version = heapq.heappop(heap)
                if kind == _FINISH:
                    assert obj is not None  # a finish event names its job
                    if obj.version == version and obj.running:
                        self.events += 1
                        self._finish(obj)
                elif kind == LAUNCH:
                    assert obj is not None  # a launch event names its job
                    self._launch(obj, t)
                elif kind == CYCLE:
                    self._cycle_armed = False
                    self._cycle_due = True
                else:
                    self.events += 1
                    self._armed[kind] = False
                    if kind == _TICK:
                        self._tick()
                        assert control is not None  # armed only where there is one
                        period = control.period_s
                    else:
                        self._sample_all()
                        period = self.policy.sample_period_s
                    # Ticks run only while some node is watched (the first node
                    # watched re-arms them), so an idle cluster costs no events.
                    if self.watched and not self._armed[kind]:
                        self._armed[kind] = True
                        self._push(t + period, kind, None, 0)
            while nr <= t:
                ri += 1  # a retired finish event's instant: a wake-up, like its pop
                nr = float(retired[ri]) if ri < len(retired) else math.inf
            if len(heap) > compact_at:
                retired = self._compact(ri)
                ri = 0
                nr = float(retired[0]) if len(retired) else math.inf
                compact_at = max(COMPACT_MIN, 2 * len(heap))
            if sched.pending():
                period = self.cycle_period
                if period > 0.0 and not self._cycle_due:
                    # A periodic scheduler: its passes are at whole multiples of the period.
                    nxt = math.ceil(t / period) * period
                    self._cycle_due = nxt <= t
                    if not self._cycle_due and not self._cycle_armed:
                        self._cycle_armed = True
                        self._push(nxt, CYCLE, None, 0)
                if period <= 0.0 or self._cycle_due:
                    sched.cycle(self.now, self)
                    if self.check:
                        sched.check_no_waiting_fit()
            self._cycle_due = False
        # Stopped by the horizon or out of events: integrate up to where we stopped.
        self._advance(self.horizon if math.isfinite(self.horizon) else max(self.now, self.w1))
        if self.progress is not None:
            self.progress(n, n)
        return self._result(time.perf_counter() - wall0)

    def _compact(self, ri: int) -> np.ndarray:
        """Take the retired finish events (version moved on, or the job stopped: for
        ever, as versions only grow) out of the heap, their times into ``_retired``
        from ``ri`` on, which it returns. The live events keep their keys, so they pop
        in the same order; every time stays a wake-up. Called between instants, so
        every time moved is still ahead."""
        heap = self.heap
        live: list[tuple[float, int, int, Job | None, int]] = []
        gone: list[float] = []
        for e in heap:
            job = e[3]
            if e[2] == FINISH and job is not None and (job.version != e[4] or not job.running):
                gone.append(e[0])
            else:
                live.append(e)
        heap[:] = live  # the same list: the loop holds it
        heapq.heapify(heap)
        rest = np.concatenate((self._retired[ri:], np.array(gone, dtype=np.float64)))
        rest.sort(kind="stable")  # a sorted run and the new times: Timsort merges them
        self._retired = rest
        return rest

    def _push(self, t: float, kind: int, obj: Job | None, version: int) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, obj, version))

    # -------------------------------------------------------------- arrivals
    def _arrive(self, i: int) -> Job | None:
        w = self.workload
        jobs = w.jobs
        gpus = int(jobs.gpus[i])
        nodes = int(jobs.nodes[i])
        model = None
        perf = None
        if gpus > 0:
            model = w.model_names[int(w.model[i])]
            perf = w.profiles.job_perf(model, -(-gpus // nodes), nodes)
        job = Job(
            i,
            jobs.ids[i],
            self.submit[i],
            gpus,
            int(jobs.cores[i]),
            int(jobs.mem_mib[i]),
            nodes,
            float(w.work[i]),
            model=model,
            perf=perf,
            bw_per_core=float(w.cpu_bw_per_core[i]),
            time_limit=self._limits[i] if self._limits is not None else math.inf,
            user=self.users[i],
        )
        never = self.sched.submit(job)
        if never is not None:
            self.unschedulable[i] = True
            self.wait_reason[i] = never.token
            return None
        return job

    # ------------------------------------------------------- start / finish
    def bind(self, start: Start) -> bool:
        """Carry out a start the cycle booked: meters, speeds, the job control."""
        job, nodes, cores_pn = start.job, list(start.nodes), start.cores_pn
        now = self.now
        wait = job.wait
        # Its reason, if it waited at all (a job refused and started at one instant did
        # not); one never looked at before this cycle waited for the cycle.
        if isinstance(wait, Reason) and now > self._requeued_at.get(job, job.submit):
            self.wait_reason[job.idx] = _CYCLE.token if wait.code == R.NEW else wait.token
        job.last_update = now
        # Its first throughput window opens when it begins to work.
        job.sample_t = now + self.start_delay
        job.sample_work = job.work - job.remaining
        job.works_from = now + self.start_delay
        if self.start_delay > 0.0:
            self._launching[job] = job.works_from
            self.gpu_launching += job.gpus
            self._push(job.works_from, LAUNCH, job, 0)
        if self._checkpoints and not job.is_dnn:
            self._ckpt[job] = (now, job.work - job.remaining)  # (last checkpoint, work done)
        self.count[f"{job.kind}_running"] += 1
        self.running += 1
        if math.isnan(self.start[job.idx]):
            self.start[job.idx] = now
            self.waited[job.idx] = now - job.submit
        else:  # restarted after a preemption
            self.waited[job.idx] += now - self._requeued_at.pop(job, now)
        self.granted[job.idx] = cores_pn * job.nodes
        self.settled[job.idx] = cores_pn * job.nodes
        job.bw_pn = self._bw_demand(job)
        for node in nodes:
            node.bw_used += job.bw_pn
            self.busy[node] = None
        self.gpu_alloc += job.gpus
        if job.kind == DNN:
            self.gpu_busy_full += job.gpus * physics._busy(job, 1.0)
        self.cores_alloc += cores_pn * job.nodes
        self.cores_useful += self._useful_cores(job)
        self._refresh(nodes)
        control = self.policy.job_control
        if control is not None and job.is_dnn:
            for action in control.on_start(job, now):
                self.apply(action)
        for node in nodes:
            self._rewatch(node)
        if self.check:
            self._check_nodes(nodes)
        return True

    def _release(self, job: Job) -> list[Node]:
        """Take a running job off its nodes (finish or preemption)."""
        self.gpu_eff -= job.gpus * job.speed
        if job.kind == DNN:
            self.gpu_busy -= job.gpus * physics._busy(job, job.speed)
            self.gpu_busy_base -= job.gpus * physics._busy(job, job.core_speed_now)
            self.gpu_busy_full -= job.gpus * physics._busy(job, 1.0)
        self.gpu_base -= job.gpus * job.core_speed_now
        job.speed = 0.0
        job.core_speed_now = 0.0
        job.version += 1  # retires its pending finish event
        self.gpu_alloc -= job.gpus
        self.cores_useful -= self._useful_cores(job)
        if self.fixed_grants:  # it leaves with what it was granted
            self.sched.restore_grant(job)
        self.cores_alloc -= job.cores_pn * job.nodes
        self.count[f"{job.kind}_running"] -= 1
        self.running -= 1
        self._close_episode(job, finished=True)
        self._ckpt.pop(job, None)
        if self._launching.pop(job, None) is not None:
            self.gpu_launching -= job.gpus
        nodes = self.sched.vacate(job, self.now)
        for node in nodes:
            node.bw_used -= job.bw_pn
            if not node.jobs:
                del self.busy[node]
                node.bw_used = 0.0  # drop accumulated float error
        return nodes

    def _finish(self, job: Job) -> None:
        now = self.now
        self._settle(job)
        if self.check and abs(job.remaining) > 1e-6 * max(1.0, job.work):
            raise InvariantError(f"{job} finished with {job.remaining} work left")
        self.work_done_error = max(self.work_done_error, abs(job.remaining) / max(job.work, EPS))
        job.end = now
        self.end[job.idx] = now
        nodes = self._release(job)
        control = self.policy.job_control
        if control is not None and job.is_dnn:
            control.on_finish(job, now)
        self._refresh(nodes)
        for node in nodes:
            self._rewatch(node)
        if self.check:
            self._check_nodes(nodes)

    def _launch(self, job: Job, t: float) -> None:
        """A started job's delay is over: it begins to work (unless it was stopped, or
        stopped and started again, meanwhile: then this event is not its launch)."""
        if self._launching.get(job) != t:
            return
        self.events += 1
        del self._launching[job]
        self.gpu_launching -= job.gpus
        self.cores_useful += self._useful_cores(job)
        self._rebandwidth(job)  # it draws bandwidth from now (also replans reservations)

    def _preempt(self, job: Job) -> None:
        """Stop a CPU job and queue it again; it keeps the work up to its last
        checkpoint (one every ``policy.checkpoint_s`` seconds of its run)."""
        if job.is_dnn:
            raise ValueError(f"only CPU jobs are preempted, not {job}")
        now = self.now
        self._settle(job)
        done = job.work - job.remaining
        lost = done - self._ckpt.pop(job, (now, done))[1]
        job.remaining += lost
        self.lost_core_s += lost * job.cores_pn_req * job.nodes
        nodes = self._release(job)
        job.preemptions += 1
        self.preempted[job.idx] += 1
        self._requeued_at[job] = now
        self.sched.requeue(job)
        self._refresh(nodes)
        for node in nodes:
            self._rewatch(node)

    def apply(self, action: Action) -> bool:
        """Apply a control action; returns True if it freed cores."""
        job = action.job
        if not job.running:
            return False
        if isinstance(action, Preempt):
            self._preempt(job)
            return True
        if isinstance(action, SetQuota):
            if not 0.0 <= action.quota <= 1.0:
                raise ValueError(f"quota must be within [0, 1], got {action.quota}")
            if action.quota < job.quota:
                self._detected(job)
            self.cores_useful -= self._useful_cores(job)
            job.quota = action.quota
            self.cores_useful += self._useful_cores(job)
            self._rebandwidth(job)
            return False
        new = int(action.cores_pn)
        old = job.cores_pn
        useful = self._useful_cores(job)
        # Growth comes from free cores only (docs/policies.md, "Probes use free cores
        # only"): CPU jobs' cores are reclaimed for a DNN job's start, never for a probe
        # or later growth. A refused growth is no change; the allocator caps. Under
        # fixed grants the books keep the grant: nothing is freed, nothing is taken.
        resize = self.sched.resize_within_grant if self.fixed_grants else self.sched.resize
        if not resize(job, new):
            return False
        delta = new - old
        self.settled[job.idx] = new * job.nodes
        if delta < 0 and not job.is_dnn:
            job.shrinks += 1
            self.shrunk[job.idx] += 1
        self.cores_useful -= useful
        if not self.fixed_grants:
            self.cores_alloc += delta * job.nodes
        self.cores_useful += self._useful_cores(job)
        self._rebandwidth(job)
        if self.check:
            self._check_nodes(job.placement)
        return delta < 0 and not self.fixed_grants

    # The parts of the driver that live in modules of their own (one idea each), as
    # methods: compiled (setup.py), a module's function does not bind as one.
    # controls.py
    def _rewatch(self, node: Node) -> None:
        controls._rewatch(self, node)

    def _rewatch_one(self, node: Node) -> None:
        controls._rewatch_one(self, node)

    def _signature(self, node: Node) -> tuple[int, ...]:
        return controls._signature(self, node)

    def _resting(self, node: Node) -> bool:
        return controls._resting(self, node)

    def _arm(self) -> None:
        controls._arm(self)

    def _tick(self) -> None:
        controls._tick(self)

    def _noise(self) -> float:
        return controls._noise(self)

    def _sample_all(self) -> None:
        controls._sample_all(self)

    # physics.py
    def _rebandwidth(self, job: Job) -> None:
        physics._rebandwidth(self, job)

    def _detected(self, cpu_job: Job) -> None:
        physics._detected(self, cpu_job)

    def _close_episode(self, job: Job, finished: bool = False) -> None:
        physics._close_episode(self, job, finished)

    def _bw_demand(self, job: Job) -> float:
        return physics._bw_demand(self, job)

    def _useful_cores(self, job: Job) -> float:
        return physics._useful_cores(self, job)

    def _local_speed(self, job: Job, node: Node) -> tuple[float, float]:
        return physics._local_speed(self, job, node)

    def _refresh(self, nodes: list[Node]) -> None:
        physics._refresh(self, nodes)

    def _track_episode(self, job: Job, base: float, speed: float) -> None:
        physics._track_episode(self, job, base, speed)

    def _settle(self, job: Job) -> None:
        physics._settle(self, job)

    def _checkpoint(self, job: Job, now: float) -> None:
        physics._checkpoint(self, job, now)

    def _set_speed(self, job: Job, speed: float) -> None:
        physics._set_speed(self, job, speed)

    def _check_nodes(self, nodes: list[Node]) -> None:
        physics._check_nodes(self, nodes)

    # meters.py
    def _advance(self, t: float) -> None:
        meters._advance(self, t)

    def _sample(self, i: int) -> None:
        meters._sample(self, i)

    def _episode_summary(self) -> dict[str, Any]:
        return meters._episode_summary(self)

    def _policy_stats(self) -> dict[str, Any]:
        return meters._policy_stats(self)

    def _result(self, wall: float) -> SimResult:
        return meters._result(self, wall)
