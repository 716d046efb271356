"""The control loops' timing in the simulator: which nodes are ticked and sampled,
the node control's ticks, the job control's throughput samples, and resting nodes
that cost nothing while nothing on them changes."""

from __future__ import annotations

from typing import Final

import numpy as np

from coda.control import ControlLoop
from coda.control.loop import ControlSink
from coda.cycle import InvariantError
from coda.policy.framework import Policy, answers_on_calls
from coda.policy.state import DNN, Job, Node
from coda.sim.constants import REST_AFTER_S, SAMPLE, TICK
from coda.sim.kernel import EventKernel
from coda.sim.physics import SpeedModel

# Knuth's multiplicative hash constant: spreads job ids evenly over the range of
# each job's own throughput units (50 to 150 samples/s at full speed).
_SPREAD: Final = 2654435761


class Controls:
    """``noise``: relative standard deviation of each throughput sample handed to the
    job control (a real job's samples are noisy), drawn from ``rng``. ``loop`` is the
    control loop every body runs, carrying its actions out through ``sink`` (the
    executor). ``check``: compare the kept answers with the job control's at each read
    (slow; for tests)."""

    def __init__(
        self,
        policy: Policy,
        kernel: EventKernel,
        speed: SpeedModel,
        noise: float,
        rng: np.random.Generator,
        sink: ControlSink,
        check: bool = False,
    ) -> None:
        self.policy = policy
        self.kernel = kernel
        self.speed = speed
        self.check = check
        jc = policy.job_control
        # Where the job control's answers change only in its own calls, they are kept
        # from the last one: the jobs that want samples (each with its nodes) and how
        # many want them on each node, not a rescan of every job at every change.
        self._kept = jc is None or answers_on_calls(jc)
        self._wanting: dict[Job, list[Node]] = {}
        self._wanted_on: dict[Node, int] = {}
        heard = self._heard if jc is not None and self._kept else None
        self.loop = ControlLoop(policy, sink, heard)
        self.noise = noise
        self.rng = rng
        self._noise_buf = np.zeros(0)
        self._noise_i = 0
        # Nodes the job/node controls want ticked (and their DNN jobs sampled).
        self.watched: dict[Node, None] = {}
        self._quiet: dict[Node, tuple[tuple[int, ...], float]] = {}  # signature, since when
        self.rests = 0  # times a watched node went to rest
        self.armed = {TICK: False, SAMPLE: False}  # a tick of this kind is in the heap

    # ------------------------------------------------- who wants samples
    def _heard(self, job: Job) -> None:
        """After a call of the job control for job: keep its answer."""
        jc = self.policy.job_control
        assert jc is not None  # heard only where there is one
        wants = jc.wants_samples(job)
        wanting = self._wanting
        if wants == (job in wanting):
            return
        counts = self._wanted_on
        if wants:
            nodes = wanting[job] = job.placement  # replaced, never changed, while it runs
            for node in nodes:
                counts[node] = counts.get(node, 0) + 1
            return
        for node in wanting.pop(job):  # its nodes then: a finished job has left them
            left = counts[node] - 1
            if left:
                counts[node] = left
            else:
                del counts[node]

    def _wants(self, job: Job) -> bool:
        """Whether the job control wants job's samples."""
        if self._kept:
            return job in self._wanting
        jc = self.policy.job_control
        return jc is not None and jc.wants_samples(job)

    def _needs_sample(self, job: Job) -> bool:
        """Whether a DNN job's next window is wanted (``ControlLoop.needs_sample``)."""
        if not self._kept:
            return self.loop.needs_sample(job)
        return job in self._wanting or self.loop.node_control_needs(job)

    def _watches(self, node: Node) -> bool:
        """Whether node needs ticks and its DNN jobs samples (``ControlLoop.watches``)."""
        loop = self.loop
        if not self._kept:
            return loop.watches(node)
        kept = node in self._wanted_on
        if self.check and kept != loop.jobs_want(node):
            raise InvariantError(f"{node}: the kept answers of its jobs' control are stale")
        return kept or loop.node_control_watches(node)

    # ---------------------------------------------------------- node control
    def rewatch(self, node: Node) -> None:
        """Ask the controls whether node still needs ticks; start its meters if new."""
        quiet = self._quiet
        if quiet:
            # A gang job's speed depends on all its nodes: a change here may wake them.
            watched = self.watched
            for job in node.jobs:
                if job.nodes == 1:
                    continue  # a job on this node alone (its placement) wakes nothing else
                for other in job.placement:
                    if other is not node and other in quiet and other not in watched:
                        self._rewatch_one(other)
        self._rewatch_one(node)

    def _rewatch_one(self, node: Node) -> None:
        want = self._watches(node)
        if want and self._resting(node):
            want = False
        watched = self.watched
        if want:
            if node not in watched:
                if not watched:
                    self.arm()
                watched[node] = None
                now = self.kernel.now
                launching = self.speed.launching
                settle = self.speed.settle
                for job in node.jobs:  # samples start with the watch, or when the job works
                    if job.kind == DNN:
                        settle(job)
                        job.sample_t = launching.get(job, now) if launching else now
                        job.sample_work = job.work - job.remaining
        elif node in watched:
            del watched[node]

    def _signature(self, node: Node) -> tuple[int, ...]:
        """Versions of the node and of every node its jobs span: while they hold,
        no job on it changed speed (a gang job's speed depends on all its nodes)."""
        for job in node.jobs:
            if job.nodes != 1:
                break
        else:  # its jobs run on it alone (a placement has the job's node count)
            return (node.idx, node.version)
        nodes = {node.idx: node}
        for job in node.jobs:
            for n in job.placement:
                nodes[n.idx] = n
        return tuple(x for i in sorted(nodes) for x in (i, nodes[i].version))

    def _resting(self, node: Node) -> bool:
        """Idle spans cost nothing: a watched node whose jobs, speeds and quotas have
        not changed for REST_AFTER_S, whose node control holds nothing there and
        whose DNN jobs' job control needs no samples (or waits for free cores), stops
        being ticked until something on it (or on its jobs' nodes) changes. Its
        samples would repeat the same exact speeds (noise aside) for ever: two
        co-located jobs running for years would otherwise cost a tick per period."""
        quiet = self._quiet
        if not node.jobs:
            quiet.pop(node, None)
            return False
        sig = self._signature(node)
        seen = quiet.get(node)
        now = self.kernel.now
        if seen is None or seen[0] != sig:
            quiet[node] = (sig, now)
            return False
        if now - seen[1] < REST_AFTER_S:
            return False
        nc = self.policy.node_control
        if nc is not None and not nc.at_rest(node):
            return False
        jc = self.policy.job_control
        if jc is not None and (not self._kept or node in self._wanted_on):
            for job in node.jobs:
                if job.kind == DNN and self._wants(job) and not jc.waiting_for_room(job):
                    return False
        self.rests += node in self.watched
        return True

    def arm(self) -> None:
        policy = self.policy
        nc_period = policy.node_control.period_s if policy.node_control is not None else 0.0
        now = self.kernel.now
        for kind, part, period in (
            (TICK, policy.node_control, nc_period),
            (SAMPLE, policy.job_control, policy.sample_period_s),
        ):
            if part is not None and not self.armed[kind]:
                self.armed[kind] = True
                self.kernel.push(now + period, kind, None, 0)

    def tick(self) -> None:
        """Run the policy's node control on every watched node."""
        loop = self.loop
        now = self.kernel.now
        for node in list(self.watched):
            if node not in self.watched:
                continue
            loop.tick(node, now)
            self.rewatch(node)

    def _noise(self) -> float:
        if self._noise_i >= len(self._noise_buf):
            self._noise_buf = self.rng.standard_normal(4096)
            self._noise_i = 0
        x = float(self._noise_buf[self._noise_i])
        self._noise_i += 1
        return x

    def sample_all(self) -> None:
        """One throughput sample per DNN job on a watched node that needs one (its
        allocator is searching, or a CPU job shares a node with it that the
        eliminator watches): the work it did since its last sample, in its own units
        (an arbitrary per-job rate, so the policy cannot read the model's
        scale), with measurement noise. A converged job away from CPU jobs is
        not sampled in the simulator (its speed only changes with co-runners)."""
        loop = self.loop
        now = self.kernel.now
        noise = self.noise
        watched = self.watched
        for node in list(watched):
            if node not in watched:
                continue
            for job in list(node.jobs):
                # sample_t >= now: sampled already this tick (a gang job on two nodes).
                if job.kind != DNN or job.sample_t >= now:
                    continue
                done = job.work - job.remaining + job.speed * (now - job.last_update)
                if not self._needs_sample(job):
                    # Neither its allocator nor the eliminator needs this window: skip
                    # it (a sample costs a policy call) and start the next.
                    job.sample_t = now
                    job.sample_work = done
                    continue
                rate = (done - job.sample_work) / (now - job.sample_t)
                job.sample_t = now
                job.sample_work = done
                units = 50.0 + (job.idx * _SPREAD % 1000) / 10.0  # samples/s at full speed
                factor = max(0.0, 1.0 + noise * self._noise()) if noise else 1.0
                loop.sample(job, now, rate * units * factor)
            self.rewatch(node)
