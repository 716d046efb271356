"""CODA as Slurm's decision maker: places held jobs, then lets Slurm run them.

Every cycle the controller reads Slurm's state (the narrow ``squeue -O`` listing of
``coda.slurm.listing``, ``scontrol show node``), brings its policy view up to date
(``SlurmView``: only the jobs whose line changed, ``coda.slurm.index``) and
runs the scheduling cycle the simulator and the node agent run (``coda.cycle``):
arrays, queue order, core count, backfill from Slurm's time limits, filters,
scores, and reclaim. Each placement is written to the pending job with ``scontrol
update`` (ReqNodeList, NumCPUs, MinCPUsNode, and CODA's mark in AdminComment) and
the job is released; Slurm starts it there. A DNN job never waits for cores CPU
jobs hold on a GPU node: the CPU jobs the reclaim plugin names (only those Slurm
may requeue) are requeued held (``scontrol requeuehold``), marked ``held`` and
placed again; the work they lose is counted. Why each held job waits is in its
mark (``wait=...``, ``squeue -O JobID,admin_comment``).

All of the controller's state can be rebuilt from Slurm: a job is CODA's to
place while its mark says ``coda:held``; once marked ``coda:placed`` it is never
placed again (a crash between the update and the release is finished by
releasing it on the next cycle). What DNN jobs settled on comes back from the
node agents in the mark (``settled=<cores>``); the controller adds it to the
allocator's learned profiles once per job and keeps them in its state file, so
they outlive both the controller and Slurm's memory of ended jobs.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections import ChainMap, Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload

from coda.collector import LongLivedHeap, collector_off
from coda.cycle import Decision, Reason, Reclaimed, Scheduler, Start
from coda.cycle import reasons as R
from coda.policy import PolicyOptions, make_policy
from coda.policy.allocator import LearnedProfiles
from coda.policy.framework import Action, LearnsProfiles, Preempt, learner_of
from coda.policy.state import CPU, DNN, Job, Node
from coda.runtime.shim import write_atomic
from coda.runtime.statedir import StateDirError, secure_file
from coda.slurm.client import (
    MARK_STATES,
    SlurmClient,
    SlurmError,
    SlurmJob,
    SlurmNode,
    format_mark,
    mark_count,
    mark_fields,
    model_key,
    moved_nodes,
)
from coda.slurm.cycle_times import CycleTimes
from coda.slurm.index import ENDED, JobIndex
from coda.slurm.listing import JobListing
from coda.slurm.ready import ReadyJobs
from coda.slurm.view import SlurmView
from coda.slurm.wait_marks import WaitMarks

STATE_FILE = "controller.json"
STATE_SCHEMA = "coda-slurm-controller/1"


# A placement is the cycle's Start (job, nodes, cores per node).
Placement = Start
# Mark updates with a changed wait reason written per cycle: each is one scontrol call,
# so a queue of thousands converges over cycles instead of stalling one.
WAIT_MARKS_PER_CYCLE = 20
_DEPENDENCY = Reason(R.DEPENDENCY)
_RECLAIM = Reason(R.RECLAIM)
_PLACE = Reason(R.PLACE)


class ListedJobs(Sequence[SlurmJob]):
    """The jobs of a ``JobListing``'s last read, made into a list only when looked at
    (a cycle that takes what changed never does: the list touches every job object).
    Looked at after the listing's next read, it says so instead of giving those jobs."""

    def __init__(self, listing: JobListing) -> None:
        self._listing = listing
        self._read = listing.reads

    def _jobs(self) -> list[SlurmJob]:
        if self._listing.reads != self._read:
            raise RuntimeError("a listing's jobs looked at after its next read")
        return self._listing.listed()

    def __len__(self) -> int:
        return len(self._jobs())

    @overload
    def __getitem__(self, i: int) -> SlurmJob: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[SlurmJob]: ...
    def __getitem__(self, i: int | slice) -> SlurmJob | Sequence[SlurmJob]:
        return self._jobs()[i]

    def __iter__(self) -> Iterator[SlurmJob]:
        return iter(self._jobs())


_DEP = re.compile(r"^(after|afterany|afterok|afternotok):(\d+)(?:_(\d+))?(?:\+\d+)?(?:\((\w+)\))?$")


class Dependencies:
    """Whether held jobs' dependencies are met, judged from the jobs Slurm lists
    (built once per cycle: one index over the jobs, not one per dependent job).

    Slurm does not evaluate the dependencies of a held job, so CODA must: ``after``
    (started), ``afterany`` (ended), ``afterok`` (COMPLETED), ``afternotok`` (ended
    otherwise); ``,`` means all, ``?`` any; a job Slurm no longer lists counts as met.
    None: a kind CODA does not judge (singleton, aftercorr), or one Slurm already
    marked failed that nothing else can make up for: left to Slurm. Slurm tests the
    dependency again before it starts the job, so a wrong True only means the job
    waits on its node.
    """

    def __init__(
        self,
        jobs: Sequence[SlurmJob] = (),
        index: JobIndex | None = None,
    ) -> None:
        """Over ``jobs``, or over what ``index`` keeps of every job (no copy)."""
        self.by_id: Mapping[int, SlurmJob]
        self.tasks: Mapping[int, Mapping[int, SlurmJob]]
        if index is not None:
            self.by_id, self.tasks = index.by_id, index.tasks
            return
        self.by_id = {j.job_id: j for j in jobs}
        tasks: dict[int, dict[int, SlurmJob]] = {}
        for j in jobs:
            if j.array_job_id:
                tasks.setdefault(j.array_job_id, {})[j.job_id] = j
        self.tasks = tasks

    def met(self, dep: str) -> bool | None:
        if not dep:
            return True
        any_of = "?" in dep
        results = []
        for item in re.split(r"[,?]", dep):
            m = _DEP.match(item.strip())
            if m is None:
                return None
            if m.group(4) == "failed":  # Slurm knows it never will be met
                if not any_of:
                    return None
                results.append(False)
                continue
            if len(m.group(2)) > 12 or len(m.group(3) or "") > 12:
                return None  # no job has such an id: unreadable, as a malformed item
            kind, jid, task = m.group(1), int(m.group(2)), m.group(3)
            tasks = self.tasks.get(jid, {}).values()
            if task is not None:
                refs = [t for t in tasks if t.array_task_id == int(task)]
            else:
                refs = list(tasks) or ([self.by_id[jid]] if jid in self.by_id else [])
            results.append(all(_dep_ok(kind, r) for r in refs))  # none listed: met
        return any(results) if any_of else all(results)


def dependency_met(dep: str, jobs: Sequence[SlurmJob]) -> bool | None:
    """``Dependencies(jobs).met(dep)`` for one job."""
    return Dependencies(jobs).met(dep)


def _dep_ok(kind: str, j: SlurmJob) -> bool:
    ended = j.state in ENDED
    if kind == "after":
        return j.state != "PENDING"
    if kind == "afterany":
        return ended
    if kind == "afterok":
        return j.state == "COMPLETED"
    return ended and j.state != "COMPLETED"  # afternotok


@dataclass
class SlurmLimits:
    """Filter plugin: a job may only go to nodes of its partitions and not to nodes
    it excluded (Slurm 22.05 takes a ReqNodeList that names an excluded node: CODA must
    not write one). Kept up to date from the jobs that changed each cycle."""

    static: bool = True  # depends on the job and node only, not on what is free
    by_shape: bool = False  # each job has its own partitions and excluded nodes
    job_partitions: dict[int, set[str]] = field(default_factory=dict)
    job_excluded: dict[int, set[str]] = field(default_factory=dict)
    node_partitions: dict[str, set[str]] = field(default_factory=dict)
    _nodes_seen: list[SlurmNode] = field(default_factory=list)  # what they were taken from

    def observe(
        self, changed: Sequence[SlurmJob], gone: Sequence[int], nodes: Sequence[SlurmNode]
    ) -> None:
        """The jobs new or changed since the last call, and the ids Slurm forgot (the
        first call: every job)."""
        parts, excl = self.job_partitions, self.job_excluded
        for jid in gone:
            parts.pop(jid, None)
            excl.pop(jid, None)
        for j in changed:
            parts.pop(j.job_id, None)
            excl.pop(j.job_id, None)
            if j.partitions:
                parts[j.job_id] = set(j.partitions)
            if j.excluded_nodes:
                excl[j.job_id] = set(j.excluded_nodes)
        # Only nodes whose record changed (a node's allocation changes it, its
        # partitions seldom): a new set for those.
        by_node = self.node_partitions
        moved = moved_nodes(nodes, self._nodes_seen)
        if moved is not None:  # the same nodes as last read, a few of them changed
            if moved:
                self._nodes_seen = list(nodes)
            for n, before in moved:
                if before.partitions != n.partitions or n.name not in by_node:
                    by_node[n.name] = set(n.partitions)
            return
        last = {n.name: n for n in self._nodes_seen}
        self._nodes_seen = list(nodes)
        listed = set()
        for n in nodes:
            listed.add(n.name)
            was = last.get(n.name)
            if was is None or was.partitions != n.partitions or n.name not in by_node:
                by_node[n.name] = set(n.partitions)
        for name in by_node.keys() - listed:
            del by_node[name]

    def filter(self, job: Job, node: Node, cores_pn: int) -> bool:
        if node.name in self.job_excluded.get(job.idx, ()):
            return False
        want = self.job_partitions.get(job.idx)
        have = self.node_partitions.get(node.name)
        return not want or have is None or bool(want & have)


# The values of each counter's label, present (0) from the start: a dashboard's rate()
# and alert see a series before its first event.
KINDS = (CPU, DNN)
REFUSALS = ("finish_placement", "pass_through", "placement_not_taken_whole",
            "placement_update", "rehold", "release", "requeue", "wait_mark")  # fmt: skip
PASS_WHYS = ("array", "heterogeneous", "dependency", "released", "never-fits")


def _zeros(keys: tuple[str, ...]) -> Counter[str]:
    return Counter(dict.fromkeys(keys, 0))


@dataclass
class ControllerStats:
    """What the controller did since it started: its Prometheus metrics
    (coda.runtime.metrics.ControllerCollector). Counters by a label are dicts, each
    label value known in advance present from the start."""

    cycles: int = 0
    cycle_errors: int = 0  # cycles a SlurmError cut short
    last_cycle_end: float = 0.0  # wall-clock time the last whole cycle ended (0: none yet)
    oldest_held_s: float = 0.0  # how long the longest-held job has waited, at the last cycle
    active: bool = True  # holds the lease (a standby: False)
    lease_epoch: int = 0
    times: CycleTimes = field(default_factory=CycleTimes)
    jobs_by_mark: dict[str, int] = field(default_factory=dict)  # at the last cycle's start
    placements: Counter[str] = field(default_factory=lambda: _zeros(KINDS))  # by kind
    cores_requested: Counter[str] = field(default_factory=lambda: _zeros(KINDS))  # all nodes
    cores_granted: Counter[str] = field(default_factory=lambda: _zeros(KINDS))
    refusals: Counter[str] = field(default_factory=lambda: _zeros(REFUSALS))  # by reason
    passed: Counter[str] = field(default_factory=lambda: _zeros(PASS_WHYS))  # by why
    reholds: int = 0
    learned_jobs: int = 0
    requeues: int = 0  # CPU jobs requeued so a DNN job could have their cores
    lost_core_s: float = 0.0  # core-seconds of work those requeues threw away
    waits: Counter[str] = field(default_factory=Counter)  # held jobs by reason, last cycle

    @property
    def placed(self) -> int:
        return sum(self.placements.values())


class Controller:
    """Reads Slurm, decides, writes back. ``cycle()`` is one pass; ``run()`` loops."""

    def __init__(
        self,
        client: SlurmClient,
        state_dir: str | os.PathLike[str],
        policy: str = "coda",
        tune: dict[str, str] | None = None,
        log: Callable[[str], None] | None = None,
        wall: Callable[[], float] = time.time,
        heap: LongLivedHeap | None = None,
    ) -> None:
        self.slurm = client
        # The daemon's: what each cycle leaves alive (the mirror) is kept out of the
        # cyclic collector's walks; None (tests): the collector is only paused.
        self.heap = heap
        self._decided: list[str] = []  # decisions not yet in the log (``_decide``)
        self._in_cycle = False
        # Each cycle reads the narrow listing: unchanged jobs come back as the same
        # objects, so the passes below cost what changed.
        self.listing = JobListing(client.run)
        self.index = JobIndex()
        self._unreadable: list[str] = []  # the listing's unreadable lines, as last said
        self._unreadable_nodes: list[str] = []  # and the nodes'
        # What changed at this cycle's read (None: ``decide`` called alone, as in tests
        # and the benchmark's first cycle: every job is looked at).
        self._delta: tuple[list[SlurmJob], list[int]] | None = None
        self._mirror_current = False  # the mirror has seen the index's last read
        self.ready = ReadyJobs()
        self._usable: set[str] = set()  # the usable nodes' names, and the read they are of
        self._usable_of: list[SlurmNode] = []
        # What moved among the ready jobs at this cycle's read (with ``_delta``).
        self._ready_delta: tuple[list[SlurmJob], list[int]] | None = None
        self.wait_marks = WaitMarks()
        # Ids whose record or readiness moved since the wait marks last looked.
        self._moved: set[int] = set()
        self.state_dir = Path(state_dir)
        self.limits = SlurmLimits()
        # What Slurm knows and can do: time limits to backfill with, requeue (it cannot
        # shrink a running job's grant), and its partitions as a filter.
        options = PolicyOptions(
            estimates="time-limits", reclaim="requeue", tune=dict(tune or {}),
            filters=(self.limits,),
        )  # fmt: skip
        self.policy = make_policy(policy, options)
        self.sched = Scheduler(self.policy)
        self.mirror = SlurmView(self.sched)
        self._starts: list[Start] = []
        self._decisions: list[Decision] = []
        # Jobs the cycle started whose start this cycle could not carry out, and why:
        # the cycle has no reason for them (it started them), their marks need one.
        self._undone: dict[int, Reason] = {}
        self._requeues: list[Job] = []
        self.log = log or (lambda msg: None)
        self.wall = wall
        self.learned_from: set[int] = set()
        self.stats = ControllerStats()
        self.lock = threading.Lock()
        self._load()

    @property
    def cycles(self) -> int:
        return self.stats.cycles

    @property
    def placed(self) -> int:
        return self.stats.placed

    @property
    def allocator(self) -> LearnsProfiles | None:
        return learner_of(self.policy.core_count)

    # ------------------------------------------------------------ state
    def _load(self) -> None:
        path = self.state_dir / STATE_FILE
        try:
            if not secure_file(path, "controller state"):
                return
            d = json.loads(path.read_text())
            if not isinstance(d, dict):
                raise ValueError("not a JSON object")
            if d.get("schema") != STATE_SCHEMA:
                raise ValueError(f"schema {d.get('schema')!r}, expected {STATE_SCHEMA!r}")
            alloc = self.allocator
            if alloc is not None:
                alloc.learned = LearnedProfiles.from_dict(d["learned"])
            self.learned_from = {int(j) for j in d.get("learned_from", [])}
        except StateDirError as e:
            raise ValueError(str(e)) from None
        except (OSError, ValueError, KeyError, TypeError, RecursionError) as e:
            raise ValueError(f"{path}: cannot read the controller's state ({e})") from None

    def _save(self) -> None:
        alloc = self.allocator
        d = {
            "schema": STATE_SCHEMA,
            "learned": (alloc.learned if alloc else LearnedProfiles()).to_dict(),
            # Slurm forgets ended jobs after MinJobAge; ids are unique per cluster.
            "learned_from": sorted(self.learned_from)[-100_000:],
        }
        write_atomic(self.state_dir / STATE_FILE, json.dumps(d, indent=1))

    def _decide(self, job_id: int, action: str, detail: dict[str, Any]) -> None:
        rec = {"t": round(self.wall(), 3), "job": job_id, "action": action, **detail}
        self._decided.append(json.dumps(rec) + "\n")
        if not self._in_cycle:
            self._write_decided()

    def _write_decided(self) -> None:
        """The decisions taken so far, appended to the log at once (a cycle's at its
        end, where one open per decision cost some 5 ms a cycle at 10,000 nodes)."""
        lines, self._decided = self._decided, []
        if lines:
            with open(self.state_dir / "decisions.jsonl", "a") as f:
                f.write("".join(lines))

    # ------------------------------------------------------------ one cycle
    def cycle(self) -> list[Placement]:
        """One pass: read Slurm, place what fits, release it. Counted and timed in
        ``stats`` (a cycle that Slurm's silence cuts short too, and re-raised)."""
        with self.lock:  # a scrape sees the counts between cycles, never half of one
            self.stats.cycles += 1
            t0 = time.perf_counter()
            self._in_cycle = True
            try:
                # A restart's cycle builds the mirror of every job Slurm lists, objects
                # that live on: the cyclic collector's passes over them were nearly half
                # of it at 191,000 jobs (``coda.collector``).
                with collector_off() if self.heap is None else self.heap.stretch():
                    done = self._cycle()
            except SlurmError:
                self.stats.cycle_errors += 1
                raise
            finally:
                self._in_cycle = False
                self._write_decided()
                self.stats.times.observe(time.perf_counter() - t0)
            self.stats.last_cycle_end = self.wall()
            return done

    def usable_names(self, snodes: Sequence[SlurmNode]) -> set[str]:
        """The names of the usable nodes of this read, kept from the nodes whose
        record changed since the last."""
        moved = moved_nodes(snodes, self._usable_of)
        if moved is None:
            self._usable = {n.name for n in snodes if n.usable}
        for n, _ in moved or ():
            (self._usable.add if n.usable else self._usable.discard)(n.name)
        if moved is None or moved:  # not the very records of last time
            self._usable_of = list(snodes)
        return self._usable

    def _say_new(self, what: str, now: list[str], said: list[str]) -> list[str]:
        """Log what a read could not read once, when it changes, not every cycle;
        returns it, to be ``said`` next time."""
        if now != said:
            for msg in now:
                self.log(f"{what}: {msg}")
        return now

    def _cycle(self) -> list[Placement]:
        # Jobs first, then nodes: a placed job Slurm starts between the two reads is
        # then counted twice (placed, and in its node's allocation) for one cycle, never
        # not at all (read the other way round, its cores looked free for a cycle).
        self.listing.read()
        jobs = ListedJobs(self.listing)  # the mirror takes what changed: no list is made
        self._unreadable = self._say_new(
            "squeue: a line not read", self.listing.unreadable, self._unreadable
        )
        snodes = self.slurm.nodes()
        self._unreadable_nodes = self._say_new(
            "a node left out", self.slurm.unreadable_nodes, self._unreadable_nodes
        )
        changed = self.index.update(jobs, self.listing.changed, self.listing.gone)
        # What only the changed jobs tell is taken at once, before anything can fail:
        # the same jobs are not handed over again.
        self.limits.observe(changed, self.index.gone, snodes)
        learned = self._learn(changed)
        # The mirror takes only what changed, if it saw the read before this one.
        self._delta = (changed, self.index.gone) if self._mirror_current else None
        self._mirror_current = False  # until this read reaches it (a cycle may fail first)
        self.stats.jobs_by_mark = {s: self.index.marks.get(s, 0) for s in MARK_STATES}
        if learned:
            self._save()
        usable = self.usable_names(snodes)
        self._finish_interrupted(list(self.index.placing.values()))
        self._rehold_stranded(list(self.index.placed_pending.values()), usable)
        self._let_go(list(self.index.released.values()))
        since = self.index.oldest_held_submit()
        self.stats.oldest_held_s = max(0.0, self.wall() - since) if since is not None else 0.0
        # Held jobs that are array tasks, heterogeneous or wait for a dependency, by id;
        # dependencies judged against every job Slurm lists (the index keeps them).
        special = [self.index.held_special[jid] for jid in sorted(self.index.held_special)]
        with_deps = [j for j in special if j.dependency]
        deps = Dependencies(index=self.index)
        ready = {j.job_id: deps.met(j.dependency) for j in with_deps}
        is_ready = ready.get
        self._pass_through(
            [j for j in special if j.is_array_or_het or is_ready(j.job_id, True) is None],
            ready,
        )
        # The held jobs to place: those above left out, kept from what changed.
        self._ready_delta = self.ready.update(self.index, changed, self.index.gone, ready)
        self._moved.update(j.job_id for j in self._ready_delta[0])
        self._moved.update(self._ready_delta[1])
        by_id = self.index.by_id
        self.decide(snodes, jobs, self.ready.jobs.values(), self.wall())
        self.ready.look_again(p.job.idx for p in self._starts)
        self._requeue(by_id)
        marked: list[tuple[SlurmJob, Placement]] = []
        for p in self._starts:
            sj = by_id[p.job.idx]
            if self._write_placement(sj, p):
                marked.append((sj, p))
        done = self._release_checked(marked)
        handed = self._hand_back_never(by_id, snodes)
        # Held behind an unmet dependency: not the cycle's to place, but held by CODA.
        blocked = [
            j for j in with_deps if ready.get(j.job_id) is False and not j.is_array_or_het
        ]  # array and het jobs were passed through to Slurm above
        self.ready.look_again(self._undone)
        self._mark_waits(handed, blocked)
        return done

    def decide(
        self,
        snodes: Sequence[SlurmNode],
        jobs: Sequence[SlurmJob],
        queued: Iterable[SlurmJob],
        now: float,
    ) -> None:
        """The pure part of a cycle: the view brought up to date and the scheduling
        cycle run over it (no Slurm command). Its starts and requeues are in
        ``_starts`` and ``_requeues`` (what ``bench_slurm_controller`` times)."""
        self._starts, self._requeues, self._undone = [], [], {}
        delta, self._delta = self._delta, None
        ready_delta, self._ready_delta = self._ready_delta, None
        if self.mirror.sync(snodes, jobs, queued, now, delta, ready_delta):
            self.policy.observe_cluster(list(self.mirror.nodes.values()))
        self._mirror_current = True
        harm = self.policy.harm
        if harm is not None:
            harm.advance(now)  # a bucket that allows more by now makes the cycle due
        self._decisions = self.sched.cycle(now, self) if self.sched.pending() else []

    def view(self, snodes: Sequence[SlurmNode], jobs: Sequence[SlurmJob]) -> list[Node]:
        """Policy nodes as the cycle would see them for this Slurm state (a throwaway
        mirror: the controller's own is left as it is)."""
        mirror = SlurmView(Scheduler(self.policy))
        mirror.sync(snodes, jobs, [], self.wall())
        return list(mirror.nodes.values())

    # The cycle's executor: decisions are collected, then written to Slurm.
    def bind(self, start: Start) -> bool:
        self._starts.append(start)
        self.mirror.touched.update(n.name for n in start.nodes)
        return True

    def apply(self, action: Action) -> None:
        if not isinstance(action, Preempt):  # RequeueOnly never shrinks
            raise ValueError(f"Slurm cannot carry out {type(action).__name__}")
        self.mirror.touched.update(n.name for n in action.job.placement)
        self.sched.vacate(action.job, self.wall())
        harm = self.policy.harm
        if harm is not None:
            harm.requeued(action.job)  # its lost work, and its wait from now
        started = [s for s in self._starts if s.job is action.job]
        if started:  # placed earlier in this cycle and not written yet: just not placed
            self._starts = [s for s in self._starts if s.job is not action.job]
            self.ready.look_again([action.job.idx])
        else:
            self._requeues.append(action.job)

    def _requeue(self, by_id: dict[int, SlurmJob]) -> None:
        """Take back the CPU jobs the reclaim plugin named: requeued held, marked
        ``held`` (CODA places them again), their lost work counted."""
        now = self.wall()
        for job in self._requeues:
            sj = by_id.get(job.idx)
            if sj is None:
                continue
            # Marked first: a crash in between leaves a running job CODA will place
            # again if Slurm requeues it, never a requeued one nobody places.
            mark = format_mark("held", req=sj.requested_cores_pn, requeued=sj.restarts + 1)
            try:
                self.slurm.update(sj.job_id, AdminComment=mark)
                self.slurm.requeue_hold(sj.job_id)
            except SlurmError as e:
                self.stats.refusals["requeue"] += 1
                self.log(f"job {sj.job_id}: requeue failed: {e}")
                # The jobs that needed its cores are not placed (they stay held, placed
                # again next cycle), and the job is read afresh from Slurm.
                needed = {
                    d.for_job for d in self._decisions
                    if isinstance(d, Reclaimed) and d.action.job is job
                }  # fmt: skip
                self._starts = [s for s in self._starts if s.job not in needed]
                self._undone.update((j.idx, _RECLAIM) for j in needed)
                self.mirror.forget(job.idx)
                try:  # its comment as it was
                    self.slurm.update(sj.job_id, AdminComment=sj.admin_comment or "")
                except (SlurmError, ValueError):  # ValueError: a comment scontrol cannot take
                    pass  # a running job whose mark says held: placed again only if requeued
                continue
            ran = max(0.0, now - sj.start_time) if sj.start_time else 0.0
            lost = ran * sj.cpus
            self.stats.requeues += 1
            self.stats.lost_core_s += lost
            self._decide(
                sj.job_id, "requeue", {"ran_s": round(ran, 1), "lost_core_s": round(lost, 1)}
            )
            self.log(
                f"job {sj.job_id} ({sj.name!r}): requeued for a DNN job ({lost:.0f} core-s lost)"
            )

    def _mark_waits(self, handed: set[int], blocked: Sequence[SlurmJob]) -> None:
        """Why each held job waits, into its mark (a few per cycle, in Slurm's order by
        id); the ``blocked`` ones wait for their dependency. Only the jobs whose reason
        or record moved are looked at again (``WaitMarks``)."""
        extra: dict[int, Reason] = dict.fromkeys((j.job_id for j in blocked), _DEPENDENCY)
        extra.update(self.mirror.never)
        extra.update(self._undone)
        records: Mapping[int, SlurmJob] = self.ready.jobs
        if blocked:
            records = ChainMap(self.ready.jobs, {j.job_id: j for j in blocked})
        marks = self.wait_marks
        marks.update(self.sched, self.mirror.queued, records, self._moved, extra, handed)
        self._moved = set()
        self.stats.waits = marks.counts()  # a token's first word
        for jid in marks.stale(WAIT_MARKS_PER_CYCLE):
            sj, why = records[jid], marks.reason(jid)
            assert why is not None  # stale implies a reason
            try:
                self.slurm.update(sj.job_id, AdminComment=self._remark(sj, "held", wait=why.token))
            except SlurmError as e:
                self.stats.refusals["wait_mark"] += 1
                self.log(f"job {sj.job_id}: wait mark not written: {e}")

    def _learn(self, jobs: Sequence[SlurmJob]) -> bool:
        alloc = self.allocator
        if alloc is None:
            return False
        new = False
        for j in jobs:
            text = j.mark.get("settled", "") if j.mark is not None else ""
            if not text:  # nothing to learn (and nothing to say) from this one
                continue
            # Array tasks and heterogeneous jobs: their names are not read (one record
            # stands for several jobs), so there is no model to learn for.
            if j.job_id in self.learned_from or not j.is_dnn or j.is_array_or_het:
                continue
            settled = mark_count(j.mark, "settled")
            if settled is None:  # unreadable: said once, not every cycle
                self.learned_from.add(j.job_id)
                self.log(f"job {j.job_id}: ignoring settled={text[:40]!r} in its mark")
                continue
            key = (model_key(j), j.gpus_per_node, j.node_count)
            alloc.learned.record(key, settled)
            alloc.generation += 1
            self.learned_from.add(j.job_id)
            self.stats.learned_jobs += 1
            self._decide(j.job_id, "learn", {"model": key[0], "cores": settled})
            self.log(f"learned: {key[0]} ({key[1]} GPUs/node) runs at {settled} cores")
            new = True
        return new

    def _finish_interrupted(self, jobs: Sequence[SlurmJob]) -> None:
        """``coda:placing``: the controller stopped between writing a placement and
        marking it placed. Still held: the placement stands, release it; released:
        only the mark is missing. (A ``placed`` job that is held again was held by
        someone, an admin or its user: left alone.)"""
        for j in jobs:
            if j.mark is None or j.mark.get("state") != "placing":
                continue
            try:
                if j.state == "PENDING" and j.priority == 0:
                    self.slurm.release(j.job_id)
                self.slurm.update(j.job_id, AdminComment=self._remark(j, "placed"))
                self._decide(j.job_id, "release", {"why": "placed before a restart"})
                self.log(f"job {j.job_id}: placement finished (placed before a restart)")
            except SlurmError as e:
                self.stats.refusals["finish_placement"] += 1
                self.log(f"job {j.job_id}: finishing its placement failed: {e}")

    @staticmethod
    def _remark(j: SlurmJob, state: str, **extra: object) -> str:
        fields = mark_fields(j.mark)
        fields.update({k: str(v) for k, v in extra.items()})
        return format_mark(state, **fields)

    def _rehold_stranded(self, jobs: Sequence[SlurmJob], usable: set[str]) -> None:
        """A placed job still pending on a node that is down, drained or gone (a
        requeue after a node failure, a drain after placement) would wait there for
        ever: hold it again and place it anew."""
        for j in jobs:
            if not (j.state == "PENDING" and j.placed_by_coda and j.priority != 0):
                continue
            if not j.required_nodes or all(n in usable for n in j.required_nodes):
                continue
            try:
                # Mark first: a crash in between leaves a job Slurm may run where it was
                # pinned, never one nobody places.
                # ``rehold``: CODA's own hold under way; a cycle that finds the job
                # released with this mark (the hold failed, or the controller died in
                # between) holds it again instead of taking it for a user's release.
                req = j.requested_cores_pn
                self.slurm.update(j.job_id, AdminComment=format_mark("held", req=req, rehold="1"))
                self.slurm.hold(j.job_id)
                self.stats.reholds += 1
                self._decide(j.job_id, "rehold", {"nodes": j.required_nodes})
                self.log(f"job {j.job_id}: its node(s) {','.join(j.required_nodes)} are "
                         "not usable; held to be placed again")  # fmt: skip
            except SlurmError as e:
                self.stats.refusals["rehold"] += 1
                self.log(f"job {j.job_id}: re-hold failed: {e}")

    def _let_go(self, jobs: Sequence[SlurmJob]) -> None:
        """A job held for CODA that someone released (its user, to opt out: job_submit.lua
        lets them; or an admin) is Slurm's own scheduler's from then on; its mark says
        so, and the node agent still slims and watches it where it runs. A job whose mark
        says CODA itself was holding it again (``rehold``, ``requeued``: the hold failed,
        or the controller died between the mark and the hold) is held again instead."""
        for j in jobs:
            if j.mark is not None and ("rehold" in j.mark or "requeued" in j.mark):
                try:
                    self.slurm.hold(j.job_id)
                    self.stats.reholds += 1
                    self._decide(j.job_id, "rehold", {"why": "hold under way"})
                except SlurmError as e:
                    self.stats.refusals["rehold"] += 1
                    self.log(f"job {j.job_id}: re-hold failed: {e}")
                continue
            try:
                self.slurm.update(j.job_id, AdminComment=format_mark("passed", why="released"))
            except SlurmError as e:
                self.stats.refusals["pass_through"] += 1
                self.log(f"job {j.job_id}: released (by its user or an admin); mark not "
                         f"rewritten: {e}")  # fmt: skip
                continue
            self.stats.passed["released"] += 1
            self._decide(j.job_id, "pass", {"why": "released"})
            self.log(f"job {j.job_id} ({j.name!r}): released by its user or an admin, left "
                     "to Slurm")  # fmt: skip

    def _pass_through(self, jobs: Sequence[SlurmJob], ready: dict[int, bool | None]) -> None:
        """Array tasks and heterogeneous jobs go to Slurm's own scheduler unchanged
        (one record stands for several jobs, which one placement cannot describe), and
        so do jobs whose dependencies CODA cannot judge."""
        for j in jobs:
            if not j.held_for_coda:
                continue
            if j.is_array_or_het:
                why = "array" if j.array_job_id else "heterogeneous"
            elif ready.get(j.job_id, True) is None:
                why = "dependency"
            else:
                continue
            self._pass(j, why, f"{why} job, left to Slurm's scheduler")

    def _pass(self, sj: SlurmJob, why: str, said: str, **detail: str) -> bool:
        """Hand a held job to Slurm's own scheduler unchanged, marked
        ``coda:passed,why=<why>``; whether Slurm took it."""
        try:
            self.slurm.update(sj.job_id, AdminComment=format_mark("passed", why=why))
            self.slurm.release(sj.job_id)
        except SlurmError as e:
            self.stats.refusals["pass_through"] += 1
            self.log(f"job {sj.job_id}: passing it to Slurm failed: {e}")
            return False
        self.stats.passed[why] += 1
        self._decide(sj.job_id, "pass", {"why": why, **detail})
        self.log(f"job {sj.job_id} ({sj.name!r}): {said}")
        return True

    def _hand_back_never(self, by_id: dict[int, SlurmJob], snodes: Sequence[SlurmNode]) -> set[int]:
        """Jobs too big for every node they may use, even empty, go back to Slurm at
        once (its own reason then tells their user), marked ``why=never-fits``; only
        while every node Slurm lists is read and usable: a node that is down (or left
        out of the read) may fit them when it returns, and they wait held for it.
        Returns the ids handed back."""
        handed: set[int] = set()
        if (
            not self.mirror.never
            or self.slurm.unreadable_nodes
            or not all(n.usable for n in snodes)
        ):
            return handed
        for jid, why in list(self.mirror.never.items()):
            sj = by_id.get(jid)
            if sj is None or not sj.held_for_coda:
                continue
            if self._pass(sj, "never-fits", f"{why}: handed back to Slurm", detail=str(why)):
                handed.add(jid)
        return handed

    def _write_placement(self, sj: SlurmJob, p: Placement) -> bool:
        """Write node, cores and the ``placing`` mark in one update (the mark keeps
        the request that NumCPUs overwrites). A crash from here on leaves a job that
        the next cycle either places again (still ``held``) or finishes
        (``placing``): never started twice, never lost."""
        names = [n.name for n in p.nodes]
        mark = format_mark("placing", req=sj.requested_cores_pn, grant=p.cores_pn,
                           nodes="+".join(names))  # fmt: skip
        try:
            self.slurm.update(
                sj.job_id,
                ReqNodeList=",".join(names),
                NumCPUs=p.cores_pn * len(names),
                MinCPUsNode=p.cores_pn,
                AdminComment=mark,
            )
        except SlurmError as e:
            self.stats.refusals["placement_update"] += 1
            self.listing.forget(sj.job_id)  # what CODA knows of it may be stale: ask again
            self._undone[sj.job_id] = _PLACE
            self.log(f"job {sj.job_id}: placement on {','.join(names)} failed: {e}")
            self._decide(sj.job_id, "error", {"error": str(e)})
            return False
        return True

    def _release_checked(self, marked: list[tuple[SlurmJob, Placement]]) -> list[Placement]:
        """Read the jobs back (one squeue) and release only those Slurm took the whole
        placement for: an update Slurm applied in part is put back on hold as ``held``
        and placed again next cycle."""
        if not marked:
            return []
        now = self.listing.some([sj.job_id for sj, _ in marked])
        done: list[Placement] = []
        for sj, p in marked:
            names = [n.name for n in p.nodes]
            got = now.get(sj.job_id)
            ok = (
                got is not None
                and got.state == "PENDING"
                and got.cpus == p.cores_pn * len(names)
                and sorted(got.required_nodes) == sorted(names)
                and (got.mark or {}).get("state") == "placing"
            )
            try:
                if not ok:
                    held = format_mark("held", req=sj.requested_cores_pn)
                    self.slurm.update(sj.job_id, AdminComment=held)
                    detail = {"error": "placement not taken whole", "got_cpus": got and got.cpus}
                    self._decide(sj.job_id, "error", detail)
                    self.stats.refusals["placement_not_taken_whole"] += 1
                    self._undone[sj.job_id] = _PLACE
                    self.log(f"job {sj.job_id}: Slurm did not take the placement whole; held")
                    continue
                assert got is not None  # ok implies it
                self.slurm.release(sj.job_id)
                fields = mark_fields(got.mark, drop=("state", "wait"))
                self.slurm.update(sj.job_id, AdminComment=format_mark("placed", **fields))
                if got.restarts:
                    # Requeued before: Slurm would hold it back ~120 s (BeginTime).
                    self.slurm.start_now(sj.job_id)
            except SlurmError as e:
                self.stats.refusals["release"] += 1
                self.log(f"job {sj.job_id}: release failed ({e}); finished next cycle")
                continue
            req = sj.requested_cores_pn
            kind = p.job.kind
            self.stats.placements[kind] += 1
            self.stats.cores_requested[kind] += req * len(names)
            self.stats.cores_granted[kind] += p.cores_pn * len(names)
            self._decide(
                sj.job_id,
                "place",
                {"name": sj.name, "kind": p.job.kind, "nodes": names, "requested": req,
                 "granted": p.cores_pn, "gpus_per_node": sj.gpus_per_node},
            )  # fmt: skip
            self.log(
                f"job {sj.job_id} ({sj.name!r}, {p.job.kind}) -> {','.join(names)}: "
                f"{p.cores_pn} of {req} cores asked"
                + (f", {sj.gpus_per_node} GPUs" if sj.gpus_per_node else "")
            )
            done.append(p)
        return done

    def run(
        self,
        should_stop: Callable[[], bool],
        period_s: float = 1.0,
        after_cycle: Callable[[], None] | None = None,
        idle: Callable[[float], None] = time.sleep,
        may_cycle: Callable[[], bool] = lambda: True,
    ) -> None:
        """Cycle every ``period_s`` until ``should_stop()``. Slurm being briefly
        unreachable is logged and retried, never fatal. A period in which
        ``may_cycle()`` says no (a standby, or a lease lost) runs no cycle.
        ``after_cycle()`` runs after every period, failed or not (the metrics file);
        ``idle(seconds)`` fills the time between cycles (the metrics server answers
        scrapes there)."""
        while not should_stop():
            t0 = time.monotonic()
            try:
                if may_cycle():
                    self.cycle()
            except SlurmError as e:
                self.log(f"Slurm: {e} (retrying)")
            if self.heap is not None and self.heap.sweep_due:  # between cycles
                if found := self.heap.sweep():
                    self.log(f"collector: {found} objects of cyclic garbage swept")
            if after_cycle is not None:
                after_cycle()
            end = t0 + period_s
            while not should_stop() and time.monotonic() < end:
                idle(min(0.1, max(0.0, end - time.monotonic())))
