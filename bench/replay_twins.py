"""What each thing the simulated twins are told of the real stack changes, against one
recorded replay: the twins run again, from the replay's own output, with each setting
on and off; the real runs are read, never rerun.

    .venv/bin/python bench/replay_twins.py out/replay-full   # a `coda replay --out` dir

For each run (plain Slurm, CODA) and each combination of policy (plain Slurm only:
`fifo`, the paper's baseline with backfill for each queue's head and best fit by GPUs,
or `slurm`, every queued job planned and Slurm's node choice), timing (none; the probes'
median latency as a start delay; CODA only: its controller's cycle simulated, with the
rest of the latency as the delay), control period (the simulator's 10 s or the agents'
window; CODA only), reclaim with grants (CODA only: elastic books with shrink or
requeue, or Slurm's fixed books with requeue) and where the allocator starts (CODA
only: a shape's learned count, or every job's request) and the windows the allocator
leaves out after a core change (CODA only: 0, or 1 as a settling agent), one row:
effective GPU utilisation, CPU queue delay and the median JCT error against the real
run, over several noise seeds (a replay's 120 jobs make one simulation sensitive to
small changes: one seed is one sample; CODA's 72 rows take a few minutes). The row
marked `replay` has the settings `coda replay` used (its CODA twin runs the same seeds
by default); `--replay-only` runs those rows alone. A Markdown table goes to stdout,
then the simulated and real gains with the replay's settings.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import math
import re
import statistics
import sys
from pathlib import Path
from typing import Any, NoReturn

from coda.replay import outcome as O
from coda.replay.plan import ReplayJob, plan
from coda.replay.run import (
    SIM_ALLOCATOR_START,
    SIM_GRANTS,
    SIM_POLICY,
    SIM_RECLAIM,
    SIM_SETTLE_WINDOWS,
    ReplayConfig,
    Timing,
    sim_timing,
)
from coda.runtime.progress import read_trusted
from coda.study.config import DEFAULT_POLICY, MAX_SEED, RunConfig
from coda.study.run import prepare, run_policy

MAX_REPLAY_JSON = 64 << 20  # bytes; a replay.json is far smaller
MAX_UTILISATION = 1.5


def _fail(msg: str) -> NoReturn:
    one_line = msg.replace("\r", "\\r").replace("\n", "\\n")
    print(f"replay_twins: {one_line}", file=sys.stderr)
    raise SystemExit(2)


def _number(x: Any, what: str) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        raise ValueError(f"{what}: not a finite number: {x!r}")
    return float(x)


def _seconds(x: Any, what: str) -> float:
    if _number(x, what) <= 0:
        raise ValueError(f"{what}: not a positive number of seconds: {x!r}")
    return float(x)


def _cluster(x: Any) -> str:
    """A test cluster's compact spec (ClusterShape.spec), never a path: the simulator
    would read a node list from a file of that name."""
    if not isinstance(x, str) or not re.fullmatch(
        r"[0-9]{1,2}x[0-9]g[0-9]{1,3}c(,[0-9]{1,2}x0g[0-9]{1,3}c)?", x
    ):
        raise ValueError(f"setting.cluster: not a test cluster's spec: {x!r}")
    return x


def _count(x: Any, what: str) -> int:
    if isinstance(x, bool) or not isinstance(x, int) or x < 0:
        raise ValueError(f"{what}: not a count: {x!r}")
    return x


def _utilisation(x: Any, what: str) -> float:
    """A share of the GPUs' time. A real run's progress may outrun its nominal speed a
    little, not by half."""
    if not 0.0 <= _number(x, what) <= MAX_UTILISATION:
        raise ValueError(f"{what}: not within 0-{MAX_UTILISATION:g}: {x!r}")
    return float(x) + 0.0  # -0.0 reads as 0.0


def _jcts(x: Any, what: str) -> dict[int, float]:
    """Job index (as ``coda replay`` writes it: a plain decimal) -> completion time. A
    time may be negative (its end is read from the wall clock, which may step); the JCT
    error leaves such jobs out."""
    out = {}
    for k, v in x.items():
        if not (isinstance(k, str) and re.fullmatch(r"0|[1-9][0-9]{0,8}", k)):
            raise ValueError(f"{what}: {k[:20]!r} is not a job index")
        out[int(k)] = _number(v, f"{what}[{k!r}]")
    return out


def _real(r: dict[str, Any], mode: str) -> O.RunMetrics:
    """A recorded real run's figures, each checked (replay.json is read, not trusted)."""
    delay = r["cpu_queue_delay_mean_s"]
    return O.RunMetrics(
        _utilisation(r["gpu_util_effective"], f"{mode}.gpu_util_effective"),
        None if delay is None else _number(delay, f"{mode}.cpu_queue_delay_mean_s"),
        _count(r["jobs_finished"], f"{mode}.jobs_finished"),
        _count(r["jobs_lost"], f"{mode}.jobs_lost"),
        _count(r["jobs_started_twice"], f"{mode}.jobs_started_twice"),
        _jcts(r["jct_s"], f"{mode}.jct_s"),
    )


def _f(v: float | None, fmt: str) -> str:
    """A figure, or n/a where there is none (no CPU job started; no job finished in both
    runs): not a zero."""
    return "n/a" if v is None else format(v, fmt)


def _same_jobs(recorded: Any, jobs: list[ReplayJob]) -> None:
    """The trace's jobs, as this version plans them, are the ones replay.json lists
    (older replays list none): else the twins would not be the replay's."""
    if recorded is None:
        return
    if not isinstance(recorded, list) or len(recorded) != len(jobs):
        raise ValueError("jobs: not the jobs of its replay-trace.csv")
    for i, job in enumerate(jobs):
        if recorded[i] != job.record():
            raise ValueError(f"jobs[{i}]: not job {i} of its replay-trace.csv as planned now")


def _latency(r: dict[str, Any], mode: str) -> list[float]:
    """The probes' start latencies (none: the replay probed none, or predates them)."""
    latency = r.get("start_latency_s")
    if latency is None:
        return []
    if not isinstance(latency, list):
        raise ValueError(f"{mode}.start_latency_s: not a list: {latency!r:.40}")
    return [_number(x, f"{mode}.start_latency_s") for x in latency]


def _read_json(path: Path) -> Any:
    """A regular file of bounded size, read without blocking on a FIFO or a device."""
    raw = read_trusted(path, size=MAX_REPLAY_JSON + 1)
    if raw is None:
        raise ValueError(f"{path.name} is missing or not a regular file")
    if len(raw) > MAX_REPLAY_JSON:
        raise ValueError(f"{path.name} is over {MAX_REPLAY_JSON >> 20} MiB")
    return json.loads(raw.decode("utf-8"))


def _timings(cfg: ReplayConfig, mode: str, latency: list[float]) -> list[Timing]:
    """No timing; the probes' median latency as a start delay alone; and (CODA) the
    controller's cycle simulated, with the rest of the latency as the delay (its probes
    waited half a cycle)."""
    median = statistics.median(latency or [0.0])
    timings = [Timing(), Timing(max(0.0, median))]
    if mode == "coda":
        p = cfg.period_s
        timings.append(Timing(max(0.0, median - p / 2), None, p))
    return list(dict.fromkeys(timings))  # no latency probed: no delay twice over


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("replay_dir", type=Path, help="a `coda replay --out` directory")
    ap.add_argument("--seeds", type=int, default=5, choices=range(1, 51), metavar="N",
                    help="noise seeds per setting (sample noise; 1-50)")  # fmt: skip
    ap.add_argument(
        "--replay-only",
        action="store_true",
        help="only the settings coda replay uses (one row per run, quick)",
    )
    args = ap.parse_args(argv)
    out: Path = args.replay_dir
    try:
        d = _read_json(out / "replay.json")
        s = d["setting"]
        config = RunConfig(trace=str(out / "replay-trace.csv"), format="csv",
                           cluster=_cluster(s["cluster"]), load=s["load"], seed=s["seed"],
                           policy=dataclasses.replace(DEFAULT_POLICY, estimates="time-limits"),
                           warmup=0.0)  # fmt: skip
        prepared = prepare(config)
        # The controller's period (older replays did not record it: the default then).
        cfg = ReplayConfig(
            window_s=_seconds(s["agent_window_s"], "setting.agent_window_s"),
            period_s=_seconds(
                s.get("controller_period_s", ReplayConfig.period_s), "setting.controller_period_s"
            ),
        )
        modes = [m for m in ("plain", "coda") if m in d]
        if not modes:
            raise ValueError("no real run (plain or coda) in replay.json")
        reals = {m: _real(d[m], m) for m in modes}
        latencies = {m: _latency(d[m], m) for m in modes}
        seed = _count(s["seed"], "setting.seed")
        if seed + args.seeds - 1 > MAX_SEED:
            raise ValueError(f"setting.seed: {seed} + {args.seeds} seeds pass {MAX_SEED}")
        jobs = plan(prepared)
        recorded = _count(s["jobs"], "setting.jobs")
        if recorded != len(jobs):
            raise ValueError(
                f"setting.jobs: {recorded} jobs recorded, its replay-trace.csv has {len(jobs)}"
            )
        _same_jobs(d.get("jobs"), jobs)
        for mode, real in reals.items():
            if real.jct_s and max(real.jct_s) >= len(jobs):
                raise ValueError(f"{mode}.jct_s: job {max(real.jct_s)} is not in the trace")
        head = f"{len(jobs)} jobs, {s['cluster']}, {_number(s['speed'], 'setting.speed'):g}x"
        for mode in modes:  # the timings the twins will run with must be valid ones
            for timing in _timings(cfg, mode, latencies[mode]):
                prepared.config.varied(
                    policy={
                        "start_delay_s": timing.start_delay_s,
                        "control_period_s": cfg.window_s,
                    },
                    simulation={"cycle_period_s": timing.cycle_period_s},
                )
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError,
            ArithmeticError) as e:  # fmt: skip
        _fail(f"{out}: not a replay's output ({e})")
    seeds = [seed + k for k in range(args.seeds)]
    print(f"Replay {out}: {head}, seed {seed}; "
          f"twins over noise seeds {seeds[0]}..{seeds[-1]} (the workload stays the replay's): "
          "mean, and the JCT error's median over seeds with its range.\n")  # fmt: skip
    print("| run | policy | start delay s | cycle s | control period s | reclaim | grants "
          "| allocator start | settle windows | eff. GPU util (sim) | (real) "
          "| CPU queue delay s (sim) | (real) | JCT error median | range | |")  # fmt: skip
    print("|---|---|---:|---:|---:|---|---|---|---:|---:|---:|---:|---:|---:|---|---|")
    plain_util: dict[bool, float] = {}  # plain Slurm's twin, with the replay's settings or not
    twin_gain: float | None = None
    for mode in modes:
        real = reals[mode]
        used = sim_timing(cfg, mode, latencies[mode])
        timings = _timings(cfg, mode, latencies[mode])
        periods: list[float | None] = [None, cfg.window_s] if mode == "coda" else [None]
        # (grants, reclaim): fixed grants need a reclaim that requeues.
        books = ([("elastic", "shrink"), ("elastic", "requeue"), ("fixed", "requeue")]
                 if mode == "coda" else [(SIM_GRANTS[mode], SIM_RECLAIM[mode])])  # fmt: skip
        starts = ["learned", "request"] if mode == "coda" else [SIM_ALLOCATOR_START[mode]]
        settles = [0, 1] if mode == "coda" else [SIM_SETTLE_WINDOWS[mode]]
        policies = ["coda"] if mode == "coda" else ["fifo", "slurm"]
        for policy, base, period, (grants, reclaim), start, settle in itertools.product(
            policies, timings, periods, books, starts, settles
        ):
            timing = dataclasses.replace(base, control_period_s=period)
            used_here = timing == used and reclaim == SIM_RECLAIM[mode]
            used_here = used_here and policy == SIM_POLICY[mode] and grants == SIM_GRANTS[mode]
            used_here = used_here and start == SIM_ALLOCATOR_START[mode]
            used_here = used_here and settle == SIM_SETTLE_WINDOWS[mode]
            if args.replay_only and not used_here:
                continue
            runs, errs = [], []
            for seed in seeds if mode == "coda" else seeds[:1]:
                c = prepared.config.varied(
                    seed=seed,
                    policy={"reclaim": reclaim, "allocator_start": start, "settle_windows": settle,
                            "start_delay_s": timing.start_delay_s,
                            "control_period_s": timing.control_period_s},
                    simulation={"grants": grants, "cycle_period_s": timing.cycle_period_s},
                )  # fmt: skip
                res = run_policy(dataclasses.replace(prepared, config=c), policy)
                m = O.sim_metrics(jobs, res.jobs, res.summary, timing.start_delay_s)
                runs.append(m)
                err = O.jct_rel_error_median(real, m)
                if err is not None:
                    errs.append(err)
            twin = O.mean_of(runs)
            util = twin.gpu_util_effective
            if mode == "plain":
                plain_util[used_here] = util
            elif used_here and plain_util.get(True):
                twin_gain = util / plain_util[True] - 1
            err_range = f"{min(errs):.3f}-{max(errs):.3f}" if errs else "n/a"
            print(f"| {mode} | {policy} | {timing.start_delay_s:.2f} | "
                  f"{timing.cycle_period_s:g} | "
                  f"{period or 10:g} | {reclaim} | {grants} | {start} | {settle} | "
                  f"{util:.3f} | {real.gpu_util_effective:.3f} | "
                  f"{_f(twin.cpu_queue_delay_mean_s, '.1f')} | "
                  f"{_f(real.cpu_queue_delay_mean_s, '.1f')} | "
                  f"{_f(statistics.median(errs) if errs else None, '.3f')} | {err_range} | "
                  f"{'replay' if used_here else ''} |")  # fmt: skip
    if "plain" in reals and "coda" in reals:
        real_plain, sim_plain = reals["plain"].gpu_util_effective, plain_util.get(True, 0.0)
        real_gain = reals["coda"].gpu_util_effective / real_plain - 1 if real_plain else math.inf
        if twin_gain is None or not (math.isfinite(real_gain) and math.isfinite(twin_gain)):
            print(f"\nNo gain: plain Slurm's effective GPU utilisation is {real_plain:.3g} "
                  f"(real), {sim_plain:.3g} (simulated).")  # fmt: skip
        else:
            # No share of a zero real gain: the difference alone.
            off = (f"off by {abs(twin_gain - real_gain) / abs(real_gain):.0%} of the real one"
                   if real_gain else f"{100 * twin_gain:+.1f} points off")  # fmt: skip
            print(
                f"\nCODA over plain Slurm with the replay's settings: simulated "
                f"{twin_gain:+.1%}, real {real_gain:+.1%}; the simulated gain is {off}."
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
