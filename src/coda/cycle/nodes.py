"""The scheduler's books of nodes: an index by free capacity, what gained room
since the last cycle ("dirty"), and the ledger every driver books through.

A start, a finish, a preemption or a cpuset change is booked here
(``occupy``/``vacate``/``resize``), so the index, the room marks and the policy's
reserve plugins see every change the same way in every driver.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from coda.cycle.index import PoolIndex
from coda.policy.framework import Policy
from coda.policy.state import GPU_POOL, Job, Node


class NodeBook:
    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.nodes: dict[int, Node] = {}
        self.index: dict[str, PoolIndex] = {}
        self.dnn_index: PoolIndex | None = None
        self._max_gpus = 0
        self.dirty: dict[Node, None] = {}  # nodes whose free capacity grew since the last cycle
        self._deferred: dict[Node, None] = {}  # dirty nodes a depth-limited sweep left
        self._live: list[Node] | None = None  # the running cycle's dirty nodes
        self._live_set: set[Node] = set()
        self._fit_cache: dict[tuple[Any, ...], bool] = {}
        # Fixed grants: running jobs narrowed inside their grant -> the grant per node.
        self._grants: dict[Job, int] = {}
        # Schedulable nodes by shape (pool, GPUs, cores, memory): what can ever fit.
        self.shapes: dict[tuple[str, int, int, int], int] = {}
        # Bumped whenever any node's free capacity or jobs change: a failed attempt's
        # verdict stands while it has not moved (Scheduler's backfill merge).
        self.book_version = 0

    def _forget_node(self, node: Node) -> None:
        """A node left: drop what the scheduler keeps about it (its reservations)."""
        return None

    def _booked(self, job: Job) -> None:
        """A job took or gave back resources (its tenant's share moved)."""
        return None

    def _share_before(self, job: Job) -> float | None:
        """Under fair share, the job's tenant's share before a booking moves it, where a
        move matters (``_share_moved`` is then told); None where it cannot."""
        return None

    def _share_moved(self, job: Job, before: float) -> None:
        """Under fair share: the job's tenant's share was ``before`` until now."""
        return None

    # ------------------------------------------------------------ nodes
    @property
    def reclaims(self) -> bool:
        return self.policy.reclaim is not None

    def add_nodes(self, nodes: Iterable[Node]) -> None:
        """Make nodes schedulable (their free capacity as it is now)."""
        new = [n for n in nodes if n.idx not in self.nodes]
        if not new:
            return
        for n in new:
            self.nodes[n.idx] = n
        if max(n.gpus for n in new) > self._max_gpus:
            self._max_gpus = max(n.gpus for n in self.nodes.values())
            self._rebuild_index()
        else:
            for n in new:
                self._index_add(n)
        self._fit_cache.clear()
        self.book_version += 1
        for n in new:
            shape = (n.pool, n.gpus, n.cores, n.mem_mib)
            self.shapes[shape] = self.shapes.get(shape, 0) + 1
            self.mark_dirty(n)

    def remove_node(self, node: Node) -> None:
        """Stop scheduling onto a node (drained, down). Jobs on it keep running."""
        if self.nodes.pop(node.idx, None) is None:
            return
        self.index[node.pool].remove(node)
        if self.dnn_index is not None and node.pool == GPU_POOL:
            self.dnn_index.remove(node)
        self.dirty.pop(node, None)
        self._deferred.pop(node, None)
        self._fit_cache.clear()
        self.book_version += 1
        shape = (node.pool, node.gpus, node.cores, node.mem_mib)
        self.shapes[shape] -= 1
        if not self.shapes[shape]:
            del self.shapes[shape]
        self._forget_node(node)

    def _rebuild_index(self) -> None:
        self.index = {}
        self.dnn_index = None
        for n in self.nodes.values():
            self._index_add(n)

    def _index_add(self, node: Node) -> None:
        index = self.index.get(node.pool)
        if index is None:
            index = self.index[node.pool] = PoolIndex(self._max_gpus)
        index.add(node)
        if self.reclaims and node.pool == GPU_POOL:
            # DNN jobs see the cores CPU jobs hold on GPU nodes as free; they search
            # this second index of the GPU pool.
            if self.dnn_index is None:
                self.dnn_index = PoolIndex(self._max_gpus, dnn_view=True)
            self.dnn_index.add(node)

    def reindex(self, node: Node) -> None:
        """Re-file a node whose free GPUs or cores changed."""
        if node.idx not in self.nodes:
            return
        self.index[node.pool].update(node)
        if self.dnn_index is not None and node.pool == GPU_POOL:
            self.dnn_index.update(node)

    def mark_dirty(self, node: Node) -> None:
        """Node gained room: retry queued jobs on it, in this cycle if one runs."""
        if node.idx not in self.nodes:
            return
        self.dirty[node] = None
        live = self._live
        if live is not None and node not in self._live_set:
            live.append(node)
            self._live_set.add(node)

    # ------------------------------------------------------------ ledger
    def occupy(self, job: Job, nodes: Sequence[Node], cores_pn: int, now: float) -> None:
        """Book a job onto nodes (every driver books through here)."""
        job.placement = list(nodes)
        job.cores_pn = cores_pn
        job.quota = 1.0
        for node in nodes:
            node.free_gpus -= job.gpus_pn
            node.free_cores -= cores_pn
            node.free_mem -= job.mem_pn
            if not job.is_dnn:
                node.cpu_job_cores += cores_pn
            node.jobs[job] = None
            if job.pcie_heavy:
                node.pcie_heavy.append(job)
            node.version += 1
            self.reindex(node)
        self.book_version += 1
        self.charge(job, nodes, now)

    def charge(self, job: Job, nodes: Sequence[Node], now: float) -> None:
        """Count a running job in the reserve plugins' books (fair-share usage): every
        booking does; a driver that mirrors nodes itself (Slurm) calls it for each job
        it finds running. Charging a job twice counts it once."""
        before = self._share_before(job)
        for r in self.policy.reserve:
            r.reserve(job, nodes, now)
        self._booked(job)
        if before is not None:
            self._share_moved(job, before)

    def discharge(self, job: Job, now: float) -> None:
        """A job stopped (its counterpart, ``charge``); a job not charged is let be."""
        before = self._share_before(job)
        for r in self.policy.reserve:
            r.unreserve(job, now)
        self._booked(job)
        if before is not None:
            self._share_moved(job, before)

    def vacate(self, job: Job, now: float) -> list[Node]:
        """Take a running job off its nodes (finish, preemption, cancel)."""
        nodes = job.placement
        job.placement = []
        for node in nodes:
            node.free_gpus += job.gpus_pn
            node.free_cores += job.cores_pn
            node.free_mem += job.mem_pn
            if not job.is_dnn:
                node.cpu_job_cores -= job.cores_pn
            node.jobs.pop(job, None)
            if job in node.pcie_heavy:
                node.pcie_heavy.remove(job)
            node.version += 1
            self.reindex(node)
            self.mark_dirty(node)
        self.book_version += 1
        self.discharge(job, now)
        return nodes

    def resize(self, job: Job, cores_pn: int) -> bool:
        """Change a running job's cores per node; growth only from free cores
        (docs/policies.md, "Probes use free cores only"). False if refused."""
        if cores_pn < 1:
            raise ValueError(f"a running job keeps at least one core, got {cores_pn}")
        delta = cores_pn - job.cores_pn
        if delta == 0 or not job.running:
            return False
        if delta > 0 and delta > min((n.free_cores for n in job.placement), default=0):
            return False
        for node in job.placement:
            node.free_cores -= delta
            if not job.is_dnn:
                node.cpu_job_cores += delta
            self.reindex(node)
            if delta < 0:
                self.mark_dirty(node)
        for node in job.placement:
            node.version += 1  # its jobs' projected ends moved: reservations are redone
        self.book_version += 1
        job.cores_pn = cores_pn
        return True

    def resize_within_grant(self, job: Job, cores_pn: int) -> bool:
        """Fixed grants (a cluster manager's books, as Slurm's: a running job's
        allocation never changes): the job works on ``cores_pn`` of the cores per node
        it was granted at its start (what it held until its first change). The rest
        stay its own, as its nodes' spare cores: room for it to grow back into, never
        free for another job. False if refused (past its grant, or no change)."""
        if cores_pn < 1:
            raise ValueError(f"a running job keeps at least one core, got {cores_pn}")
        delta = cores_pn - job.cores_pn
        grant_pn = self.grant_pn(job)
        if delta == 0 or not job.running or cores_pn > grant_pn:
            return False
        for node in job.placement:
            node.spare_cores -= delta
            if not job.is_dnn:
                node.cpu_job_cores += delta
            node.version += 1  # its jobs' projected ends moved: reservations are redone
        self.book_version += 1
        job.cores_pn = cores_pn
        if cores_pn == grant_pn:
            self._grants.pop(job, None)
        else:
            self._grants[job] = grant_pn
        return True

    def cores(self, job: Job) -> int:
        """The cores per node job asks for now (the policy's core count decides)."""
        return self.policy.core_count.cores_per_node(job)

    def grant_pn(self, job: Job) -> int:
        """The cores per node a running job frees when it ends: its grant, which under
        fixed grants may be more than it works on."""
        return self._grants.get(job, job.cores_pn)

    def restore_grant(self, job: Job) -> None:
        """Fixed grants: before a job leaves its nodes, its cores per node are its
        grant again (its spare cores go back into what it holds), so ``vacate`` frees
        what was granted."""
        grant_pn = self._grants.pop(job, job.cores_pn)
        spare = grant_pn - job.cores_pn
        for node in job.placement:
            node.spare_cores -= spare
            if not job.is_dnn:
                node.cpu_job_cores += spare
        job.cores_pn = grant_pn

    def node_capacity_changed(self, node: Node, grew: bool) -> None:
        """A driver changed a node's free capacity itself (the Slurm view)."""
        node.version += 1
        self.book_version += 1
        self.reindex(node)
        if grew:
            self.mark_dirty(node)

    def _needs_reclaim(self, gpus: int, cores_pn: int) -> Iterator[Node]:
        assert self.dnn_index is not None
        for node in self.dnn_index.best_fit(gpus, cores_pn):
            if node.free_cores < cores_pn and self._dnn_fits(node, cores_pn):
                yield node

    def _dnn_fits(self, node: Node, cores_pn: int) -> bool:
        """Enough cores once the CPU jobs the reclaim plugin may take are counted out."""
        return node.free_cores + self._reclaimable_cores(node) >= cores_pn

    def _reclaimable_cores(self, node: Node) -> int:
        reclaim = self.policy.reclaim
        if reclaim is None:
            return 0
        return sum(j.cores_pn for j in node.jobs if not j.is_dnn and reclaim.reclaimable(j))

    @staticmethod
    def _shape_fits(n: Node, job: Job, cores_pn: int) -> bool:
        return (
            n.gpus >= job.gpus_pn
            and n.cores >= cores_pn
            and (n.mem_mib == 0 or n.mem_mib >= job.mem_pn)
        )
