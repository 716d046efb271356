"""CODA's node agent on a Slurm node (coda.slurm.agent, coda.slurm.cgroups), on a fake
cgroup tree in a temporary directory: no root, no Slurm. A fake ``scontrol``
answers the agent's questions; a fake clock and hand-written progress records
drive the allocator."""

from __future__ import annotations

import errno
import json
import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from fakes import Affinity

import coda.slurm.cgroups as slurm_cgroups
from coda.policy.framework import Preempt, SetCores, SetQuota
from coda.runtime.agent import AgentConfig, NodeAgent
from coda.runtime.cgroups import CgroupError
from coda.runtime.progress import Progress, encode
from coda.runtime.store import Store
from coda.slurm.agent import GRANTS_KEY, SlurmJobs, slurm_node_agent
from coda.slurm.cgroups import SlurmJobCgroups, cgroup_version_of
from coda.slurm.client import JOBS_JSON, SlurmClient, SlurmError

UID = os.getuid()
DEAD = 4_194_304 + 1000  # above the kernel's largest pid_max: never a live process


# ------------------------------------------------------------------ fake trees
def v1_job(root: Path, job: int, cpus: str, uid: int = UID, steps: Sequence[str] = ("batch",),
           procs: Sequence[int] = (), tids: Sequence[int] = ()) -> Path:  # fmt: skip
    """A job group as slurmd makes it under cgroup v1; returns the job's directory."""
    base = root / "cpuset" / "slurm_n1"
    base.mkdir(parents=True, exist_ok=True)
    if not (base / "cpuset.cpus").exists():
        (base / "cpuset.cpus").write_text("0-3\n")
    user = base / f"uid_{uid}"
    user.mkdir(exist_ok=True)
    (user / "cpuset.cpus").write_text("0-3\n")
    jd = user / f"job_{job}"
    jd.mkdir()
    (jd / "cpuset.cpus").write_text(cpus + "\n")
    (jd / "cgroup.procs").write_text("")
    (jd / "tasks").write_text("")
    for i, s in enumerate(steps):
        sd = jd / f"step_{s}"
        sd.mkdir()
        (sd / "cpuset.cpus").write_text(cpus + "\n")
        mine = [p for k, p in enumerate(procs) if k % len(steps) == i]
        (sd / "cgroup.procs").write_text("".join(f"{p}\n" for p in mine))
        (sd / "tasks").write_text("".join(f"{t}\n" for t in tids if t % len(steps) == i))
    (root / "cpu").mkdir(exist_ok=True)
    return jd


def read_cpus(path: Path) -> str:
    return (path / "cpuset.cpus").read_text().strip()


class Writes:
    """Records every control-file write the Slurm driver makes (and still makes it)."""

    def __init__(self, root: Path, events: list[tuple[str, ...]] | None = None) -> None:
        self.root = root
        self.events = events if events is not None else []
        self.real = slurm_cgroups.write_file

    def __call__(self, path: Path, value: str, *a: Any) -> None:
        self.events.append(("write", path.relative_to(self.root).as_posix(), value))
        self.real(path, value, *a)

    @property
    def writes(self) -> list[tuple[str, str]]:
        return [(e[1], e[2]) for e in self.events if e[0] == "write"]


@pytest.fixture
def writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Writes:
    w = Writes(tmp_path)
    monkeypatch.setattr(slurm_cgroups, "write_file", w)
    return w


J = f"cpuset/slurm_n1/uid_{UID}/job_5"
NAME = f"uid_{UID}/job_5"


# ------------------------------------------------------------------ SlurmJobCgroups v1
def test_discovery_finds_job_groups(tmp_path: Path) -> None:
    v1_job(tmp_path, 5, "0-1")
    v1_job(tmp_path, 9, "2", uid=4242)
    base = tmp_path / "cpuset" / "slurm_n1"
    for junk in ("system", "uid_x", f"uid_{UID}/job_x", f"uid_{UID}/jobs_7", "uid_4242/job_10x"):
        (base / junk).mkdir()
    (base / f"uid_{UID}" / "job_11").write_text("a file, not a group")
    cg = SlurmJobCgroups("n1", tmp_path, version=1, setaffinity=Affinity())
    assert cg.jobs() == {5: NAME, 9: "uid_4242/job_9"}
    assert cg.exists(NAME) and not cg.exists(f"uid_{UID}/job_6")
    assert cg.node_cpus() == [0, 1, 2, 3]
    assert cg.cpus(NAME) == [0, 1]
    assert SlurmJobCgroups.name_for(5, 4242) == "uid_4242/job_5"
    assert SlurmJobCgroups.name_for(5, 0, version=2) == "job_5"
    assert "cgroup v1" in cg.describe()


def test_no_node_group_means_no_jobs(tmp_path: Path) -> None:
    cg = SlurmJobCgroups("n1", tmp_path, version=1)
    assert cg.jobs() == {}


def test_a_single_slurmd_host_uses_the_plain_slurm_group(tmp_path: Path) -> None:
    # One slurmd per host (the usual case) makes cpuset/slurm/...; slurm_<node> is
    # for several slurmd on one host. The group appears with the first job.
    cg = SlurmJobCgroups("n1", tmp_path, version=1, setaffinity=Affinity())
    assert cg.jobs() == {}
    jd = tmp_path / "cpuset" / "slurm" / f"uid_{UID}" / "job_7"
    jd.mkdir(parents=True)
    (jd / "cpuset.cpus").write_text("1\n")
    assert cg.jobs() == {7: f"uid_{UID}/job_7"}
    assert cg.cpus(f"uid_{UID}/job_7") == [1]
    # Once found, the base stays put (a later slurm_<node> dir is someone else's).
    (tmp_path / "cpuset" / "slurm_n1").mkdir()
    assert cg.jobs() == {7: f"uid_{UID}/job_7"}


@pytest.mark.parametrize("node", ["", "../n1", "n 1", "n1/x", "-n1"])
def test_node_names_are_checked(tmp_path: Path, node: str) -> None:
    with pytest.raises(ValueError, match="node name"):
        SlurmJobCgroups(node, tmp_path)


def test_only_cgroup_v1_or_v2(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="1 or 2"):
        SlurmJobCgroups("n1", tmp_path, version=3)


@pytest.mark.parametrize(
    "name",
    [
        "job_5",
        f"uid_{UID}/job_5/step_batch",
        "../uid_0/job_5",
        f"uid_{UID}/../job_5",
        f"uid_{UID}/job_x",
        "uid_x/job_5",
        f"uid_{UID}/job_5/..",
        "",
    ],
)
def test_group_names_are_checked(tmp_path: Path, name: str) -> None:
    v1_job(tmp_path, 5, "0-1")
    cg = SlurmJobCgroups("n1", tmp_path, version=1, setaffinity=Affinity())
    for call in (
        lambda: cg.cpus(name),
        lambda: cg.set_cpus(name, [0]),
        lambda: cg.set_quota(name, 1.0),
        lambda: cg.quota(name),
        lambda: cg.exists(name),
        lambda: cg.pids(name),
        lambda: cg.remove(name),
    ):
        with pytest.raises(CgroupError, match="not a Slurm job group name"):
            call()
    assert read_cpus(tmp_path / J) == "0-1"


def test_narrowing_writes_steps_before_the_job(tmp_path: Path, writes: Writes) -> None:
    v1_job(tmp_path, 5, "0-1", steps=("batch", "0"), tids=(100, 101))
    aff = Affinity()
    cg = SlurmJobCgroups("n1", tmp_path, version=1, setaffinity=aff)
    cg.set_cpus(NAME, [0])
    files = [p for p, _ in writes.writes]
    assert files.index(f"{J}/cpuset.cpus") == len(files) - 1  # the job last
    assert set(files[:-1]) == {f"{J}/step_0/cpuset.cpus", f"{J}/step_batch/cpuset.cpus"}
    assert all(v == "0" for _, v in writes.writes)
    for d in ("", "/step_0", "/step_batch"):
        assert read_cpus(tmp_path / (J + d)) == "0"
    assert aff.calls == []  # narrowing needs no affinity change: the kernel does it


def test_widening_writes_the_job_first_then_steps_then_affinity(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jd = v1_job(tmp_path, 5, "1", tids=(100, 101))
    (jd / "tasks").write_text("99\n")  # slurmstepd-style member of the job group itself
    events: list[tuple[str, ...]] = []
    monkeypatch.setattr(slurm_cgroups, "write_file", Writes(tmp_path, events))

    def aff(tid: int, cpus: set[int]) -> None:
        events.append(("affinity", str(tid), ",".join(map(str, sorted(cpus)))))

    cg = SlurmJobCgroups("n1", tmp_path, version=1, setaffinity=aff)
    cg.set_cpus(NAME, [1, 2, 3])
    writes = [e[1] for e in events if e[0] == "write"]
    assert writes[:2] == [f"{J}/cpuset.cpus", f"{J}/step_batch/cpuset.cpus"]  # parents first
    kinds = [e[0] for e in events]
    assert kinds.index("affinity") > max(i for i, k in enumerate(kinds) if k == "write")
    assert sorted(e[1:] for e in events if e[0] == "affinity") == [
        ("100", "1,2,3"),
        ("101", "1,2,3"),
        ("99", "1,2,3"),
    ]
    assert read_cpus(jd) == read_cpus(jd / "step_batch") == "1-3"


def test_moving_to_other_cpus_never_leaves_a_child_outside_its_parent(
    tmp_path: Path, writes: Writes
) -> None:
    jd = v1_job(tmp_path, 5, "0-1")
    cg = SlurmJobCgroups("n1", tmp_path, version=1, setaffinity=Affinity())
    cg.set_cpus(NAME, [2, 3])
    job, step = f"{J}/cpuset.cpus", f"{J}/step_batch/cpuset.cpus"
    state = {job: {0, 1}, step: {0, 1}}
    for path, value in writes.writes:
        cpus = set(slurm_cgroups.parse_cpus(value))
        state[path] = cpus
        assert state[step] <= state[job], writes.writes
    assert read_cpus(jd) == read_cpus(jd / "step_batch") == "2-3"


def test_widening_skips_exited_threads_and_reports_refusals(tmp_path: Path) -> None:
    v1_job(tmp_path, 5, "0", tids=(100, 101))
    aff = Affinity()
    aff.gone.add(100)
    cg = SlurmJobCgroups("n1", tmp_path, version=1, setaffinity=aff)
    cg.set_cpus(NAME, [0, 1])
    assert aff.calls == [(101, {0, 1})]

    def denied(tid: int, cpus: set[int]) -> None:
        raise OSError(errno.EPERM, "denied")

    cg = SlurmJobCgroups("n1", tmp_path, version=1, setaffinity=denied)
    with pytest.raises(CgroupError, match="sched_setaffinity"):
        cg.set_cpus(NAME, [0, 1, 2])


def test_set_cpus_needs_cpus_and_a_cpuset(tmp_path: Path) -> None:
    jd = v1_job(tmp_path, 5, "0-1")
    cg = SlurmJobCgroups("n1", tmp_path, version=1, setaffinity=Affinity())
    with pytest.raises(ValueError):
        cg.set_cpus(NAME, [])
    (jd / "cpuset.cpus").unlink()
    (jd / "step_batch" / "cpuset.cpus").unlink()
    with pytest.raises(CgroupError, match="no cpuset"):
        cg.set_cpus(NAME, [0])


def test_pids_and_threads_cover_every_step(tmp_path: Path) -> None:
    v1_job(tmp_path, 5, "0-1", steps=("batch", "0"), procs=(10, 11, 12), tids=(20, 21))
    cg = SlurmJobCgroups("n1", tmp_path, version=1)
    assert cg.pids(NAME) == [10, 11, 12]
    assert cg.threads(NAME) == [20, 21]


def test_quota_v1_in_codas_own_cpu_group(tmp_path: Path, writes: Writes) -> None:
    v1_job(tmp_path, 5, "0-1", steps=("batch", "0"), procs=(DEAD, DEAD + 1))
    cg = SlurmJobCgroups("n1", tmp_path, version=1, setaffinity=Affinity())
    qd = tmp_path / "cpu" / "coda_slurm_n1" / "job_5"
    assert cg.quota(NAME) is None
    cg.set_quota(NAME, None)  # never throttled: nothing to undo, nothing made
    assert not qd.exists()
    cg.set_quota(NAME, 1.5)
    assert (qd / "cpu.cfs_quota_us").read_text() == "150000"
    assert (qd / "cpu.cfs_period_us").read_text() == "100000"
    moved = [int(v) for p, v in writes.writes if p.endswith("coda_slurm_n1/job_5/cgroup.procs")]
    assert sorted(moved) == [DEAD, DEAD + 1]  # every process of every step
    assert cg.quota(NAME) == pytest.approx(1.5)
    # The cpuset hierarchy is not touched by a throttle.
    assert not any(p.startswith("cpuset/") for p, _ in writes.writes)
    cg.set_quota(NAME, 0.001)
    assert (qd / "cpu.cfs_quota_us").read_text() == "1000"  # the kernel's minimum
    cg.set_quota(NAME, None)
    assert (qd / "cpu.cfs_quota_us").read_text() == "-1"
    assert cg.quota(NAME) is None
    for bad in (-1.0, float("nan"), float("inf")):  # inf reached round() here once
        with pytest.raises(ValueError, match="non-negative number of cores"):
            cg.set_quota(NAME, bad)
    assert (qd / "cpu.cfs_quota_us").read_text() == "-1"  # nothing written


def test_sync_quota_members_moves_only_new_processes(tmp_path: Path, writes: Writes) -> None:
    jd = v1_job(tmp_path, 5, "0-1", procs=(DEAD,))
    cg = SlurmJobCgroups("n1", tmp_path, version=1)
    cg.sync_quota_members(NAME)  # no quota group yet: nothing to do
    assert writes.writes == []
    cg.set_quota(NAME, 0.5)
    qprocs = "cpu/coda_slurm_n1/job_5/cgroup.procs"
    assert [v for p, v in writes.writes if p == qprocs] == [str(DEAD)]
    (jd / "step_1").mkdir()
    (jd / "step_1" / "cgroup.procs").write_text(f"{DEAD + 5}\n")  # a new step started
    writes.events.clear()
    cg.sync_quota_members(NAME)
    assert [v for p, v in writes.writes if p == qprocs] == [str(DEAD + 5)]


def test_sync_quota_members_tolerates_only_dead_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jd = v1_job(tmp_path, 5, "0-1", procs=(DEAD,))
    cg = SlurmJobCgroups("n1", tmp_path, version=1)
    cg.set_quota(NAME, 0.5)
    real = slurm_cgroups.write_file

    def refuse_procs(path: Path, value: str, *a: Any) -> None:
        if path.name == "cgroup.procs":
            raise CgroupError(f"write {value!r} to {path}: No such process")
        real(path, value, *a)

    monkeypatch.setattr(slurm_cgroups, "write_file", refuse_procs)
    (jd / "step_batch" / "cgroup.procs").write_text(f"{DEAD + 1}\n")
    cg.sync_quota_members(NAME)  # it exited meanwhile: fine
    (jd / "step_batch" / "cgroup.procs").write_text(f"{os.getpid()}\n")
    with pytest.raises(CgroupError):
        cg.sync_quota_members(NAME)  # alive and not moved: an error


def test_remove_and_cleanup_v1(tmp_path: Path) -> None:
    v1_job(tmp_path, 5, "0-1", procs=(DEAD,))
    v1_job(tmp_path, 6, "2-3", procs=(DEAD + 1,))
    six = f"uid_{UID}/job_6"
    cg = SlurmJobCgroups("n1", tmp_path, version=1)
    parent = tmp_path / "cpu" / "coda_slurm_n1"
    assert cg.cleanup() == []  # nothing made yet: nothing to do
    cg.set_quota(NAME, 0.5)
    cg.set_quota(six, 0.5)
    assert cg.cleanup(keep=[NAME, six]) == []
    assert (parent / "job_5").is_dir() and (parent / "job_6").is_dir()
    cg.remove(NAME)
    assert not (parent / "job_5").exists() and (parent / "job_6").is_dir()
    cg.remove(NAME)  # twice is fine
    cg.cleanup(keep=[six])
    assert (parent / "job_6").is_dir()  # a running job's group stays
    cg.cleanup()  # job 6 is gone too (its group was left by an agent that died)
    assert not parent.exists()
    assert (tmp_path / J).is_dir()  # Slurm's own groups are Slurm's


def test_remove_refuses_a_quota_group_with_live_processes(tmp_path: Path) -> None:
    v1_job(tmp_path, 5, "0-1", procs=(os.getpid(),))
    cg = SlurmJobCgroups("n1", tmp_path, version=1)
    cg.set_quota(NAME, 0.5)
    with pytest.raises(CgroupError, match="still has processes"):
        cg.remove(NAME)
    assert (tmp_path / "cpu" / "coda_slurm_n1" / "job_5").is_dir()


# ------------------------------------------------------------------ SlurmJobCgroups v2
def v2_tree(root: Path, node: str = "n1") -> Path:
    """The layout Slurm 24.11 makes on a real cgroup v2 hierarchy (IgnoreSystemd): a
    scope named after the node, holding slurmd's and slurmstepd's own groups and one
    per job; cpuset.cpus set at the job level only (empty below: inherited)."""
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    base = root / "system.slice" / f"{node}_slurmstepd.scope"
    base.mkdir(parents=True)
    (base / "cpuset.cpus.effective").write_text("0-7\n")
    (base / "slurmd").mkdir()  # slurmd itself: not a job
    (base / "system").mkdir()  # slurmstepd's own group: not a job
    jd = base / "job_5"
    task = jd / "step_batch" / "user" / "task_0"
    task.mkdir(parents=True)
    (jd / "step_batch" / "slurm").mkdir()
    (jd / "cpuset.cpus").write_text("2-3\n")
    for d in (jd / "step_batch", jd / "step_batch" / "slurm", jd / "step_batch" / "user", task):
        (d / "cpuset.cpus").write_text("\n")
        (d / "cpuset.cpus.effective").write_text("2-3\n")
    (jd / "cpu.max").write_text("max 100000\n")
    (task / "cgroup.threads").write_text("300\n301\n")
    (task / "cgroup.procs").write_text("300\n")
    return base


def test_v2_groups_quota_and_cpus(tmp_path: Path, writes: Writes) -> None:
    base = v2_tree(tmp_path)
    v2_tree(tmp_path, node="n2")  # another slurmd's scope on the same host
    aff = Affinity()
    cg = SlurmJobCgroups("n1", tmp_path, version=2, setaffinity=aff)
    assert cg.base == base and cg.jobs() == {5: "job_5"}
    assert cg.node_cpus() == list(range(8))
    assert cg.cpus("job_5") == [2, 3]
    assert cg.pids("job_5") == [300] and cg.threads("job_5") == [300, 301]
    with pytest.raises(CgroupError):
        cg.cpus(f"uid_{UID}/job_5")  # the v1 form is no v2 name
    cg.set_quota("job_5", 1.5)
    assert (base / "job_5" / "cpu.max").read_text() == "150000 100000"
    assert cg.quota("job_5") == pytest.approx(1.5)
    cg.set_quota("job_5", None)
    assert (base / "job_5" / "cpu.max").read_text() == "max 100000"
    assert cg.quota("job_5") is None
    cg.set_cpus("job_5", [2, 3, 4])
    cpuset_writes = [p for p, _ in writes.writes if p.endswith("cpuset.cpus")]
    # Only the job's own: the steps' empty sets inherit it (written, they would pin).
    assert cpuset_writes[0] == "system.slice/n1_slurmstepd.scope/job_5/cpuset.cpus"
    assert {p.rsplit("/", 1)[0] for p in cpuset_writes} == {
        "system.slice/n1_slurmstepd.scope/job_5"
    }
    assert read_cpus(base / "job_5") == "2-4"
    assert read_cpus(base / "job_5" / "step_batch" / "user" / "task_0") == ""
    assert sorted(t for t, _ in aff.calls) == [300, 301]
    cg.set_cpus("job_5", [3])
    assert cg.cpus("job_5") == [3]
    cg.remove("job_5")  # v2: the quota lives in Slurm's group; nothing of CODA's to remove
    assert (base / "job_5").is_dir()
    assert "cgroup v2" in cg.describe() and "n1_slurmstepd.scope" in cg.describe()


def test_v2_a_step_with_a_cpuset_of_its_own_is_kept_inside_the_job(tmp_path: Path) -> None:
    base = v2_tree(tmp_path)
    (base / "job_5" / "step_batch" / "cpuset.cpus").write_text("2-3\n")
    cg = SlurmJobCgroups("n1", tmp_path, version=2, setaffinity=Affinity())
    cg.set_cpus("job_5", [2])
    assert read_cpus(base / "job_5") == "2" and read_cpus(base / "job_5" / "step_batch") == "2"
    assert read_cpus(base / "job_5" / "step_batch" / "slurm") == ""


def test_v2_the_plain_scope_of_a_one_node_slurmd(tmp_path: Path) -> None:
    base = v2_tree(tmp_path)
    base.rename(tmp_path / "system.slice" / "slurmstepd.scope")
    cg = SlurmJobCgroups("n1", tmp_path, version=2, setaffinity=Affinity())
    assert cg.jobs() == {5: "job_5"} and cg.base.name == "slurmstepd.scope"


def test_v2_no_scope_yet_means_no_jobs(tmp_path: Path) -> None:
    cg = SlurmJobCgroups("n1", tmp_path, version=2)
    assert cg.jobs() == {} and cg.base.name == "n1_slurmstepd.scope"


def test_the_cgroup_version_is_read_from_the_root(tmp_path: Path) -> None:
    assert cgroup_version_of(tmp_path) == 1
    v2_tree(tmp_path)
    assert cgroup_version_of(tmp_path) == 2


# ------------------------------------------------------------------ the node agent
class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class Slurmd:
    """``scontrol`` as the agent calls it: one job record per id, one node, updates kept."""

    def __init__(self) -> None:
        self.jobs: dict[int, dict[str, Any]] = {}
        self.calls: list[list[str]] = []
        self.updates: list[list[str]] = []
        self.fail: Callable[[list[str]], bool] = lambda argv: False
        self.hidden: set[int] = set()  # jobs squeue leaves out
        self.node_line = "NodeName=n1 CPUAlloc=2 CPUEfctv=4 CPUTot=4 Gres=gpu:1 State=MIXED"

    def add(self, job: int, name: str = "tiny", cpus: str = "0-1", gres: str | None = "gpu:1",
            comment: str = "coda:placed,req=2,grant=2,nodes=n1", state: str = "RUNNING",
            uid: int = UID, nodes: int = 1, tres: str | None = None) -> None:  # fmt: skip
        self.jobs[job] = dict(name=name, cpus=cpus, gres=gres, comment=comment, state=state,
                              uid=uid, nodes=nodes, tres=tres)  # fmt: skip

    def detail_calls(self, job: int) -> int:
        """Job lookups: the agent reads every job's record from squeue's JSON."""
        return sum(1 for c in self.calls if c == list(JOBS_JSON))

    def run(self, argv: Sequence[str]) -> str:
        argv = list(argv)
        self.calls.append(argv)
        if self.fail(argv):
            raise SlurmError(f"{' '.join(argv)}: Socket timed out on send/recv operation")
        if argv == list(JOBS_JSON):
            out = []
            for jid, j in self.jobs.items():
                if jid in self.hidden:
                    continue
                # gres: the job's total (per job); tres: per node, as Slurm keeps them.
                out.append(
                    {"job_id": jid, "name": j["name"], "user_id": j["uid"],
                     "job_state": j["state"], "state_reason": "None", "cpus": 2,
                     "node_count": j["nodes"], "tres_per_node": j["tres"] or "",
                     "tres_per_job": f"gres:{j['gres']}" if j["gres"] else "",
                     "nodes": "n1", "priority": 1, "admin_comment": j["comment"]}
                )  # fmt: skip
            return json.dumps({"jobs": out})
        if argv == ["scontrol", "show", "-o", "-d", "node"]:
            return self.node_line + "\n"
        if argv[:2] == ["scontrol", "update"]:
            self.updates.append(argv)
            jid = int(argv[2].removeprefix("JobId="))
            for a in argv[3:]:
                k, _, v = a.partition("=")
                assert k == "AdminComment", argv
                self.jobs[jid]["comment"] = v
            return ""
        raise AssertionError(f"unexpected command {argv}")


class Env:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.root = tmp / "cg"
        self.progress = tmp / "progress"
        self.progress.mkdir()
        self.state = tmp / "state"
        self.state.mkdir()
        self.store = Store(self.state / "coda.db")
        self.clock = Clock()
        self.slurm = Slurmd()
        self.affinity = Affinity()
        self.samples: dict[int, int] = {}
        self.logs: list[str] = []
        self.agents: list[NodeAgent[SlurmJobs]] = []

    def job(self, job: int, cpus: str = "0-1", uid: int = UID, **kw: Any) -> Path:
        self.slurm.add(job, cpus=cpus, uid=uid, **kw)
        return v1_job(self.root, job, cpus, uid=uid)

    def cgroups(self) -> SlurmJobCgroups:
        return SlurmJobCgroups("n1", self.root, version=1, setaffinity=self.affinity)

    def agent(self, **cfg: Any) -> NodeAgent[SlurmJobs]:
        config = AgentConfig(**{"period_s": 1.0, "window_s": 1.0, "settle_s": 0.5, **cfg})
        cg = self.cgroups()
        a = slurm_node_agent("n1", SlurmClient(self.slurm.run), cg, self.store, self.state,
                           self.progress, config, clock=self.clock,
                           wall=lambda: 1.7e9 + self.clock.t, log=self.logs.append)  # fmt: skip
        a.start()
        self.agents.append(a)
        return a

    def report(self, job: int, rate: float) -> None:
        """The job did ``rate`` samples in the last second (as the progress Reporter)."""
        self.samples[job] = self.samples.get(job, 0) + int(rate)
        path = self.progress / f"job_{job}"
        path.write_bytes(encode(Progress(self.samples[job], self.clock.t, 4321)))

    def step(self, agent: NodeAgent[SlurmJobs], rates: dict[int, float]) -> None:
        self.clock.t += 1.0
        for job, rate in rates.items():
            self.report(job, rate)
        agent.tick()

    def cpuset(self, job: int, uid: int = UID) -> str:
        return read_cpus(self.root / "cpuset" / "slurm_n1" / f"uid_{uid}" / f"job_{job}")

    def actions(self, job: int) -> list[str]:
        return [d["action"] for d in self.store.decisions(limit=500, job_id=job)]


@pytest.fixture
def env(tmp_path: Path):
    e = Env(tmp_path)
    yield e
    e.store.close()


def converge(env: Env, agent: NodeAgent[SlurmJobs], job: int, rate: float = 100.0,
             limit: int = 200) -> int:  # fmt: skip
    """Tick with a flat throughput curve until the agent reports; returns the ticks."""
    for i in range(limit):
        env.step(agent, {job: rate})
        if env.slurm.updates:
            return i + 1
    raise AssertionError(f"no report in {limit} ticks; decisions: {env.actions(job)}")


def test_start_adopts_the_running_job(env: Env) -> None:
    env.job(5)
    agent = env.agent()
    assert set(agent.jobs.running) == {5}
    m = agent.jobs.running[5]
    assert m.cgroup == NAME and m.cpus == [0, 1]
    assert (m.job.kind, m.job.model, m.job.cores_pn_req, m.job.gpus_pn) == (
        "dnn",
        f"{UID}:tiny",
        2,
        1,
    )
    assert agent.source.info[5].grant == [0, 1] and agent.source.info[5].uid == UID
    assert agent.source.info[5].mark == {"state": "placed", "req": "2", "grant": "2", "nodes": "n1"}
    node = agent.node
    assert node is not None and (node.cores, node.gpus) == (4, 1)  # cgroup CPUs, Slurm's GPUs
    assert node.free_cores == 0 and node.free_gpus == 0
    assert json.loads(env.store.meta(GRANTS_KEY)) == {"5": "0-1"}
    assert json.loads(env.store.meta("agent"))["slurm"] is True
    (adopt,) = [d for d in env.store.decisions(job_id=5) if d["action"] == "adopt"]
    assert adopt["detail"]["grant"] == "0-1" and adopt["detail"]["requested"] == 2


def test_a_flat_curve_slims_the_job_within_its_grant_and_reports_it(env: Env) -> None:
    jd = env.job(5)
    agent = env.agent()
    ticks = converge(env, agent, 5)
    assert ticks < 60
    assert env.cpuset(5) == "0" and read_cpus(jd / "step_batch") == "0"
    assert agent.jobs.running[5].cpus == [0]
    assert agent.node.free_cores == 1  # granted by Slurm, no longer in its cpuset
    mark = "AdminComment=coda:placed,req=2,grant=2,nodes=n1,settled=1"
    assert env.slurm.updates == [["scontrol", "update", "JobId=5", mark]]
    moves = [d for d in env.store.decisions(limit=100, job_id=5) if d["action"] == "set-cores"]
    assert [(d["component"], d["detail"]["from"], d["detail"]["to"]) for d in moves] == [
        ("allocator", 2, 1)
    ]
    assert "report" in env.actions(5)
    status = json.loads((env.state / "status.json").read_text())
    assert status["jobs"][0]["settled"] == 1 and status["jobs"][0]["grant"] == "0-1"
    for _ in range(10):  # reported once: the mark already says so
        env.step(agent, {5: 100.0})
    assert len(env.slurm.updates) == 1
    assert env.cpuset(5) == "0"


def test_a_failed_report_is_retried(env: Env) -> None:
    env.job(5)
    agent = env.agent()
    env.slurm.fail = lambda argv: argv[:2] == ["scontrol", "update"]
    for _ in range(40):
        env.step(agent, {5: 100.0})
    assert env.slurm.updates == [] and "report" not in env.actions(5)
    assert any("could not report settled cores" in m for m in env.logs)
    env.slurm.fail = lambda argv: False
    env.step(agent, {5: 100.0})
    assert len(env.slurm.updates) == 1
    assert env.slurm.jobs[5]["comment"].endswith(",settled=1")


def test_growth_beyond_the_grant_is_refused(env: Env) -> None:
    env.job(5)
    agent = env.agent()
    m = agent.jobs.running[5]
    agent.actuator.carry_out([SetCores(m.job, 3)], env.clock(), "test")
    assert env.cpuset(5) == "0-1" and m.cpus == [0, 1] and m.job.cores_pn == 2
    (refused,) = [d for d in env.store.decisions(job_id=5) if d["action"] == "refused"]
    assert refused["component"] == "test" and refused["detail"]["asked"] == 3
    assert agent.node.free_cores == 0
    # Within the grant it may shrink and grow back, threads re-pinned when it grows.
    agent.actuator.carry_out([SetCores(m.job, 1)], env.clock(), "test")
    assert env.cpuset(5) == "0" and agent.node.free_cores == 1
    env.affinity.calls.clear()
    (env.root / J / "step_batch" / "tasks").write_text("777\n")
    agent.actuator.carry_out([SetCores(m.job, 2)], env.clock(), "test")
    assert env.cpuset(5) == "0-1" and agent.node.free_cores == 0
    assert env.affinity.calls == [(777, {0, 1})]


@pytest.mark.parametrize("stop_jobs", [False, True])
def test_a_cpu_job_is_throttled_and_released_on_shutdown(env: Env, stop_jobs: bool) -> None:
    env.job(6, cpus="2-3", name="prep", gres=None, comment="coda:placed,req=2,grant=2,nodes=n1")
    agent = env.agent()
    m = agent.jobs.running[6]
    assert m.job.kind == "cpu" and agent.node.cpu_job_cores == 2
    agent.actuator.carry_out([SetQuota(m.job, 0.5)], env.clock(), "test")
    qfile = env.root / "cpu" / "coda_slurm_n1" / "job_6" / "cpu.cfs_quota_us"
    assert qfile.read_text() == "100000"  # half of its 2 CPUs
    agent.shutdown(stop_jobs=stop_jobs)  # stopping Slurm's jobs is scancel's business
    assert qfile.read_text() == "-1"  # nobody would lift it later
    assert env.cpuset(6) == "2-3"  # the job keeps running, untouched


def test_a_preemption_is_refused_where_slurm_owns_the_job(env: Env) -> None:
    env.job(6, cpus="2-3", name="prep", gres=None, comment="coda:placed,req=2,grant=2,nodes=n1")
    agent = env.agent()
    m = agent.jobs.running[6]
    agent.actuator.carry_out([Preempt(m.job)], env.clock(), "test")
    assert agent.jobs.running[6] is m and m.job.placement  # neither killed nor released
    assert agent.decisions.counters.get("test:preempt-refused") == 1


def test_a_throttle_left_by_a_dead_agent_is_lifted_on_adoption(env: Env) -> None:
    env.job(6, cpus="2-3", name="prep", gres=None)
    qd = env.root / "cpu" / "coda_slurm_n1" / "job_6"
    qd.mkdir(parents=True)
    (qd / "cpu.cfs_quota_us").write_text("20000")
    (qd / "cpu.cfs_period_us").write_text("100000")
    env.agent()
    assert (qd / "cpu.cfs_quota_us").read_text() == "-1"


def test_start_removes_quota_groups_of_jobs_that_are_gone(env: Env) -> None:
    env.job(6, cpus="2-3", name="prep", gres=None)
    parent = env.root / "cpu" / "coda_slurm_n1"
    for job in (6, 99):  # 99 ended while no agent ran; its throttle group stayed
        (parent / f"job_{job}").mkdir(parents=True)
        (parent / f"job_{job}" / "cpu.cfs_quota_us").write_text("20000")
        (parent / f"job_{job}" / "cpu.cfs_period_us").write_text("100000")
    agent = env.agent()
    assert not (parent / "job_99").exists()
    assert (parent / "job_6" / "cpu.cfs_quota_us").read_text() == "-1"  # lifted, kept
    agent.shutdown()
    assert (parent / "job_6").is_dir()  # still running: a later agent adopts it


def test_shutdown_can_restore_every_grant(env: Env) -> None:
    env.job(5)
    agent = env.agent()
    agent.actuator.carry_out([SetCores(agent.jobs.running[5].job, 1)], env.clock(), "test")
    assert env.cpuset(5) == "0"
    agent.source.restore_on_exit = True
    agent.shutdown()
    assert env.cpuset(5) == "0-1"
    assert json.loads(env.store.meta(GRANTS_KEY)) == {"5": "0-1"}


@pytest.mark.skipif(os.getuid() != 0, reason="chown to another uid needs root")
def test_a_progress_file_of_another_user_is_ignored(env: Env) -> None:
    env.job(5)
    agent = env.agent()
    for _ in range(30):
        env.clock.t += 1.0
        env.report(5, 100.0)
        os.chown(env.progress / "job_5", UID + 12345, -1)
        agent.tick()
    m = agent.jobs.running[5]
    assert m.last is None and not m.controlled and m.throughput is None
    assert env.cpuset(5) == "0-1" and env.slurm.updates == []
    # Its own user's file is read at once.
    os.chown(env.progress / "job_5", UID, -1)
    env.step(agent, {5: 100.0})
    assert m.last is not None and m.controlled


def test_a_symlinked_or_special_progress_file_is_ignored(env: Env) -> None:
    env.job(5)
    agent = env.agent()
    elsewhere = env.tmp / "elsewhere"
    (env.progress / "job_5").symlink_to(elsewhere)
    for i in range(30):
        env.clock.t += 1.0
        elsewhere.write_bytes(encode(Progress(100 * (i + 1), env.clock.t, 1)))
        agent.tick()
    m = agent.jobs.running[5]
    assert m.last is None and not m.controlled
    (env.progress / "job_5").unlink()
    os.mkfifo(env.progress / "job_5")  # would block a naive reader
    agent.tick()
    assert m.last is None
    assert env.cpuset(5) == "0-1" and env.slurm.updates == []


def test_a_vanished_cgroup_releases_the_job(env: Env) -> None:
    jd = env.job(5)
    env.job(6, cpus="2-3", name="other")
    env.slurm.node_line = env.slurm.node_line.replace("Gres=gpu:1", "Gres=gpu:2")
    agent = env.agent()
    env.step(agent, {5: 100.0, 6: 100.0})
    agent.actuator.carry_out([SetCores(agent.jobs.running[5].job, 1)], env.clock(), "test")
    assert agent.node.free_cores == 1 and agent.node.free_gpus == 0
    shutil.rmtree(jd)  # Slurm removed the group: the job ended
    env.step(agent, {6: 100.0})
    assert set(agent.jobs.running) == {6}
    assert agent.node.free_cores == 0 and agent.node.free_gpus == 1
    assert "finish" in env.actions(5)
    assert not (env.progress / "job_5").exists()  # its progress file is cleaned up
    assert json.loads(env.store.meta(GRANTS_KEY)) == {"6": "2-3"}
    assert 5 not in agent.source.info


def test_start_needs_slurm_to_know_the_node(env: Env) -> None:
    env.slurm.node_line = env.slurm.node_line.replace("NodeName=n1", "NodeName=n2")
    with pytest.raises(CgroupError, match="no node named 'n1'"):
        env.agent()


def test_start_without_slurm_assumes_the_configured_gpus(env: Env) -> None:
    env.job(5)
    env.slurm.fail = lambda argv: argv[-1] == "node"
    agent = env.agent(gpus=3)
    assert agent.node.gpus == 3 and set(agent.jobs.running) == {5}
    assert any("assuming 3 GPUs" in m for m in env.logs)


def test_a_job_that_is_not_running_is_not_adopted(env: Env) -> None:
    env.job(5, state="COMPLETING")
    agent = env.agent()
    assert agent.jobs.running == {}
    env.slurm.jobs[5]["state"] = "RUNNING"
    env.step(agent, {})
    assert set(agent.jobs.running) == {5}


def test_a_failed_lookup_is_retried_later_not_every_tick(env: Env) -> None:
    env.job(5)
    env.slurm.fail = lambda argv: argv[0] == "squeue"
    agent = env.agent()
    assert agent.jobs.running == {} and env.slurm.detail_calls(5) == 1
    assert any("not adopted yet" in m for m in env.logs)
    env.slurm.fail = lambda argv: False
    for _ in range(3):
        env.step(agent, {})
    assert agent.jobs.running == {} and env.slurm.detail_calls(5) == 1  # backing off
    for _ in range(3):
        env.step(agent, {})
    assert set(agent.jobs.running) == {5}


def test_a_restarted_agent_readopts_with_the_original_grant(env: Env) -> None:
    env.job(5)
    first = env.agent()
    first.actuator.carry_out([SetCores(first.jobs.running[5].job, 1)], env.clock(), "test")
    assert env.cpuset(5) == "0"
    # The first agent dies without a word; a new one starts on the same store.
    second = env.agent()
    m = second.jobs.running[5]
    assert m.cpus == [0] and second.source.info[5].grant == [0, 1]
    assert second.node.free_cores == 1
    second.actuator.carry_out([SetCores(m.job, 2)], env.clock(), "test")
    assert env.cpuset(5) == "0-1" and m.cpus == [0, 1]
    assert "refused" not in env.actions(5)


def test_without_the_stored_grant_the_narrowed_cpuset_would_be_all(env: Env) -> None:
    # The other side of the restart test: the grant really comes from the store.
    env.job(5)
    first = env.agent()
    first.actuator.carry_out([SetCores(first.jobs.running[5].job, 1)], env.clock(), "test")
    env.store.set_meta(GRANTS_KEY, "{}")
    second = env.agent()
    assert second.source.info[5].grant == [0]


def test_a_restarted_agent_knows_the_report_was_made(env: Env) -> None:
    env.job(5)
    first = env.agent()
    converge(env, first, 5)
    second = env.agent()
    assert second.source.reports.reported == {5: 1}
    for _ in range(40):
        env.step(second, {5: 100.0})
    assert len(env.slurm.updates) == 1  # settled=1 already in the mark


# -------------------------------------- grants, cpusets and quota groups across stalls and restarts
def test_a_stalled_job_gets_its_grant_back(env: Env) -> None:
    env.job(5, comment="coda:placed,req=4,grant=2,nodes=n1")  # granted fewer than asked
    env.job(6, cpus="2-3", name="other")
    agent = env.agent(stall_s=5.0)
    agent.actuator.carry_out([SetCores(agent.jobs.running[5].job, 1)], env.clock(), "test")
    agent.actuator.carry_out([SetCores(agent.jobs.running[6].job, 1)], env.clock(), "test")
    env.step(agent, {5: 100.0})  # one record: the allocator takes the job on
    for _ in range(8):
        env.step(agent, {})  # then silence
    assert agent.jobs.running[5].stalled
    assert env.cpuset(5) == "0-1"


def test_a_grant_survives_a_restart_with_a_failed_lookup(env: Env) -> None:
    env.job(5)
    env.job(6, cpus="2-3", name="other")
    first = env.agent()
    first.actuator.carry_out([SetCores(first.jobs.running[6].job, 1)], env.clock(), "test")
    assert env.cpuset(6) == "2"
    env.slurm.hidden = {6}  # a lookup that misses it (Slurm busy, a stale answer)
    second = env.agent()
    assert set(second.jobs.running) == {5}
    env.slurm.hidden = set()
    for _ in range(6):
        env.step(second, {})
    assert set(second.jobs.running) == {5, 6}
    assert second.source.info[6].grant == [2, 3]


def test_gpus_per_node_of_a_multi_node_job(env: Env) -> None:
    env.job(7, nodes=2, gres="gpu:2", tres="gres:gpu:1",
            comment="coda:placed,req=2,grant=2,nodes=n1+n2")  # fmt: skip
    agent = env.agent()
    m = agent.jobs.running[7]
    assert m.job.gpus_pn == 1
    assert agent.node.free_gpus == 0


def test_an_admin_comment_that_is_not_codas_is_kept(env: Env) -> None:
    env.job(5, comment="keep-me")
    agent = env.agent()
    for _ in range(60):
        env.step(agent, {5: 100.0})
    assert env.cpuset(5) == "0"  # it was slimmed (and so would be reported)
    assert env.slurm.jobs[5]["comment"] == "keep-me"


def test_a_cpuset_slurm_rewrote_is_put_back(env: Env) -> None:
    jd = env.job(5)
    agent = env.agent()
    agent.actuator.carry_out([SetCores(agent.jobs.running[5].job, 1)], env.clock(), "test")
    assert env.cpuset(5) == "0"
    # A new step: slurmd writes the job's whole grant again.
    (jd / "cpuset.cpus").write_text("0-1\n")
    (jd / "step_batch" / "cpuset.cpus").write_text("0-1\n")
    env.step(agent, {})
    assert env.cpuset(5) == "0" and read_cpus(jd / "step_batch") == "0"
    assert agent.jobs.running[5].cpus == [0]
    assert "restore-cpuset" in env.actions(5)


def test_only_the_first_task_on_a_node_reports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from coda.runtime.progress import Reporter, read_progress

    f = tmp_path / "job_5"
    monkeypatch.setenv("CODA_PROGRESS_FILE", str(f))
    monkeypatch.setenv("SLURM_LOCALID", "1")
    Reporter().step(10)
    assert not f.exists()  # rank 1 on this node: silent
    monkeypatch.setenv("SLURM_LOCALID", "0")
    r = Reporter(min_interval_s=0)
    r.step(10)
    assert read_progress(f).samples == 10  # type: ignore[union-attr]


def test_a_progress_file_that_cannot_be_made_does_not_stop_the_job(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from coda.runtime.progress import Reporter

    r = Reporter(tmp_path / "missing-dir" / "job_5")
    r.step(3)  # no error: reporting is optional
    assert not r.enabled and "progress not reported" in capsys.readouterr().err


def test_a_quota_group_still_busy_at_job_end_is_removed_later(env: Env) -> None:
    jd = env.job(6, cpus="2-3", name="prep", gres=None, comment="coda:placed,req=2,grant=2")
    agent = env.agent()
    agent.actuator.carry_out([SetQuota(agent.jobs.running[6].job, 0.5)], env.clock(), "test")
    qd = env.root / "cpu" / "coda_slurm_n1" / "job_6"
    # The job ends: slurmd removes its cpuset groups while its last process is still
    # exiting in CODA's quota group (seen on the real kernel).
    shutil.rmtree(jd)
    (qd / "cgroup.procs").write_text(f"{os.getpid()}\n")
    env.step(agent, {})
    assert agent.jobs.running == {} and qd.is_dir()
    env.step(agent, {})
    assert sum("quota group kept" in m for m in env.logs) == 1  # said once, not every tick
    (qd / "cgroup.procs").write_text("")  # it has gone
    env.step(agent, {})
    assert not qd.exists()
