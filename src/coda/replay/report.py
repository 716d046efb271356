"""A replay's report: ``replay.json`` (every figure) and ``report.md`` (the setting,
one table real against simulated, and where the two differ and why)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from coda.writing import write_text


def _f(v: Any, fmt: str = ".3f") -> str:
    return "—" if v is None else format(v, fmt)


def _median(xs: Any) -> float | None:
    return statistics.median(xs) if isinstance(xs, list) and xs else None


def _range(r: Any) -> str:
    return f" ({r[0]:.3f}-{r[1]:.3f})" if isinstance(r, list) and len(r) == 2 else ""


def _seeds(r: dict[str, Any]) -> str:
    seeds = max((v.get("seeds") or [] for v in r.get("sim", {}).values()), key=len, default=[])
    if len(seeds) < 2:
        return ""
    return (f" CODA's simulated figures are the mean over noise seeds {seeds[0]}-{seeds[-1]} "
            "(plain Slurm's twin has no allocator: one seed); its JCT error is the median over "
            "those seeds of each seed's median over jobs (its range in brackets).")  # fmt: skip


def _stretch(s: dict[str, Any]) -> str:
    if not s.get("jobs"):
        return "no CPU job finished in both"
    return (
        f"{s['jobs']} jobs, p99 {_f(s['stretch_p99'], '.2f')}x, "
        f"max {_f(s['stretch_max'], '.2f')}x, "
        f"over 1.5x {_f(s['stretch_over_1_5x_share'], '.1%')}, "
        f"over 2x {_f(s['stretch_over_2x_share'], '.1%')}"
    )


def markdown(r: dict[str, Any]) -> str:
    s = r["setting"]
    lines = [
        "# CODA on a real Slurm: replay",
        "",
        f"Setting: {s['jobs']} jobs of the {s['trace']}, time-compressed {s['speed']:g}x, "
        f"offered GPU load {s['load']:g} on the test cluster `{s['cluster']}` (declared-big "
        f"nodes, fake GPUs), seed {s['seed']}, submitted with plain `sbatch` as "
        f"{', '.join(s['users'])}. Arrivals span {s['arrival_span_s']:.0f} s. Jobs are "
        "emulated (coda.runtime.workloads.emulated): their speed follows CODA's performance "
        "model for what they are really given; this tests the control stack and the "
        "scheduling, not the hardware.",
        "",
        "| run | simulator policy | effective GPU util (real) | (sim) "
        "| CPU queue delay mean s (real) | (sim) | finished | unfinished | lost "
        "| started twice | JCT error median | start latency s (probes' median) "
        "| twin: start delay s | twin: cycle s |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for mode in ("plain", "coda"):
        if mode not in r:
            continue
        real, sim = r[mode], r["sim"][mode]
        lines.append(
            f"| {'plain Slurm' if mode == 'plain' else 'CODA'} | `{sim['policy']}` | "
            f"{_f(real['gpu_util_effective'])} | {_f(sim['gpu_util_effective'])} | "
            f"{_f(real['cpu_queue_delay_mean_s'], '.1f')} | "
            f"{_f(sim['cpu_queue_delay_mean_s'], '.1f')} | "
            f"{real['jobs_finished']} | {real['jobs_unfinished']} | {real['jobs_lost']} | "
            f"{real['jobs_started_twice']} | "
            f"{_f(real['jct_rel_error_median'])}{_range(real.get('jct_rel_error_range'))} | "
            f"{_f(_median(real.get('start_latency_s')), '.2f')} | "
            f"{_f(sim.get('start_delay_s'), '.2f')} | {_f(sim.get('cycle_period_s'), 'g')} |"
        )
    if "gain_real" in r:
        lines += [
            "",
            f"CODA over plain Slurm, effective GPU utilisation: real "
            f"{_f(r['gain_real'], '+.1%')}, simulated {_f(r['gain_sim'], '+.1%')}." + _seeds(r),
        ]
    if "cpu_stretch_real" in r:
        lines += ["", "Each CPU job's execution (its start line to its end) under CODA over "
                  "the same job's under plain Slurm: " + "; ".join(
                      f"{side} {_stretch(r[f'cpu_stretch_{side}'])}" for side in ("real", "sim")
                  ) + "."]  # fmt: skip
    choice = r.get("plain", {}).get("node_choice") or []
    if choice:
        same = sum(1 for c in choice if c["slurm"] == c["twin"])
        lines += [
            "",
            f"Node choice (plain Slurm's idle cluster, before its run: filler jobs pinned to "
            f"nodes, then one probe): Slurm and its twin `{r['sim']['plain']['policy']}` put "
            f"the probe on the same node in {same} of {len(choice)} scenes ("
            + "; ".join(f"{c['scene']}: Slurm {c['slurm']}, twin {c['twin'] or 'none'}"
                        for c in choice)
            + ").",
        ]  # fmt: skip
    faults = r.get("coda", {}).get("faults") or []
    if faults:
        lines += [
            "",
            "Faults during the CODA run (seconds from the first arrival): "
            + ", ".join(
                f"{f['what']} {f['target']} at {f['t']:.1f}".replace("  ", " ") for f in faults
            )
            + ".",
        ]
    lines += [
        "",
        "What the simulator is told of the real stack, and where the two still differ:",
        "- Start latency: before each run, probe jobs on its idle cluster measure the time "
        "from `sbatch` to the job's own start line (Slurm's scheduler pass, or CODA's "
        f"controller every {s['controller_period_s']:g} s; the prolog, slurmstepd, the job's "
        "start-up). Each twin places a job the instant it fits and starts its work its "
        "probes' median later, holding its GPUs and cores meanwhile. A real job waiting for "
        "CODA's controller's next cycle holds nothing yet, and a probe meets an idle "
        "cluster: under load a start may take longer.",
        f"- Control period: the agents judge a core count over {s['agent_window_s']:g} s "
        "windows and the eliminator acts once per window; the simulated `coda` uses the "
        "same period. After a core change an agent ignores its job for 1 s and then waits "
        "for a whole window, so its allocator steps a window later than one that cuts its "
        "windows at the change: the twin's allocator leaves one window out "
        "(`--settle-windows 1`).",
        "- Slurm's backfill (plain Slurm's twin `slurm`): a pending job's plan begins where "
        "Slurm's will-run test puts it, at the last end of the batch of running jobs (by "
        "their time limits) after which it fits, not at its exact earliest start; shorter "
        "jobs may run on its node until then.",
        "- Slurm's books (both twins, `--grants fixed`): a job holds the cores Slurm "
        "granted it until it ends. The agent narrows a DNN job's cpuset inside its grant, "
        "which frees nothing for the next job; CPU jobs are requeued whole, never shrunk.",
        "- Learning (`--allocator-start request`): the controller learns cores per user "
        "and job name, and the replay names every job apart (r0, r1, ...), so each DNN job "
        "is placed with its request and searches from there; nothing carries over.",
        "- Faults (CODA run): while the controller is down, nothing is placed; while an "
        "agent is down, its node's cores and quotas stay as they were. The simulator has "
        "no faults.",
        "- A requeued CPU job is held by Slurm for a while after its release (BeginTime); "
        "CODA's controller lifts that, a cycle later.",
        "- Effective GPU utilisation is GPU-weighted work done between the first and the last "
        "arrival (the simulator's window), real from the jobs' own progress lines.",
        "- Unfinished: still queued or running when the run stopped (its drain timeout); "
        "their completion times are left out of the JCT error, on both sides.",
        "",
        "Figures: replay.json; the jobs' own output under each run's users' directories.",
    ]
    return "\n".join(lines) + "\n"


def write_report(result: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / "replay.json", json.dumps(result, indent=2, default=str) + "\n")
    write_text(out / "report.md", markdown(result))
