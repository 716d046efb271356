"""The scheduling cycle: one runner for the simulator, the node agent and Slurm.

Pure: no I/O, no clock (``now`` is passed in). It holds its parts: the queue (each of
the policy's arrays as FIFO buckets, ``queue.py``), the node ledger (an index of
nodes and which gained room since the last cycle, ``nodes.py``), each array's backfill
reservation (``reservations.py``), what bookings move under fair share
(``shares.py``), the node search (``search.py``), the attempt that starts a job
(``starts.py``) and backfill (``backfill.py``, ``every_job.py``). A cycle

1. starts each array's first jobs while they fit; the first that does not is the
   array's head and holds a reservation (when and where it can start, from the
   policy's runtime estimates); heads settle in queue order across arrays;
2. backfills: jobs behind the heads, in queue order, start where they do not delay a
   reservation (without runtime estimates: none, strict FIFO); where the policy asks
   (``reservations="every-job"``), every job that does not fit is planned instead, as
   Slurm does;
3. for a DNN job where the policy reclaims, counts cores CPU jobs hold on a GPU
   node as free, and takes them back through the reclaim plugin when it starts.

Every start and reclaim action is booked in the ledger (``occupy``/``vacate``/
``resize``) and handed to the driver's ``Executor``; every job not started keeps a
``Reason``. Old jobs are retried only on nodes that gained room ("dirty"), new
ones search the index, so a cycle costs what changed, not the queue's length
times the cluster's size.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from coda.cycle import reasons as R
from coda.cycle.backfill import Backfill
from coda.cycle.buckets import Bucket
from coda.cycle.clock import Clock
from coda.cycle.decisions import Decision, Executor, Returned
from coda.cycle.every_job import EveryJobReservations
from coda.cycle.index import PoolIndex
from coda.cycle.invariant import InvariantError
from coda.cycle.nodes import NodeBook
from coda.cycle.queue import Queue, ReasonChanges
from coda.cycle.reasons import Reason, Reasons
from coda.cycle.reservations import Hold, Reservations
from coda.cycle.search import NodeSearch
from coda.cycle.shares import Shares
from coda.cycle.starts import Starter
from coda.cycle.tenants import rank
from coda.policy.framework import Policy, SetCores
from coda.policy.harm_budget import HarmBudget
from coda.policy.state import Job, Node

_MAX_ROUNDS = 64  # rounds at one instant (each starts jobs or moves a reservation)


class Scheduler:
    """The queue, the node ledger and the cycle over them, for one policy."""

    def __init__(self, policy: Policy, nodes: Iterable[Node] = ()) -> None:
        self.policy = policy
        self.clock = clock = Clock()
        reasons = Reasons()
        self.reasons = reasons
        self.book = book = NodeBook(policy, self)
        self.queue = queue = Queue(policy, clock)
        self.reservations = plans = Reservations(policy, book, clock)
        self.shares = Shares(policy, queue, plans)
        self.search = search = NodeSearch(policy, book, plans, queue, reasons, clock)
        self.starter = starter = Starter(policy, book, queue, plans, search, clock)
        self.backfill = Backfill(policy, book, queue, search, starter, reasons, clock)
        self.every_job: EveryJobReservations | None = None
        if policy.reserves_every_job:
            self.every_job = EveryJobReservations(
                policy, book, queue, plans, starter, reasons, clock
            )
        self._new: list[Job] = []  # submitted since the last cycle: owed a full search
        self._carry: set[Job] = set()  # requeued jobs still owed a full search
        self._requeue: list[Job] = []  # preempted during a cycle, queued after its round
        self._in_cycle = False
        self._generation = policy.core_count.generation
        self._pools_generation = policy.pools.generation
        book.add_nodes(nodes)

    # ------------------------------------------------------------ queue
    def submit(self, job: Job) -> Reason | None:
        """Queue a job. A job that could not run even on the empty cluster is not
        queued: its reason (``NEVER``) is returned."""
        never = self.book.never_fits(job, self.book.cores(job))
        if never is not None:
            job.wait, job.wait_cycle = never, self.clock.cycles
            return never
        self.queue.enqueue(job)
        job.wait, job.wait_cycle = self.reasons.why(R.NEW), self.clock.cycles
        self._new.append(job)
        return None

    def requeue(self, job: Job) -> None:
        """Queue a preempted job again (it keeps its preemption count): queued
        after the running round, with a full search."""
        harm = self.policy.harm
        if harm is not None:
            harm.requeued(job)
        job.start = -1.0
        job.queue_key = ()  # its old entry (if any) is dead from now on
        if self._in_cycle:
            self._requeue.append(job)
        else:
            self.queue.enqueue(job)
            self._carry.add(job)

    def withdraw(self, job: Job) -> None:
        """Drop a queued job (cancelled, or gone from the cluster manager)."""
        if not self.queue.withdraw(job):
            return
        if self.policy.harm is not None and not job.running:
            self.policy.harm.forget(job)  # cancelled while requeued: its bucket goes
        self._carry.discard(job)
        self.shares.booked(job)  # its tenant's first job may have been this one
        self.reservations.job_left(job)

    def is_queued(self, job: Job) -> bool:
        return self.queue.is_queued(job)

    def reason_of(self, job: Job) -> Reason | None:
        """Why a queued job waits (None once it has started)."""
        return self.queue.reason_of(job)

    def shown_by(self, job: Job) -> Bucket | None:
        """The bucket whose reason the job shows (``Queue``)."""
        return self.queue.shown_by(job)

    def reason_changes(self) -> ReasonChanges | None:
        """The jobs whose reason may have changed since the last call (``Queue``)."""
        return self.queue.reason_changes()

    def waiting(self) -> Iterator[tuple[Job, Reason]]:
        """Every queued job with its reason, in queue order per array."""
        return self.queue.waiting()

    @property
    def queued(self) -> dict[str, int]:
        """Queued jobs by kind."""
        return self.queue.queued

    @property
    def buckets(self) -> dict[str, dict[tuple[Any, ...], Bucket]]:
        return self.queue.buckets

    # ------------------------------------------------------------ the ledger
    # Every driver books through these (NodeBook); bookings charge through ``Shares``.
    def add_nodes(self, nodes: Iterable[Node]) -> None:
        self.book.add_nodes(nodes)

    def remove_node(self, node: Node) -> None:
        if self.book.remove_node(node):
            self.reservations.forget_node(node)

    def occupy(self, job: Job, nodes: Sequence[Node], cores_pn: int, now: float) -> None:
        self.book.occupy(job, nodes, cores_pn, now)

    def vacate(self, job: Job, now: float) -> list[Node]:
        return self.book.vacate(job, now)

    def charge(self, job: Job, nodes: Sequence[Node], now: float) -> None:
        self.shares.charge(job, nodes, now)

    def discharge(self, job: Job, now: float) -> None:
        self.shares.discharge(job, now)

    def resize(self, job: Job, cores_pn: int) -> bool:
        return self.book.resize(job, cores_pn)

    def resize_within_grant(self, job: Job, cores_pn: int) -> bool:
        return self.book.resize_within_grant(job, cores_pn)

    def restore_grant(self, job: Job) -> None:
        self.book.restore_grant(job)

    def grant_pn(self, job: Job) -> int:
        return self.book.grant_pn(job)

    def node_eased(self, node: Node) -> None:
        """Something a filter reads of a node besides its capacity eased (its memory
        bus calmed): retry queued jobs on it."""
        self.book.mark_dirty(node)

    def node_capacity_changed(self, node: Node, grew: bool) -> None:
        self.book.node_capacity_changed(node, grew)

    @property
    def index(self) -> dict[str, PoolIndex]:
        return self.book.index

    @property
    def dnn_index(self) -> PoolIndex | None:
        return self.book.dnn_index

    @property
    def shapes(self) -> dict[tuple[str, int, int, int], int]:
        return self.book.shapes

    # ------------------------------------------------------------ the cycle
    def pending(self) -> bool:
        """Whether a cycle now could start anything."""
        return bool(
            self.book.dirty
            or self._new
            or self._carry
            or self.shares.unbound  # shares moved past a reservation (``Shares``)
            or self.queue.depth_owed  # full searches the backfill depth put off
            or self.policy.core_count.generation != self._generation
            or self.policy.pools.generation != self._pools_generation
            or (self.policy.harm is not None and self.policy.harm.due())
        )

    def cycle(self, now: float, executor: Executor) -> list[Decision]:
        """Scheduling rounds at one instant, until nothing is left to retry.

        A job that was already queued failed to fit at an earlier cycle, and free
        capacity has since grown only on the dirty nodes. So old jobs are tried on
        those nodes only; new arrivals search the whole index.
        """
        self.clock.now = now
        self.clock.cycles += 1
        self.starter.begin(executor)
        self._in_cycle = True
        harm = self.policy.harm
        if harm is not None:
            harm.advance(now)
            nodes = self.book.nodes
            for job in harm.take_flipped():  # it may give cores it could not before
                for node in job.placement:
                    if nodes.get(node.idx) is node:  # this cycle's (a policy is one cycle's)
                        self.book.mark_dirty(node)
            self._return_cores(harm, executor)
        if self.policy.pools.generation != self._pools_generation:
            self._pools_generation = self.policy.pools.generation
            self.queue.refile()
        generation = self.policy.core_count.generation
        if generation != self._generation:
            self._generation = generation
            self.queue.owe_full_search()
        fresh = set(self._new)
        if self._carry:
            fresh |= self._carry
            self._carry = set()
        self._new = []
        shares = self.shares
        self.book.hold_instant(True)
        try:
            for _ in range(_MAX_ROUNDS):
                if shares.unbound:
                    shares.rebind()
                dirty = self.book.take_dirty()
                shares.moved = False
                self._round(dirty, fresh)
                # They have had their full search; a job the round's starts moved to
                # its array's front (fair share) is owed one as the head it now is.
                fresh = self._overtaken()
                if self._requeue:
                    # Preempted mid-round: queued now (not while buckets were being
                    # walked) and given a full search like new arrivals.
                    for job in self._requeue:
                        self.queue.enqueue(job)
                    fresh.update(self._requeue)
                    self._requeue = []
                elif not self.book.dirty and not fresh and not shares.unbound:
                    break
        finally:
            self._in_cycle = False
            self.book.hold_instant(False)
            self.starter.executor = None
        # Requeued jobs the round limit left without their full search: at the next.
        self._carry = {job for job in fresh if job.start < 0 and self.queue.is_queued(job)}
        return self.starter.decisions

    def _return_cores(self, harm: HarmBudget, executor: Executor) -> None:
        """Shrunk CPU jobs get their cores back, before any start, as far as their nodes
        have free cores (a DNN job that needs them takes them back within budget)."""
        nodes = self.book.nodes
        for job in list(harm.shrunk):
            if not job.running or any(nodes.get(n.idx) is not n for n in job.placement):
                continue
            room = min(n.free_cores for n in job.placement)
            want = min(job.cores_pn_req, job.cores_pn + room)
            if want <= job.cores_pn:
                continue
            action = SetCores(job, want)
            executor.apply(action)  # the simulator's says whether it freed cores
            if job.cores_pn == want:
                harm.counts["regrown"] += 1
                self.starter.decisions.append(Returned(action))

    def _overtaken(self) -> set[Job]:
        """Each array's first job that is not the head the round settled on: under fair
        share a start moves its tenant's share, so a job of another tenant may come
        first after its array's head was settled (and bound by that head's reservation).
        Another round settles it; without this it waited, with a stale reason, for a
        node to change."""
        if not self.shares.moved:  # no start or stop this round: the heads stand
            return set()
        overtaken = set()
        for arr, head in self.queue.heads.items():
            if head is not None and head.start < 0:
                first = self.queue.earliest(arr)
                if first is not None and first is not head:
                    overtaken.add(first)
        return overtaken

    def _round(self, dirty: list[Node], fresh: set[Job]) -> None:
        if self.every_job is not None:
            # Slurm's sched/backfill: the whole queue, every job planned (every_job.py).
            self.every_job.rounds()
            return
        # Nodes that gain room during the round (a reservation spent or moved)
        # join `dirty` at once, so the jobs kept off them are retried now.
        self.book.follow(dirty)
        # node idx -> [(shadow, owner's queue key, owner)]: binds later-queued jobs only
        active: dict[int, list[Hold]] = {}
        heads = self._start_heads(dirty, fresh, active)
        self.queue.heads = heads
        if not self.policy.backfill:
            # Strict FIFO per array: nothing behind a blocked head may start.
            blocked = {arr for arr, h in heads.items() if h is not None}
        else:
            blocked = set()
        self.backfill.run(dirty, fresh, active, heads, blocked)
        self.book.unfollow()

    def _full(self, job: Job, fresh: set[Job]) -> bool:
        # Without backfill the jobs behind a head are never tried, so whatever room
        # appeared while they waited, a new head is searched for everywhere.
        if job in fresh or not self.policy.backfill:
            return True
        bucket = self.queue.bucket_of.get(job)
        return bucket is not None and bucket.owes_full(job)

    def _start_heads(
        self, dirty: list[Node], fresh: set[Job], active: dict[int, list[Hold]]
    ) -> dict[str, Job | None]:
        """Start each array's first jobs while they fit; the first that does not
        is the array's head and holds a reservation. Heads are settled in queue
        order across arrays, so an earlier head's reservation binds a later one."""
        policy, queue, starter = self.policy, self.queue, self.starter
        names = policy.arrays.names
        heads: dict[str, Job | None] = dict.fromkeys(names)
        pending: dict[str, Job] = {}
        for arr in names:
            first = queue.earliest(arr)
            if first is not None:
                pending[arr] = first
        core_count = policy.core_count
        while pending:
            if len(pending) == 1:
                arr = next(iter(pending))
            else:
                arr = min(pending, key=lambda a: rank(policy, pending[a]))
            job = pending[arr]
            gen = core_count.generation
            cores_pn = self.book.cores(job)
            if starter.attempt(job, self._full(job, fresh), dirty, active, cores_pn):
                nxt = queue.earliest(arr)
                if nxt is None:
                    del pending[arr]
                else:
                    pending[arr] = nxt
                continue
            heads[arr] = job
            del pending[arr]
            if policy.backfill:
                if core_count.generation != gen:  # the attempt moved core counts
                    cores_pn = self.book.cores(job)
                self.reservations.hold(arr, job, active, cores_pn)
        return heads

    def check_no_waiting_fit(self) -> None:
        """Invariant check (tests and ``--check-invariants`` runs only): after a cycle
        no queued job may fit anywhere, unless a reservation of an earlier-queued job
        forbids it (or, without backfill, it is not first)."""
        policy, plans = self.policy, self.reservations
        active: dict[int, list[Hold]] = {}
        every_job = policy.reserves_every_job
        if every_job:
            for idx, held in plans.every_job_holds.items():
                active[idx] = [h for h in held if self.is_queued(h[2])]
        for resv in plans.by_array.values():
            if resv is not None and resv.job.start < 0:
                for node in resv.nodes:
                    active.setdefault(node.idx, []).append((resv.shadow, resv.rank, resv.job))
        for arr in policy.arrays.names:
            waiting = sorted(self.queue.live(arr), key=lambda j: rank(policy, j))
            if not policy.backfill:
                first = self.queue.earliest(arr)
                waiting = [first] if first is not None else []
            for job in waiting:
                if every_job and isinstance(job.wait, Reason) and job.wait.code == R.DEPTH:
                    continue  # past the depth: not looked at, as in Slurm's pass
                cores_pn = self.book.cores(job)
                job.estimate = policy.estimates.runtime(job, cores_pn)
                wait, cycle = job.wait, job.wait_cycle
                if self.search.find(job, cores_pn, active, None) is not None:
                    raise InvariantError(f"{job} fits at t={self.clock.now} but was left waiting")
                job.wait, job.wait_cycle = wait, cycle
