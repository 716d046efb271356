"""CODA's Slurm controller (coda.slurm.controller): the pure scheduling cycle
(``plan``) on policy objects, and ``Controller.cycle`` against a fake Slurm that
keeps jobs as dicts and answers the commands SlurmClient runs."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from coda.cycle.once import plan
from coda.policy import PolicyOptions, make_policy
from coda.policy.state import CPU, DNN, Job, Node
from coda.slurm import fake_squeue
from coda.slurm.client import HELD, JOBS_JSON, SlurmClient, SlurmError, parse_mark
from coda.slurm.controller import STATE_FILE, Controller
from coda.slurm.failopen import hand_back
from coda.slurm.view import policy_job
from tests.bench_module import load_bench
from tests.fakes import LOOSE_HARM


# ------------------------------------------------------------------ plan (pure)
def gpu_node(idx: int, name: str, gpus: int = 2, cores: int = 16) -> Node:
    return Node(idx, name, gpus, cores, 0, 0.0)


def cpu_node(idx: int, name: str, cores: int = 16) -> Node:
    return Node(idx, name, 0, cores, 0, 0.0)


def dnn(idx: int, cores: int, gpus: int = 1, nodes: int = 1, model: str = "resnet") -> Job:
    return Job(idx, f"{model}#{idx}", float(idx), gpus, cores, 0, nodes, 100.0, model=model)


def cpu(idx: int, cores: int, nodes: int = 1) -> Job:
    return Job(idx, f"cpu#{idx}", float(idx), 0, cores, 0, nodes, 100.0, model="prep")


def placed(ps: Sequence[Any]) -> dict[int, tuple[list[str], int]]:
    return {p.job.idx: ([n.name for n in p.nodes], p.cores_pn) for p in ps}


def test_dnn_job_gets_a_gpu_node_and_its_request_when_the_model_is_unknown() -> None:
    policy = make_policy("coda")
    nodes = [cpu_node(0, "c1"), gpu_node(1, "g1")]
    job = dnn(1, cores=6)
    ps = plan(policy, nodes, [job])
    assert placed(ps) == {1: (["g1"], 6)}
    assert job.cores_pn == 6 and job.placement == [nodes[1]]
    assert nodes[1].free_cores == 10 and nodes[1].free_gpus == 1
    assert nodes[0].free_cores == 16  # never on a CPU node
    assert job in nodes[1].jobs


def test_dnn_job_gets_the_learned_count_but_never_more_than_asked() -> None:
    policy = make_policy("coda")
    policy.core_count.learned.record(("resnet", 1, 1), 3)
    policy.core_count.learned.record(("bert", 1, 1), 12)
    nodes = [gpu_node(0, "g1", gpus=4, cores=32)]
    jobs = [dnn(1, cores=8, model="resnet"), dnn(2, cores=8, model="bert"), dnn(3, 8, 2, 1, "gpt")]
    assert placed(plan(policy, nodes, jobs)) == {1: (["g1"], 3), 2: (["g1"], 8), 3: (["g1"], 8)}
    assert nodes[0].free_cores == 32 - 3 - 8 - 8
    assert nodes[0].free_gpus == 4 - 1 - 1 - 2


def test_learned_count_is_per_shape() -> None:
    policy = make_policy("coda")
    policy.core_count.learned.record(("resnet", 2, 1), 2)  # learned with 2 GPUs per node
    ps = plan(policy, [gpu_node(0, "g1", gpus=4)], [dnn(1, cores=8, gpus=1)])
    assert placed(ps) == {1: (["g1"], 8)}  # 1 GPU per node is another shape


def test_cpu_jobs_go_to_cpu_nodes_first_then_to_gpu_nodes() -> None:
    policy = make_policy("coda")
    nodes = [gpu_node(0, "g1", gpus=1, cores=16), cpu_node(1, "c1", cores=8)]
    jobs = [cpu(1, 6), cpu(2, 6), cpu(3, 2)]
    ps = plan(policy, nodes, jobs)
    # 1 fills the CPU node best; 2 no longer fits there and goes onto the GPU node's
    # cores (beyond the reserve for its idle GPU); 3 fits the CPU node's rest.
    assert placed(ps) == {1: (["c1"], 6), 2: (["g1"], 6), 3: (["c1"], 2)}
    assert nodes[1].free_cores == 0
    assert nodes[0].free_cores == 10 and nodes[0].free_gpus == 1
    assert nodes[0].cpu_job_cores == 6 and nodes[1].cpu_job_cores == 8


def test_cpu_job_respects_the_idle_gpu_reserve() -> None:
    policy = make_policy("coda")
    nodes = [gpu_node(0, "g1", gpus=2, cores=8)]  # reserve: 2 cores per idle GPU
    ps = plan(policy, nodes, [cpu(1, 4), cpu(2, 1)])
    assert placed(ps) == {1: (["g1"], 4)}  # 8 - 4 >= 4: fits beside the reserve
    assert nodes[0].free_cores == 4  # 2 would eat into the reserve: it waits (FIFO)


def test_fifo_per_array_without_runtime_estimates() -> None:
    policy = make_policy("coda", PolicyOptions(estimates="none"))
    nodes = [gpu_node(0, "g1", gpus=4, cores=16), cpu_node(1, "c1", cores=4)]
    nodes[0].free_gpus = 2  # two of its GPUs are busy
    jobs = [
        dnn(1, cores=2, gpus=4),  # the DNN head: no node has 4 GPUs free now
        dnn(2, cores=2, gpus=1),  # would fit, but waits behind the head
        cpu(3, 4),
        cpu(4, 2),
    ]
    ps = plan(policy, nodes, jobs)
    got = placed(ps)
    assert 1 not in got and 2 not in got
    assert got[3] == (["c1"], 4)
    assert got[4] == (["g1"], 2)
    assert nodes[0].free_gpus == 2


def test_a_job_that_could_never_fit_blocks_nothing() -> None:
    policy = make_policy("coda")
    nodes = [gpu_node(0, "g1", gpus=4, cores=16)]
    jobs = [dnn(1, cores=2, gpus=8), dnn(2, cores=2, gpus=1)]  # no node has 8 GPUs at all
    got = placed(plan(policy, nodes, jobs))
    assert 1 not in got and got[2] == (["g1"], 2)


def test_fifo_order_follows_submit_time_not_list_order() -> None:
    policy = make_policy("coda")
    nodes = [gpu_node(0, "g1", gpus=1, cores=8)]
    late, early = dnn(5, cores=2), dnn(6, cores=2)
    late.submit, early.submit = 50.0, 10.0
    assert placed(plan(policy, nodes, [late, early])) == {6: (["g1"], 2)}


def test_placed_jobs_use_up_the_nodes() -> None:
    policy = make_policy("coda", PolicyOptions(estimates="none"))
    nodes = [gpu_node(0, "g1", gpus=2, cores=8)]
    ps = plan(policy, nodes, [dnn(1, 5), dnn(2, 5), dnn(3, 3)])
    assert placed(ps) == {1: (["g1"], 5)}  # 2 does not fit the 3 cores left: FIFO stops
    assert (nodes[0].free_cores, nodes[0].free_gpus) == (3, 1)
    # A later cycle on the same (updated) nodes takes the next fitting head.
    assert placed(plan(policy, nodes, [dnn(3, 3)])) == {3: (["g1"], 3)}
    assert (nodes[0].free_cores, nodes[0].free_gpus) == (0, 0)


def test_time_limits_let_a_short_job_backfill_past_a_blocked_head() -> None:
    policy = make_policy("coda", PolicyOptions(estimates="time-limits"))
    nodes = [gpu_node(0, "g1", gpus=2, cores=8)]
    first, head, short, unbounded = dnn(1, 5), dnn(2, 5), dnn(3, 3), dnn(4, 3)
    first.time_limit, short.time_limit = 600.0, 300.0  # head: ends after `first`
    ps = plan(policy, nodes, [first, head, short, unbounded], now=0.0)
    # `short` ends (300 s) before the head can start (600 s); `unbounded` has no limit,
    # so it could delay the head for ever: it waits.
    assert placed(ps) == {1: (["g1"], 5), 3: (["g1"], 3)}


def test_multi_node_job_gets_distinct_nodes() -> None:
    policy = make_policy("coda")
    nodes = [gpu_node(i, f"g{i}", gpus=2, cores=8) for i in range(3)]
    nodes[1].free_cores = 2  # too few for it
    job = dnn(1, cores=8, gpus=4, nodes=2)  # 4 cores and 2 GPUs per node
    (p,) = plan(policy, nodes, [job])
    names = [n.name for n in p.nodes]
    assert len(names) == 2 and len(set(names)) == 2 and "g1" not in names
    assert p.cores_pn == 4
    for n in p.nodes:
        assert (n.free_cores, n.free_gpus) == (4, 0)
    assert (nodes[1].free_cores, nodes[1].free_gpus) == (2, 2)


def test_multi_node_job_waits_for_enough_nodes() -> None:
    policy = make_policy("coda")
    nodes = [gpu_node(0, "g0", gpus=1), gpu_node(1, "g1", gpus=1)]
    nodes[1].free_gpus = 0
    assert plan(policy, nodes, [dnn(1, cores=4, gpus=3, nodes=3)]) == []
    assert plan(policy, nodes, [dnn(2, cores=4, gpus=2, nodes=2)]) == []
    assert nodes[0].free_cores == 16


def test_unusable_requests_place_nothing() -> None:
    policy = make_policy("coda")
    nodes = [gpu_node(0, "g1", gpus=1, cores=4)]
    assert plan(policy, nodes, [dnn(1, cores=5)]) == []
    assert plan(policy, nodes, [cpu(2, 5)]) == []
    assert plan(policy, [], [dnn(3, cores=1), cpu(4, 1)]) == []


# ------------------------------------------------------------------ a fake Slurm
class FakeSlurm:
    """Jobs as dicts (squeue --json's keys), nodes as dicts; answers the argv the
    client builds. CPUAlloc/GresUsed follow from the running jobs. ``fail`` holds
    predicates on argv that make a command fail. ``gres_used_needs_detail``: like
    slurmctld, GresUsed only with ``-d`` (SHOW_DETAIL)."""

    def __init__(self, gres_used_needs_detail: bool = False) -> None:
        self.jobs: dict[int, dict[str, Any]] = {}
        self.nodes: dict[str, dict[str, Any]] = {}
        self.calls: list[list[str]] = []
        self.fail: list[Callable[[list[str]], bool]] = []
        self.gres_used_needs_detail = gres_used_needs_detail

    # ---------------------------------------------------------- setup
    def node(self, name: str, cpus: int, gpus: int = 0, state: str = "IDLE") -> None:
        self.nodes[name] = {"cpus": cpus, "gpus": gpus, "state": state}

    def job(
        self,
        job_id: int,
        name: str,
        cpus: int,
        gpus_pn: int = 0,
        node_count: int = 1,
        state: str = "PENDING",
        priority: int = 0,
        comment: str = HELD,
        dependency: str = "",
        nodes: str = "",
        required: str = "",
    ) -> dict[str, Any]:
        d = {
            "job_id": job_id,
            "array_job_id": 0,
            "het_job_id": 0,
            "name": name,
            "user_id": 1000,
            "job_state": state,
            "state_reason": "JobHeldUser" if priority == 0 else "None",
            "cpus": cpus,
            "node_count": node_count,
            "tres_per_node": f"gres:gpu:{gpus_pn}" if gpus_pn else "",
            "tres_per_job": "",
            "tres_per_task": "",
            "tasks": 1,
            "nodes": nodes,
            "required_nodes": required,
            "dependency": dependency,
            "priority": priority,
            "admin_comment": comment,
            "submit_time": 1_700_000_000 + job_id,
            "start_time": 0,
            "end_time": 0,
            "exit_code": 0,
            "restart_cnt": 0,
        }
        self.jobs[job_id] = d
        return d

    # ---------------------------------------------------------- queries
    def ids(self, verb: str) -> list[int]:
        """Job ids the client ran ``scontrol <verb>`` for, in order."""
        out = []
        for c in self.calls:
            if c[:2] == ["scontrol", verb]:
                out.append(int(c[2].removeprefix("JobId=")))
        return out

    def updates(self, job_id: int) -> list[dict[str, str]]:
        out = []
        for c in self.calls:
            if c[:3] == ["scontrol", "update", f"JobId={job_id}"]:
                out.append(dict(a.split("=", 1) for a in c[3:]))
        return out

    # ---------------------------------------------------------- the runner
    def run(self, argv: Sequence[str]) -> str:
        argv = list(argv)
        self.calls.append(argv)
        for f in self.fail:
            if f(argv):
                raise SlurmError(f"{' '.join(argv)}: Socket timed out on send/recv operation")
        if argv == list(JOBS_JSON):
            return json.dumps(
                {"meta": {"Slurm": {"version": "22.05"}}, "jobs": list(self.jobs.values())}
            )
        listed = fake_squeue.answer(argv, self.jobs.values())
        if listed is not None:
            return listed
        if argv[:2] == ["scontrol", "show"] and argv[-1] == "node" and "-o" in argv:
            return "\n".join(self._node_line(n, "-d" in argv) for n in self.nodes) + "\n"
        if argv[:2] == ["scontrol", "update"]:
            m = re.fullmatch(r"JobId=(\d+)", argv[2])
            assert m, argv
            job = self.jobs[int(m.group(1))]
            for a in argv[3:]:
                k, _, v = a.partition("=")
                if k == "ReqNodeList":
                    job["required_nodes"] = v
                elif k == "NumCPUs":
                    job["cpus"] = int(v)
                elif k == "MinCPUsNode":
                    job["min_cpus_node"] = int(v)
                elif k == "AdminComment":
                    job["admin_comment"] = v
                else:
                    raise AssertionError(f"unexpected update {a!r}")
            return ""
        if argv[:2] == ["scontrol", "hold"]:
            job = self.jobs[int(argv[2])]
            job["priority"], job["state_reason"] = 0, "JobHeldAdmin"
            return ""
        if argv[:2] == ["scontrol", "release"]:
            job = self.jobs[int(argv[2])]
            if job["job_state"] != "PENDING":
                raise SlurmError(f"{' '.join(argv)}: Job is no longer pending execution")
            job["priority"], job["state_reason"] = 1, "None"
            return ""
        raise AssertionError(f"unexpected command {argv}")

    def _node_line(self, name: str, detail: bool) -> str:
        n = self.nodes[name]
        alloc = used = 0
        for j in self.jobs.values():
            if j["job_state"] == "RUNNING" and name in j["nodes"].split(","):
                alloc += j["cpus"] // max(1, len(j["nodes"].split(",")))
                used += int(j["tres_per_node"].rpartition(":")[2] or 0)
        gres = f"gpu:{n['gpus']}" if n["gpus"] else "(null)"
        line = (
            f"NodeName={name} Arch=x86_64 CoresPerSocket={n['cpus']} CPUAlloc={alloc} "
            f"CPUEfctv={n['cpus']} CPUTot={n['cpus']} Gres={gres} "
        )
        if n["gpus"] and (detail or not self.gres_used_needs_detail):
            line += f"GresUsed=gpu:{used}(IDX:N/A) "
        return line + f"State={n['state']} Partitions=main"


def decisions(state_dir: Path) -> list[dict[str, Any]]:
    path = state_dir / "decisions.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def fake() -> FakeSlurm:
    f = FakeSlurm()
    f.node("c1", 8)
    f.node("g1", 16, gpus=2)
    return f


def controller(fake: FakeSlurm, state_dir: Path, **kw: Any) -> Controller:
    return Controller(SlurmClient(fake.run), state_dir, wall=lambda: 1000.0, **kw)


def fake_client(fake: FakeSlurm) -> SlurmClient:
    return SlurmClient(fake.run)


# ------------------------------------------------------------------ one cycle
def test_cycle_places_held_jobs_and_releases_them(fake: FakeSlurm, tmp_path: Path) -> None:
    fake.job(1, "resnet", 4, gpus_pn=1)
    fake.job(2, "prep", 2)
    logs: list[str] = []
    ctl = controller(fake, tmp_path, log=logs.append)
    done = ctl.cycle()
    assert sorted(p.job.idx for p in done) == [1, 2]
    j1, j2 = fake.jobs[1], fake.jobs[2]
    assert j1["required_nodes"] == "g1" and j1["cpus"] == 4 and j1["min_cpus_node"] == 4
    assert j1["admin_comment"] == "coda:placed,req=4,grant=4,nodes=g1"
    assert j1["priority"] == 1
    assert j2["required_nodes"] == "c1" and j2["cpus"] == 2  # CPU job: CPU node first
    assert j2["admin_comment"] == "coda:placed,req=2,grant=2,nodes=c1"
    assert j2["priority"] == 1
    # Placement and mark in one update, then the release: a crash never starts a job
    # unplaced, and the mark never lacks the request that NumCPUs overwrote.
    mine = [c for c in fake.calls if "JobId=1" in c or c[-1:] == ["1"]]
    assert [c[:3] for c in mine] == [
        ["scontrol", "update", "JobId=1"],
        ["scontrol", "release", "1"],
        ["scontrol", "update", "JobId=1"],
    ]
    assert "ReqNodeList=g1" in mine[0]
    assert any(a.startswith("AdminComment=coda:placing") for a in mine[0])
    assert mine[2][3:] == ["AdminComment=coda:placed,req=4,grant=4,nodes=g1"]
    places = [d for d in decisions(tmp_path) if d["action"] == "place"]
    assert {d["job"]: (d["kind"], d["nodes"], d["granted"]) for d in places} == {
        1: (DNN, ["g1"], 4),
        2: (CPU, ["c1"], 2),
    }
    assert ctl.placed == 2 and ctl.cycles == 1
    assert any("job 1 ('resnet', dnn) -> g1" in m for m in logs)  # names quoted: repr


def test_a_cycle_pauses_the_cyclic_collector_and_leaves_it_as_it_was(
    fake: FakeSlurm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gc

    fake.job(1, "resnet", 4, gpus_pn=1)
    ctl = controller(fake, tmp_path)
    seen: list[bool] = []
    cycle = Controller._cycle

    def watched(self: Controller) -> Any:
        seen.append(gc.isenabled())
        if len(seen) == 2:
            raise SlurmError("squeue: timed out")
        return cycle(self)

    monkeypatch.setattr(Controller, "_cycle", watched)
    was_on = gc.isenabled()
    try:
        gc.enable()
        assert len(ctl.cycle()) == 1
        assert gc.isenabled()
        with pytest.raises(SlurmError):
            ctl.cycle()  # a cycle cut short gives it back too
        assert gc.isenabled()
        gc.disable()
        ctl.cycle()
        assert not gc.isenabled()  # off before: off after
    finally:
        if was_on:
            gc.enable()
    assert seen == [False, False, False]


def test_the_daemons_heap_freezes_each_cycle_and_sweeps_between_cycles(
    fake: FakeSlurm, tmp_path: Path
) -> None:
    import gc

    from coda.collector import LongLivedHeap

    fake.job(1, "resnet", 4, gpus_pn=1)
    heap = LongLivedHeap(sweep_every=2)
    ctl = controller(fake, tmp_path, heap=heap)
    was_on = gc.isenabled()
    try:
        gc.enable()
        frozen0 = gc.get_freeze_count()
        assert len(ctl.cycle()) == 1
        assert gc.get_freeze_count() > frozen0 and gc.isenabled()  # the mirror, frozen
        assert heap.stretches == 1 and heap.sweeps == 0
        ctl.run(lambda: ctl.cycles >= 4, period_s=0.0)  # three more, swept after 2 and 4
        assert heap.sweeps == 2 and heap.stretches == 0
    finally:
        gc.unfreeze()
        (gc.enable if was_on else gc.disable)()


def test_a_second_cycle_places_nothing_new(fake: FakeSlurm, tmp_path: Path) -> None:
    fake.job(1, "resnet", 4, gpus_pn=1)
    ctl = controller(fake, tmp_path)
    assert len(ctl.cycle()) == 1
    n = len(fake.calls)
    assert ctl.cycle() == []
    # Only reads: no update, no release.
    assert [c[1] for c in fake.calls[n:] if c[0] == "scontrol"] == ["show"]
    assert {c[0] for c in fake.calls[n:]} == {"squeue", "scontrol"}
    assert fake.jobs[1]["admin_comment"] == "coda:placed,req=4,grant=4,nodes=g1"


def test_a_placed_job_that_starts_between_the_reads_keeps_its_cores(tmp_path: Path) -> None:
    # Slurm starts a placed job between the cycle's two reads (its nodes and its jobs):
    # whichever comes first, the job's cores must count once at least, never zero
    # times (found on a slow slurmctld: a CPU job booked onto cores just started).
    fake = FakeSlurm()
    fake.node("c1", 2)
    fake.node("g1", 4, gpus=1)
    fake.job(1, "prep", 1)
    fake.job(2, "prep", 1)
    reads = {("squeue", "--noheader"), ("scontrol", "show")}
    start_after_first_read = False

    def run(argv: Sequence[str]) -> str:
        nonlocal start_after_first_read
        out = fake.run(argv)
        if start_after_first_read and tuple(argv[:2]) in reads:
            start_after_first_read = False
            for jid in (1, 2):  # Slurm starts them where CODA placed them
                fake.jobs[jid].update(job_state="RUNNING", nodes="c1", start_time=999)
        return out

    ctl = Controller(SlurmClient(run), tmp_path, wall=lambda: 1000.0)
    assert {p.job.idx: p.nodes[0].name for p in ctl.cycle()} == {1: "c1", 2: "c1"}
    fake.job(3, "prep", 1)["requeue"] = True  # may be taken back: it may borrow g1's cores
    start_after_first_read = True
    done = ctl.cycle()
    assert not start_after_first_read, "the jobs started during the cycle"
    assert {p.job.idx: p.nodes[0].name for p in done} == {3: "g1"}, "c1 is full"


def test_a_cpu_job_that_may_not_be_requeued_waits_for_a_cpu_node(tmp_path: Path) -> None:
    # Nothing could take a GPU node's cores back from it: it waits for the CPU node.
    fake = FakeSlurm()
    fake.node("c1", 2)
    fake.node("g1", 4, gpus=1)
    fake.job(
        1, "prep", 2, state="RUNNING", nodes="c1", comment="coda:placed,req=2,grant=2,nodes=c1"
    )
    fake.job(2, "prep", 1)
    fake.job(3, "prep", 1)["requeue"] = True
    ctl = Controller(SlurmClient(fake.run), tmp_path, wall=lambda: 1000.0)
    assert {p.job.idx: p.nodes[0].name for p in ctl.cycle()} == {3: "g1"}


def test_interrupted_placement_is_released_not_replanned(fake: FakeSlurm, tmp_path: Path) -> None:
    # The controller stopped between writing the placement and releasing the job.
    fake.job(
        3, "resnet", 2, gpus_pn=1, comment="coda:placing,req=4,grant=2,nodes=g1", required="g1"
    )
    ctl = controller(fake, tmp_path)
    assert ctl.cycle() == []
    assert fake.ids("release") == [3]
    assert fake.ids("update") == [3]  # the placement stands; only the mark is finished
    assert fake.jobs[3]["admin_comment"] == "coda:placed,req=4,grant=2,nodes=g1"
    assert fake.jobs[3]["priority"] == 1
    assert [d["action"] for d in decisions(tmp_path)] == ["release"]
    fake.calls.clear()
    ctl.cycle()
    assert fake.ids("release") == []  # released once


def test_a_placed_job_held_again_by_someone_is_left_alone(fake: FakeSlurm, tmp_path: Path) -> None:
    # An admin (or Slurm after a failed launch) held a job CODA had placed.
    fake.job(4, "resnet", 2, gpus_pn=1, comment="coda:placed,req=4,grant=2,nodes=g1", required="g1")
    ctl = controller(fake, tmp_path)
    ctl.cycle()
    assert fake.ids("release") == [] and fake.ids("update") == []
    assert fake.jobs[4]["priority"] == 0


def test_jobs_with_a_dependency_or_a_user_hold_are_left_alone(
    fake: FakeSlurm, tmp_path: Path
) -> None:
    fake.job(3, "before", 1, state="RUNNING", priority=1, nodes="c1", comment="")
    fake.job(4, "after", 2, dependency="afterok:3(unfulfilled)")
    fake.job(5, "mine", 2, comment="")  # the user's own --hold: no mark
    fake.job(6, "seen", 2, comment="reserved by admin")
    ctl = controller(fake, tmp_path)
    assert ctl.cycle() == []
    # Job 4 is CODA's (held): its mark says why it waits; the others are not touched.
    assert fake.ids("update") == [4] and fake.ids("release") == []
    assert parse_mark(fake.jobs[4]["admin_comment"]) == {"state": "held", "wait": "dependency"}
    assert all(fake.jobs[j]["priority"] == 0 for j in (4, 5, 6))
    # Slurm does not re-evaluate a held job's dependency ("unfulfilled" stays): CODA
    # judges it from job 3's state, and places job 4 once job 3 completed.
    fake.jobs[3]["job_state"] = "COMPLETED"
    assert [p.job.idx for p in ctl.cycle()] == [4]
    assert fake.ids("release") == [4]


def test_a_dependency_coda_cannot_judge_is_left_to_slurm(fake: FakeSlurm, tmp_path: Path) -> None:
    fake.job(7, "one-at-a-time", 2, dependency="singleton(unfulfilled)")
    ctl = controller(fake, tmp_path)
    assert ctl.cycle() == []
    j = fake.jobs[7]
    assert j["priority"] == 1 and j["required_nodes"] == ""
    assert parse_mark(j["admin_comment"]) == {"state": "passed", "why": "dependency"}


def _sj(jid: int, state: str, array: int = 0, task: int | None = None) -> Any:
    from coda.slurm.client import SlurmJob

    return SlurmJob(jid, "x", 0, state, "", 1, 1, 0, [], [], "", 1, None,
                    array_job_id=array, array_task_id=task)  # fmt: skip


@pytest.mark.parametrize(
    "dep, met",
    [
        ("", True),
        ("afterok:1(unfulfilled)", True),  # 1 COMPLETED
        ("afterok:2(unfulfilled)", False),  # 2 FAILED
        ("afternotok:2(unfulfilled)", True),
        ("afternotok:3(unfulfilled)", False),  # 3 still running
        ("afterany:2(unfulfilled)", True),
        ("afterany:3(unfulfilled)", False),
        ("after:3+5(unfulfilled)", True),  # started
        ("after:4(unfulfilled)", False),  # 4 pending
        ("afterok:1(unfulfilled),afterok:2(unfulfilled)", False),  # all of
        ("afterok:2(unfulfilled)?afterok:1(unfulfilled)", True),  # any of
        ("afterok:99(unfulfilled)", True),  # Slurm forgot it: met
        ("afterok:10_1(unfulfilled)", True),  # one array task, completed
        ("afterok:10(unfulfilled)", False),  # the whole array: task 2 still runs
        ("singleton(unfulfilled)", None),
        ("aftercorr:10(unfulfilled)", None),
        ("afterok:2(failed)", None),
        ("afterok:2(failed)?afterok:1(unfulfilled)", True),  # the other one will do
        ("afterok:2(failed)?afterok:3(unfulfilled)", False),
    ],
)
def test_dependency_met(dep: str, met: bool | None) -> None:
    from coda.slurm.controller import dependency_met

    jobs = [
        _sj(1, "COMPLETED"),
        _sj(2, "FAILED"),
        _sj(3, "RUNNING"),
        _sj(4, "PENDING"),
        _sj(11, "COMPLETED", array=10, task=1),
        _sj(10, "RUNNING", array=10, task=2),
    ]
    assert dependency_met(dep, jobs) is met


def test_settled_cores_are_learned_once_and_kept(fake: FakeSlurm, tmp_path: Path) -> None:
    fake.job(
        10,
        "bert",
        4,
        gpus_pn=1,
        state="RUNNING",
        priority=1,
        comment="coda:placed,req=4,grant=4,nodes=g1,settled=1",
        nodes="g1",
        required="g1",
    )
    fake.job(11, "cpu-with-settled", 2, state="RUNNING", priority=1, nodes="c1",
             comment="coda:placed,req=2,grant=2,nodes=c1,settled=1")  # fmt: skip
    ctl = controller(fake, tmp_path)
    ctl.cycle()
    assert ctl.allocator is not None
    assert ctl.allocator.learned.cores(("1000:bert", 1, 1)) == 1
    assert ctl.allocator.learned.count(("1000:bert", 1, 1)) == 1
    state = json.loads((tmp_path / STATE_FILE).read_text())
    assert state["learned_from"] == [10]  # CPU jobs teach nothing
    assert state["learned"]["profiles"] == [
        {"model": "1000:bert", "gpus_per_node": 1, "nodes": 1, "cores": [[1, 1]], "granted": 1}
    ]
    mtime = (tmp_path / STATE_FILE).stat().st_mtime_ns
    ctl.cycle()
    ctl.cycle()
    assert ctl.allocator.learned.count(("1000:bert", 1, 1)) == 1  # once per job
    assert [d["action"] for d in decisions(tmp_path)] == ["learn"]
    assert (tmp_path / STATE_FILE).stat().st_mtime_ns == mtime  # nothing new: not rewritten

    # A new controller (restart; Slurm forgot job 10) grants the model what it learned.
    del fake.jobs[10]
    fake.job(12, "bert", 4, gpus_pn=1)
    again = controller(fake, tmp_path)
    assert again.learned_from == {10}
    assert [p.cores_pn for p in again.cycle()] == [1]
    j = fake.jobs[12]
    assert j["cpus"] == 1 and j["min_cpus_node"] == 1
    assert parse_mark(j["admin_comment"]) == {
        "state": "placed",
        "req": "4",
        "grant": "1",
        "nodes": "g1",
    }


def test_a_job_seen_again_after_restart_is_not_learned_twice(
    fake: FakeSlurm, tmp_path: Path
) -> None:
    fake.job(10, "bert", 4, gpus_pn=1, state="RUNNING", priority=1, nodes="g1",
             comment="coda:placed,req=4,grant=4,nodes=g1,settled=2")  # fmt: skip
    controller(fake, tmp_path).cycle()
    again = controller(fake, tmp_path)
    again.cycle()
    assert again.allocator.learned.count(("1000:bert", 1, 1)) == 1


def test_a_broken_state_file_is_refused(fake: FakeSlurm, tmp_path: Path) -> None:
    (tmp_path / STATE_FILE).write_text('{"schema": "something-else"}')
    with pytest.raises(ValueError, match="controller's state"):
        controller(fake, tmp_path)
    (tmp_path / STATE_FILE).write_text("{not json")
    with pytest.raises(ValueError, match="controller's state"):
        controller(fake, tmp_path)


def test_view_counts_placed_jobs_slurm_has_not_started(fake: FakeSlurm, tmp_path: Path) -> None:
    fake.node("g2", 16, gpus=2, state="DOWN+DRAIN")
    fake.job(20, "run", 2, gpus_pn=1, state="RUNNING", priority=1, nodes="g1",
             comment="coda:placed,req=2,grant=2,nodes=g1")  # fmt: skip
    fake.job(21, "wait", 4, gpus_pn=1, priority=1, required="g1",
             comment="coda:placed,req=8,grant=3,nodes=g1")  # fmt: skip
    fake.job(22, "cpu", 8, state="RUNNING", priority=1, nodes="c1", comment="")
    client = SlurmClient(fake.run)
    ctl = controller(fake, tmp_path)
    nodes = {n.name: n for n in ctl.view(client.nodes(), client.jobs())}
    assert set(nodes) == {"c1", "g1"}  # the drained node is not offered
    g1 = nodes["g1"]
    # 16 - 2 (Slurm's allocation, job 20) - 3 (job 21's grant, not started yet)
    assert g1.free_cores == 11
    assert g1.free_gpus == 0  # one used by 20, one spoken for by 21
    assert {j.idx for j in g1.jobs} == {20, 21}
    assert nodes["c1"].free_cores == 0 and nodes["c1"].cpu_job_cores == 8
    # So a held DNN job does not go to g1 though Slurm shows a GPU free there.
    fake.job(23, "new", 2, gpus_pn=1)
    assert ctl.cycle() == []
    assert fake.jobs[23]["priority"] == 0


def test_a_slurm_error_on_update_leaves_the_job_held(fake: FakeSlurm, tmp_path: Path) -> None:
    fake.job(30, "resnet", 4, gpus_pn=1)
    fake.fail.append(lambda argv: argv[:3] == ["scontrol", "update", "JobId=30"])
    logs: list[str] = []
    ctl = controller(fake, tmp_path, log=logs.append)
    assert ctl.cycle() == []
    j = fake.jobs[30]
    assert j["priority"] == 0 and j["admin_comment"] == HELD
    assert fake.ids("release") == []
    assert any("job 30: placement on g1 failed" in m for m in logs)
    (err,) = [d for d in decisions(tmp_path) if d["action"] == "error"]
    assert err["job"] == 30 and "timed out" in err["error"]
    assert ctl.placed == 0
    # Slurm answers again: the next cycle places it.
    fake.fail.clear()
    assert [p.job.idx for p in ctl.cycle()] == [30]
    assert fake.jobs[30]["priority"] == 1


def test_a_failed_release_is_finished_by_the_next_cycle(fake: FakeSlurm, tmp_path: Path) -> None:
    fake.job(31, "resnet", 4, gpus_pn=1)
    fake.fail.append(lambda argv: argv[:2] == ["scontrol", "release"])
    ctl = controller(fake, tmp_path)
    assert ctl.cycle() == []
    assert fake.jobs[31]["admin_comment"].startswith("coda:placing")
    assert fake.jobs[31]["priority"] == 0
    fake.fail.clear()
    fake.calls.clear()
    assert ctl.cycle() == []  # not placed again ...
    # ... only released, and marked placed
    assert fake.ids("update") == [31] and fake.ids("release") == [31]


def test_a_failing_squeue_is_a_slurm_error(fake: FakeSlurm, tmp_path: Path) -> None:
    fake.fail.append(lambda argv: argv[0] == "squeue")
    with pytest.raises(SlurmError):
        controller(fake, tmp_path).cycle()


def test_run_retries_after_slurm_errors(fake: FakeSlurm, tmp_path: Path) -> None:
    fake.job(1, "resnet", 4, gpus_pn=1)
    # The first squeue fails (the calls are counted before the check).
    fake.fail.append(lambda argv: argv[0] == "squeue" and
                     sum(c[0] == "squeue" for c in fake.calls) == 1)  # fmt: skip
    logs: list[str] = []
    ctl = controller(fake, tmp_path, log=logs.append)
    ctl.run(lambda: ctl.cycles >= 2, period_s=0.0)
    assert ctl.cycles == 2 and ctl.placed == 1
    assert any("retrying" in m for m in logs)


def test_handback_releases_held_jobs_unchanged(fake: FakeSlurm, tmp_path: Path) -> None:
    fake.job(40, "a", 4, gpus_pn=1)
    fake.job(41, "b", 2)
    fake.job(42, "user-hold", 2, comment="")
    fake.job(43, "running", 2, state="RUNNING", priority=1, nodes="c1",
             comment="coda:placed,req=2,grant=2,nodes=c1")  # fmt: skip
    fake.job(44, "cancelled-while-held", 2, state="CANCELLED")  # still marked, priority 0
    said: list[str] = []
    assert hand_back(SlurmClient(fake.run), log=said.append) == 2
    assert fake.ids("release") == [40, 41]
    for j in (40, 41):
        assert fake.jobs[j]["priority"] == 1
        assert fake.jobs[j]["admin_comment"] == "coda:passed,why=handback"
        assert fake.jobs[j]["cpus"] == (4 if j == 40 else 2)  # request unchanged
        assert fake.jobs[j]["required_nodes"] == ""
    assert fake.jobs[42]["priority"] == 0
    assert fake.jobs[44]["admin_comment"] == HELD
    assert fake.jobs[43]["admin_comment"] == "coda:placed,req=2,grant=2,nodes=c1"
    assert len(said) == 2
    # Handed back: a controller started later leaves them to Slurm.
    fake.calls.clear()
    assert controller(fake, tmp_path).cycle() == []
    assert fake.ids("update") == []


def test_policy_job_carries_the_slurm_job() -> None:
    fake = FakeSlurm()
    fake.job(7, "resnet", 8, gpus_pn=2, node_count=2)
    fake.job(8, "", 3)
    a, b = SlurmClient(fake.run).jobs()
    ja, jb = policy_job(a), policy_job(b)
    assert (ja.idx, ja.kind, ja.gpus_pn, ja.cores_pn_req, ja.nodes) == (7, DNN, 2, 4, 2)
    assert ja.model == "1000:resnet" and ja.job_id == "resnet#7"
    assert ja.submit == 1_700_000_007.0
    assert (jb.kind, jb.model, jb.cores_pn_req) == (CPU, "1000:job8", 3)


def test_multi_node_placement_writes_per_node_cores(tmp_path: Path) -> None:
    fake = FakeSlurm()
    for i in range(3):
        fake.node(f"g{i}", 8, gpus=1)
    fake.job(50, "ddp", 8, gpus_pn=1, node_count=2)
    (p,) = controller(fake, tmp_path).cycle()
    j = fake.jobs[50]
    nodes = j["required_nodes"].split(",")
    assert len(nodes) == 2 and len(set(nodes)) == 2
    assert j["cpus"] == 8 and j["min_cpus_node"] == 4
    mark = parse_mark(j["admin_comment"])
    assert mark is not None
    assert (mark["req"], mark["grant"], mark["nodes"]) == ("4", "4", "+".join(nodes))


# ---------------------- what Slurm really reports: busy GPUs, failed writes, partitions, down nodes
def test_busy_gpus_are_seen_as_slurm_really_reports_them(tmp_path: Path) -> None:
    fake = FakeSlurm(gres_used_needs_detail=True)
    fake.node("g1", 16, gpus=1)
    fake.node("g2", 16, gpus=1)
    fake.job(60, "busy", 8, gpus_pn=1, state="RUNNING", priority=1, nodes="g1", comment="")
    fake.job(61, "resnet", 4, gpus_pn=1)
    controller(fake, tmp_path).cycle()
    # Best fit would pick g1 (fewer free cores), but its only GPU is taken.
    assert fake.jobs[61]["required_nodes"] == "g2"


def test_a_failed_mark_write_does_not_lose_the_request(fake: FakeSlurm, tmp_path: Path) -> None:
    fake.job(70, "resnet", 4, gpus_pn=1)
    ctl = controller(fake, tmp_path)
    ctl.allocator.learned.record(("1000:resnet", 1, 1), 1)
    fake.fail.append(lambda argv: any(a.startswith("AdminComment=") for a in argv))
    assert ctl.cycle() == []
    assert fake.jobs[70]["priority"] == 0  # still held, to be placed again
    fake.fail.clear()
    assert len(ctl.cycle()) == 1
    mark = parse_mark(fake.jobs[70]["admin_comment"])
    assert mark is not None and mark["grant"] == "1"
    assert mark["req"] == "4"


def test_a_bad_settled_value_does_not_stop_the_controller(fake: FakeSlurm, tmp_path: Path) -> None:
    fake.job(80, "bert", 4, gpus_pn=1, state="RUNNING", priority=1, nodes="g1",
             comment="coda:placed,req=4,grant=4,nodes=g1,settled=0")  # fmt: skip
    fake.job(81, "prep", 2)
    ctl = controller(fake, tmp_path)
    assert [p.job.idx for p in ctl.cycle()] == [81]


@pytest.mark.parametrize("value", ["9" * 20, "9" * 5000, "\u00b2", "1048577"])
def test_a_count_no_machine_has_is_not_learned_and_the_state_reloads(
    fake: FakeSlurm, tmp_path: Path, value: str
) -> None:
    """A job's mark is written by others too: a settled count out of range is ignored
    (said once), never saved where the next start would refuse the state file."""
    fake.job(80, "bert", 4, gpus_pn=1, state="RUNNING", priority=1, nodes="g1",
             comment=f"coda:placed,req=4,grant=4,nodes=g1,settled={value}")  # fmt: skip
    fake.job(81, "prep", 2)
    logs: list[str] = []
    ctl = controller(fake, tmp_path, log=logs.append)
    assert [p.job.idx for p in ctl.cycle()] == [81]
    fake.jobs[80]["end_time"] = 1_700_000_999  # its record changed: read again
    ctl.cycle()
    assert ctl.stats.learned_jobs == 0
    said = [m for m in logs if "ignoring settled" in m]
    assert len(said) == (0 if value == "\u00b2" else 1)  # ², not ASCII: not CODA's field
    again = controller(fake, tmp_path)  # reads the state the first one saved
    assert again.allocator is not None and again.allocator.learned.shapes() == {}


def test_a_huge_request_or_dependency_costs_that_job_not_the_cycle(
    fake: FakeSlurm, tmp_path: Path
) -> None:
    from coda.slurm.client import mark_count

    assert mark_count({"req": "9" * 5000}, "req") is None
    assert mark_count({"req": "\u00b2"}, "req") is None
    assert mark_count({"req": "0"}, "req") is None and mark_count({"req": "8"}, "req") == 8
    fake.job(82, "prep", 2, comment="coda:held,req=" + "9" * 5000)
    fake.job(83, "prep", 2, dependency=f"afterok:{'9' * 5000}(unfulfilled)")
    fake.job(84, "prep", 2)
    ctl = controller(fake, tmp_path)
    assert 84 in [p.job.idx for p in ctl.cycle()]


def test_partitions_and_excluded_nodes_limit_placement() -> None:
    from coda.slurm.client import SlurmJob, SlurmNode
    from coda.slurm.controller import SlurmLimits

    def sjob(jid: int, parts: list[str], excluded: list[str] = []) -> SlurmJob:  # noqa: B006
        return SlurmJob(jid, "m", 0, "PENDING", "", 4, 1, 1, [], [], "", 0, None,
                        partitions=parts, excluded_nodes=excluded)  # fmt: skip

    snodes = [
        SlurmNode("g1", 16, 0, 2, 0, "IDLE", ["main"]),
        SlurmNode("g2", 16, 0, 2, 0, "IDLE", ["gpu", "main"]),
        SlurmNode("g3", 16, 0, 2, 0, "IDLE", ["gpu"]),
    ]
    limits = SlurmLimits()
    limits.observe([sjob(1, ["gpu"]), sjob(2, ["gpu"], ["g2"]), sjob(3, [])], [], snodes)
    policy = make_policy("coda")
    policy.filters.append(limits)
    nodes = [gpu_node(0, "g1", cores=6), gpu_node(1, "g2", cores=8), gpu_node(2, "g3")]
    got = placed(plan(policy, nodes, [dnn(1, 4), dnn(2, 4), dnn(3, 4)]))
    # Best fit alone would put job 1 on g1 (fewest free cores); its partition says no.
    assert got[1][0] == ["g2"]
    assert got[2][0] == ["g3"]  # in its partition, and g2 excluded
    assert got[3][0] == ["g2"]  # no partition recorded: any node (best fit: g2 has 4 left)


def test_the_partitions_of_nodes_follow_each_read() -> None:
    """Taken only from nodes whose record changed, the nodes' partitions are those of
    the last read: a node moved to another partition, one gone, one new."""
    from coda.slurm.client import SlurmNode
    from coda.slurm.controller import SlurmLimits

    limits = SlurmLimits()
    g1, g2 = SlurmNode("g1", 16, 0, 2, 0, "IDLE", ["main"]), SlurmNode("g2", 16, 0, 2, 0, "IDLE")
    for read in (
        [g1, g2],
        [g1, g2],  # the same objects: nothing looked at
        [SlurmNode("g1", 16, 4, 2, 1, "MIXED", ["main"]), g2],
        [
            SlurmNode("g1", 16, 4, 2, 1, "MIXED", ["gpu"]),
            SlurmNode("g3", 8, 0, 0, 0, "IDLE", ["x"]),
        ],
    ):
        limits.observe([], [], read)
        assert limits.node_partitions == {n.name: set(n.partitions) for n in read}


def test_the_partitions_and_usable_nodes_follow_reads_where_few_nodes_change(
    fake: FakeSlurm, tmp_path: Path
) -> None:
    """Reads that mostly give back the last read's node objects, some changed in place
    (partitions, state), now and then reordered, grown or shrunk:
    the nodes' partitions and the usable names are what every node of the read says."""
    import random

    from coda.slurm.client import SlurmNode, moved_nodes
    from coda.slurm.controller import SlurmLimits

    rng = random.Random(7)
    parts = [[], ["main"], ["gpu"], ["gpu", "main"]]
    states = ["IDLE", "MIXED", "DOWN+NOT_RESPONDING", "DRAIN"]

    def node(name: str) -> SlurmNode:
        return SlurmNode(name, 16, 0, 2, 0, rng.choice(states), rng.choice(parts))

    limits = SlurmLimits()
    ctl = controller(fake, tmp_path)
    read = [node(f"n{i}") for i in range(20)]
    for _ in range(300):
        read = list(read)
        for _ in range(rng.randrange(4)):  # changed in place
            i = rng.randrange(len(read))
            read[i] = node(read[i].name)
        shape = rng.random()
        if shape < 0.05:
            rng.shuffle(read)
        elif shape < 0.1:
            read.append(node(f"m{rng.randrange(10**6)}"))  # new
        elif shape < 0.15 and len(read) > 1:
            read.pop(rng.randrange(len(read)))
        limits.observe([], [], read)
        assert limits.node_partitions == {n.name: set(n.partitions) for n in read}
        assert ctl.usable_names(read) == {n.name for n in read if n.usable}
    assert moved_nodes(read, read) == []
    assert moved_nodes(read[::-1], read) is None  # reordered: every node looked at


def test_a_placed_job_stranded_on_a_down_node_is_placed_again(
    fake: FakeSlurm, tmp_path: Path
) -> None:
    # Requeued after its node failed (or the node was drained after placement): pinned
    # to a node that will not take it, it would wait for ever.
    fake.node("g1", 16, gpus=1, state="DOWN+NOT_RESPONDING")
    fake.node("g2", 16, gpus=1)
    fake.job(90, "resnet", 2, gpus_pn=1, priority=1, required="g1",
             comment="coda:placed,req=4,grant=2,nodes=g1")  # fmt: skip
    ctl = controller(fake, tmp_path)
    ctl.cycle()
    j = fake.jobs[90]
    assert j["priority"] == 0
    assert parse_mark(j["admin_comment"]) == {"state": "held", "req": "4", "rehold": "1"}
    # Held as CODA's again, it is placed on a usable node with its original request.
    fake.calls.clear()
    done = ctl.cycle()
    assert [p.job.idx for p in done] == [90]
    assert j["required_nodes"] == "g2" and j["priority"] == 1
    assert parse_mark(j["admin_comment"])["req"] == "4"  # type: ignore[index]


def test_a_placed_job_waiting_on_something_else_keeps_no_cores(
    fake: FakeSlurm, tmp_path: Path
) -> None:
    # Placed on g1, but pending for a QOS limit: g1's cores must not stay spoken for.
    fake.job(91, "big", 16, gpus_pn=1, priority=1, required="g1",
             comment="coda:placed,req=16,grant=16,nodes=g1")  # fmt: skip
    fake.jobs[91]["state_reason"] = "QOSMaxJobsPerUserLimit"
    ctl = controller(fake, tmp_path)
    nodes = {n.name: n for n in ctl.view(fake_client(fake).nodes(), fake_client(fake).jobs())}
    assert nodes["g1"].free_cores == 16 and nodes["g1"].free_gpus == 2
    fake.jobs[91]["state_reason"] = "Resources"
    nodes = {n.name: n for n in ctl.view(fake_client(fake).nodes(), fake_client(fake).jobs())}
    assert nodes["g1"].free_cores == 0 and nodes["g1"].free_gpus == 1


def test_array_and_het_jobs_are_left_to_slurm(fake: FakeSlurm, tmp_path: Path) -> None:
    fake.job(92, "sweep", 2)["array_job_id"] = 92
    fake.job(93, "het", 2)["het_job_id"] = 93
    fake.job(94, "plain", 2)
    done = controller(fake, tmp_path).cycle()
    assert [p.job.idx for p in done] == [94]
    for jid, why in ((92, "array"), (93, "heterogeneous")):
        j = fake.jobs[jid]
        assert j["priority"] == 1 and j["required_nodes"] == ""  # released unchanged
        assert parse_mark(j["admin_comment"]) == {"state": "passed", "why": why}


def test_a_placement_slurm_took_in_part_is_not_released(fake: FakeSlurm, tmp_path: Path) -> None:
    fake.job(95, "resnet", 4, gpus_pn=1)
    real = fake.run

    def partial(argv: Sequence[str]) -> str:  # Slurm applied the mark but not NumCPUs
        if argv[:2] == ["scontrol", "update"] and any(a.startswith("NumCPUs") for a in argv):
            argv = [a for a in argv if not a.startswith(("NumCPUs", "MinCPUsNode"))]
        return real(argv)

    ctl = Controller(SlurmClient(partial), tmp_path)
    ctl.allocator.learned.record(("1000:resnet", 1, 1), 1)  # type: ignore[union-attr]
    assert ctl.cycle() == []
    j = fake.jobs[95]
    assert j["priority"] == 0 and parse_mark(j["admin_comment"])["state"] == "held"  # type: ignore[index]
    assert +ctl.stats.refusals == {"placement_not_taken_whole": 1}  # and the metrics say so
    assert fake.ids("release") == []
    assert parse_mark(j["admin_comment"])["wait"] == "place" and ctl.stats.waits == {"place": 1}


# ------------------------------------------------------------ fair share on Slurm
def test_the_share_book_follows_what_slurm_runs(tmp_path: Path) -> None:
    """DRF's usage on Slurm: a job counts for its owner while it holds cores, once,
    however often its record or its Job changes, and not after it is gone."""
    fake = FakeSlurm()
    for i in range(3):
        fake.node(f"c{i}", 8)
    fake.job(50, "mpi", 5, node_count=2)  # 5 CPUs on 2 nodes: its Job is made again
    ctl = controller(fake, tmp_path)
    fair = ctl.policy.fair_share
    assert fair is not None
    assert [p.job.idx for p in ctl.cycle()] == [50]
    j = fake.jobs[50]
    j.update(job_state="RUNNING", nodes=j["required_nodes"], start_time=1000)
    ctl.cycle()
    assert fair.usage() == {"1000": (0, 6)}  # its placement: 3 cores on each node
    del fake.jobs[50]  # ended, and Slurm forgot it
    ctl.cycle()
    assert fair.usage() == {"1000": (0, 0)}


def test_a_placed_job_slurm_does_not_start_holds_no_share(tmp_path: Path) -> None:
    fake = FakeSlurm()
    fake.node("g1", 16, gpus=2)
    fake.job(91, "big", 16, gpus_pn=1, priority=1, required="g1",
             comment="coda:placed,req=16,grant=16,nodes=g1")  # fmt: skip
    fake.jobs[91]["state_reason"] = "QOSMaxJobsPerUserLimit"
    ctl = controller(fake, tmp_path)
    ctl.cycle()
    assert ctl.policy.fair_share is not None
    assert ctl.policy.fair_share.usage().get("1000", (0, 0)) == (0, 0)


def test_a_placement_slurm_refused_is_not_charged_after_a_cancel(tmp_path: Path) -> None:
    fake = FakeSlurm()
    fake.node("g1", 16, gpus=2)
    fake.job(30, "resnet", 4, gpus_pn=1)
    fake.fail.append(lambda argv: argv[:3] == ["scontrol", "update", "JobId=30"])
    ctl = controller(fake, tmp_path)
    assert ctl.cycle() == []  # the placement update failed
    fake.fail.clear()
    fake.jobs[30]["job_state"] = "CANCELLED"
    ctl.cycle()
    assert ctl.policy.fair_share is not None
    assert ctl.policy.fair_share.usage()["1000"] == (0, 0)


def test_a_share_moved_by_a_job_slurm_started_is_a_cycle_owed(tmp_path: Path) -> None:
    """b's job waits behind a's head (it would delay a's reservation). Slurm runs an
    array task of a (passed through to it): a's share passes b's, the reservation no
    longer binds b's job, and the next pass starts it though no node gained room."""
    fake = FakeSlurm()
    fake.node("g1", 16, gpus=2)
    fake.node("c1", 16)
    fake.node("c2", 16)

    def running(jid: int, name: str, cpus: int, node: str, uid: int, gpus: int = 0) -> None:
        d = fake.job(jid, name, cpus, gpus_pn=gpus, state="RUNNING", priority=1, nodes=node,
                     comment="")  # fmt: skip
        d.update(user_id=uid, time_limit=60, start_time=1000)

    running(1, "hog", 2, "g1", 3000, gpus=1)  # ends within the hour
    running(2, "b-prep", 4, "c1", 2000)  # b holds 4 of 48 cores
    fake.job(10, "a-big", 2, gpus_pn=2)["user_id"] = 1000  # a's head: both GPUs of g1
    fake.job(11, "b-long", 2, gpus_pn=1)["user_id"] = 2000  # no limit: would delay a-big
    sweep = fake.job(12, "a-sweep", 12)
    sweep.update(user_id=1000, array_job_id=12)
    ctl = controller(fake, tmp_path)
    assert ctl.cycle() == []
    assert ctl.sched.reason_of(ctl.mirror.jobs[11]).code == "reservation"
    sweep.update(job_state="RUNNING", nodes="c2", start_time=1001)
    assert [p.job.idx for p in ctl.cycle()] == [11]


def test_an_array_job_with_a_dependency_keeps_its_passed_mark(tmp_path: Path) -> None:
    fake = FakeSlurm()
    fake.node("c1", 8)
    fake.job(3, "before", 1, state="RUNNING", priority=1, nodes="c1", comment="")
    fake.job(92, "sweep", 2, dependency="afterok:3(unfulfilled)")["array_job_id"] = 92
    ctl = controller(fake, tmp_path)
    ctl.cycle()
    assert parse_mark(fake.jobs[92]["admin_comment"]) == {"state": "passed", "why": "array"}


def test_a_placement_slurm_refuses_leaves_the_job_a_reason(fake: FakeSlurm, tmp_path: Path) -> None:
    """The cycle started it, so the cycle has no reason for it: the controller gives
    the one it knows (its placement was refused), every cycle the refusal lasts."""
    fake.job(30, "resnet", 4, gpus_pn=1)
    fake.fail.append(lambda argv: argv[:3] == ["scontrol", "update", "JobId=30"]
                     and any(a.startswith("ReqNodeList=") for a in argv))  # fmt: skip
    ctl = controller(fake, tmp_path)
    for _ in range(2):
        assert ctl.cycle() == []
        assert parse_mark(fake.jobs[30]["admin_comment"]) == {"state": "held", "wait": "place"}
        assert ctl.stats.waits == {"place": 1}
    fake.fail.clear()
    assert [p.job.idx for p in ctl.cycle()] == [30]


def test_a_failed_requeue_leaves_the_dnn_job_a_reason(tmp_path: Path) -> None:
    """A DNN job that needs the cores of a running CPU job whose requeue Slurm refuses
    is not placed; its mark says why (``reclaim``), every cycle the refusal lasts, and
    once Slurm requeues the CPU job the DNN job is placed."""
    bench = load_bench("bench_slurm_controller")
    s = bench.FakeSlurm(random.Random(0))
    node = bench.FakeNode("g1", 1, cores=8)
    s.nodes[node.name] = node
    cpu_job = s._job(8, 0)
    s._run(cpu_job, node)  # every core of the only GPU node
    dnn_job = s._job(4, 1)
    refuse = [True]

    def slurm(argv: Sequence[str]) -> str:
        if refuse[0] and list(argv[:2]) == ["scontrol", "requeuehold"]:
            raise SlurmError(f"{' '.join(argv)}: Socket timed out on send/recv operation")
        return str(s(argv))

    # The CPU job was just started: a loose harm budget lets CODA take it back at all.
    ctl = Controller(SlurmClient(slurm), tmp_path, wall=lambda: s.now, tune=LOOSE_HARM)
    for _ in range(2):
        assert ctl.cycle() == []
        assert parse_mark(dnn_job["admin_comment"])["wait"] == "reclaim"
        assert ctl.stats.waits == {"reclaim": 1} and ctl.stats.requeues == 0
    refuse[0] = False
    assert [p.job.idx for p in ctl.cycle()] == [dnn_job["job_id"]]
    assert ctl.stats.requeues == 1 and cpu_job["job_state"] == "PENDING"


def test_one_odd_node_is_left_out_said_once_and_the_rest_are_used(
    fake: FakeSlurm, tmp_path: Path
) -> None:
    """A node name no mark can hold crashed the controller; refusing the whole node
    read instead stopped every placement on the cluster."""
    fake.node("gpu/1", 8)
    fake.job(50, "cpu", 2)
    said: list[str] = []
    ctl = controller(fake, tmp_path, log=said.append)
    ctl.cycle()
    ctl.cycle()
    assert fake.jobs[50]["priority"] != 0 and fake.jobs[50]["required_nodes"] == "c1"
    assert [x for x in said if "a node left out" in x and "gpu/1" in x] != []
    assert len([x for x in said if "a node left out" in x]) == 1  # once, not each cycle


def test_a_held_job_its_user_released_is_left_to_slurm_and_says_so(
    fake: FakeSlurm, tmp_path: Path
) -> None:
    # Job 7 was held for CODA, then its user released it (opting out): Slurm's own
    # scheduler has it now. Job 8 is still held and is placed as usual.
    fake.job(7, "mine", 2, priority=1, comment="coda:held,req=2,wait=gpus")
    fake.job(8, "prep", 2)
    logs: list[str] = []
    ctl = controller(fake, tmp_path, log=logs.append)
    done = ctl.cycle()
    assert [p.job.idx for p in done] == [8]
    assert parse_mark(fake.jobs[7]["admin_comment"]) == {"state": "passed", "why": "released"}
    assert fake.jobs[7]["required_nodes"] == "" and fake.jobs[7]["priority"] == 1
    assert ctl.stats.passed["released"] == 1
    assert any("job 7" in line and "released by its user or an admin" in line for line in logs)
    ctl.cycle()
    assert ctl.stats.passed["released"] == 1  # said once: its mark is not held any more
    # Slurm may start a released job at once: running with CODA's held mark, it is
    # let go too; one Slurm holds again itself (priority 0: it can never run) is not.
    fake.job(11, "quick", 1, state="RUNNING", priority=1, nodes="c1", comment="coda:held")
    fake.job(12, "held", 1, priority=0, comment="coda:held,wait=never")
    ctl.cycle()
    assert parse_mark(fake.jobs[11]["admin_comment"]) == {"state": "passed", "why": "released"}
    assert parse_mark(fake.jobs[12]["admin_comment"])["state"] != "passed"  # CODA's still


def test_a_job_coda_was_holding_again_is_held_not_let_go(fake: FakeSlurm, tmp_path: Path) -> None:
    # The controller marked job 9 for a re-hold and died before `scontrol hold`: the job
    # is pending, not held, with CODA's mark; job 10 was requeued by CODA the same way.
    fake.job(9, "dnn", 2, gpus_pn=1, priority=1, comment="coda:held,req=2,rehold=1")
    fake.job(10, "prep", 1, priority=1, comment="coda:held,req=1,requeued=1")
    ctl = controller(fake, tmp_path)
    ctl.cycle()
    for jid in (9, 10):
        assert parse_mark(fake.jobs[jid]["admin_comment"])["state"] != "passed", jid
    assert ctl.stats.passed["released"] == 0 and ctl.stats.reholds == 2


def test_agents_hand_held_jobs_back_once_no_controller_beats(
    fake: FakeSlurm, tmp_path: Path
) -> None:
    import random

    from coda.slurm.failopen import FailOpen
    from coda.slurm.lease import LeaseRecord

    lease = tmp_path / "lease"
    now = [1_000_000.0]
    lease.write_text(LeaseRecord(1, "h:0:1:1", now[0], 10).line())
    fake.job(40, "a", 4, gpus_pn=1)
    fake.job(41, "b", 2, comment="coda:placing,req=2,grant=1,nodes=c1")
    fake.job(42, "user-hold", 2, comment="")
    said: list[str] = []
    watch = FailOpen(SlurmClient(fake.run), lease, 60, said.append, wall=lambda: now[0],
                     rng=random.Random(1))  # fmt: skip
    now[0] += 60
    assert watch.tick() == 0 and fake.ids("release") == []  # beat 60 s old: alive
    now[0] += 1
    assert watch.tick() == 0  # gone: this agent's own random wait first
    now[0] += 15
    assert watch.tick() == 2
    assert fake.ids("release") == [40, 41]
    for j in (40, 41):
        assert fake.jobs[j]["admin_comment"] == "coda:passed,why=controller-down"
    assert fake.jobs[42]["priority"] == 0
    assert any("no controller beat" in m for m in said)
    # A controller beats again: new held jobs are its.
    lease.write_text(LeaseRecord(2, "h:0:2:1", now[0], 10).line())
    fake.job(43, "c", 2)
    assert watch.tick() == 0 and fake.jobs[43]["priority"] == 0
    assert "beats again" in said[-1]
    # A lease that cannot be read counts as a beat for the fail-open time (a late mount
    # must not release every held job), then as none.
    lease.write_text("garbage")
    assert watch.tick() == 0  # first seen unreadable now
    now[0] += 59
    assert watch.tick() == 0 and fake.jobs[43]["priority"] == 0
    now[0] += 2
    watch.tick()  # down from now: this agent's own wait first
    now[0] += 16
    assert watch.tick() == 1 and fake.jobs[43]["priority"] == 1


def test_a_job_no_node_could_ever_hold_goes_back_to_slurm_at_once(
    fake: FakeSlurm, tmp_path: Path
) -> None:
    fake.node("g1", 8, gpus=1)
    fake.node("c1", 2)
    fake.job(50, "too-many-gpus", 1, gpus_pn=4)
    fake.job(51, "too-many-cores", 16)
    fake.job(52, "fits", 2)
    ctl = controller(fake, tmp_path)
    ctl.cycle()
    assert fake.ids("release") == [52, 50, 51] or sorted(fake.ids("release")) == [50, 51, 52]
    for j in (50, 51):
        assert fake.jobs[j]["admin_comment"] == "coda:passed,why=never-fits"
        assert fake.jobs[j]["priority"] == 1
    assert ctl.stats.passed["never-fits"] == 2
    # While a node is down, it might fit when the node returns: held, and why.
    fake.node("g2", 8, gpus=1, state="DOWN")
    fake.job(53, "too-many-gpus-again", 1, gpus_pn=4)
    ctl.cycle()
    assert fake.jobs[53]["priority"] == 0
    assert fake.jobs[53]["admin_comment"].startswith("coda:held,wait=never")


def test_a_job_only_a_node_left_out_of_the_read_could_hold_stays_held(
    fake: FakeSlurm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node whose line cannot be read, or which is listed twice, is left out: the
    jobs only it could hold wait for it, held, not handed back for good."""
    fake.node("g1", 8, gpus=1)
    fake.node("big", 64, gpus=8)
    fake.job(60, "eight-gpus", 32, gpus_pn=8)
    answer = fake.run
    odd = {"how": "twice"}

    def run(argv: Sequence[str]) -> str:
        text = answer(argv)
        if argv[:2] == ["scontrol", "show"] and odd["how"]:
            big = next(line for line in text.splitlines() if line.startswith("NodeName=big"))
            if odd["how"] == "twice":
                return text + big + "\n"
            return text.replace(big, big.replace("=64 ", "=lots "))
        return text

    monkeypatch.setattr(fake, "run", run)
    ctl = controller(fake, tmp_path)
    for how in ("twice", "unreadable"):
        odd["how"] = how
        ctl.cycle()
        assert fake.jobs[60]["priority"] == 0, how
        assert fake.jobs[60]["admin_comment"].startswith("coda:held"), how
        assert ctl.stats.passed["never-fits"] == 0
    odd["how"] = ""
    ctl.cycle()
    assert fake.jobs[60]["priority"] == 1 and fake.jobs[60]["required_nodes"] == "big"
