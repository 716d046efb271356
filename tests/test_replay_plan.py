"""The replay's plan and figures (coda.replay.plan, coda.replay.outcome), without Slurm:
the jobs the real stack gets are the simulator's, time-compressed with whole-minute
limits; sbatch commands carry no shell; a job's own lines give its starts, end and
work in the window; lost and started-twice jobs are counted from them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from coda.replay import outcome as O
from coda.replay.plan import ClusterShape, ReplayJob, compress, load_table, plan, prepare_replay
from coda.replay.stack import sbatch_argv

USERS = ["coda-u1", "coda-u2", "coda-u3"]


@pytest.fixture(scope="module")
def planned(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[ReplayJob], object]:
    table = compress(load_table(None, None, 0, 30), 30, 300.0, USERS)
    prepared = prepare_replay(
        table, ClusterShape(2, 2, 5, 28), tmp_path_factory.mktemp("r"), 0, 0.9
    )
    return plan(prepared), prepared


def test_compression_divides_times_and_rounds_limits_up_to_minutes() -> None:
    t = load_table(None, None, 0, 50)
    c = compress(t, 50, 300.0, USERS)
    order = np.argsort(t.submit, kind="stable")[:50]
    assert len(c) == 50 and c.submit[0] == 0.0
    assert np.allclose(c.submit, (t.submit[order] - t.submit[order][0]) / 300.0)
    assert np.all(c.duration >= 5.0)
    assert np.all(c.time_limit % 60 == 0) and np.all(c.time_limit >= 60)
    assert np.all(c.time_limit >= c.duration)
    assert set(c.user or []) <= set(USERS)


BAD = [(0, 10.0, USERS), (5, 0.5, USERS), (5, float("nan"), USERS), (5, 10.0, [])]


@pytest.mark.parametrize(("jobs", "speed", "users"), BAD)
def test_bad_replay_settings_are_refused(jobs: int, speed: float, users: list[str]) -> None:
    with pytest.raises(ValueError):
        compress(load_table(None, None, 0, 10), jobs, speed, users)


def test_the_plan_is_the_simulators_workload_job_by_job(planned: tuple) -> None:
    jobs, prepared = planned
    w = prepared.workload
    assert [j.idx for j in jobs] == list(range(len(w.jobs)))
    for j in jobs:
        assert j.submit_s == w.jobs.submit[j.idx] and j.work_s == w.work[j.idx]
        assert (j.kind == "dnn") == (w.jobs.gpus[j.idx] > 0)
        assert j.time_limit_min * 60 == w.jobs.time_limit[j.idx]
        if j.kind == "dnn":
            assert j.model in w.profiles.models and j.gpus_pn >= 1
        assert j.user in USERS
    assert prepared.config.policy.estimates == "time-limits"


def test_sbatch_runs_the_script_with_options_as_arguments(planned: tuple, tmp_path: Path) -> None:
    jobs, _ = planned
    dnn = next(j for j in jobs if j.kind == "dnn")
    cpu = next(j for j in jobs if j.kind == "cpu")
    script = tmp_path / "job.sh"
    a = sbatch_argv(dnn, script, tmp_path, 56.0, 1.0)
    assert a[:5] == ["runuser", "-u", dnn.user, "--", "sbatch"]
    assert f"--gres=gpu:{dnn.gpus_pn}" in a and "--no-requeue" in a
    assert a[a.index("-t") + 1] == str(dnn.time_limit_min)
    assert a[a.index(str(script)) + 1] == "dnn" and a[a.index("--model") + 1] == dnn.model
    b = sbatch_argv(cpu, script, tmp_path, 56.0, 1.0)
    assert "--requeue" in b and not any(x.startswith("--gres") for x in b)
    assert b[b.index("--checkpoint") + 1] == str(tmp_path / f"{cpu.name}.ckpt")
    assert "--wrap" not in a + b and "-w" not in a + b
    # Pinned (the node-choice scenes' fillers): -w before the script, not after it.
    c = sbatch_argv(cpu, script, tmp_path, 56.0, 1.0, nodelist="n2")
    assert c[c.index("-w") + 1] == "n2" and c.index("-w") < c.index(str(script))


def _job(idx: int, kind: str = "dnn", submit: float = 0.0, work: float = 10.0) -> ReplayJob:
    gpus = 2 if kind == "dnn" else 0
    return ReplayJob(idx, f"r{idx}", "coda-u1", submit, kind, gpus, 1, gpus, 4,
                     "ResNet50" if kind == "dnn" else "", work, 0.0, 1)  # fmt: skip


def _lines(path: Path, t0: float, rows: list[tuple[str, float, float]]) -> None:
    with open(path, "a") as f:
        f.write("slurmstepd: some message of Slurm's\n{not json\n")
        for event, t, done in rows:
            f.write(json.dumps({"event": event, "wall": t0 + t, "done": done}) + "\n")


def test_a_jobs_lines_give_its_starts_end_and_work_in_the_window(tmp_path: Path) -> None:
    t0 = 1.7e9
    out = tmp_path / "r0.out"
    # Started at 2, requeued at 5 with no checkpoint, started again at 7, done at 17.
    _lines(out, t0, [("start", 2, 0), ("progress", 4, 2), ("start", 7, 0),
                     ("progress", 12, 5), ("end", 17, 10)])  # fmt: skip
    o = O.Outcome(0)
    O.read_output(out, t0, o)
    O.finish(o, _job(0))
    assert o.starts == [2.0, 7.0] and o.end == 17.0 and o.done == 10.0
    # 2 s of work done twice over [2, 4] (lost) and 10 over [7, 17]; window [0, 12]:
    assert O.work_in(o.progress, 0.0, 12.0) == pytest.approx(2.0 + 5.0)
    o.slurm_state, o.slurm_restarts = "COMPLETED", 1
    m = O.real_metrics([_job(0, submit=1.0), _job(1, "cpu", submit=12.0)], {0: o}, gpus=4)
    assert m.jobs_started_twice == 0 and m.jobs_finished == 1
    assert m.jobs_lost == 1  # job 1 left no lines
    assert m.jct_s == {0: 16.0}
    assert m.gpu_util_effective == pytest.approx(2 * O.work_in(o.progress, 1.0, 12.0) / (4 * 11.0))


def test_a_job_still_running_when_the_run_stops_is_unfinished_not_lost() -> None:
    running = O.Outcome(0, starts=[1.0], slurm_state="RUNNING")
    failed = O.Outcome(1, starts=[1.0], slurm_state="FAILED")
    gone = O.Outcome(2, starts=[1.0], slurm_state="UNKNOWN")
    m = O.real_metrics(
        [_job(0), _job(1, "cpu"), _job(2, "cpu")], {0: running, 1: failed, 2: gone}, 2
    )
    assert (m.jobs_unfinished, m.jobs_lost, m.jobs_finished) == (1, 2, 0)


def test_a_start_no_requeue_explains_counts_as_started_twice(tmp_path: Path) -> None:
    o = O.Outcome(0, starts=[1.0, 3.0], end=9.0, slurm_state="COMPLETED", slurm_restarts=0)
    m = O.real_metrics([_job(0)], {0: o}, gpus=2)
    assert m.jobs_started_twice == 1


def test_an_unreadable_or_hostile_output_file_gives_no_lines(tmp_path: Path) -> None:
    o = O.Outcome(0)
    O.read_output(tmp_path / "absent.out", 0.0, o)
    bad = tmp_path / "bad.out"
    bad.write_bytes(b'{"event": "start", "wall": "nan"}\n{"event": "end", "wall": 1e999}\n'
                    b'\xff\xfe\n{"event": "end", "wall": 5, "done": -3}\n')  # fmt: skip
    O.read_output(bad, 0.0, o)
    assert o.starts == [] and o.done == 0.0


def test_errors_and_gain() -> None:
    real = O.RunMetrics(0.5, 1.0, 2, 0, 0, {0: 10.0, 1: 20.0})
    sim = O.RunMetrics(0.4, 1.0, 2, 0, 0, {0: 11.0, 1: 20.0})
    assert O.jct_rel_error_median(real, sim) == pytest.approx(0.05)
    assert O.gain(sim, real) == pytest.approx(0.25)
    assert O.gain(O.RunMetrics(0.0, None, 0, 0, 0, {}), real) is None


def test_jobs_that_cannot_fit_the_test_cluster_are_left_out_and_counted() -> None:
    from coda.replay.plan import fitting

    t = load_table(None, None, 0, 300)
    small = ClusterShape(1, 1, 2, 4)
    kept, left = fitting(t, small)
    assert left > 0 and len(kept) + left == len(t)
    assert np.all(-(-kept.cores // kept.nodes) <= 4) and np.all(kept.nodes == 1)
    assert np.all(-(-kept.gpus // kept.nodes) <= 2)


def test_an_empty_trace_is_refused_in_one_line() -> None:
    t = load_table(None, None, 0, 10)
    with pytest.raises(ValueError, match="no jobs"):
        compress(t.take(np.array([], dtype=int)), 5, 10.0, USERS)


def test_the_twins_are_told_the_measured_start_latency_and_codas_period() -> None:
    from coda.replay.run import ReplayConfig, Timing, sim_timing

    cfg = ReplayConfig(window_s=2.0)
    assert sim_timing(cfg, "plain", [0.9, 0.5, 0.7, 3.0, 0.6]) == Timing(0.7)
    assert sim_timing(cfg, "coda", [1.2, 1.6, 1.4]) == Timing(1.4, 2.0)
    assert sim_timing(cfg, "coda", []) == Timing(0.0, 2.0)  # no probes: no delay
    assert sim_timing(cfg, "plain", [-0.3]) == Timing(0.0)  # a clock step: never < 0


def test_a_start_delay_moves_every_simulated_end_and_first_line(planned: tuple) -> None:
    from coda.replay.run import Timing, run_sim

    jobs, prepared = planned
    base = run_sim(prepared, "plain")
    late = run_sim(prepared, "plain", Timing(1.5))
    a = O.sim_metrics(jobs, base.jobs, base.summary)
    b = O.sim_metrics(jobs, late.jobs, late.summary, 1.5)
    # Jobs end later: by the delay, typically, plus waiting behind delayed jobs (a job may
    # gain a little where a launching co-runner draws no bandwidth yet), and never
    # sooner than the delay plus its work at full speed.
    assert set(a.jct_s) == set(b.jct_s)
    assert sorted(b.jct_s[i] - a.jct_s[i] for i in a.jct_s)[len(a.jct_s) // 2] >= 1.5 - 1e-9
    work = {j.idx: j.work_s for j in jobs}
    assert all(b.jct_s[i] >= 1.5 + work[i] - 1e-6 for i in b.jct_s)
    # Queue delay is measured to the job's first line: at least the delay.
    assert b.cpu_queue_delay_mean_s is not None and a.cpu_queue_delay_mean_s is not None
    assert b.cpu_queue_delay_mean_s >= a.cpu_queue_delay_mean_s + 1.5 - 1e-9
    assert b.gpu_util_effective < a.gpu_util_effective
    assert late.summary["config"]["start_delay_s"] == 1.5
    # CODA's twin runs its controls at the agents' period.
    coda = run_sim(prepared, "coda", Timing(1.5, 2.0, 1.0))
    assert coda.summary["config"]["control_period_s"] == 2.0
    assert coda.summary["config"]["cycle_period_s"] == 1.0
    # Placed only at the controller's cycles: whole seconds.
    placed = coda.jobs["start"][np.isfinite(coda.jobs["start"])]
    assert np.allclose(placed, np.round(placed))
    # ...and takes cores back from CPU jobs as the Slurm controller does: by requeueing.
    # Both twins are told Slurm's books: a grant holds until the job ends, and no job
    # starts from what another (named apart) settled on.
    for twin in (coda, late):
        assert twin.summary["config"]["reclaim"] == "requeue"
        assert twin.summary["config"]["grants"] == "fixed"
        assert twin.summary["config"]["allocator_start"] == "request"
    # A twin's seed moves its sample noise only: the same jobs, arrivals and shapes.
    other = run_sim(prepared, "coda", Timing(1.5, 2.0, 1.0), seed=3)
    assert other.summary["config"]["seed"] == 3
    assert np.array_equal(other.jobs["submit"], coda.jobs["submit"])
    assert np.array_equal(other.jobs["cores_requested"], coda.jobs["cores_requested"])


def test_the_report_shows_the_start_latency_the_twin_was_given() -> None:
    from coda.replay.report import markdown

    run = {"gpu_util_effective": 0.5, "cpu_queue_delay_mean_s": 3.0, "jobs_finished": 2,
           "jobs_unfinished": 0, "jobs_lost": 0, "jobs_started_twice": 0,
           "jct_rel_error_median": 0.05, "start_latency_s": [0.7, 0.8]}  # fmt: skip
    sim = {"policy": "slurm", "gpu_util_effective": 0.55, "cpu_queue_delay_mean_s": 2.5,
           "start_delay_s": 0.7, "cycle_period_s": 0.0}  # fmt: skip
    r = {"setting": {"jobs": 2, "trace": "t", "speed": 300.0, "load": 0.9, "cluster": "c",
                     "seed": 0, "users": ["u"], "arrival_span_s": 5.0,
                     "controller_period_s": 1.0, "agent_window_s": 2.0},
         "plain": run, "sim": {"plain": sim}}  # fmt: skip
    text = markdown(r)
    assert "start latency s (probes' median)" in text and "twin: cycle s" in text
    assert "| 0.050 | 0.75 | 0.70 | 0 |" in text
    run["jct_rel_error_range"] = [0.04, 0.09]
    sim["seeds"] = [0]
    r["gain_real"], r["gain_sim"] = 0.1, 0.08
    r["coda"] = run
    r["sim"]["coda"] = {**sim, "policy": "coda", "seeds": [0, 1, 2]}
    text = markdown(r)
    assert "| 0.050 (0.040-0.090) | 0.75 | 0.70 | 0 |" in text
    assert "mean over noise seeds 0-2" in text  # CODA's, not plain Slurm's one
    assert "holding its GPUs and cores meanwhile" in text
    assert "Node choice" not in text  # no scenes probed
    run["node_choice"] = [{"scene": "a", "slurm": "n1", "twin": "n1"},
                          {"scene": "b", "slurm": "n2", "twin": ""}]  # fmt: skip
    text = markdown(r)
    assert "twin `slurm` put the probe on the same node in 1 of 2 scenes" in text
    assert "(a: Slurm n1, twin n1; b: Slurm n2, twin none)" in text


def test_the_twin_over_seeds_is_their_mean_and_each_job_s_median() -> None:
    a = O.RunMetrics(0.5, 2.0, 3, 0, 0, {0: 10.0, 1: 20.0, 2: 30.0})
    b = O.RunMetrics(0.7, 4.0, 2, 1, 0, {0: 14.0, 1: 22.0})
    c = O.RunMetrics(0.6, None, 3, 0, 0, {0: 12.0, 1: 40.0, 2: 31.0})
    m = O.mean_of([a, b, c])
    assert m.gpu_util_effective == pytest.approx(0.6)
    assert m.cpu_queue_delay_mean_s == pytest.approx(3.0)
    assert m.jct_s == {0: 12.0, 1: 22.0}  # job 2 did not finish in every seed
    assert m.jobs_finished == 2 and m.jobs_lost == 1
    with pytest.raises(ValueError):
        O.mean_of([])


def test_the_replay_compares_each_cpu_jobs_execution_on_both_sides() -> None:
    from coda.replay.report import markdown

    plain = O.RunMetrics(0.5, 1.0, 3, 0, 0, {}, cpu_exec_s={0: 100.0, 1: 50.0, 2: 10.0})
    coda = O.RunMetrics(0.6, 1.0, 3, 0, 0, {}, cpu_exec_s={0: 120.0, 1: 110.0, 3: 5.0})
    s = O.cpu_stretch(plain, coda)
    # Jobs 0 and 1 finished in both: 1.2x and 2.2x.
    assert s["jobs"] == 2 and s["stretch_max"] == pytest.approx(2.2)
    assert s["stretch_over_2x_share"] == pytest.approx(0.5)
    # The twin over seeds: each CPU job's median execution, jobs of every seed only.
    m = O.mean_of([coda, O.RunMetrics(0.6, 1.0, 3, 0, 0, {}, cpu_exec_s={0: 140.0, 1: 90.0})])
    assert m.cpu_exec_s == {0: 130.0, 1: 100.0}
    run = {"gpu_util_effective": 0.5, "cpu_queue_delay_mean_s": 3.0, "jobs_finished": 2,
           "jobs_unfinished": 0, "jobs_lost": 0, "jobs_started_twice": 0,
           "jct_rel_error_median": 0.05, "start_latency_s": [0.7]}  # fmt: skip
    sim = {"policy": "slurm", "gpu_util_effective": 0.55, "cpu_queue_delay_mean_s": 2.5,
           "start_delay_s": 0.7, "cycle_period_s": 0.0, "seeds": [0]}  # fmt: skip
    r = {"setting": {"jobs": 2, "trace": "t", "speed": 300.0, "load": 0.9, "cluster": "c",
                     "seed": 0, "users": ["u"], "arrival_span_s": 5.0,
                     "controller_period_s": 1.0, "agent_window_s": 2.0},
         "plain": run, "coda": run, "sim": {"plain": sim, "coda": {**sim, "policy": "coda"}},
         "gain_real": 0.1, "gain_sim": 0.1, "cpu_stretch_real": s,
         "cpu_stretch_sim": O.cpu_stretch(plain, plain)}  # fmt: skip
    text = markdown(r)
    assert "real 2 jobs, p99 2.19x, max 2.20x, over 1.5x 50.0%, over 2x 50.0%" in text
    assert "sim 3 jobs, p99 1.00x, max 1.00x, over 1.5x 0.0%, over 2x 0.0%" in text
