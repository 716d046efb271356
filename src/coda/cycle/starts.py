"""One attempt to start a job: the node search, then (for a DNN job where the policy
reclaims) the cores CPU jobs give back, the booking, and the driver's executor.

The heads, backfill and the every-job round all start jobs through here, so every start
is booked, leaves the queue, spends its reservation and reaches the driver the same way.
"""

from __future__ import annotations

from coda.cycle import reasons as R
from coda.cycle.clock import Clock
from coda.cycle.decisions import Decision, Executor, Reclaimed, Start
from coda.cycle.invariant import InvariantError
from coda.cycle.nodes import NodeBook
from coda.cycle.queue import Queue
from coda.cycle.reasons import Reason
from coda.cycle.reservations import Hold, Reservations
from coda.cycle.search import NodeSearch
from coda.policy.framework import Policy
from coda.policy.state import CPU, Job, Node


class Starter:
    def __init__(
        self,
        policy: Policy,
        book: NodeBook,
        queue: Queue,
        reservations: Reservations,
        search: NodeSearch,
        clock: Clock,
    ) -> None:
        self.policy = policy
        self.book = book
        self.queue = queue
        self.reservations = reservations
        self.search = search
        self.clock = clock
        self.executor: Executor | None = None  # the running cycle's driver
        self.decisions: list[Decision] = []  # the running (or the last) cycle's

    def begin(self, executor: Executor) -> None:
        """A cycle starts: its decisions go to ``executor``."""
        self.executor = executor
        self.decisions = []

    def attempt(
        self,
        job: Job,
        full: bool,
        dirty: list[Node],
        active: dict[int, list[Hold]],
        cores_pn: int | None = None,
    ) -> bool:
        """Start the job if it fits (an old job: on a dirty node); True if started."""
        if cores_pn is None:
            cores_pn = self.book.cores(job)
        job.estimate = self.policy.estimates.runtime(job, cores_pn)
        search = self.search
        nodes = search.find(job, cores_pn, active, None if full else dirty)
        if nodes is None:
            bucket = self.queue.bucket_of.get(job)
            if full and bucket is not None and bucket.full:
                if search.alike:
                    # Refused by what its bucket's jobs share: they need no full search
                    # each (memory, reservations and per-job filters depend on the job).
                    bucket.full = False
                else:
                    bucket.searched_through(job)
            return False
        return self.start(job, nodes, cores_pn)

    def start(self, job: Job, nodes: list[Node], cores_pn: int) -> bool:
        """Reclaim what it needs, book it, hand it to the driver; True if it started."""
        now = self.clock.now
        book = self.book
        executor = self.executor
        assert executor is not None
        if job.is_dnn and book.dnn_index is not None:
            for node in nodes:
                if node.free_cores < cores_pn and not self._reclaim(
                    job, node, cores_pn - node.free_cores
                ):
                    # The driver could not take the cores back (a process that will not
                    # die): the job waits, for cores, and nothing is over-committed.
                    self.queue.note(job, Reason(R.CORES, str(cores_pn)))
                    return False
        # The last reason it waited, for the drivers' records (FIFO waits are worked out
        # from the array's head, so they are read here, before it leaves the queue).
        job.wait = self.queue.waited(job)
        book.occupy(job, nodes, cores_pn, now)
        job.start = now
        self.queue.started(job)
        # Its reservation is spent; jobs it kept off those nodes may fit there now.
        self.reservations.release(self.policy.arrays.array_of(job), job)
        if job.is_dnn and self.policy.filters and self.queue.queued[CPU]:
            # Filters may depend on idle GPUs (CODA's reserve for them shrinks when
            # they are taken), so queued CPU jobs are worth a retry here.
            for node in nodes:
                if node.free_cores:
                    book.mark_dirty(node)
        start = Start(job, tuple(nodes), cores_pn)
        self.decisions.append(start)
        if not executor.bind(start):
            if job.placement:  # the driver may have given it back already
                book.vacate(job, now)
            job.start = -1.0
            job.queue_key = ()
            self.decisions.pop()
            return False
        return True

    def _reclaim(self, job: Job, node: Node, need: int) -> bool:
        """Free ``need`` cores that CPU jobs hold on node, as the policy chooses; False
        if the driver could not carry an action out (it returned False)."""
        reclaim = self.policy.reclaim
        executor = self.executor
        assert reclaim is not None and executor is not None
        before = node.free_cores
        refused = False
        for action in reclaim.reclaim(job, node, need, self.clock.now):
            if not action.job.running:
                continue
            self.decisions.append(Reclaimed(job, node, action))
            if executor.apply(action) is False:
                refused = True
        if node.free_cores - before >= need:
            return True
        if refused:
            return False
        raise InvariantError(
            f"reclaim freed {node.free_cores - before} of the {need} cores {job} needs on {node}"
        )
