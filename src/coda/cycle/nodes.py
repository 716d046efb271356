"""The scheduler's books of nodes: an index by free capacity, what gained room
since the last cycle ("dirty"), and the ledger every driver books through.

A start, a finish, a preemption or a cpuset change is booked here
(``occupy``/``vacate``/``resize``), so the index, the room marks and the policy's
reserve plugins (through the book's ``Charges``) see every change the same way in
every driver.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Protocol

from coda.cycle import reasons as R
from coda.cycle.index import PoolIndex
from coda.cycle.reasons import Reason
from coda.policy.framework import Policy
from coda.policy.state import GPU_POOL, Job, Node


class Charges(Protocol):
    """What a booking moves besides the nodes (the reserve plugins' books, fair share):
    told of every job booked onto nodes and taken off them."""

    def charge(self, job: Job, nodes: Sequence[Node], now: float) -> None: ...

    def discharge(self, job: Job, now: float) -> None: ...


class NodeBook:
    def __init__(self, policy: Policy, charges: Charges) -> None:
        self.policy = policy
        self.charges = charges
        self.nodes: dict[int, Node] = {}
        self.index: dict[str, PoolIndex] = {}
        self.dnn_index: PoolIndex | None = None
        self._max_gpus = 0
        self.dirty: dict[Node, None] = {}  # nodes whose free capacity grew since the last cycle
        self._live: list[Node] | None = None  # the running round's dirty nodes
        self._live_set: set[Node] = set()
        self._fit_cache: dict[tuple[Any, ...], bool] = {}
        self._static = [f for f in policy.filters if f.static]
        # Fixed grants: running jobs narrowed inside their grant -> the grant per node.
        self._grants: dict[Job, int] = {}
        # Schedulable nodes by shape (pool, GPUs, cores, memory): what can ever fit.
        self.shapes: dict[tuple[str, int, int, int], int] = {}
        # Bumped whenever any node's free capacity or jobs change: a failed attempt's
        # verdict stands while it has not moved (backfill's merge).
        self.book_version = 0
        # Within one cycle (one instant): each node's reclaimable cores as of its version.
        # What a reclaim plugin may take changes with its jobs (which bump the version)
        # and with time (a harm budget's buckets), never within an instant; a backfill
        # pass over thousands of jobs asks again for the same nodes.
        self._reclaimable: dict[Node, tuple[int, int]] | None = None
        # Within one instant: (GPUs, cores per node) no GPU node fits even with what its
        # CPU jobs may give back, since room last grew anywhere. A start only takes room,
        # so the answer stands until something frees some (``_room_grew``).
        self._none_fit: list[tuple[int, int]] = []

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

    def remove_node(self, node: Node) -> bool:
        """Stop scheduling onto a node (drained, down). Jobs on it keep running. False
        if it was not schedulable."""
        if self.nodes.pop(node.idx, None) is None:
            return False
        self.index[node.pool].remove(node)
        if self.dnn_index is not None and node.pool == GPU_POOL:
            self.dnn_index.remove(node)
        self.dirty.pop(node, None)
        self._fit_cache.clear()
        self.book_version += 1
        shape = (node.pool, node.gpus, node.cores, node.mem_mib)
        self.shapes[shape] -= 1
        if not self.shapes[shape]:
            del self.shapes[shape]
        return True

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

    def _room_grew(self) -> None:
        self._none_fit.clear()

    def mark_dirty(self, node: Node) -> None:
        """Node gained room: retry queued jobs on it, in this cycle if one runs."""
        self._room_grew()
        if node.idx not in self.nodes:
            return
        self.dirty[node] = None
        live = self._live
        if live is not None and node not in self._live_set:
            live.append(node)
            self._live_set.add(node)

    def follow(self, dirty: list[Node]) -> None:
        """A round runs over ``dirty``: nodes that gain room during it (a reservation
        spent or moved) join it at once, so the jobs kept off them are retried now."""
        self._live, self._live_set = dirty, set(dirty)

    def unfollow(self) -> None:
        self._live = None

    def take_dirty(self) -> list[Node]:
        """The nodes that gained room since the last round; none are left marked."""
        dirty = list(self.dirty)
        self.dirty = {}
        return dirty

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
        self.charges.charge(job, nodes, now)
        harm = self.policy.harm
        if harm is not None and not job.is_dnn:
            harm.started(job, now)

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
        self.charges.discharge(job, now)
        harm = self.policy.harm
        if harm is not None and not job.is_dnn:
            harm.stopped(job, now)
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
        self._room_grew()  # what its harm budget allows it to give back may have moved
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
        self._harm_changed(job)
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
        self._room_grew()  # a CPU job that works on more cores may give more back
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
        self._harm_changed(job)
        return True

    def _harm_changed(self, job: Job) -> None:
        harm = self.policy.harm
        if harm is not None and not job.is_dnn:
            harm.changed(job)

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
        self._room_grew()
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

    def needs_reclaim(self, gpus: int, cores_pn: int) -> Iterator[Node]:
        """GPU nodes with the GPUs that fit ``cores_pn`` only once CPU jobs give cores
        back, in best-fit order."""
        assert self.dnn_index is not None
        instant = self._reclaimable is not None
        # More GPUs than a shape none fits: none fits either (not so for more cores: a
        # node with those free is one that needs no reclaiming for fewer).
        if instant and any(gpus >= g and cores_pn == c for g, c in self._none_fit):
            return
        found = False
        for node in self.dnn_index.best_fit(gpus, cores_pn):
            if node.free_cores < cores_pn and self.dnn_fits(node, cores_pn):
                found = True
                yield node
        if instant and not found:
            self._none_fit.append((gpus, cores_pn))

    def dnn_fits(self, node: Node, cores_pn: int) -> bool:
        """Enough cores once the CPU jobs the reclaim plugin may take are counted out."""
        return node.free_cores + self.reclaimable_cores(node) >= cores_pn

    def reclaimable_cores(self, node: Node) -> int:
        reclaim = self.policy.reclaim
        if reclaim is None:
            return 0
        memo = self._reclaimable
        if memo is not None:
            got = memo.get(node)
            if got is not None and got[0] == node.version:
                return got[1]
        cores = 0
        for j in node.jobs:
            if not j.is_dnn:
                cores += reclaim.takeable(j)
        if memo is not None:
            memo[node] = (node.version, cores)
        return cores

    def hold_instant(self, on: bool) -> None:
        """Between ``hold_instant(True)`` and ``(False)`` time stands still (a cycle):
        what each node's CPU jobs may give back is worked out once per node version."""
        self._reclaimable = {} if on else None
        self._none_fit.clear()

    def never_fits(self, job: Job, cores_pn: int) -> Reason | None:
        """Why the job could not run even on the empty cluster (None: it could)."""
        pools = self.policy.pools.pools(job)
        if self._static:
            # Stops at the job's node count: most jobs fit the first nodes looked at. A
            # plain loop, as a generator fed to islice ran every filter on every node in
            # the compiled build (tests/test_compiled_build.py counts the calls).
            found = 0
            for n in self.nodes.values():
                if n.pool not in pools or not _shape_fits(n, job, cores_pn):
                    continue
                if all(f.filter(job, n, cores_pn) for f in self._static):
                    found += 1
                    if found >= job.nodes:
                        break
            ok = found >= job.nodes
        else:
            key = (pools, job.gpus_pn, cores_pn, job.mem_pn, job.nodes)
            hit = self._fit_cache.get(key)
            if hit is None:
                # By distinct node shape, not node: a million jobs on ten thousand
                # nodes must not cost jobs x nodes.
                fitting = sum(
                    count
                    for (pool, g, c, m), count in self.shapes.items()
                    if pool in pools
                    and g >= job.gpus_pn
                    and c >= cores_pn
                    and (m == 0 or m >= job.mem_pn)
                )
                hit = self._fit_cache[key] = fitting >= job.nodes
            ok = hit
        if ok:
            return None
        need = f"{job.nodes} node(s) with {job.gpus_pn} GPUs, {cores_pn} cores"
        if job.mem_pn:
            need += f", {job.mem_pn} MiB"
        return Reason(R.NEVER, f"needs {need} in pools {'/'.join(pools)}")


def _shape_fits(n: Node, job: Job, cores_pn: int) -> bool:
    return (
        n.gpus >= job.gpus_pn
        and n.cores >= cores_pn
        and (n.mem_mib == 0 or n.mem_mib >= job.mem_pn)
    )
