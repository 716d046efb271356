"""Where plain Slurm puts a job, against where its simulated twin (``slurm``) would.

Before the plain run, on its idle cluster, a few scenes: filler jobs pinned to nodes
(``sbatch -w``), then one unpinned probe job; Slurm's choice is read from its record,
the twin's from one scheduling cycle over the same nodes and fillers. The scenes tell
apart the rules a scheduler might follow: the node with the fewest free cores (what
Slurm's select/cons_tres was seen to do), the fewest free GPUs (the simulator's
best-fit index), or the first in node order.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from coda.cycle.decisions import Start
from coda.cycle.once import Booking
from coda.cycle.scheduler import Scheduler
from coda.policy import PolicyOptions, make_policy
from coda.policy.state import Job, Node
from coda.replay.plan import ClusterShape, ReplayJob
from coda.replay.stack import StackError, fresh_dir, node_names, run_checked, sbatch_argv

TWIN = "slurm"  # the policy of plain Slurm's twin
PLACE_TIMEOUT_S = 60.0  # for a job of the idle cluster to be running


@dataclass(frozen=True)
class Filler:
    node: int  # 0-based: n1 is 0
    gpus: int
    cores: int


@dataclass(frozen=True)
class Scene:
    name: str
    fillers: tuple[Filler, ...]
    gpus: int  # the probe's
    cores: int


def scenes(shape: ClusterShape) -> list[Scene]:
    """The scenes this shape allows (two GPU nodes of 2+ GPUs and 4+ cores; else none)."""
    g, c = shape.gpus, shape.cores
    if shape.gpu_nodes < 2 or g < 2 or c < 4:
        return []
    half = c // 2
    return [
        # n1: fewer free cores; n2: fewer free GPUs.
        Scene("cores-or-gpus", (Filler(0, 0, half), Filler(1, g - 1, 1)), 1, 1),
        # As many free cores on each; n2 has fewer free GPUs.
        Scene("tie-on-cores", (Filler(0, 0, half), Filler(1, g - 1, half)), 1, 1),
        # n2 has fewer free cores, n1 comes first.
        Scene("first-or-fewest", (Filler(1, 0, half),), 1, 1),
    ]


def twin_choice(shape: ClusterShape, scene: Scene, names: list[str] | None = None) -> str:
    """The node the twin's cycle starts the scene's probe on ("" if it does not);
    ``names``: the cluster's node names in order (default n1, n2, ...)."""
    names = names or [f"n{i + 1}" for i in range(shape.nodes)]
    nodes = [
        Node(i, names[i], shape.gpus if i < shape.gpu_nodes else 0, shape.cores, 0, 0.0)
        for i in range(shape.nodes)
    ]
    sched = Scheduler(make_policy(TWIN, PolicyOptions(estimates="time-limits")), nodes)
    for k, f in enumerate(scene.fillers):
        job = Job(-1 - k, f"filler{k}", 0.0, f.gpus, f.cores, 0, 1, 600.0, time_limit=600.0)
        job.start = 0.0
        sched.occupy(job, [nodes[f.node]], f.cores, 0.0)
    probe = Job(0, "probe", 0.0, scene.gpus, scene.cores, 0, 1, 60.0, time_limit=60.0)
    if sched.submit(probe) is not None:
        return ""
    for d in sched.cycle(0.0, Booking(sched)):
        if isinstance(d, Start) and d.job is probe:
            return d.nodes[0].name
    return ""


def _job(name: str, user: str, gpus: int, cores: int) -> ReplayJob:
    # An emulated CPU job that outlives the scene (it is cancelled): GPUs are only held.
    return ReplayJob(idx=-1, name=name, user=user, submit_s=0.0, kind="cpu", gpus=gpus,
                     nodes=1, gpus_pn=gpus, cores_pn=cores, model="", work_s=600.0,
                     bw_per_core=0.0, time_limit_min=10)  # fmt: skip


def _running_on(env: dict[str, str], job_id: str) -> str:
    """The node Slurm runs a job on, once it does (within PLACE_TIMEOUT_S)."""
    deadline = time.monotonic() + PLACE_TIMEOUT_S
    while time.monotonic() < deadline:
        out = run_checked(["squeue", "-h", "-j", job_id, "-o", "%T %N"], env, 30).split()
        if len(out) == 2 and out[0] == "RUNNING":
            return out[1]
        time.sleep(0.2)
    raise StackError(f"node-choice job {job_id} was not running after {PLACE_TIMEOUT_S:.0f} s")


def probe_node_choice(
    env: dict[str, str],
    script: Path,
    user: str,
    workdir: Path,
    node_bw: float,
    shape: ClusterShape,
    log: Callable[[str], None],
) -> list[dict[str, str]]:
    """Each scene on the idle plain cluster: Slurm's node for its probe and the twin's."""
    fresh_dir(workdir, user, env)
    names = node_names(env, shape.nodes)
    out: list[dict[str, str]] = []
    for scene in scenes(shape):
        ids: list[str] = []
        try:
            for k, f in enumerate(scene.fillers):
                argv = sbatch_argv(_job(f"fill{k}", user, f.gpus, f.cores), script, workdir,
                                   node_bw, 60.0, nodelist=names[f.node])  # fmt: skip
                ids.append(_submitted(run_checked(argv, env, 60)))
                _running_on(env, ids[-1])
            argv = sbatch_argv(_job("probe", user, scene.gpus, scene.cores), script, workdir,
                               node_bw, 60.0)  # fmt: skip
            ids.append(_submitted(run_checked(argv, env, 60)))
            slurm = _running_on(env, ids[-1])
        except StackError:
            try:  # the run must not start with these jobs on its nodes
                _cancel(env, ids)
            except StackError as e:
                log(f"node choice: cleaning up after a failure: {e}")
            raise
        _cancel(env, ids)
        twin = twin_choice(shape, scene, names)
        log(f"node choice, {scene.name}: Slurm {slurm}, twin {twin or 'none'}")
        out.append({"scene": scene.name, "slurm": slurm, "twin": twin})
    return out


def _submitted(out: str) -> str:
    jid = out.strip().split(";")[0]
    if not jid.isascii() or not jid.isdigit():
        raise StackError(f"sbatch for a node-choice job: no job id in {jid[:80]!r}")
    return jid


def _cancel(env: dict[str, str], ids: list[str]) -> None:
    if ids:
        run_checked(["scancel", *ids], env, 60)
        _gone(env, ids)


def _gone(env: dict[str, str], ids: list[str]) -> None:
    """Wait for cancelled jobs to leave their nodes (the next scene starts empty)."""
    deadline = time.monotonic() + PLACE_TIMEOUT_S
    while time.monotonic() < deadline:
        out = run_checked(["squeue", "-h", "-j", ",".join(ids), "-o", "%T"], env, 30)
        if not any(s in ("RUNNING", "COMPLETING", "PENDING") for s in out.split()):
            return
        time.sleep(0.2)
    raise StackError(f"node-choice jobs {', '.join(ids)} still there after cancelling")
