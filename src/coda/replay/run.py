"""One replay: the same jobs through plain Slurm, through CODA on Slurm (controller and
agents, faults injected), and through the simulator with the matching policies.

Plain Slurm is the test cluster with CODA off (no job_submit.lua: Slurm's own FIFO
priority and backfill on the jobs' time limits); its simulated twin is ``slurm`` (one
queue in arrival order, requested cores, CPU jobs on any node, every queued job holding
a plan as sched/backfill does, Slurm's node choice) with time-limit estimates. CODA's
run is the plugin, the controller and one agent per node, the agents keeping the jobs'
cores on each node's board (the nodes are declared-big); its twin is ``coda`` with the
same estimates.
"""

from __future__ import annotations

import dataclasses
import os
import pwd
import random
import shutil
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coda.replay import outcome as O
from coda.replay.node_choice import probe_node_choice
from coda.replay.plan import (
    ClusterShape,
    ReplayJob,
    compress,
    fitting,
    load_table,
    plan,
    prepare_replay,
)
from coda.replay.stack import (
    Daemon,
    StackError,
    TestCluster,
    coda_daemons,
    fresh_dir,
    job_script,
    node_names,
    probe_job_python,
    probe_start_latency,
    submit_all,
)

TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
            "BOOT_FAIL", "DEADLINE"}  # fmt: skip
SIM_POLICY = {"plain": "slurm", "coda": "coda"}
# What both twins are told of Slurm (plain Slurm's twin never resizes a job nor takes
# cores back, so for it these only say what Slurm is):
# - reclaim: CODA on Slurm requeues CPU jobs whole, as its controller does (Slurm
#   cannot shrink a running job);
# - grants: Slurm's books are fixed. A job holds the NumCPUs it was granted until it
#   ends; the agent narrows its cpuset inside them, which frees nothing for the next
#   job (only the next job of the same name is granted fewer);
# - allocator start: the controller learns per user and job name, and the replay's
#   jobs are all named apart (r0, r1, ...), so every job is placed with its request
#   and searches from there, and nothing learned carries over.
SIM_RECLAIM = {"plain": "requeue", "coda": "requeue"}
SIM_GRANTS = {"plain": "fixed", "coda": "fixed"}
SIM_ALLOCATOR_START = {"plain": "request", "coda": "request"}
# - settle: after a core change an agent ignores its job's progress for 1 s, then waits
#   for a whole window from the next record, so its allocator steps 3 windows apart,
#   not 2 (6 s in the agents' logs of the full replays): the twin's allocator leaves one
#   window out after each change.
SIM_SETTLE_WINDOWS = {"plain": 0, "coda": 1}
# - bandwidth: the controller reads no node's memory bandwidth, so to it no bus is ever
#   busy (plugins/bus_headroom.py); the twin's bus share is set past any oversubscription
#   its jobs can reach, while its physics still slows jobs on a saturated bus.
SIM_TUNE: dict[str, dict[str, str]] = {"plain": {}, "coda": {"harm.bus_share": "1000"}}

if TYPE_CHECKING:
    from coda.sim.result import SimResult
    from coda.study.run import Prepared


@dataclass
class ReplayConfig:
    trace: str | None = None
    format: str | None = None
    jobs: int = 36
    speed: float = 300.0
    load: float = 0.9
    seed: int = 0
    shape: ClusterShape = field(default_factory=lambda: ClusterShape(2, 2, 5, 28))
    users: int = 3
    out: Path = Path("out/replay")
    cluster_dir: Path = Path("/var/tmp/coda-replay")
    faults: bool = True
    controller_kills: int = 3
    agent_kills: int = 3
    slurmd_restarts: int = 1
    period_s: float = 1.0
    window_s: float = 2.0
    probes: int = 5  # jobs that measure the stack's start latency before each run
    sim_seeds: int = 5  # noise seeds each simulated twin runs (seed, seed+1, ...)
    drain_timeout_s: float = 300.0
    runs: tuple[str, ...] = ("plain", "coda")


@dataclass
class Fault:
    t: float
    what: str  # "controller", "agent", "slurmd"
    target: str = ""
    done: bool = False


def fault_plan(
    cfg: ReplayConfig, span_s: float, rng: random.Random, nodes: list[str]
) -> list[Fault]:
    """Random moments inside the arrival span (seeded): the controller and random agents
    SIGKILLed (and started again a moment later), one slurmd restarted; ``nodes``: the
    cluster's node names."""
    if not cfg.faults:
        return []
    out = [Fault(rng.uniform(0.1, 0.9) * span_s, "controller") for _ in range(cfg.controller_kills)]
    out += [
        Fault(rng.uniform(0.1, 0.9) * span_s, "agent", nodes[rng.randint(1, len(nodes)) - 1])
        for _ in range(cfg.agent_kills)
    ]
    out += [
        Fault(rng.uniform(0.2, 0.8) * span_s, "slurmd", nodes[rng.randint(1, len(nodes)) - 1])
        for _ in range(cfg.slurmd_restarts)
    ]
    return sorted(out, key=lambda f: f.t)


class Faults:
    """Carries out a fault plan as time passes (called between submissions and polls)."""

    def __init__(self, plan: list[Fault], daemons: dict[str, Daemon], cluster: TestCluster,
                 log: Callable[[str], None]) -> None:  # fmt: skip
        self.plan = plan
        self.daemons = daemons
        self.cluster = cluster
        self.log = log
        self.restart_at: list[tuple[float, Daemon]] = []
        self.happened: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self._slurmd: threading.Thread | None = None

    def _restart_slurmd(self, node: str) -> None:
        try:
            self.cluster.restart_slurmd(node)
        except StackError as e:
            self.errors.append(str(e))

    @property
    def busy(self) -> bool:
        """A restart is still due or under way."""
        return bool(self.restart_at) or (self._slurmd is not None and self._slurmd.is_alive())

    def __call__(self, t: float) -> None:
        for when, d in list(self.restart_at):
            if t >= when:
                d.start()
                self.restart_at.remove((when, d))
        for f in self.plan:
            if f.done or t < f.t:
                continue
            name = "controller" if f.what == "controller" else f"agent-{f.target}"
            if f.what == "slurmd":
                if self._slurmd is not None and self._slurmd.is_alive():
                    continue  # the last restart is still under way: this one waits
                f.done = True
                self._slurmd = threading.Thread(  # submissions go on meanwhile
                    target=self._restart_slurmd, args=(f.target,), daemon=True
                )
                self._slurmd.start()
            else:
                d = self.daemons[name]
                if any(p is d for _, p in self.restart_at):
                    continue  # down already: killed again once it is back
                f.done = True
                d.kill()
                self.restart_at.append((t + 1.0, d))
            self.happened.append({"t": round(t, 3), "what": f.what, "target": f.target})
            self.log(f"fault at {t:.1f} s: {f.what} {f.target}".rstrip())

    def settle(self) -> None:
        for _, d in self.restart_at:
            d.start()
        self.restart_at = []
        if self._slurmd is not None:
            self._slurmd.join(timeout=120)
        if self.errors:
            raise StackError(f"fault injection: {self.errors[0]}")


def _node_bw(shape: ClusterShape, profiles: Any) -> float:
    return float(profiles.node_bw_gbps_per_core) * shape.cores


def run_real(
    mode: str,
    cfg: ReplayConfig,
    jobs: list[ReplayJob],
    node_bw: float,
    log: Callable[[str], None],
) -> dict[str, Any]:
    """One run on the real stack; its outcomes and what it did."""
    from coda.slurm.client import SlurmClient, SlurmError

    cluster = TestCluster(cfg.cluster_dir, cfg.shape, cfg.users)
    state = "off" if mode == "plain" else "on"
    log(f"{mode}: bringing the test cluster up ({cfg.shape.spec}, CODA {state})")
    env = cluster.up(coda_off=mode == "plain")
    users = [f"coda-u{i + 1}" for i in range(cfg.users)]
    missing = sorted(set(users) - set(cluster.local_users))
    if missing:
        raise StackError(f"the test cluster did not make the users {', '.join(missing)}")
    os.environ["SLURM_CONF"] = env["SLURM_CONF"]  # SlurmClient's commands
    run_dir = cfg.out / mode
    if run_dir.exists():  # an earlier replay's: CODA must start as cold as the simulator
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    daemons: dict[str, Daemon] = {}
    faults = Faults([], daemons, cluster, log)
    try:
        if mode == "coda":
            for d in coda_daemons(env, cfg.shape, run_dir / "state", cfg.period_s, cfg.window_s):
                daemons[d.name] = d
                d.start()
            daemons["controller"].wait_active(env)  # jobs are held only once it beats
            span = jobs[-1].submit_s if jobs else 0.0
            faults.plan = fault_plan(
                cfg, span, random.Random(cfg.seed), node_names(env, cfg.shape.nodes)
            )
        script = job_script(cfg.out)
        probe_job_python(script, users[0], env)
        workdir = Path(env["CODA_SLURM_DIR"]) / "users"
        for u in users:  # each run's output apart (Slurm may number jobs alike again)
            fresh_dir(workdir / u / mode, u, env)
        latency = (
            probe_start_latency(env, script, users[0], workdir / users[0] / f"{mode}-probes",
                                node_bw, cfg.probes, random.Random(cfg.seed + 1), log)
            if cfg.probes
            else []
        )  # fmt: skip
        choice = (
            probe_node_choice(env, script, users[0], workdir / users[0] / f"{mode}-placement",
                              node_bw, cfg.shape, log)
            if mode == "plain" and cfg.probes
            else []
        )  # fmt: skip
        span = jobs[-1].submit_s if jobs else 0.0
        log(f"{mode}: submitting {len(jobs)} jobs over {span:.0f} s as {', '.join(users)}")
        t0_wall, ids = submit_all(
            jobs, env, script, lambda u: workdir / u / mode, node_bw, 1.0, faults
        )
        t_sub = time.time() - t0_wall
        client = SlurmClient()
        deadline = time.monotonic() + cfg.drain_timeout_s
        states: dict[int, Any] = {}
        while True:
            faults(time.time() - t0_wall)
            try:
                seen = {j.job_id: j for j in client.jobs()}
            except SlurmError as e:
                log(f"{mode}: squeue: {e}")
                seen = {}
            states.update({i: seen[jid] for i, jid in ids.items() if jid in seen})
            left = [
                i for i, jid in ids.items() if jid not in seen or seen[jid].state not in TERMINAL
            ]
            if not left and not faults.busy and all(f.done for f in faults.plan):
                break
            if time.monotonic() > deadline:
                log(f"{mode}: {len(left)} jobs not done after {cfg.drain_timeout_s:.0f} s")
                break
            time.sleep(1.0)
        faults.settle()
        elapsed = time.time() - t0_wall
        outcomes: dict[int, O.Outcome] = {}
        placed: dict[int, list[str]] = {}
        for job in jobs:
            o = O.Outcome(job.idx)
            jid = ids.get(job.idx)
            if jid is not None:
                path = workdir / job.user / mode / f"{job.name}-{jid}.out"
                O.read_output(path, t0_wall, o, owner=pwd.getpwnam(job.user).pw_uid)
                sj = states.get(job.idx)
                if sj is not None:
                    o.slurm_state, o.slurm_restarts = sj.state, sj.restarts
                    placed[job.idx] = sj.nodes  # where it last ran
                else:
                    o.slurm_state = "UNKNOWN"
            else:
                o.slurm_state = "NOT_SUBMITTED"
            O.finish(o, job)
            outcomes[job.idx] = o
        starts = {d.name: d.starts for d in daemons.values()}
        return {"outcomes": outcomes, "faults": faults.happened, "submit_s": t_sub,
                "elapsed_s": elapsed, "daemon_starts": starts,
                "start_latency_s": latency, "node_choice": choice, "nodes": placed}  # fmt: skip
    finally:
        for d in daemons.values():
            d.stop()
        cluster.down()


@dataclass(frozen=True)
class Timing:
    """What a simulated twin is told of its real stack's timing (coda simulate's
    --start-delay, --control-period, --cycle-period)."""

    start_delay_s: float = 0.0
    control_period_s: float | None = None
    cycle_period_s: float = 0.0


def sim_timing(cfg: ReplayConfig, mode: str, latency: list[float]) -> Timing:
    """The same model for both stacks: a job starts to work the probes' median start
    latency after the twin places it (Slurm's scheduler pass or CODA's controller
    cycle, the prolog, slurmstepd, the job's start-up), holding its GPUs and cores
    meanwhile. CODA's control period is its agents' window (their allocator's
    throughput window, and the eliminator's tick); plain Slurm has no control loop.
    Simulating CODA's controller cycle instead (``cycle_period_s``, the rest of the
    latency as the delay) was tried: on two recorded full replays it matched the real
    stack worse (bench/replay_twins.py shows both)."""
    delay = max(0.0, statistics.median(latency)) if latency else 0.0  # a clock step: not < 0
    return Timing(delay, cfg.window_s if mode == "coda" else None)


def run_sim(
    prepared: Prepared, mode: str, timing: Timing = Timing(), seed: int | None = None
) -> SimResult:
    """One simulated twin; ``seed`` seeds its sample noise only (the prepared workload,
    the real jobs' twin, stays as it is)."""
    from coda.study.run import run_policy

    config = prepared.config.varied(
        policy={
            "start_delay_s": timing.start_delay_s,
            "control_period_s": timing.control_period_s,
            "reclaim": SIM_RECLAIM[mode],
            "allocator_start": SIM_ALLOCATOR_START[mode],
            "settle_windows": SIM_SETTLE_WINDOWS[mode],
            "tune": {**prepared.config.policy.tune, **SIM_TUNE[mode]},
        },
        simulation={"cycle_period_s": timing.cycle_period_s, "grants": SIM_GRANTS[mode]},
        seed=prepared.config.seed if seed is None else seed,
    )
    return run_policy(dataclasses.replace(prepared, config=config), SIM_POLICY[mode])


def replay(cfg: ReplayConfig, log: Callable[[str], None] = print) -> dict[str, Any]:
    """The whole replay; the content of replay.json (report.md beside it)."""
    from coda.replay.report import write_report

    if cfg.users < 1:
        raise ValueError("--users: at least one local user")
    users = [f"coda-u{i + 1}" for i in range(cfg.users)]
    whole, unfit = fitting(load_table(cfg.trace, cfg.format, cfg.seed, cfg.jobs), cfg.shape)
    table = compress(whole, cfg.jobs, cfg.speed, users)
    cfg.out.mkdir(parents=True, exist_ok=True)
    prepared = prepare_replay(table, cfg.shape, cfg.out, cfg.seed, cfg.load)
    jobs = plan(prepared)
    node_bw = _node_bw(cfg.shape, prepared.workload.profiles)
    gpus = cfg.shape.gpu_nodes * cfg.shape.gpus
    result: dict[str, Any] = {
        "setting": {
            "trace": cfg.trace or "generated paper workload (coda.workload.generate, preset paper)",
            "jobs": len(jobs), "speed": cfg.speed, "load": cfg.load, "seed": cfg.seed,
            "cluster": cfg.shape.spec, "users": users, "faults": cfg.faults,
            "controller_period_s": cfg.period_s, "agent_window_s": cfg.window_s,
            "arrival_span_s": jobs[-1].submit_s if jobs else 0.0,
            "notes": list(prepared.notes)
            + ([f"{unfit} jobs of the trace cannot fit the test cluster's nodes: left out"]
               if unfit else []),
        },
        "jobs_submitted": len(jobs),
        "sim": {},
    }  # fmt: skip
    result["jobs"] = [j.record() for j in jobs]
    # The real runs first: each measures its stack's start latency, which its simulated
    # twin is then told (sim_timing).
    reals: dict[str, O.RunMetrics] = {}
    latency: dict[str, list[float]] = {}
    for mode in cfg.runs:
        got = run_real(mode, cfg, jobs, node_bw, log)
        reals[mode] = O.real_metrics(jobs, got["outcomes"], gpus)
        latency[mode] = got["start_latency_s"]
        result[mode] = {
            **reals[mode].as_dict(),
            "start_latency_s": [round(x, 3) for x in latency[mode]],
            "faults": got["faults"], "daemon_starts": got["daemon_starts"],
            "elapsed_s": round(got["elapsed_s"], 1), "jct_s": reals[mode].jct_s,
            "per_job": {i: {"starts": o.starts, "end": o.end, "done": o.done,
                            "slurm_state": o.slurm_state, "slurm_restarts": o.slurm_restarts,
                            "nodes": got["nodes"].get(i, [])}
                        for i, o in got["outcomes"].items()},
        }  # fmt: skip
        if got["node_choice"]:
            result[mode]["node_choice"] = got["node_choice"]
        log(f"{mode}: {result[mode]['jobs_finished']} finished, "
            f"{result[mode]['jobs_unfinished']} unfinished, {result[mode]['jobs_lost']} lost, "
            f"effective GPU utilisation {reals[mode].gpu_util_effective:.3f}")  # fmt: skip
    sims: dict[str, O.RunMetrics] = {}
    for mode in cfg.runs:
        timing = sim_timing(cfg, mode, latency[mode])
        delay = timing.start_delay_s
        # Noise seeds move only the allocator's samples: plain Slurm's twin (slurm) has
        # none, so one seed is all of it.
        seeds = [cfg.seed + k for k in range(cfg.sim_seeds if mode == "coda" else 1)]
        log(f"simulating {SIM_POLICY[mode]} on the same jobs (start delay {delay:.2f} s, "
            f"cycle {timing.cycle_period_s:g} s, {len(seeds)} noise seeds)")  # fmt: skip
        per_seed = []
        for seed in seeds:
            r = run_sim(prepared, mode, timing, seed)
            per_seed.append(O.sim_metrics(jobs, r.jobs, r.summary, delay))
        sims[mode] = O.mean_of(per_seed)
        each = [O.jct_rel_error_median(reals[mode], m) for m in per_seed]
        errs = [e for e in each if e is not None]
        result["sim"][mode] = {
            "policy": SIM_POLICY[mode], **dataclasses.asdict(timing),
            "reclaim": SIM_RECLAIM[mode], "grants": SIM_GRANTS[mode],
            "allocator_start": SIM_ALLOCATOR_START[mode],
            "settle_windows": SIM_SETTLE_WINDOWS[mode], "seeds": seeds,
            **sims[mode].as_dict(),
            "jct_s": sims[mode].jct_s,
            "per_seed": [{"gpu_util_effective": m.gpu_util_effective,
                          "cpu_queue_delay_mean_s": m.cpu_queue_delay_mean_s,
                          "jct_rel_error_median": e} for m, e in zip(per_seed, each, strict=True)],
        }  # fmt: skip
        # The JCT error: per seed, the median over jobs; reported, the median over seeds.
        result[mode]["jct_rel_error_median"] = statistics.median(errs) if errs else None
        result[mode]["jct_rel_error_range"] = [min(errs), max(errs)] if len(errs) > 1 else None
    if "plain" in reals and "coda" in reals:
        result["gain_real"] = O.gain(reals["plain"], reals["coda"])
        result["gain_sim"] = O.gain(sims["plain"], sims["coda"])
        # What CODA's co-location cost each CPU job against plain Slurm, on both sides.
        result["cpu_stretch_real"] = O.cpu_stretch(reals["plain"], reals["coda"])
        result["cpu_stretch_sim"] = O.cpu_stretch(sims["plain"], sims["coda"])
    result["jobs_lost"] = {m: result[m]["jobs_lost"] for m in reals}
    result["jobs_started_twice"] = {m: result[m]["jobs_started_twice"] for m in reals}
    write_report(result, cfg.out)
    return result
