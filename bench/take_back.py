# ruff: noqa: E501  (markdown table rows in report())
"""Requeue or suspend: what taking a CPU job's cores back for a DNN job costs the CPU
job, on the real kernel, through a `coda agent` of each kind (`--take-back`).

    sudo .venv/bin/python bench/take_back.py [--work-s 20] [--preempt-at 6] [--dnn-s 8]
                                             [--runs 3] [--out out/take-back]

Each run: one agent on this machine's CPUs (all of them, one fake GPU); a CPU job asks
for every core and does ``--work-s`` seconds of single-threaded CPU work, writing how
much it has done; ``--preempt-at`` seconds after it starts, a DNN job (every core and
the GPU, ``sleep --dnn-s``) arrives and takes its cores back. With requeue the CPU job
is killed and queued again, and restarts from nothing once the DNN job ends; with
suspend it is frozen (the cgroup freezer) and thawed where it was. A loose harm budget
lets the agent take so young a job (as the kernel tests do).

Writes ``--out``/results.json and report.md (docs/results/take-back.md is that report).
Needs root and cgroup v1 or v2 with cpuset, cpu and the freezer."""

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
from pathlib import Path
from typing import Any

from coda.runtime.jobrow import FINAL
from coda.runtime.store import JobRow, JobSpec, Store

LOOSE_HARM = {"harm.share": "0.99", "harm.initial_s": "1e9", "harm.cap_s": "1e9"}

# Does ``argv[1]`` s of CPU work; writes "start", its progress (CPU s) every 0.2 s and
# "done" to ``argv[2]``: a killed run's last line is the work it lost.
CPU_WORK = (
    "import sys, time\n"
    "target, log = float(sys.argv[1]), open(sys.argv[2], 'a')\n"
    "log.write('start\\n'); log.flush()\n"
    "t0, last, x = time.process_time(), 0.0, 0\n"
    "while (done := time.process_time() - t0) < target:\n"
    "    for _ in range(20000):\n"
    "        x += 1\n"
    "    if done - last >= 0.2:\n"
    "        log.write(f'{done:.3f}\\n'); log.flush(); last = done\n"
    "log.write(f'done {done:.3f}\\n'); log.flush()\n"
)


def wait(cond: Callable[[], bool], timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.05)
    raise SystemExit(f"take_back: timed out after {timeout:g} s waiting for {what}")


def lost_work(progress: Path) -> tuple[float, int]:
    """(CPU seconds of work done by runs that did not finish, runs started)."""
    lost, runs, last = 0.0, 0, 0.0
    for line in progress.read_text().splitlines():
        if line == "start":
            lost, runs, last = lost + last, runs + 1, 0.0
        elif line.startswith("done"):
            last = 0.0
        else:
            last = float(line)
    return lost + last, runs


def one_run(
    mode: str, work_s: float, preempt_at: float, dnn_s: float, root: Path
) -> dict[str, Any]:
    from coda.cli.node_commands import spawn_agent

    root.mkdir(parents=True, exist_ok=True)
    state = root / f"state-{mode}"
    parent = f"coda-tb-{os.getpid()}-{mode}"
    args = ["--cgroup-parent", parent, "--gpus", "1", "--period", "0.2", "--take-back", mode,
            "--stop-jobs-on-exit"]  # fmt: skip
    args += [a for k, v in LOOSE_HARM.items() for a in ("--tune", f"{k}={v}")]
    proc = spawn_agent(state, args, root / f"agent-{mode}.log")
    store: Store | None = None
    try:
        store = Store(state / "coda.db")
        cores = len(os.sched_getaffinity(0))
        progress = root / f"progress-{mode}"
        progress.write_text("")
        cpu = store.submit(JobSpec(argv=[sys.executable, "-c", CPU_WORK, str(work_s), str(progress)],
                                   name="cpu-work", cores=cores))  # fmt: skip

        def row(jid: int) -> JobRow:
            assert store is not None
            r = store.job(jid)
            assert r is not None
            return r

        wait(lambda: progress.read_text().startswith("start"), 60, "the CPU job to start")
        time.sleep(preempt_at)
        dnn = store.submit(JobSpec(argv=["sleep", str(dnn_s)], name="train", cores=cores, gpus=1))
        wait(lambda: row(dnn).state == "running", 60, "the DNN job to start")
        wait(lambda: row(cpu).state in FINAL, work_s * 3 + dnn_s + 120, "the CPU job to end")
        c, d = row(cpu), row(dnn)
        if c.state != "done":
            raise SystemExit(f"take_back: the CPU job ended {c.state}: {c.message}")
        assert d.start_t is not None and c.end_t is not None
        lost, runs = lost_work(progress)
        acts = [x["action"] for x in store.decisions(100, cpu)]
        return {
            "mode": mode,
            "cpu_jct_s": c.end_t - c.submit_t,
            "cpu_lost_cpu_s": lost,
            "cpu_runs": runs,
            "cpu_launches": c.launches,
            "taken_back": "suspend"
            if "suspend" in acts
            else "preempt"
            if "preempt" in acts
            else "none",
            "dnn_wait_s": d.start_t - d.submit_t,
        }
    finally:
        if store is not None:
            store.close()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def report(results: dict[str, Any]) -> str:
    s = results["setting"]
    lines = [
        "<!-- Regenerate: sudo .venv/bin/python bench/take_back.py --out out/take-back && cp out/take-back/report.md docs/results/take-back.md -->",
        "",
        "# Requeue or suspend: what taking its cores back costs a CPU job",
        "",
        f"Setting: one `coda agent` on this machine's {s['cores']} CPUs (one fake GPU), {s['kernel']}, cgroup v{s['cgroup']}. "
        f"A CPU job asks for every core and does {s['work_s']:g} s of single-threaded CPU work; {s['preempt_at']:g} s after it starts "
        f"a DNN job asks for every core and the GPU and runs {s['dnn_s']:g} s, so the agent takes the CPU job's cores back: "
        "`--take-back requeue` kills it and queues it again (it restarts from nothing), `--take-back suspend` freezes it (the cgroup "
        f"freezer) and thaws it where it was. A loose harm budget lets the agent take so young a job. {s['runs']} runs each; medians, "
        "with the worst run in brackets.",
        "",
        "| take-back | CPU job's JCT s | CPU work lost s | runs of the CPU job | DNN job waited s |",
        "|---|---:|---:|---:|---:|",
    ]

    def med(rs: list[dict[str, Any]], key: str) -> str:
        vals = [float(r[key]) for r in rs]
        return f"{statistics.median(vals):.1f} ({max(vals):.1f})"

    for mode in ("requeue", "suspend"):
        rs = results["runs"][mode]
        lines.append(
            f"| {mode} | {med(rs, 'cpu_jct_s')} | {med(rs, 'cpu_lost_cpu_s')} | {med(rs, 'cpu_runs')} | {med(rs, 'dnn_wait_s')} |"
        )
    lines += [
        "",
        "The DNN job waits the same either way (a control period or two): freezing is as quick as killing. The suspended job "
        "keeps its memory while frozen, which a requeued one gives back; on a node short of memory that is the price of the "
        "work it keeps. The policy prices a suspension as it prices a requeue (the work since the job's start, or its last "
        "checkpoint), so it takes no more jobs for being able to suspend them.",
        "",
        "Data: `out/take-back/results.json`.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work-s", type=float, default=20.0)
    ap.add_argument("--preempt-at", type=float, default=6.0)
    ap.add_argument("--dnn-s", type=float, default=8.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("out/take-back"))
    a = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("take_back: needs root (cgroups)")
    for name, v in (("--work-s", a.work_s), ("--preempt-at", a.preempt_at), ("--dnn-s", a.dnn_s)):
        if not 0 < v <= 3600:
            raise SystemExit(f"take_back: {name} must be in (0, 3600], not {v}")
    if not 1 <= a.runs <= 20:
        raise SystemExit(f"take_back: --runs must be 1-20, not {a.runs}")
    from coda.runtime.cgroups import detect

    results: dict[str, Any] = {
        "setting": {
            "work_s": a.work_s,
            "preempt_at": a.preempt_at,
            "dnn_s": a.dnn_s,
            "runs": a.runs,
            "cores": len(os.sched_getaffinity(0)),
            "kernel": os.uname().release,
            "cgroup": detect().version,
        },  # fmt: skip
        "runs": {"requeue": [], "suspend": []},
    }
    with tempfile.TemporaryDirectory(prefix="coda-take-back-") as tmp:
        for i in range(a.runs):
            for mode in ("requeue", "suspend"):  # interleaved: drift hits both alike
                r = one_run(mode, a.work_s, a.preempt_at, a.dnn_s, Path(tmp) / f"run{i}")
                results["runs"][mode].append(r)
                print(
                    f"run {i + 1}/{a.runs} {mode}: JCT {r['cpu_jct_s']:.1f} s, lost {r['cpu_lost_cpu_s']:.1f} s, DNN waited {r['dnn_wait_s']:.1f} s",
                    flush=True,
                )
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (a.out / "report.md").write_text(report(results))
    print(report(results))


if __name__ == "__main__":
    main()
