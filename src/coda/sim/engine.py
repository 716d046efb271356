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
from bisect import bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from coda.policy.allocator import free_room
from coda.policy.framework import Action, Policy, Preempt, SetQuota
from coda.policy.state import CPU, DNN, GPU_POOL, Job, Node
from coda.sim.index import PoolIndex
from coda.sim.result import TIMESERIES_COLUMNS, SimResult, describe
from coda.workload.cluster import ClusterSpec
from coda.workload.perf import Workload

_FINISH = 0
_TICK = 1  # node control (the eliminator)
_SAMPLE = 2  # throughput samples for the job control (the allocator)
_EPS = 1e-9
_MAX_ROUNDS = 64  # scheduling rounds at one instant (each starts jobs or moves a reservation)
_RESERVATION_CANDIDATES = 32  # nodes considered when planning a blocked job's reservation
# An interference episode: a DNN job runs this much below its speed from cores
# because of memory-bandwidth pressure (the eliminator's detect/recover times).
_EPISODE_LOSS = 0.05
# A watched node unchanged this long, with nothing held by its controls, stops being
# ticked until it changes (Simulator._resting); ten minutes, the eliminator's calm_s.
_REST_AFTER_S = 600.0


class InvariantError(AssertionError):
    """The simulator broke one of its own invariants (only checked when asked)."""


@dataclass
class _Reservation:
    job: Job
    nodes: list[Node]
    shadow: float  # when the reserved job is expected to be able to start
    versions: tuple[int, ...]


class _Bucket:
    """Queued jobs of one shape, sorted by (queue key, trace row); started jobs
    are skipped lazily and trimmed from the front."""

    __slots__ = ("keys", "jobs", "pos")

    def __init__(self) -> None:
        self.keys: list[tuple] = []
        self.jobs: list[Job] = []
        self.pos = 0  # entries before pos have all started

    def add(self, key: tuple, job: Job) -> None:
        at = bisect_right(self.keys, key)
        self.keys.insert(at, key)
        self.jobs.insert(at, job)
        self.pos = min(self.pos, at)

    def _stale(self, i: int) -> bool:
        # Started, or requeued (after a preemption) under a new key elsewhere.
        job = self.jobs[i]
        return job.start >= 0 or job.queue_key != self.keys[i]

    def front(self) -> tuple[tuple, Job] | None:
        jobs, i = self.jobs, self.pos
        while i < len(jobs) and self._stale(i):
            i += 1
        if i > 64 and i * 2 > len(jobs):  # trim the started prefix
            del self.keys[:i], self.jobs[:i]
            i = 0
        self.pos = i
        return (self.keys[i], jobs[i]) if i < len(jobs) else None

    def next_after(self, at: int) -> tuple[tuple, int] | None:
        jobs = self.jobs
        i = at + 1
        while i < len(jobs) and self._stale(i):
            i += 1
        return (self.keys[i], i) if i < len(jobs) else None


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
        max_gpus = max((n.gpus for n in self.nodes), default=0)
        self.index: dict[str, PoolIndex] = {}
        for node in self.nodes:
            if node.pool not in self.index:
                self.index[node.pool] = PoolIndex(max_gpus)
            self.index[node.pool].add(node)
        # DNN jobs see the cores CPU jobs hold on GPU nodes as free when the
        # policy reclaims them; they search this second index of the GPU pool.
        self.dnn_index: PoolIndex | None = None
        if policy.reclaim is not None and GPU_POOL in self.index:
            self.dnn_index = PoolIndex(max_gpus, dnn_view=True)
            for node in self.nodes:
                if node.pool == GPU_POOL:
                    self.dnn_index.add(node)
        # Distinct node shapes per pool, for the "can this job ever run" check.
        self.pool_shapes: dict[str, dict[tuple[int, int, int], int]] = {}
        for node in self.nodes:
            shapes = self.pool_shapes.setdefault(node.pool, {})
            key = (node.gpus, node.cores, node.mem_mib)
            shapes[key] = shapes.get(key, 0) + 1
        self.total_gpus = sum(n.gpus for n in self.nodes)
        # Plugins that want the cluster's shape (kube: the framework's node lister) get it once.
        for part in (
            policy.queue_sort, policy.pools, policy.core_count, *policy.filters,
            policy.reclaim, policy.node_control, policy.job_control,
        ):  # fmt: skip
            hook = getattr(part, "observe_cluster", None)
            if hook is not None:
                hook(self.nodes)
        self.total_cores = sum(n.cores for n in self.nodes)

        jobs = workload.jobs
        self.n = len(jobs)
        self.submit = jobs.submit.tolist()
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
        # Each array (DNN, CPU) is one queue kept as FIFO buckets of alike jobs
        # (same GPUs and cores per node, nodes, model), each sorted by queue key.
        # Jobs of a bucket fit or fail alike, so a cycle looks at bucket fronts,
        # not at every queued job.
        self.buckets: dict[str, dict[tuple, _Bucket]] = {DNN: {}, CPU: {}}
        self.reservations: dict[str, _Reservation | None] = {DNN: None, CPU: None}
        self.dirty: dict[Node, None] = {}  # nodes whose free capacity grew since the last cycle
        self._deferred: dict[Node, None] = {}  # dirty nodes a depth-limited sweep left
        self._live: list[Node] | None = None  # the running cycle's dirty nodes
        self._live_set: set[Node] = set()
        # Stand-in jobs, to ask the policy which pools each array may use.
        self._probe_dnn = Job(-1, "probe", 0.0, 1, 1, 0, 1, 0.0)
        self._probe_cpu = Job(-1, "probe", 0.0, 0, 1, 0, 1, 0.0)
        # Jobs alike in what decides their core count share a queue bucket.
        self._core_group = getattr(policy.core_count, "group_key", lambda job: job.cores_pn_req)

        self.busy: dict[Node, None] = {}  # nodes with at least one job
        # Nodes the job/node controls want ticked (and their DNN jobs sampled).
        self.watched: dict[Node, None] = {}
        self._quiet: dict[Node, tuple[tuple[int, ...], float]] = {}  # signature, since when
        self.rests = 0  # times a watched node went to rest
        nc = policy.node_control
        self._nc_watching = getattr(nc, "watching", None) if nc is not None else None
        if noise < 0:
            raise ValueError(f"noise must be >= 0, got {noise}")
        self.noise = float(noise)
        self.rng = np.random.default_rng([seed, 11])
        self._noise_buf = np.zeros(0)
        self._noise_i = 0
        self.requeue: list[Job] = []  # preempted jobs, queued again after the cycle
        self._carry: set[Job] = set()  # requeued jobs still owed a full search
        self._generation = getattr(policy.core_count, "generation", None)
        # Checkpoints of preemptable CPU jobs are tracked only where preemption exists.
        self._checkpoints = policy.reclaim is not None
        self._armed = {_TICK: False, _SAMPLE: False}  # a tick of this kind is in the heap
        self.running = 0
        self._fit_cache: dict[tuple, bool] = {}

        # Aggregates, updated incrementally; integrated over the window.
        self.gpu_eff = 0.0
        self.gpu_base = 0.0  # sum of GPUs x speed from cores alone (no interference)
        self.gpu_alloc = 0
        self.cores_alloc = 0
        self.cores_useful = 0.0
        self.count = {"dnn_queued": 0, "cpu_queued": 0, "dnn_running": 0, "cpu_running": 0}
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
        new_jobs: list[Job] = []
        while True:
            t_arr = submit[next_i] if next_i < n else math.inf
            t_evt = heap[0][0] if heap else math.inf
            t = t_arr if t_arr <= t_evt else t_evt
            if t == math.inf or t > self.horizon:
                break
            self._advance(t)
            while next_i < n and submit[next_i] <= t:
                job = self._arrive(next_i)
                if job is not None:
                    new_jobs.append(job)
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
            generation = getattr(self.policy.core_count, "generation", None)
            if generation != self._generation:
                # Core counts changed (the allocator learned a shape): queued DNN
                # jobs may fit where they failed before, i.e. on any node with an
                # idle GPU (only DNN jobs' core counts are learned).
                self._generation = generation
                for node in self.nodes:
                    if node.free_gpus:
                        self.dirty[node] = None
            if self.dirty or new_jobs or self._carry:
                self._schedule(new_jobs)
                new_jobs = []
                if self.check:
                    self._check_no_waiting_fit()
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
        )
        cores_pn = self._cores(job)
        if not self._can_ever_fit(job, cores_pn):
            self.unschedulable[i] = True
            return None
        self._enqueue(job)
        return job

    def _enqueue(self, job: Job) -> None:
        shape = (job.kind, job.gpus_pn, job.nodes, self._core_group(job))
        bucket = self.buckets[job.kind].get(shape)
        if bucket is None:
            bucket = self.buckets[job.kind][shape] = _Bucket()
        # The preemption count keeps a requeued job's new entry apart from its old one.
        job.queue_key = (self.policy.queue_sort.key(job), job.idx, job.preemptions)
        bucket.add(job.queue_key, job)
        self.count[f"{job.kind}_queued"] += 1

    def _can_ever_fit(self, job: Job, cores_pn: int) -> bool:
        pools = self.policy.pools.pools(job)
        key = (pools, job.gpus_pn, cores_pn, job.mem_pn, job.nodes)
        hit = self._fit_cache.get(key)
        if hit is None:
            fitting = 0
            for pool in pools:
                for (g, c, m), k in self.pool_shapes.get(pool, {}).items():
                    if g >= job.gpus_pn and c >= cores_pn and (m == 0 or m >= job.mem_pn):
                        fitting += k
            hit = self._fit_cache[key] = fitting >= job.nodes
        return hit

    # ------------------------------------------------------------ scheduling
    def _schedule(self, new_jobs: list[Job]) -> None:
        """Scheduling cycles at one instant, until nothing is left to retry.

        A job that was already queued failed to fit at an earlier cycle, and
        free capacity has since grown only on the "dirty" nodes (a job left,
        cores were given back, a reservation moved or was spent). So old jobs
        are tried on those nodes only; new arrivals search the whole index.
        A cycle thus costs the queue's bucket fronts and what changed, not the
        length of the queue or the size of the cluster.
        """
        fresh = set(new_jobs) | self._carry
        self._carry = set()
        for _ in range(_MAX_ROUNDS):
            dirty = list(self.dirty)
            self.dirty = {}
            self._cycle(dirty, fresh)
            fresh = set()  # they have had their full search
            if self.requeue:
                # Preempted mid-cycle: queued now (not while buckets were being
                # walked) and given a full search like new arrivals.
                for job in self.requeue:
                    self._enqueue(job)
                fresh = set(self.requeue)
                self.requeue = []
            elif not self.dirty:
                break
        # Nodes a depth-limited sweep did not get to: retried at the next event;
        # so are requeued jobs the round limit left without their full search.
        self.dirty.update(self._deferred)
        self._deferred = {}
        self._carry = {job for job in fresh if job.start < 0}

    def _cycle(self, dirty: list[Node], fresh: set[Job]) -> None:
        policy = self.policy
        # Nodes that gain room during the cycle (a reservation spent or moved)
        # join `dirty` at once, so the jobs kept off them are retried now.
        self._live, self._live_set = dirty, set(dirty)
        # node idx -> [(shadow, owner's queue key, owner)]: binds later-queued jobs only
        active: dict[int, list[tuple]] = {}
        heads = self._start_heads(dirty, fresh, active)
        if not policy.backfill and any(heads.values()):
            # Strict FIFO per array: nothing behind a blocked head may start.
            blocked = {arr for arr, h in heads.items() if h is not None}
        else:
            blocked = set()
        self._backfill(dirty, fresh, active, heads, blocked)
        self._live = None

    def _earliest(self, arr: str) -> Job | None:
        """The first queued job of an array, in queue order."""
        best = None
        buckets = self.buckets[arr]
        for shape in list(buckets):
            front = buckets[shape].front()
            if front is None:
                del buckets[shape]
            elif best is None or front[1].queue_key < best.queue_key:
                best = front[1]
        return best

    def _start_heads(
        self, dirty: list[Node], fresh: set[Job], active: dict[int, list[tuple]]
    ) -> dict[str, Job | None]:
        """Start each array's first jobs while they fit; the first that does not
        is the array's head and holds a reservation. Heads are settled in queue
        order across arrays, so an earlier head's reservation binds a later one."""
        heads: dict[str, Job | None] = {DNN: None, CPU: None}
        pending = {arr: self._earliest(arr) for arr in (DNN, CPU)}
        while any(pending.values()):
            arr = min((a for a in pending if pending[a]), key=lambda a: pending[a].queue_key)
            job = pending[arr]
            if self._try(job, job in fresh, dirty, active):
                pending[arr] = self._earliest(arr)
                continue
            heads[arr] = job
            pending[arr] = None
            if self.policy.backfill:
                self._hold(job, active)
        return heads

    def _backfill(
        self,
        dirty: list[Node],
        fresh: set[Job],
        active: dict[int, list[tuple]],
        heads: dict[str, Job | None],
        blocked: set[str],
    ) -> None:
        """Try the jobs behind the heads, in queue order, where they do not delay
        a reservation. Old jobs are tried on the dirty nodes, bucket by bucket in
        merged queue order; a bucket stops at its first job that does not fit
        what those nodes still offer (room only shrinks while this runs, so no
        job of the same shape behind it can fit; nodes that join mid-cycle are
        also dirty for the next round). New jobs get a full search."""
        depth = self.policy.backfill_depth
        room = self._room(dirty)
        seen = len(dirty)
        heap: list[tuple] = []
        for arr in (DNN, CPU):
            if arr in blocked or not dirty:
                continue
            for shape, bucket in self.buckets[arr].items():
                front = bucket.front()
                if front is not None:
                    heap.append((front[0], arr, shape, bucket.pos))
        heapq.heapify(heap)
        examined = {DNN: 0, CPU: 0}
        while heap:
            key, arr, shape, at = heapq.heappop(heap)
            bucket = self.buckets[arr][shape]
            job = bucket.jobs[at]
            if job.start < 0 and job is not heads[arr] and job not in fresh:
                if len(dirty) != seen:  # nodes joined mid-cycle
                    room, seen = self._room(dirty), len(dirty)
                max_g, max_c, max_m = room[arr]
                cores_pn = self._cores(job)
                if job.gpus_pn > max_g or cores_pn > max_c:
                    continue  # no older job behind it in this bucket fits the dirty nodes
                # A job too big for their memory is passed over without an attempt
                # (jobs behind it may need less), so it does not use up the depth.
                if job.mem_pn <= max_m or job.nodes > 1:
                    if examined[arr] >= depth:
                        self._deferred.update(dict.fromkeys(dirty))
                        continue
                    examined[arr] += 1  # depth counts real placement attempts
                    if self._try(job, False, dirty, active, cores_pn):
                        room = self._room(dirty)
            nxt = bucket.next_after(at)
            if nxt is not None:
                heapq.heappush(heap, (nxt[0], arr, shape, nxt[1]))
        # New arrivals come last in a FIFO queue; each gets a full search.
        for job in sorted(fresh, key=lambda j: j.queue_key):
            if job.start < 0 and job is not heads[job.kind] and job.kind not in blocked:
                self._try(job, True, dirty, active)

    def _mark_dirty(self, node: Node) -> None:
        """Node gained room: retry queued jobs on it, in this cycle if one runs."""
        self.dirty[node] = None
        live = self._live
        if live is not None and node not in self._live_set:
            live.append(node)
            self._live_set.add(node)

    def _cores(self, job: Job) -> int:
        return self.policy.core_count.cores_per_node(job)

    @staticmethod
    def _estimate(job: Job, cores_pn: int) -> None:
        """Runtime estimate for backfill: its work at these cores, no contention."""
        job.estimate = job.work / max(job.core_speed(cores_pn), _EPS)

    def _try(
        self,
        job: Job,
        new: bool,
        dirty: list[Node],
        active: dict[int, list[tuple]],
        cores_pn: int | None = None,
    ) -> bool:
        """Start the job if it fits (an old job: on a dirty node); True if started."""
        if cores_pn is None:
            cores_pn = self._cores(job)
        self._estimate(job, cores_pn)
        nodes = self._find_nodes(job, cores_pn, active, None if new else dirty)
        if nodes is None:
            return False
        self._start(job, nodes, cores_pn)
        return True

    def _room(self, dirty: list[Node]) -> dict[str, tuple[int, int, float]]:
        """(max free GPUs, cores, memory) over the dirty nodes each array may use."""
        room = {}
        for arr, probe in ((DNN, self._probe_dnn), (CPU, self._probe_cpu)):
            pools = self.policy.pools.pools(probe)
            g = c = -1
            m = -1.0
            reclaim = arr == DNN and self.dnn_index is not None
            for node in dirty:
                if node.pool in pools:
                    g = max(g, node.free_gpus)
                    c = max(c, node.free_cores + node.cpu_job_cores if reclaim else node.free_cores)
                    m = max(m, node.free_mem if node.mem_mib else math.inf)
            needs_gpu = arr == DNN
            room[arr] = (g, c, m) if c > 0 and (g > 0 or not needs_gpu) else (-1, -1, -1.0)
        return room

    def _hold(self, job: Job, active: dict[int, list[tuple]]) -> None:
        """Give a blocked head its reservation and make it bind later-queued jobs."""
        old = self.reservations[job.kind]
        resv = self._reserve_for(job, self._cores(job), active)
        if old is not None and old is not resv:
            for node in old.nodes:
                self._mark_dirty(node)  # jobs kept off these nodes may fit now
        if resv is not None:
            for node in resv.nodes:
                active.setdefault(node.idx, []).append((resv.shadow, job.queue_key, job))

    def _find_nodes(
        self,
        job: Job,
        cores_pn: int,
        active: dict[int, list[tuple]],
        only: list[Node] | None,
    ) -> list[Node] | None:
        """Feasible nodes in best-fit order, then the policy's scores pick among them.

        ``only``: search just these nodes (a single-node job retried after a
        departure); a gang job always searches the index, since the nodes it
        needs beside a freed one may have been free all along.
        """
        policy = self.policy
        need = job.nodes
        want = max(need, policy.candidates_to_score)
        pools = policy.pools.pools(job)
        reclaim = job.is_dnn and self.dnn_index is not None
        if only is not None and need == 1:
            cands = sorted(
                (
                    n
                    for n in only
                    if n.pool in pools
                    and n.free_gpus >= job.gpus_pn
                    and (n.free_cores + n.cpu_job_cores if reclaim else n.free_cores) >= cores_pn
                ),
                # Nodes where it would have to reclaim CPU jobs' cores come last.
                key=lambda n: (
                    pools.index(n.pool),
                    n.free_cores < cores_pn,
                    n.free_gpus,
                    n.free_cores,
                    n.idx,
                ),
            )
            streams = [cands]
        else:
            streams = []
            for p in pools:
                if p in self.index:
                    streams.append(self.index[p].best_fit(job.gpus_pn, cores_pn))
                    if reclaim and p == GPU_POOL:
                        # Then the nodes that fit only once CPU jobs give cores back.
                        streams.append(self._needs_reclaim(job.gpus_pn, cores_pn))
        mem = job.mem_pn
        finish_by = self.now + job.estimate
        key = job.queue_key
        found: list[Node] = []
        for stream in streams:
            for node in stream:
                if mem and node.mem_mib and node.free_mem < mem:
                    continue
                held = active.get(node.idx)
                if held is not None and any(
                    owner is not job
                    and okey < key
                    and finish_by > shadow
                    and self._binds(owner, job)
                    for shadow, okey, owner in held
                ):
                    continue  # would delay an earlier job's reservation
                if policy.filters and not policy.allows(job, node, cores_pn):
                    continue
                found.append(node)
                if len(found) >= want:
                    break
            if len(found) >= want:
                break
        if len(found) < need:
            return None
        return policy.pick(job, found, cores_pn, need)

    def _needs_reclaim(self, gpus: int, cores_pn: int) -> Iterator[Node]:
        for node in self.dnn_index.best_fit(gpus, cores_pn):
            if node.free_cores < cores_pn:
                yield node

    def _binds(self, owner: Job, job: Job) -> bool:
        """Whether owner's reservation binds job. A CPU job's does not bind a DNN
        job where the policy reclaims: the DNN job would take those cores back."""
        return owner.is_dnn or not job.is_dnn or self.dnn_index is None

    def _reserve_for(
        self, job: Job, cores_pn: int, active: dict[int, list[tuple]]
    ) -> _Reservation | None:
        """Plan when and where a blocked job can start (the backfill shadow time).

        Kept across cycles while the same job is blocked and its nodes are
        unchanged. Nodes an earlier-queued head holds are left out: that head
        goes first there (once it starts, this plan is redone).
        """
        old = self.reservations[job.kind]
        if (
            old is not None
            and old.job is job
            and old.shadow > self.now
            and old.versions == tuple(n.version for n in old.nodes)
        ):
            return old
        key = job.queue_key
        policy = self.policy
        times: list[tuple[float, int, Node]] = []
        for pool in policy.pools.pools(job):
            index = self.index.get(pool)
            if index is None:
                continue
            for node in index.most_free():
                if len(times) >= _RESERVATION_CANDIDATES:
                    break
                if any(
                    okey < key and self._binds(owner, job)
                    for _, okey, owner in active.get(node.idx, ())
                ):
                    continue
                if policy.filters and not policy.allows(job, node, cores_pn):
                    continue
                t = self._available_at(node, job, cores_pn)
                if t < math.inf:
                    times.append((t, node.idx, node))
        if len(times) < job.nodes:
            self.reservations[job.kind] = None
            return None
        times.sort(key=lambda x: (x[0], x[1]))
        chosen = [node for _, _, node in times[: job.nodes]]
        shadow = max(t for t, _, _ in times[: job.nodes])
        resv = _Reservation(job, chosen, shadow, tuple(n.version for n in chosen))
        self.reservations[job.kind] = resv
        return resv

    def _available_at(self, node: Node, job: Job, cores_pn: int) -> float:
        """When node could host job, if its running jobs end as now projected."""
        g, c, m = node.free_gpus, node.free_cores, node.free_mem
        reclaim = job.is_dnn and self.dnn_index is not None
        if reclaim:
            c += node.cpu_job_cores  # CPU jobs' cores are taken back when it starts
        need_g, need_m = job.gpus_pn, job.mem_pn
        if node.gpus < need_g or node.cores < cores_pn or (node.mem_mib and node.mem_mib < need_m):
            return math.inf
        if g >= need_g and c >= cores_pn and (not node.mem_mib or m >= need_m):
            return self.now
        ends = sorted((self._projected_end(j), j.idx, j) for j in node.jobs)
        for t, _, j in ends:
            g += j.gpus_pn
            c += 0 if reclaim and not j.is_dnn else j.cores_pn
            m += j.mem_pn
            if g >= need_g and c >= cores_pn and (not node.mem_mib or m >= need_m):
                return t
        return math.inf

    def _projected_end(self, job: Job) -> float:
        if job.speed <= 0:
            return math.inf
        return job.last_update + job.remaining / job.speed

    # ------------------------------------------------------- start / finish
    def _reindex(self, node: Node) -> None:
        self.index[node.pool].update(node)
        if self.dnn_index is not None and node.pool == GPU_POOL:
            self.dnn_index.update(node)

    def _start(self, job: Job, nodes: list[Node], cores_pn: int) -> None:
        now = self.now
        if job.is_dnn and self.dnn_index is not None:
            for node in nodes:
                if node.free_cores < cores_pn:
                    self._reclaim(job, node, cores_pn - node.free_cores)
        job.placement = nodes
        job.cores_pn = cores_pn
        job.quota = 1.0
        job.start = now
        job.last_update = now
        job.sample_t = now
        job.sample_work = job.work - job.remaining
        if self._checkpoints and not job.is_dnn:
            self._ckpt[job] = (now, job.work - job.remaining)  # (last checkpoint, work done)
        self.count[f"{job.kind}_queued"] -= 1
        self.count[f"{job.kind}_running"] += 1
        self.running += 1
        if math.isnan(self.start[job.idx]):
            self.start[job.idx] = now
            self.waited[job.idx] = now - job.submit
        else:  # restarted after a preemption
            self.waited[job.idx] += now - self._requeued_at.pop(job, now)
        self.granted[job.idx] = cores_pn * job.nodes
        resv = self.reservations[job.kind]
        if resv is not None and resv.job is job:
            # Its reservation is spent; jobs it kept off those nodes may fit there now.
            self.reservations[job.kind] = None
            for node in resv.nodes:
                self._mark_dirty(node)
        job.bw_pn = self._bw_demand(job)
        for node in nodes:
            node.free_gpus -= job.gpus_pn
            node.free_cores -= cores_pn
            node.free_mem -= job.mem_pn
            if not job.is_dnn:
                node.cpu_job_cores += cores_pn
            node.jobs[job] = None
            node.bw_used += job.bw_pn
            if job.perf is not None and job.perf.pcie_heavy:
                node.pcie_heavy.append(job)
            node.version += 1
            self._reindex(node)
            self.busy[node] = None
        self.gpu_alloc += job.gpus
        self.cores_alloc += cores_pn * job.nodes
        self.cores_useful += self._useful_cores(job)
        if job.is_dnn and self.policy.filters and self.count["cpu_queued"]:
            # Filters may depend on idle GPUs (CODA's reserve for them shrinks
            # when they are taken), so queued CPU jobs are worth a retry here.
            for node in nodes:
                if node.free_cores:
                    self._mark_dirty(node)
        for r in self.policy.reserve:
            r.reserve(job, nodes, now)
        self._refresh(nodes)
        control = self.policy.job_control
        if control is not None and job.is_dnn:
            for action in control.on_start(job, now):
                self.apply(action)
        for node in nodes:
            self._rewatch(node)
        if self.check:
            self._check_nodes(nodes)

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
        nodes = job.placement
        job.placement = []
        for node in nodes:
            node.free_gpus += job.gpus_pn
            node.free_cores += job.cores_pn
            node.free_mem += job.mem_pn
            if not job.is_dnn:
                node.cpu_job_cores -= job.cores_pn
            del node.jobs[job]
            node.bw_used -= job.bw_pn
            if job in node.pcie_heavy:
                node.pcie_heavy.remove(job)
            node.version += 1
            self._reindex(node)
            self._mark_dirty(node)
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
        for r in self.policy.reserve:
            r.unreserve(job, now)
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
        job.queue_key = ()  # its old queue entry is dead from now on
        self.lost_core_s += lost * job.cores_pn_req * job.nodes
        nodes = self._release(job)
        for r in self.policy.reserve:
            r.unreserve(job, now)
        job.start = -1.0
        job.preemptions += 1
        self.preempted[job.idx] += 1
        self._requeued_at[job] = now
        self.requeue.append(job)
        self._refresh(nodes)
        for node in nodes:
            self._rewatch(node)

    def _reclaim(self, job: Job, node: Node, need: int) -> None:
        """Free ``need`` cores that CPU jobs hold on node, as the policy chooses."""
        before = node.free_cores
        for action in self.policy.reclaim.reclaim(job, node, need, self.now):
            self.apply(action)
        if node.free_cores - before < need:
            raise InvariantError(
                f"reclaim freed {node.free_cores - before} of the {need} cores {job} needs "
                f"on {node}"
            )

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
            watching = self._nc_watching
            want = watching(node) if watching is not None else bool(node.jobs)
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
        at_rest = getattr(self.policy.node_control, "at_rest", None)
        if self.policy.node_control is not None and (at_rest is None or not at_rest(node)):
            return False
        jc = self.policy.job_control
        if jc is not None:
            waiting = getattr(jc, "waiting_for_room", None)
            for job in node.jobs:
                if job.is_dnn and jc.wants_samples(job):
                    if waiting is None or not waiting(job):
                        return False
        self.rests += node in self.watched
        return True

    def _arm(self) -> None:
        policy = self.policy
        for kind, part, period in (
            (_TICK, policy.node_control, getattr(policy.node_control, "period_s", 0.0)),
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
        if new < 1:
            raise ValueError(f"a running job keeps at least one core, got {new}")
        delta = new - job.cores_pn
        if delta == 0:
            return False
        if delta > 0 and delta > free_room(job.placement):
            # Growth comes from free cores only (docs/policies.md, "Probes use free
            # cores only"): CPU jobs' cores are reclaimed for a DNN job's start, never
            # for a probe or later growth, which would cost a CPU job its work to
            # measure a core the DNN job may not need. Refused; the allocator caps.
            return False
        self.cores_useful -= self._useful_cores(job)
        for node in job.placement:
            node.free_cores -= delta
            if not job.is_dnn:
                node.cpu_job_cores += delta
            self._reindex(node)
            if delta < 0:
                self._mark_dirty(node)
        job.cores_pn = new
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

    def _check_no_waiting_fit(self) -> None:
        """After a cycle no queued job may fit anywhere, unless a reservation of
        an earlier-queued job forbids it (or, without backfill, it is not first)."""
        active: dict[int, list[tuple]] = {}
        for resv in self.reservations.values():
            if resv is not None and resv.job.start < 0:
                for node in resv.nodes:
                    active.setdefault(node.idx, []).append(
                        (resv.shadow, resv.job.queue_key, resv.job)
                    )
        for arr in (DNN, CPU):
            waiting = sorted(
                (j for b in self.buckets[arr].values() for j in b.jobs if j.start < 0),
                key=lambda j: j.queue_key,
            )
            if not self.policy.backfill:
                waiting = waiting[:1]
            for job in waiting:
                cores_pn = self._cores(job)
                self._estimate(job, cores_pn)
                if self._find_nodes(job, cores_pn, active, None) is not None:
                    raise InvariantError(f"{job} fits at t={self.now} but was left waiting")

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
        for name, part in (
            ("allocator", self.policy.job_control),
            ("eliminator", self.policy.node_control),
        ):
            stats = getattr(part, "stats", None)
            if stats is not None:
                out[name] = stats()
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
        }
        return SimResult(summary=summary, timeseries=self.series, jobs=jobs)
