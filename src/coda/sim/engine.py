"""The discrete-event core: one loop, plain data, no hidden global state.

Events are arrivals (streamed from the sorted job table, never all in the heap),
job finishes and periodic node-control ticks. After every batch of events at one
instant the scheduling cycle runs the policy's extension points over the queues.
Whenever a node's set of co-runners changes, every job on it gets its speed
recomputed from the performance model and its finish time rescheduled; stale
finish events are recognised by a per-job version number.
"""

from __future__ import annotations

import heapq
import math
import time
from collections import Counter
from collections.abc import Callable

import numpy as np

from coda.cycle import InvariantError, Reason, Scheduler, Start
from coda.cycle import reasons as R
from coda.policy.framework import Action, Policy, Preempt, SetQuota
from coda.policy.state import Job, Node
from coda.sim.result import TIMESERIES_COLUMNS, SimResult, describe
from coda.workload.cluster import ClusterSpec
from coda.workload.perf import Workload

_FINISH = 0
_TICK = 1  # node control (the eliminator)
_SAMPLE = 2  # throughput samples for the job control (the allocator)
_EPS = 1e-9
# An interference episode: a DNN job runs this much below its speed from cores
# because of memory-bandwidth pressure (the eliminator's detect/recover times).
_EPISODE_LOSS = 0.05
# A watched node unchanged this long, with nothing held by its controls, stops being
# ticked until it changes (Simulator._resting); ten minutes, the eliminator's calm_s.
_REST_AFTER_S = 600.0


class Simulator:
    """Runs one policy over one workload on one cluster.

    ``horizon``: stop at this simulated time (seconds, same origin as the
    trace); jobs not finished by then are reported unfinished.
    ``check_invariants``: verify capacity and work conservation after every
    change (slow; for tests).
    ``noise``: relative standard deviation of each throughput sample handed to
    the policy's job control (a real job's samples are noisy); ``seed`` seeds it.
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
    ) -> None:
        self.workload = workload
        self.policy = policy
        self.horizon = math.inf if horizon is None else float(horizon)
        self.check = check_invariants
        self.progress = progress
        self.nodes = [
            Node(i, s.name, s.gpus, s.cores, s.mem_mib, s.bw_gbps)
            for i, s in enumerate(cluster.nodes)
        ]
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
        self.heap: list[tuple] = []
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
        self._noise_buf = np.zeros(0)
        self._noise_i = 0
        # Checkpoints of preemptable CPU jobs are tracked only where preemption exists.
        self._checkpoints = policy.reclaim is not None
        self._armed = {_TICK: False, _SAMPLE: False}  # a tick of this kind is in the heap
        self.running = 0

        # Aggregates, updated incrementally; integrated over the window.
        self.gpu_eff = 0.0
        self.gpu_base = 0.0  # sum of GPUs x speed from cores alone (no interference)
        self.gpu_alloc = 0
        self.cores_alloc = 0
        self.cores_useful = 0.0
        self.count = {"dnn_running": 0, "cpu_running": 0}
        self.area = {
            "gpu_eff": 0.0,
            "gpu_base": 0.0,
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
        self.unschedulable = np.zeros(self.n, dtype=bool)
        self.waited = np.zeros(self.n)  # time queued, summed over requeues
        self.preempted = np.zeros(self.n, dtype=np.int32)
        # The last reason each job waited (its Reason's token; "" = never waited).
        self.wait_reason: list[str] = [""] * self.n
        self._requeued_at: dict[Job, float] = {}
        self._ckpt: dict[Job, tuple[float, float]] = {}  # CPU job -> its last checkpoint
        self.lost_core_s = 0.0  # CPU-job work lost to preemption, core-seconds
        # Interference episodes: job -> [onset, first throttle on its nodes or None].
        self._episodes: dict[Job, list] = {}
        self.episode_log: list[tuple[float, float | None, float | None]] = []
        self.episodes_open_at_finish = 0
        self.work_done_error = 0.0  # largest |remaining| at finish, relative to work

    # ------------------------------------------------------------------ loop
    def run(self) -> SimResult:
        wall0 = time.perf_counter()
        next_i = 0
        n = self.n
        submit = self.submit
        heap = self.heap
        control = self.policy.node_control
        report_every = max(1, n // 200)
        sched = self.sched
        while True:
            t_arr = submit[next_i] if next_i < n else math.inf
            t_evt = heap[0][0] if heap else math.inf
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
                    if obj.version == version and obj.running:
                        self.events += 1
                        self._finish(obj)
                else:
                    self.events += 1
                    self._armed[kind] = False
                    if kind == _TICK:
                        self._tick()
                        period = control.period_s
                    else:
                        self._sample_all()
                        period = self.policy.sample_period_s
                    # Ticks run only while some node is watched (the first node
                    # watched re-arms them), so an idle cluster costs no events.
                    if self.watched and not self._armed[kind]:
                        self._armed[kind] = True
                        self._push(t + period, kind, None, 0)
            if sched.pending():
                sched.cycle(self.now, self)
                if self.check:
                    sched.check_no_waiting_fit()
        # Stopped by the horizon or out of events: integrate up to where we stopped.
        self._advance(self.horizon if math.isfinite(self.horizon) else max(self.now, self.w1))
        if self.progress is not None:
            self.progress(n, n)
        return self._result(time.perf_counter() - wall0)

    def _push(self, t: float, kind: int, obj: Job | None, version: int) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, obj, version))

    def _advance(self, t: float) -> None:
        """Integrate the aggregates from the last instant to t and take due samples."""
        last = self.last_t
        if t <= last:
            return
        lo = max(last, self.w0)
        hi = min(t, self.w1)
        if hi > lo:
            dt = hi - lo
            area = self.area
            area["gpu_eff"] += self.gpu_eff * dt
            area["gpu_base"] += self.gpu_base * dt
            area["gpu_alloc"] += self.gpu_alloc * dt
            area["cores_alloc"] += self.cores_alloc * dt
            area["cores_useful"] += self.cores_useful * dt
        times = self.sample_times
        while self.sample_i < len(times) and times[self.sample_i] < t:
            self._sample(self.sample_i)
            self.sample_i += 1
        self.last_t = t
        self.now = t

    def _sample(self, i: int) -> None:
        s = self.series
        s["t"][i] = self.sample_times[i] - self.w0
        s["gpu_util_effective"][i] = self.gpu_eff / self.total_gpus if self.total_gpus else 0.0
        s["gpu_util_allocated"][i] = self.gpu_alloc / self.total_gpus if self.total_gpus else 0.0
        s["cpu_util"][i] = self.cores_alloc / self.total_cores
        s["dnn_queued"][i] = self.sched.queued["dnn"]
        s["cpu_queued"][i] = self.sched.queued["cpu"]
        for k, v in self.count.items():
            s[k][i] = v

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
        if isinstance(wait, Reason) and wait.code != R.NEW:
            self.wait_reason[job.idx] = wait.token
        job.last_update = now
        job.sample_t = now
        job.sample_work = job.work - job.remaining
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
        job.bw_pn = self._bw_demand(job)
        for node in nodes:
            node.bw_used += job.bw_pn
            self.busy[node] = None
        self.gpu_alloc += job.gpus
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
        self.gpu_base -= job.gpus * job.core_speed_now
        job.speed = 0.0
        job.core_speed_now = 0.0
        job.version += 1  # retires its pending finish event
        self.gpu_alloc -= job.gpus
        self.cores_alloc -= job.cores_pn * job.nodes
        self.cores_useful -= self._useful_cores(job)
        self.count[f"{job.kind}_running"] -= 1
        self.running -= 1
        self._close_episode(job, finished=True)
        self._ckpt.pop(job, None)
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
        self.work_done_error = max(self.work_done_error, abs(job.remaining) / max(job.work, _EPS))
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

    # ------------------------------------------------------ node control
    def _rewatch(self, node: Node) -> None:
        """Ask the controls whether node still needs ticks; start its meters if new."""
        if self._quiet:
            # A gang job's speed depends on all its nodes: a change here may wake them.
            for job in node.jobs:
                for other in job.placement:
                    if other is not node and other in self._quiet and other not in self.watched:
                        self._rewatch_one(other)
        self._rewatch_one(node)

    def _rewatch_one(self, node: Node) -> None:
        jc = self.policy.job_control
        want = False
        if jc is not None:
            want = any(j.is_dnn and jc.wants_samples(j) for j in node.jobs)
        if not want and self.policy.node_control is not None:
            want = self.policy.node_control.watching(node)
        if want and self._resting(node):
            want = False
        if want:
            if node not in self.watched:
                if not self.watched:
                    self._arm()
                self.watched[node] = None
                now = self.now
                for job in node.jobs:  # samples start with the watch
                    if job.is_dnn:
                        self._settle(job)
                        job.sample_t = now
                        job.sample_work = job.work - job.remaining
        elif node in self.watched:
            del self.watched[node]

    def _signature(self, node: Node) -> tuple[int, ...]:
        """Versions of the node and of every node its jobs span: while they hold,
        no job on it changed speed (a gang job's speed depends on all its nodes)."""
        nodes = {node.idx: node}
        for job in node.jobs:
            for n in job.placement:
                nodes[n.idx] = n
        return tuple(x for i in sorted(nodes) for x in (i, nodes[i].version))

    def _resting(self, node: Node) -> bool:
        """Idle spans cost nothing: a watched node whose jobs, speeds and quotas have
        not changed for _REST_AFTER_S, whose node control holds nothing there and
        whose DNN jobs' job control needs no samples (or waits for free cores), stops
        being ticked until something on it (or on its jobs' nodes) changes. Its
        samples would repeat the same exact speeds (noise aside) for ever: two
        co-located jobs running for years would otherwise cost a tick per period."""
        if not node.jobs:
            self._quiet.pop(node, None)
            return False
        sig = self._signature(node)
        seen = self._quiet.get(node)
        if seen is None or seen[0] != sig:
            self._quiet[node] = (sig, self.now)
            return False
        if self.now - seen[1] < _REST_AFTER_S:
            return False
        nc = self.policy.node_control
        if nc is not None and not nc.at_rest(node):
            return False
        jc = self.policy.job_control
        if jc is not None:
            for job in node.jobs:
                if job.is_dnn and jc.wants_samples(job) and not jc.waiting_for_room(job):
                    return False
        self.rests += node in self.watched
        return True

    def _arm(self) -> None:
        policy = self.policy
        nc_period = policy.node_control.period_s if policy.node_control is not None else 0.0
        for kind, part, period in (
            (_TICK, policy.node_control, nc_period),
            (_SAMPLE, policy.job_control, policy.sample_period_s),
        ):
            if part is not None and not self._armed[kind]:
                self._armed[kind] = True
                self._push(self.now + period, kind, None, 0)

    def _tick(self) -> None:
        """Run the policy's node control on every watched node."""
        control = self.policy.node_control
        now = self.now
        for node in list(self.watched):
            if node not in self.watched:
                continue
            for action in control.control(node, now):
                self.apply(action)
            self._rewatch(node)

    def _noise(self) -> float:
        if self._noise_i >= len(self._noise_buf):
            self._noise_buf = self.rng.standard_normal(4096)
            self._noise_i = 0
        x = self._noise_buf[self._noise_i]
        self._noise_i += 1
        return x

    def _sample_all(self) -> None:
        """One throughput sample per DNN job on a watched node that needs one (its
        allocator is searching, or a CPU job shares a node with it and there is
        an eliminator): the work it did since its last sample, in its own units
        (an arbitrary per-job rate, so the policy cannot read the model's
        scale), with measurement noise. A converged job away from CPU jobs is
        not sampled in the simulator (its speed only changes with co-runners)."""
        control = self.policy.job_control
        eliminator = self.policy.node_control is not None
        now = self.now
        noise = self.noise
        for node in list(self.watched):
            if node not in self.watched:
                continue
            for job in list(node.jobs):
                # sample_t >= now: sampled already this tick (a gang job on two nodes).
                if not job.is_dnn or job.sample_t >= now:
                    continue
                done = job.work - job.remaining + job.speed * (now - job.last_update)
                if not (
                    control.wants_samples(job)
                    or (eliminator and any(n.cpu_job_cores for n in job.placement))
                ):
                    # Neither its allocator nor the eliminator needs this window:
                    # skip it (a sample costs a policy call) and start the next.
                    job.sample_t = now
                    job.sample_work = done
                    continue
                rate = (done - job.sample_work) / (now - job.sample_t)
                job.sample_t = now
                job.sample_work = done
                units = 50.0 + (job.idx * 2654435761 % 1000) / 10.0  # samples/s at full speed
                factor = max(0.0, 1.0 + noise * self._noise()) if noise else 1.0
                for action in control.on_sample(job, now, rate * units * factor):
                    self.apply(action)
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
        # or later growth. A refused growth is no change; the allocator caps.
        if not self.sched.resize(job, new):
            return False
        delta = new - old
        self.cores_useful -= useful
        self.cores_alloc += delta * job.nodes
        self.cores_useful += self._useful_cores(job)
        self._rebandwidth(job)
        if self.check:
            self._check_nodes(job.placement)
        return delta < 0

    def _rebandwidth(self, job: Job) -> None:
        new_bw = self._bw_demand(job)
        for node in job.placement:
            node.bw_used += new_bw - job.bw_pn
            node.version += 1  # co-runners' projected ends moved: replan reservations
        job.bw_pn = new_bw
        self._refresh(job.placement)

    # ----------------------------------------------------- interference episodes
    def _detected(self, cpu_job: Job) -> None:
        """A co-runner's quota was cut (the eliminator acted): open episodes on its
        nodes count as detected. Reclaim shrinks for a starting DNN job do not count."""
        for node in cpu_job.placement:
            for job in node.jobs:
                ep = self._episodes.get(job)
                if ep is not None and ep[1] is None:
                    ep[1] = self.now

    def _close_episode(self, job: Job, finished: bool = False) -> None:
        ep = self._episodes.pop(job, None)
        if ep is None:
            return
        if finished:
            self.episodes_open_at_finish += 1
            self.episode_log.append((ep[0], ep[1], None))
        else:
            self.episode_log.append((ep[0], ep[1], self.now))

    # ---------------------------------------------------------- performance
    def _bw_demand(self, job: Job) -> float:
        if job.perf is not None:
            return job.perf.bw_gbps * job.perf.core_speed(job.cores_pn * job.quota)
        return job.bw_per_core * job.cores_pn * job.quota

    def _useful_cores(self, job: Job) -> float:
        effective = job.cores_pn * job.quota
        if job.perf is not None:
            effective = min(effective, job.perf.c_opt)
        return effective * job.nodes

    def _local_speed(self, job: Job, node: Node) -> tuple[float, float]:
        """(speed from cores alone, slowdown from memory-bandwidth pressure x PCIe)."""
        if job.perf is not None:
            perf = job.perf
            base = perf.core_speed(job.cores_pn * job.quota)
            if self.policy.ideal_isolation:
                return base, 1.0
            slow = perf.slowdown((node.bw_used - job.bw_pn) / node.bw_gbps)
            if perf.pcie_heavy and len(node.pcie_heavy) > 1:
                pair = self.workload.profiles.pcie_pair_slowdown
                slow *= max(pair(job.model, o.model) for o in node.pcie_heavy if o is not job)
            return base, slow
        base = min(1.0, job.cores_pn * job.quota / job.cores_pn_req)
        if node.bw_used > node.bw_gbps and not self.policy.ideal_isolation:
            return base, node.bw_used / node.bw_gbps  # saturated bus shared pro rata
        return base, 1.0

    def _refresh(self, nodes: list[Node]) -> None:
        """Recompute the speed of every job on these nodes and reschedule its finish."""
        seen: set[Job] = set()
        for node in nodes:
            for job in node.jobs:
                if job in seen:
                    continue
                seen.add(job)
                base = 1.0
                speed = math.inf
                for n in job.placement:
                    b, slow = self._local_speed(job, n)
                    base = min(base, b)
                    speed = min(speed, b / slow)
                if job.is_dnn:
                    self._track_episode(job, base, speed)
                    self.gpu_base += job.gpus * (base - job.core_speed_now)
                job.core_speed_now = base
                self._set_speed(job, speed)

    def _track_episode(self, job: Job, base: float, speed: float) -> None:
        """Episodes of interference that co-located CPU jobs cause: the slowdown
        from all bandwidth pressure over the slowdown without the CPU jobs' share
        (what the eliminator can act on; DNN-DNN and PCIe pressure aside)."""
        perf = job.perf
        factor = 1.0
        if perf is not None and not self.policy.ideal_isolation:
            for n in job.placement:
                if n.cpu_job_cores == 0:
                    continue
                cpu_bw = sum(j.bw_pn for j in n.jobs if not j.is_dnn)
                others = n.bw_used - job.bw_pn
                f = perf.slowdown(others / n.bw_gbps) / perf.slowdown((others - cpu_bw) / n.bw_gbps)
                factor = max(factor, f)
        hurt = factor > 1.0 / (1.0 - _EPISODE_LOSS)
        if hurt and job not in self._episodes:
            self._episodes[job] = [self.now, None]
        elif not hurt and job in self._episodes:
            self._close_episode(job)

    def _settle(self, job: Job) -> None:
        now = self.now
        if now > job.last_update:
            if self._checkpoints and job in self._ckpt:
                self._checkpoint(job, now)
            job.remaining -= job.speed * (now - job.last_update)
            job.last_update = now

    def _checkpoint(self, job: Job, now: float) -> None:
        """Record the last checkpoint (every checkpoint_s of its run) up to now;
        speed is constant since the last settle, so the work then is exact."""
        every = self.policy.checkpoint_s
        last = job.start + math.floor((now - job.start) / every) * every
        if last > self._ckpt[job][0]:
            # Settles happen at every speed change, so last >= last_update here.
            done = job.work - job.remaining + job.speed * (last - job.last_update)
            self._ckpt[job] = (last, done)

    def _set_speed(self, job: Job, speed: float) -> None:
        self._settle(job)
        if speed == job.speed and job.version:
            return
        if job.is_dnn:
            self.gpu_eff += job.gpus * (speed - job.speed)
        job.speed = speed
        job.version += 1
        if speed > 0:
            self._push(self.now + max(job.remaining, 0.0) / speed, _FINISH, job, job.version)

    # --------------------------------------------------------------- checks
    def _check_nodes(self, nodes: list[Node]) -> None:
        for node in nodes:
            used_g = sum(j.gpus_pn for j in node.jobs)
            used_c = sum(j.cores_pn for j in node.jobs)
            if node.free_gpus < 0 or node.free_cores < 0:
                raise InvariantError(f"{node} over-committed")
            if used_g + node.free_gpus != node.gpus or used_c + node.free_cores != node.cores:
                raise InvariantError(f"{node} books do not balance: {used_g}g {used_c}c in use")
            cpu_c = sum(j.cores_pn for j in node.jobs if not j.is_dnn)
            if cpu_c != node.cpu_job_cores:
                raise InvariantError(
                    f"{node}: CPU jobs hold {cpu_c} cores, books say {node.cpu_job_cores}"
                )
            if node.mem_mib and node.free_mem < 0:
                raise InvariantError(f"{node} memory over-committed")

    # --------------------------------------------------------------- result
    def _episode_summary(self) -> dict:
        """Interference episodes: how long until a co-runner was throttled
        (detect) and until the job ran within 5% of its speed again (recover)."""
        log = self.episode_log + [(ep[0], ep[1], None) for ep in self._episodes.values()]
        detect = np.array([d - o for o, d, _ in log if d is not None])
        recover = np.array([e - o for o, d, e in log if d is not None and e is not None])
        gone = np.array([e - o for o, d, e in log if d is None and e is not None])
        return {
            "episodes": len(log),
            "loss_threshold": _EPISODE_LOSS,
            "detected": int(detect.size),
            "detect_s": describe(detect),
            "recover_s": describe(recover),
            "ended_undetected_s": describe(gone),
            "open_at_job_end": self.episodes_open_at_finish,
        }

    def _policy_stats(self) -> dict:
        out = {}
        from coda.policy.allocator import AdaptiveAllocator
        from coda.policy.eliminator import ContentionEliminator

        for name, part in (
            ("allocator", self.policy.job_control),
            ("eliminator", self.policy.node_control),
        ):
            if isinstance(part, (AdaptiveAllocator, ContentionEliminator)):
                out[name] = part.stats()
        return out

    def _result(self, wall: float) -> SimResult:
        is_dnn = self.workload.jobs.gpus > 0
        submit = np.asarray(self.submit)
        started = ~np.isnan(self.start)
        finished = ~np.isnan(self.end)
        w_end = min(self.w1, self.horizon)
        span = w_end - self.w0
        area = self.area

        def util(x: float, total: int) -> float:
            if total == 0 or span <= 0:  # no capacity, or a window of one instant
                return 0.0
            return x / (span * total)

        while self.sample_i < len(self.sample_times):
            self._sample(self.sample_i)
            self.sample_i += 1
        for job, since in self._requeued_at.items():  # preempted, not restarted by the end
            self.waited[job.idx] += max(0.0, self.now - since)
        for job, reason in self.sched.waiting():  # still queued at the end: why
            self.wait_reason[job.idx] = reason.token
        waits = Counter(r.split(":", 1)[0] for r in self.wait_reason if r)
        summary = {
            "jobs": {
                "dnn": int(is_dnn.sum()),
                "cpu": int((~is_dnn).sum()),
                "finished": int(finished.sum()),
                "unfinished": int((~finished).sum()),
                "unschedulable": int(self.unschedulable.sum()),
                "never_started": int((~started).sum()),
            },
            "window": {"start": self.w0, "end": w_end, "basis": self.window_basis},
            "gpu_util_effective": util(area["gpu_eff"], self.total_gpus),
            "gpu_util_allocated": util(area["gpu_alloc"], self.total_gpus),
            # allocated - lost to too few cores - lost to interference = effective
            "gpu_lost_cores": util(area["gpu_alloc"] - area["gpu_base"], self.total_gpus),
            "gpu_lost_contention": util(area["gpu_base"] - area["gpu_eff"], self.total_gpus),
            "cpu_util": util(area["cores_alloc"], self.total_cores),
            "cpu_util_useful": util(area["cores_useful"], self.total_cores),
            "dnn_queue_delay_s": describe(self.waited[is_dnn & started]),
            "dnn_jct_s": describe((self.end - submit)[is_dnn & finished]),
            "cpu_queue_delay_s": describe(self.waited[~is_dnn & started]),
            "cpu_jct_s": describe((self.end - submit)[~is_dnn & finished]),
            "makespan_s": float(np.nanmax(self.end) - self.submit[0]) if finished.any() else None,
            "wall_seconds": wall,
            "events": self.events + self.n,
            "events_per_s": (self.events + self.n) / wall if wall > 0 else None,
            "max_work_error": self.work_done_error,
            "preemption": {
                "count": int(self.preempted.sum()),
                "jobs": int((self.preempted > 0).sum()),
                "lost_core_s": self.lost_core_s,
            },
            # Jobs by the last reason they waited (a job that never waited: none).
            "waits_by_reason": dict(sorted(waits.items())),
            "contention": self._episode_summary(),
            "policy_stats": self._policy_stats(),
        }
        jobs = {
            "job_id": np.asarray(self.workload.jobs.ids, dtype=object),
            "is_dnn": is_dnn,
            "submit": submit,
            "start": self.start,
            "end": self.end,
            "gpus": self.workload.jobs.gpus,
            "cores_requested": self.workload.jobs.cores,
            "cores_granted": self.granted,
            "wait_reason": np.asarray(self.wait_reason, dtype=object),
        }
        return SimResult(summary=summary, timeseries=self.series, jobs=jobs)
