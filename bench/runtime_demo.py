# ruff: noqa: E501  (markdown table rows in report())
"""The node runtime on real processes: the numbers behind issue 4's closing note.

    sudo .venv/bin/python bench/runtime_demo.py                 # every part, ~10 min
    sudo .venv/bin/python bench/runtime_demo.py --parts curve,allocator

Parts (each on the real kernel: root, cgroup v1 or v2 with cpuset and cpu):
- curve: the training-like workload's throughput at 1..N CPUs (pinned, no agent),
  per setting; the "right" core count is the smallest within 5% of the best.
- allocator: a `coda agent` slims each setting's job (asked for every CPU); the
  cores it settles on against the curve's answer, and how long the search took.
- eliminator: a setting the allocator slims to fewer cores, then a memory-bandwidth
  hog on the freed core: the training job's throughput and the hog's quota over
  time, with the eliminator and without (policy coda-no-eliminator), `--runs` times; time to
  detect (hog start -> first throttle written) and to recover (-> throughput back
  within 5% of its reference).
- solo: the hog started before the training job (so the job's reference is
  measured beside it) and after it, real and synthetic job, with solo probes and
  without (``eliminator.probe_ticks=0``): time to detect (the later of the two
  jobs' start -> first throttle, the probe not counted), the training job's
  samples/s before the throttle and in the last 20 s, the hog's core-seconds lost
  to quotas below 1 (the probe's share apart).
- restart: the agent killed (SIGKILL) with two jobs running, restarted: same
  processes, re-adopted, each job started once and finished once.

Writes ``--out``/results.json, report.md and timeline.png.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from coda.runtime.store import JobRow, JobSpec, Store

# Settings of the training-like workload (measured on a 2-CPU machine: see report.md).
SETTINGS: dict[str, list[str]] = {
    # Data preparation well under the GPU step: one CPU keeps up.
    "light": ["--workers", "2", "--gpu-ms", "50", "--batch-images", "16"],
    # Preparation about 3.7x the GPU step per batch: two workers need both CPUs.
    "heavy": ["--workers", "2", "--gpu-ms", "10", "--batch-images", "32"],
    # One worker with heavy batched augmentation (~16 MB per batch, cache-resident
    # alone): a second CPU does not help, and a co-runner that thrashes the shared
    # L3 slows it.
    "contended": [
        "--workers",
        "1",
        "--gpu-ms",
        "30",
        "--batch-images",
        "16",
        "--augment-passes",
        "6",
    ],
}
CONTENDED = "contended"
TRAIN = [sys.executable, "-m", "coda.runtime.workloads.train"]
# Two 32 MiB buffers: streams through the shared L3 all the time (measured here: a
# stronger co-runner for a cache-resident batch than 256 MiB buffers that mostly miss).
HOG = [sys.executable, "-m", "coda.runtime.workloads.membw", "--mib", "32", "--quiet"]


def log(msg: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {msg}", flush=True)


# ------------------------------------------------------------------- curve
def curve(settings: dict[str, list[str]], point_s: float, repeats: int) -> dict[str, Any]:
    cpus = sorted(os.sched_getaffinity(0))
    out: dict[str, Any] = {}
    for name, args in settings.items():
        points = {}
        for n in range(1, len(cpus) + 1):
            runs = []
            for _ in range(repeats):
                mask = set(cpus[:n])
                res = subprocess.run(
                    [*TRAIN, *args, "--seconds", str(point_s), "--quiet"],
                    capture_output=True,
                    text=True,
                    check=True,
                    preexec_fn=partial(os.sched_setaffinity, 0, mask),
                )
                summary = json.loads(res.stdout.strip().splitlines()[-1])
                runs.append(summary["samples_per_s"])
            points[n] = {"samples_per_s": round(statistics.median(runs), 2), "runs": runs}
            log(f"curve {name}: {n} CPU(s) -> {points[n]['samples_per_s']} samples/s {runs}")
        best = max(p["samples_per_s"] for p in points.values())
        right = min(n for n, p in points.items() if p["samples_per_s"] >= 0.95 * best)
        out[name] = {"points": points, "right_cores": right, "args": args}
    return out


# ------------------------------------------------------------------- agent
class Agent:
    def __init__(
        self, root: Path, policy: str = "coda", tag: str = "", tune: tuple[str, ...] = ()
    ) -> None:
        self.tune = tune
        self.state = root / f"state{tag}"
        self.parent = f"coda-demo-{os.getpid()}{tag}"
        self.policy = policy
        self.logf = root / f"agent{tag}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._store: Store | None = None

    def start(self) -> None:
        from coda.cli.node_commands import spawn_agent

        args = ["--cgroup-parent", self.parent, "--gpus", "1", "--policy", self.policy]
        args += [x for t in self.tune for x in ("--tune", t)]
        self.proc = spawn_agent(self.state, args, self.logf)
        if self._store is None:
            self._store = Store(self.state / "coda.db")

    @property
    def store(self) -> Store:
        if self._store is None:
            raise RuntimeError("the demo's agent has not been started")
        return self._store

    def job(self, job_id: int) -> JobRow:
        row = self.store.job(job_id)
        if row is None:
            raise SystemExit(f"runtime_demo: job {job_id} is not in the agent's store")
        return row

    def submit(self, name: str, cores: int, gpus: int, argv: list[str], model: str = "") -> int:
        spec = JobSpec(argv=argv, name=name, cores=cores, gpus=gpus, model=model)
        return self.store.submit(spec)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=60)

    def cancel_all(self) -> None:
        for r in self.store.jobs(("queued", "starting", "running")):
            self.store.request_cancel(r.id)
        wait(lambda: not self.store.jobs(("starting", "running")), 60)

    def start_time(self, job: int) -> float:
        t: float = next(d["t"] for d in self.store.decisions(200, job) if d["action"] == "start")
        return t


def wait(cond: Callable[[], bool], timeout: float, poll: float = 0.1) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(poll)
    return False


def converged(a: Agent, job_id: int) -> bool:
    return a.job(job_id).phase == "converged"


def allocator(root: Path, curve_out: dict[str, Any], timeout: float) -> dict[str, Any]:
    ncpu = len(os.sched_getaffinity(0))
    a = Agent(root)
    a.start()
    out = {}
    try:
        for name, args in SETTINGS.items():
            jid = a.submit(f"train-{name}", ncpu, 1, [*TRAIN, *args, "--quiet"], model=name)
            ok = wait(partial(converged, a, jid), timeout, 0.25)
            row = a.job(jid)
            moves = [d for d in a.store.decisions(200, jid) if d["action"] == "set-cores"]
            why = moves[-1]["detail"].get("why", {}) if moves else {}
            t_conv = time.time() - a.start_time(jid)
            chosen = (
                len(row.cpus.split(","))
                if "-" not in row.cpus
                else (int(row.cpus.split("-")[1]) - int(row.cpus.split("-")[0]) + 1)
            )
            out[name] = {
                "converged": ok,
                "asked": ncpu,
                "chosen_cores": chosen,
                "curve_right_cores": curve_out.get(name, {}).get("right_cores"),
                "seconds_to_converge": round(t_conv, 1) if ok else None,
                "measured_levels": why.get("levels"),
                "reference": row.reference,
            }
            log(
                f"allocator {name}: chose {chosen} (curve says {out[name]['curve_right_cores']}),"
                f" {out[name]['seconds_to_converge']} s"
            )
            a.cancel_all()
    finally:
        a.stop()
    return out


def seed_learned(state: Path, model: str, cores: int) -> None:
    """Start the agent as if three earlier jobs of ``model`` had converged at ``cores``
    (the allocator part shows how it gets there): the job starts slimmed and only
    measures its reference, so the freed core is there for the co-runner at once."""
    from coda.policy.allocator import LearnedProfiles
    from coda.runtime.agent import LEARNED_KEY
    from coda.runtime.store import Store

    learned = LearnedProfiles()
    for _ in range(learned.confident_after):
        learned.record((model, 1, 1), cores)
    store = Store(state / "coda.db")
    store.set_meta(LEARNED_KEY, json.dumps(learned.to_dict()))
    store.close()


def synthetic_job(a: Agent, contention: float, dnn: int = 1, hog: int = 2) -> list[str]:
    """The test suite's job whose throughput is a known function of its cores and of
    the co-runner's real CFS quota (read from the co-runner's cgroup): immune to the
    machine's speed, so the control loop's own timing shows."""
    cg = Path("/sys/fs/cgroup")
    return [
        sys.executable,
        str(Path(__file__).parent.parent / "tests" / "synthetic_job.py"),
        "--cpuset-file",
        str(cg / "cpuset" / a.parent / f"job-{dnn}" / "cpuset.cpus"),
        "--optimum",
        "1",
        "--base",
        "400",
        "--seconds",
        "600",
        "--contention",
        str(contention),
        "--corunner",
        str(cg / "cpu" / a.parent / f"job-{hog}"),
        "--corunner-cpuset",
        str(cg / "cpuset" / a.parent / f"job-{hog}" / "cpuset.cpus"),
    ]


def contention_run(
    root: Path,
    policy: str,
    observe_s: float,
    tag: str,
    tune: tuple[str, ...] = (),
    synthetic: float | None = None,
) -> dict[str, Any]:
    ncpu = len(os.sched_getaffinity(0))
    a = Agent(root, policy=policy, tag=tag, tune=tune)
    seed_learned(a.state, CONTENDED, 1)
    a.start()
    timeline: list[tuple[float, float | None, float | None]] = []
    try:
        argv = (
            [*TRAIN, *SETTINGS[CONTENDED], "--quiet"]
            if synthetic is None
            else synthetic_job(a, synthetic)
        )
        dnn = a.submit("train", ncpu, 1, argv, model=CONTENDED)
        if not wait(lambda: a.job(dnn).phase == "converged", 300, 0.25):
            return {"error": "allocator did not converge"}
        ref = a.job(dnn).reference
        if ref is None:
            return {"error": "the converged job has no reference throughput"}
        time.sleep(6)
        hog = a.submit("membw", 1, 0, HOG)
        if not wait(lambda: a.job(hog).state == "running", 30):
            return {"error": "the hog found no free core (the job was not slimmed)"}
        t0 = a.start_time(hog)
        end = time.time() + observe_s
        while time.time() < end:
            r, h = a.job(dnn), a.job(hog)
            timeline.append((round(time.time() - t0, 2), r.throughput, h.quota))
            time.sleep(0.25)
        decs = a.store.decisions(500, hog)
        throttles = [
            d for d in decs if d["action"] == "set-quota" and d["component"] == "eliminator"
        ]
        t_thr = throttles[0]["t"] - t0 if throttles else None
        pts = [(t, thr / ref) for t, thr, _ in timeline if thr is not None]
        recovered = None
        if t_thr is not None:
            # Recovered: from here on, the mean over the next 10 s is within 5% of the
            # reference (single windows swing by several % on this shared VM).
            for t, _ in pts:
                ahead = [r for u, r in pts if t <= u <= t + 10]
                if t > t_thr and t + 10 <= pts[-1][0] and statistics.mean(ahead) >= 0.95:
                    recovered = t
                    break
        first = [r for t, r in pts if 2 < t < 8]
        last = [r for t, r in pts if t > pts[-1][0] - 20] if pts else []
        return {
            "policy": policy + (f" ({', '.join(tune)})" if tune else ""),
            "reference": ref,
            "dnn_cores": len(a.job(dnn).cpus.split(",")),
            "hog_cpus": a.job(hog).cpus,
            "slowdown_first_s": round(1 - statistics.mean(first), 3) if first else None,
            "ratio_last_20s": round(statistics.mean(last), 3) if last else None,
            "detect_s": round(t_thr, 2) if t_thr is not None else None,
            "recover_s": recovered,
            "throttle_decisions": len(throttles),
            "final_quota": a.job(hog).quota,
            "timeline": timeline,
        }
    finally:
        a.cancel_all()
        a.stop()


def eliminator(root: Path, observe_s: float, runs: int) -> dict[str, Any]:
    out: dict[str, Any] = {"with": [], "without": []}
    for i in range(runs):
        for key, policy in (("with", "coda"), ("without", "coda-no-eliminator")):
            run = contention_run(root, policy, observe_s, f"-{key}{i}")
            out[key].append(run)
            log(
                f"{policy} run {i + 1}: slowdown {run.get('slowdown_first_s')}, detect "
                f"{run.get('detect_s')} s, recover {run.get('recover_s')} s, last 20 s "
                f"{run.get('ratio_last_20s')}"
            )
    return out


def synthetic(root: Path, observe_s: float) -> dict[str, Any]:
    out = {}
    for key, policy in (("with", "coda"), ("without", "coda-no-eliminator")):
        out[key] = run = contention_run(root, policy, observe_s, f"-syn-{key}", synthetic=0.3)
        log(
            f"synthetic {policy}: slowdown {run.get('slowdown_first_s')}, detect "
            f"{run.get('detect_s')} s, recover {run.get('recover_s')} s, last 20 s "
            f"{run.get('ratio_last_20s')}"
        )
    return out


def solo_run(
    root: Path, tag: str, hog_first: bool, synthetic: bool, probes: bool, observe_s: float
) -> dict[str, Any]:
    """One run of the solo-reference part (see the module's docstring)."""
    ncpu = len(os.sched_getaffinity(0))
    tune = () if probes else ("eliminator.probe_ticks=0",)
    a = Agent(root, policy="coda", tag=tag, tune=tune)
    seed_learned(a.state, CONTENDED, 1)
    a.start()
    timeline: list[tuple[float, float | None, float | None]] = []
    try:
        ids = {"hog": 1, "dnn": 2} if hog_first else {"dnn": 1, "hog": 2}
        argv = (
            synthetic_job(a, 0.3, ids["dnn"], ids["hog"])
            if synthetic
            else [*TRAIN, *SETTINGS[CONTENDED], "--quiet"]
        )
        if hog_first:
            hog = a.submit("membw", 1, 0, HOG)
            if not wait(lambda: a.job(hog).state == "running", 30):
                return {"error": "the hog did not start"}
            time.sleep(3)
        dnn = a.submit("train", ncpu, 1, argv, model=CONTENDED)
        if not wait(lambda: a.job(dnn).phase == "converged", 300, 0.25):
            return {"error": "allocator did not converge"}
        ref_converged = a.job(dnn).reference
        if not hog_first:
            time.sleep(6)
            hog = a.submit("membw", 1, 0, HOG)
            if not wait(lambda: a.job(hog).state == "running", 30):
                return {"error": "the hog found no free core (the job was not slimmed)"}
        t0 = max(a.start_time(hog), a.start_time(dnn))
        end = t0 + observe_s
        while time.time() < end:
            r, h = a.job(dnn), a.job(hog)
            timeline.append((round(time.time() - t0, 2), r.throughput, h.quota))
            time.sleep(0.25)
        decs = [
            d for d in a.store.decisions(500, hog)
            if d["action"] == "set-quota" and d["component"] == "eliminator"
        ]  # fmt: skip
        kinds = [(d["t"] - t0, (d["detail"] or {}).get("decision")) for d in decs]
        throttles = [t for t, k in kinds if k in ("throttle", "fast_path")]
        probe = [t for t, k in kinds if k in ("solo_probe", "probe_end")]
        t_thr = throttles[0] if throttles else None
        # Contended speed: hog first, what the allocator measured beside it (the rows
        # show no throughput before convergence); hog after, the samples from 2 s after
        # it started to the first throttle.
        if hog_first:
            contended = ref_converged
        else:
            during = [x for t, x, _ in timeline if x is not None and 2 < t < (t_thr or observe_s)]
            contended = statistics.median(during) if during else None
        last = [x for t, x, _ in timeline if x is not None and t > timeline[-1][0] - 20]
        lost = probe_lost = 0.0
        for (t1, _, q), (t2, _, _) in zip(timeline, timeline[1:], strict=False):
            cost = (1.0 - (q if q is not None else 1.0)) * (t2 - t1)
            lost += cost
            if probe and probe[0] <= t1 < probe[-1]:
                probe_lost += cost
        return {
            "order": "hog first" if hog_first else "hog after",
            "job": "synthetic" if synthetic else CONTENDED,
            "probes": probes,
            "reference_at_converge": ref_converged,
            "reference_final": a.job(dnn).reference,
            "probe_s": [round(t, 2) for t in probe],
            "detect_s": round(t_thr, 2) if t_thr is not None else None,
            "contended_per_s": round(contended, 1) if contended is not None else None,
            "last_20s_per_s": round(statistics.mean(last), 1) if last else None,
            "hog_lost_core_s": round(lost, 1),
            "probe_lost_core_s": round(probe_lost, 1),
            "final_quota": a.job(hog).quota,
        }
    finally:
        a.cancel_all()
        a.stop()


def solo(root: Path, observe_s: float) -> list[dict[str, Any]]:
    out = []
    for synthetic in (True, False):
        for hog_first, probes in ((True, True), (True, False), (False, True)):
            tag = f"-solo-{int(synthetic)}{int(hog_first)}{int(probes)}"
            run = solo_run(root, tag, hog_first, synthetic, probes, observe_s)
            out.append(run)
            log(f"solo: {json.dumps(run)}")
    return out


def drift(seconds: float) -> dict[str, Any]:
    """The machine's own speed over time: the contended job alone, pinned to one CPU,
    nothing else running; the workload prints its rate about every 5 s."""
    res = subprocess.run(
        [*TRAIN, *SETTINGS[CONTENDED], "--seconds", str(seconds)],
        capture_output=True,
        text=True,
        check=True,
        preexec_fn=lambda: os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}),
    )
    rates = [
        float(line.split(",")[1].split()[0])
        for line in res.stderr.splitlines() + res.stdout.splitlines()
        if line.startswith("train:") and "samples/s" in line
    ]
    out: dict[str, Any] = {"samples_per_s_every_5s": rates}
    if rates:
        m = statistics.mean(rates)
        out.update(
            mean=round(m, 1), min_rel=round(min(rates) / m, 3), max_rel=round(max(rates) / m, 3)
        )
    log(f"drift: {out}")
    return out


def restart(root: Path) -> dict[str, Any]:
    ncpu = len(os.sched_getaffinity(0))
    a = Agent(root, tag="-restart")
    a.start()
    try:
        dnn = a.submit(
            "train",
            ncpu,
            1,
            [*TRAIN, *SETTINGS["light"], "--seconds", "40", "--quiet"],
            model="light-r",
        )
        cpu = a.submit("cpu", 1, 0, ["sleep", "30"])
        # The CPU job starts on the core slimming frees; kill the agent once both run.
        wait(lambda: a.job(cpu).state == "running", 180)
        time.sleep(3)
        from coda.runtime.cgroups import detect

        drv = detect(parent=a.parent)
        before = {j: sorted(drv.pids(f"job-{j}")) for j in (dnn, cpu)}
        a.stop(signal.SIGKILL)
        t_kill = time.time()
        time.sleep(3)
        alive_while_down = {
            j: all(Path(f"/proc/{p}").exists() for p in ps) for j, ps in before.items()
        }
        a.start()
        t_back = time.time()
        wait(lambda: all(a.job(j).state in ("done", "failed", "lost") for j in (dnn, cpu)), 120)
        rows = {j: a.job(j) for j in (dnn, cpu)}
        acts = {j: [d["action"] for d in a.store.decisions(500, j)] for j in (dnn, cpu)}
        after = {j: rows[j].shim_pid for j in rows}
    finally:
        a.cancel_all()
        a.stop()
    return {
        "jobs": {
            str(j): {
                "pids_before_kill": before[j],
                "alive_while_agent_down": alive_while_down[j],
                "state": rows[j].state,
                "exit_code": rows[j].exit_code,
                "launches": rows[j].launches,
                "starts": acts[j].count("start"),
                "adoptions": acts[j].count("adopt"),
                "finishes": acts[j].count("finish"),
                "same_supervisor": after[j] in before[j],
            }
            for j in rows
        },
        "agent_down_s": round(t_back - t_kill, 1),
    }


# ------------------------------------------------------------------ report
def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    for key, style in (("with", "-"), ("without", "--")):
        run = (results["eliminator"].get(key) or [{}])[0]
        if "timeline" not in run:
            continue
        t = [p[0] for p in run["timeline"] if p[1] is not None]
        r = [p[1] / run["reference"] for p in run["timeline"] if p[1] is not None]
        ax1.plot(t, r, style, label=f"{run['policy']}")
        ax2.plot(
            [p[0] for p in run["timeline"]],
            [p[2] for p in run["timeline"]],
            style,
            label=run["policy"],
        )
    ax1.axhline(0.95, color="grey", lw=0.8, ls=":")
    ax1.set_ylabel("training throughput / reference")
    ax1.legend()
    ax2.set_ylabel("hog's CPU quota")
    ax2.set_xlabel("seconds since the memory-bandwidth hog started")
    ax2.legend()
    fig.suptitle("Contention eliminator on real processes (2-CPU machine)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def report(results: dict[str, Any]) -> str:
    lines = ["# Node runtime on real processes", ""]
    lines.append(f"Machine: {os.cpu_count()} CPUs; command: `{' '.join(sys.argv)}`.")
    if "curve" in results:
        lines += [
            "",
            "## Throughput curve vs the allocator's choice",
            "",
            "| setting | samples/s by CPUs | right cores (within 5% of best) | allocator chose | search time |",
            "|---|---|---|---|---|",
        ]
        for name, c in results["curve"].items():
            pts = ", ".join(f"{n}: {p['samples_per_s']}" for n, p in c["points"].items())
            al = results.get("allocator", {}).get(name, {})
            lines.append(
                f"| {name} (`{' '.join(c['args'])}`) | {pts} | {c['right_cores']} | "
                f"{al.get('chosen_cores', '-')} | {al.get('seconds_to_converge', '-')} s |"
            )
    if "eliminator" in results:
        runs = results["eliminator"]["with"] + results["eliminator"]["without"]
        w = runs[0]
        lines += [
            "",
            "## Contention eliminator",
            "",
            f"Setting `{CONTENDED}` at {w.get('dnn_cores')} core (the agent starts from a seeded "
            "learned profile of 1 core: with one data worker a second core adds only the main "
            "process's share, 0-8% here); a memory-bandwidth hog "
            f"(`membw --mib 32`) started on the freed CPU {w.get('hog_cpus')}. Throughput is "
            "relative to the job's reference (measured alone); detect = hog start to the first "
            "throttle written; recover = hog start to the point from which the next 10 s "
            "average within 5% of the reference.",
            "",
            "| policy | slowdown, 2-8 s | detect | recover | throttles | final quota | throughput, last 20 s |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in runs:
            lines.append(
                f"| {r.get('policy')} | {r.get('slowdown_first_s')} | {r.get('detect_s')} s | "
                f"{r.get('recover_s')} s | {r.get('throttle_decisions')} | {r.get('final_quota')} "
                f"| {r.get('ratio_last_20s')} |"
            )
        lines += ["", "![timeline](timeline.png)"]
    if "synthetic" in results:
        lines += [
            "",
            "## Contention eliminator, job with a known sensitivity",
            "",
            "The test suite's synthetic job (`tests/synthetic_job.py`): 400 samples/s at 1 "
            "core, minus 30% x the real co-runner's CPU quota (read from its cgroup), beside "
            "the same real hog; immune to the machine's speed.",
            "",
            "| policy | slowdown, 2-8 s | detect | recover | throttles | final quota | throughput, last 20 s |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in results["synthetic"].values():
            lines.append(
                f"| {r.get('policy')} | {r.get('slowdown_first_s')} | {r.get('detect_s')} s | "
                f"{r.get('recover_s')} s | {r.get('throttle_decisions')} | {r.get('final_quota')} "
                f"| {r.get('ratio_last_20s')} |"
            )
    if "solo" in results:
        lines += [
            "",
            "## A co-runner that came first: solo references",
            "",
            "The memory-bandwidth hog started 3 s before the training job (whose reference is "
            "then measured beside it) or 6 s after it converged. detect = the later start to "
            "the first throttle (a solo probe not counted); contended = the training job's "
            "samples/s beside the hog at full quota (hog first: the reference the allocator "
            "measured; hog after: the median from 2 s after the hog started to the throttle); "
            "last 20 s = mean samples/s; hog lost = core-seconds "
            "under quota 1 (of which the probe's).",
            "",
            "| job | order | probes | reference at converge -> final | probe at | detect | contended | last 20 s | hog lost (probe) | final quota |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in results["solo"]:
            if "error" in r:
                lines.append(f"| error: {r['error']} |")
                continue
            lines.append(
                f"| {r['job']} | {r['order']} | {'on' if r['probes'] else 'off'} | "
                f"{r['reference_at_converge']:.4g} -> {r['reference_final']:.4g} | "
                f"{r['probe_s'] or '-'} | {r['detect_s']} s | {r['contended_per_s']} | "
                f"{r['last_20s_per_s']} | {r['hog_lost_core_s']} ({r['probe_lost_core_s']}) | "
                f"{r['final_quota']} |"
            )
    if "drift" in results:
        d = results["drift"]
        lines += [
            "",
            "## The machine's own drift",
            "",
            f"`{CONTENDED}` alone on one CPU, samples/s about every 5 s: "
            f"{d.get('samples_per_s_every_5s')} (min {d.get('min_rel')}, max "
            f"{d.get('max_rel')} of the mean).",
        ]
    if "restart" in results:
        lines += [
            "",
            "## Agent killed and restarted",
            "",
            f"Agent down {results['restart']['agent_down_s']} s.",
            "",
            "| job | alive while down | state | exit | launches | starts | adoptions | finishes |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for j, r in results["restart"]["jobs"].items():
            lines.append(
                f"| {j} | {r['alive_while_agent_down']} | {r['state']} | {r['exit_code']} | "
                f"{r['launches']} | {r['starts']} | {r['adoptions']} | {r['finishes']} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", default="out/runtime-demo")
    ap.add_argument("--parts", default="curve,allocator,eliminator,synthetic,drift,restart")
    ap.add_argument("--point-s", type=float, default=15.0, help="seconds per curve point")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--observe-s", type=float, default=70.0)
    ap.add_argument("--runs", type=int, default=2, help="eliminator runs per policy")
    ap.add_argument("--timeout", type=float, default=300.0, help="allocator convergence limit")
    ap.add_argument(
        "--render", action="store_true", help="only rewrite report.md from results.json"
    )
    args = ap.parse_args()
    if args.render:
        rendered = json.loads((Path(args.out) / "results.json").read_text())
        (Path(args.out) / "report.md").write_text(report(rendered))
        return
    if os.geteuid() != 0:
        raise SystemExit("runtime_demo: needs root (it creates cgroups)")
    parts = set(args.parts.split(","))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="coda-demo-") as tmp:
        root = Path(tmp)
        if "curve" in parts:
            results["curve"] = curve(SETTINGS, args.point_s, args.repeats)
            save(out, results)
        if "allocator" in parts:
            results["allocator"] = allocator(root, results.get("curve", {}), args.timeout)
            save(out, results)
        if "eliminator" in parts:
            results["eliminator"] = eliminator(root, args.observe_s, args.runs)
            plot(results, out / "timeline.png")
            save(out, results)
        if "synthetic" in parts:
            results["synthetic"] = synthetic(root, args.observe_s)
            save(out, results)
        if "solo" in parts:
            results["solo"] = solo(root, args.observe_s)
            save(out, results)
        if "drift" in parts:
            results["drift"] = drift(60.0)
            save(out, results)
        if "restart" in parts:
            results["restart"] = restart(root)
            log(f"restart: {json.dumps(results['restart'])}")
    save(out, results)
    print(report(results))


def save(out: Path, results: dict[str, Any]) -> None:
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (out / "report.md").write_text(report(results))


if __name__ == "__main__":
    main()
