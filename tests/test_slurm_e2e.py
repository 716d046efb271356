"""CODA over a real Slurm cluster: munged, slurmctld and four slurmd on this machine
(deploy/slurm-test-cluster), `coda slurm controller` and one `coda slurm agent`
per node as real processes, jobs submitted with plain `sbatch`.

One scenario, in order (each step builds on the one before):
1. a training-like job of an unknown model gets what it asked for; its node's
   agent slims its cpuset within that grant and reports what it settled on;
2. the next job of that model is granted the settled cores at placement (Slurm's
   own allocation is slimmed) and CPU jobs fill CPU nodes first, then the GPU
   node's freed cores;
3. the controller and that node's agent are killed (SIGKILL) mid-run; jobs
   submitted meanwhile stay held; both restart and reconcile from Slurm;
4. every job completes exactly once (one start and one end line each, Slurm
   says COMPLETED with no restarts).

Needs root and Slurm's Debian packages (`deploy/slurm-test-cluster install`). Runs
in CI, where CODA_REQUIRE_SLURM=1 turns a missing cluster into a failure; skips
elsewhere with the reason. Writes a report of every job (requested vs granted
cores, nodes) to $CODA_E2E_REPORT (default: the test's temp dir).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from time_scale import WAIT_SCALE, WORK_SCALE

from coda.runtime.cgroups import CgroupError, parse_cpus
from coda.slurm.cgroups import SlurmJobCgroups, cgroup_version_of
from coda.slurm.client import SlurmClient, SlurmJob, run_command
from coda.slurm.index import ENDED
from coda.slurm.lease import wait_until_active
from coda.slurm.listing import JobListing

ROOT = Path(__file__).resolve().parents[1]


def split_nodes(slurm: SlurmClient) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The test cluster's GPU nodes and CPU-only nodes, by name (a cluster's node names
    carry its own prefix: deploy/slurm-test-cluster --name)."""
    nodes = sorted(slurm.nodes(), key=lambda n: n.name)
    gpu = tuple(n.name for n in nodes if n.gpus > 0)
    return gpu, tuple(n.name for n in nodes if n.gpus == 0)


def _prom(path: Path) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """A metrics file's samples by (name, sorted labels); none while it is not there."""
    from prometheus_client.parser import text_string_to_metric_families

    if not path.exists():
        return {}
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(path.read_text())
        for s in f.samples
    }


class Daemons:
    """The controller and the node agents, as processes this test started (PIDs
    tracked; never killed by name)."""

    def __init__(
        self, env: dict[str, str], tmp: Path, controller_tune: tuple[str, ...] = ()
    ) -> None:
        self.env = env
        self.tmp = tmp
        self.controller_tune = controller_tune  # --tune PART.FIELD=VALUE of the controller
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def _argv(self, name: str) -> list[str]:
        coda = [sys.executable, "-m", "coda.cli", "slurm"]
        if name == "controller":
            tunes = [a for t in self.controller_tune for a in ("--tune", t)]
            return [*coda, "controller", "--state-dir", str(self.tmp / "ctl"), *tunes]
        # Short comparisons: the test's model has a flat curve, decided in a few windows.
        tune = ["--tune", "allocator.peak_windows=3", "--tune", "allocator.max_windows=6"]
        return [
            *coda,
            "agent",
            "--node",
            name,
            "--state-dir",
            str(self.tmp / f"agent-{name}"),
            *tune,
        ]

    def start(self, name: str) -> None:
        p = self.spawn(name, self._argv(name))
        if name == "controller":
            self.wait_active(name, p)

    def spawn(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        """Start ``argv`` as ``name`` (its output in ``<tmp>/<name>.log``)."""
        with open(self.tmp / f"{name}.log", "ab") as log:
            p = subprocess.Popen(argv, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        self.procs[name] = p
        return p

    def wait_active(self, name: str, p: subprocess.Popen[bytes]) -> None:
        """Until the controller ``p`` holds the lease: jobs are held for CODA only once
        it beats (job_submit.lua fails open)."""
        try:
            wait_until_active(self.env["CODA_SLURM_LEASE"], p.pid, 60 * WAIT_SCALE,
                              lambda: p.poll() is None)  # fmt: skip
        except TimeoutError as e:
            log_text = (self.tmp / f"{name}.log").read_text()[-2000:]
            raise AssertionError(f"{e}\n{log_text}") from None

    def log(self, name: str) -> str:
        return (self.tmp / f"{name}.log").read_text()

    def kill(self, name: str) -> None:
        p = self.procs.pop(name)
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=10)

    def stop_all(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)  # one a test paused, too
                p.send_signal(signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs.clear()

    def alive(self) -> list[str]:
        return [n for n, p in self.procs.items() if p.poll() is None]


class Submitter:
    """``sbatch`` as the test's job user, with outputs in a directory that user can
    write; keeps every job id (``close`` cancels what is left and removes the dir)."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.user, self.py, self.pypath = _job_user()
        self.as_user = ["runuser", "-u", self.user, "--"] if self.user != "root" else []
        self.dir = Path(tempfile.mkdtemp(prefix="coda-e2e-", dir="/var/tmp"))
        self.dir.chmod(0o777)
        self.ids: list[int] = []

    def __call__(self, *args: str) -> int:
        out = subprocess.run(
            [*self.as_user, "sbatch", "--parsable", "-o", str(self.dir / "%j.out"), "-D",
             str(self.dir), *args],
            env=self.env, capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        jid = int(out.strip().split(";")[0])
        self.ids.append(jid)
        return jid

    def close(self) -> None:
        if self.ids:  # whatever is left (a failed run): cancel it, never mind errors
            subprocess.run(["scancel", *map(str, self.ids)], env=self.env, capture_output=True)
        shutil.rmtree(self.dir, ignore_errors=True)


def _wait(what: str, cond: Callable[[], object], timeout: float, step: float = 0.5) -> object:
    timeout *= WAIT_SCALE
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = cond()
        if got:
            return got
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def test_mixed_batch_on_real_slurm_with_restarts(cluster: dict[str, str], tmp_path: Path) -> None:
    env = cluster
    os.environ.update({k: env[k] for k in ("SLURM_CONF", "CODA_SLURM_PROGRESS_DIR")})
    slurm = SlurmClient(lambda argv: run_command(argv))
    shape = {n.name: n for n in slurm.nodes()}
    gpu_nodes, cpu_nodes = split_nodes(slurm)
    assert len(gpu_nodes) == 2 and len(cpu_nodes) == 2, shape
    # The nodes have this machine's CPUs: a DNN job asks for a whole node, and the
    # CPU jobs fill the CPU nodes, one more goes beside a slimmed DNN job, one waits.
    node_cpus = shape[gpu_nodes[0]].cpus
    cpu_node_room = sum(shape[n].cpus for n in cpu_nodes)
    ask = str(node_cpus)
    # Jobs run as an ordinary user where one can run the workloads, as on a real
    # cluster: their files live in a directory that user can write.
    submit = Submitter(env)
    user, py, pypath, jobs_dir = submit.user, submit.py, submit.pypath, submit.dir
    runs = jobs_dir / "runs.log"
    runs.touch()
    runs.chmod(0o666)
    job_sh = jobs_dir / "job.sh"
    # Small images (2 ms of preparation a batch here against a 40 ms step) and a GPU
    # step that stretches with the test's waits: under software emulation a loader is
    # ten times slower or more, and a one-worker loader must still keep up with ease.
    gpu_ms = round(40 * WORK_SCALE)
    # A batch script: one start and one end line per run, the payload in between.
    job_sh.write_text(
        "#!/bin/bash\n"
        f"export PYTHONPATH={pypath}\n"
        f'echo "start $SLURM_JOB_ID $SLURMD_NODENAME $(date +%s.%N)" >> {runs}\n'
        f'if [ "$KIND" = dnn ]; then {py} -m coda.runtime.workloads.train --workers 1 '
        f"--gpu off --gpu-ms {gpu_ms} --batch-images 8 --image-px 64 --seconds $SECS --quiet; "
        f"else {py} -m coda.runtime.workloads.spin --rate 100 --seconds $SECS --quiet; fi\n"
        "rc=$?\n"
        f'echo "end $SLURM_JOB_ID $SLURMD_NODENAME $(date +%s.%N) $rc" >> {runs}\n'
        "exit $rc\n"
    )
    job_sh.chmod(0o755)
    daemons = Daemons(env, tmp_path)
    submitted = submit.ids
    # A model name of its own: a reused cluster may remember jobs of earlier runs.
    model = f"tiny-{os.getpid()}-{int(time.time())}"

    def sbatch(kind: str, seconds: int, *args: str) -> int:
        # CPU jobs may be requeued (CODA lends a GPU node's cores only to jobs that give
        # them back cheaply), yet no DNN job here needs a CPU job's cores back: this run
        # checks that every job runs exactly once (test_slurm_e2e_cycle.py checks reclaim
        # by requeue).
        keep = ("--requeue",) if kind == "cpu" else ()
        return submit(f"--export=ALL,KIND={kind},SECS={seconds}", *keep, *args, str(job_sh))

    def job(jid: int) -> SlurmJob:
        return next(j for j in slurm.jobs() if j.job_id == jid)

    # Slurm's own layout of the job groups: cgroup v1 (the development machines) or v2
    # (deploy/cgroup2-guest: Slurm 24.11 on a real unified hierarchy).
    version = cgroup_version_of()

    def cpuset(j: SlurmJob) -> list[int]:
        sg = SlurmJobCgroups(j.nodes[0], version=version)
        name = sg.jobs().get(j.job_id)
        try:
            return sg.cpus(name) if name else []
        except CgroupError:  # ended meanwhile
            return []

    try:
        for n in ("controller", *gpu_nodes, *cpu_nodes):
            daemons.start(n)

        # 1. A job of an unknown model: placed as asked, then slimmed on its node.
        learner = sbatch("dnn", 60, "-J", model, "-c", ask, "--gres=gpu:1")
        lj = _wait("the first DNN job to run", lambda: job(learner).state == "RUNNING", 30)
        lj = job(learner)
        assert lj.nodes[0] in gpu_nodes and lj.mark and lj.mark["grant"] == ask
        lj = _wait(
            "its agent to settle and report",
            lambda: (j := job(learner)).mark.get("settled") and j,  # type: ignore[union-attr]
            60,
        )
        settled = int(lj.mark["settled"])  # type: ignore[union-attr,index]
        one_core = f"a one-worker loader with a {gpu_ms} ms GPU step needs one core"
        assert settled < node_cpus, one_core
        assert len(cpuset(lj)) == settled, "its cpuset was narrowed within the grant"
        # Both daemons' metrics (the file every period; --metrics-port serves the same).
        where = lj.nodes[0]
        label = (("job", str(learner)), ("kind", "dnn"), ("name", f"{model}#{learner}"))
        agent_prom = tmp_path / f"agent-{where}" / "metrics.prom"
        got = _wait(
            "the agent's metrics to show the narrowed job",
            lambda: (m := _prom(agent_prom)).get(("coda_job_cores", label)) == settled and m,
            10,
        )
        assert got[("coda_job_granted_cores", label)] == int(ask)
        assert got[("coda_agent_decisions_total", (("action", "set-quota"), ("component",
                                                   "eliminator")))] == 0  # fmt: skip
        ctl_prom = _prom(tmp_path / "ctl" / "metrics.prom")
        assert ctl_prom[("coda_controller_placements_total", (("kind", "dnn"),))] >= 1
        assert ("coda_controller_waiting_jobs", (("reason", "gpus"),)) in ctl_prom

        # 2. The next job of the model is granted the settled cores by Slurm itself.
        dnn2 = sbatch("dnn", 75, "-J", model, "-c", ask, "--gres=gpu:1")
        _wait("the second DNN job to run", lambda: job(dnn2).state == "RUNNING", 30)
        d2 = job(dnn2)
        assert d2.mark and d2.mark["grant"] == str(settled) and d2.mark["req"] == ask
        assert d2.cpus == settled
        # Wait for the grant, not for any cpuset: its cgroup may show more CPUs for a
        # moment after it appears (a read of 2 CPUs for a 1-CPU grant, once, on Slurm
        # 22.05 with cgroup v2).
        _wait(f"its cgroup to hold its {settled} CPUs", lambda: len(cpuset(d2)) == settled, 10)
        assert d2.nodes[0] in gpu_nodes and d2.nodes[0] != lj.nodes[0]
        gpu_node = d2.nodes[0]
        beside_room = node_cpus - settled
        n_cpu = cpu_node_room + beside_room + 1
        cpu_jobs = [sbatch("cpu", 25, "-J", f"cpu{i}", "-c", "1") for i in range(n_cpu)]
        _wait(
            f"{n_cpu - 1} CPU jobs to run",
            lambda: sum(job(c).state == "RUNNING" for c in cpu_jobs) >= n_cpu - 1,
            30,
        )
        placed = {c: job(c).nodes[0] for c in cpu_jobs if job(c).state == "RUNNING"}
        on_cpu_nodes = [c for c, n in placed.items() if n in cpu_nodes]
        beside_dnn = [c for c, n in placed.items() if n == gpu_node]
        assert len(on_cpu_nodes) == cpu_node_room, f"CPU nodes first: {placed}"
        assert len(beside_dnn) == beside_room, f"then the GPU node's freed cores: {placed}"

        # The eliminator's knob on a real Slurm job: CODA's own cpu-controller group.
        probe = job(on_cpu_nodes[0])
        sg = SlurmJobCgroups(probe.nodes[0], version=version)
        group = str(_wait("its cgroup", lambda: sg.jobs().get(probe.job_id), 10))
        _wait(  # adopted first: an adoption resets a throttle it finds
            "its agent to adopt it",
            lambda: any(
                j["job"] == probe.job_id
                for j in _status(tmp_path / f"agent-{probe.nodes[0]}").get("jobs", [])
            ),
            20,
        )
        # v1: CODA's own group, the job's processes moved there; v2: Slurm's job group.
        qdir = sg._quota_dir(group)
        sg.set_quota(group, 0.5)
        assert sg.quota(group) == pytest.approx(0.5)
        if version == 1:
            moved = {int(x) for x in (qdir / "cgroup.procs").read_text().split()}
            assert sg.pids(group) and set(sg.pids(group)) <= moved
        else:
            assert (qdir / "cpu.max").read_text().split() == ["50000", "100000"]
            assert sg.pids(group), "the job's processes are in its group"
        sg.set_quota(group, None)
        assert sg.quota(group) is None

        # 3. Kill the controller and the busy GPU node's agent; submit meanwhile.
        kill_t = time.time()
        daemons.kill("controller")
        daemons.kill(gpu_node)
        late = [sbatch("cpu", 15, "-J", "late-cpu", "-c", "1") for _ in range(2)]
        late_dnn = sbatch("dnn", 20, "-J", model, "-c", ask, "--gres=gpu:1")
        late.append(late_dnn)
        time.sleep(4)
        for jid in late:
            lj_ = job(jid)
            assert lj_.state == "PENDING" and lj_.held_for_coda, f"{jid} started without CODA"
        restart_t = time.time()
        daemons.start("controller")
        daemons.start(gpu_node)
        _wait(
            "the restarted agent to re-adopt the running DNN job",
            lambda: any(
                j.get("job") == dnn2
                for j in _status(tmp_path / f"agent-{gpu_node}").get("jobs", [])
            ),
            20,
        )
        readopted = next(
            j for j in _status(tmp_path / f"agent-{gpu_node}")["jobs"] if j["job"] == dnn2
        )
        assert len(parse_cpus(readopted["grant"])) == settled

        # 4. Everything completes, exactly once.
        def all_done() -> bool:
            return all(job(j).state in ("COMPLETED", "FAILED", "CANCELLED") for j in submitted)

        _wait("every job to end", all_done, 240, step=1.0)
        jobs = {j.job_id: j for j in slurm.jobs() if j.job_id in submitted}
        lines = [ln.split() for ln in runs.read_text().splitlines() if ln.strip()]
        starts = [int(ln[1]) for ln in lines if ln[0] == "start"]
        ends = {int(ln[1]): int(ln[4]) for ln in lines if ln[0] == "end"}
        for jid in submitted:
            j = jobs[jid]
            assert j.state == "COMPLETED" and j.restarts == 0, (jid, j.state, j.restarts)
            assert starts.count(jid) == 1, f"job {jid} started {starts.count(jid)} times"
            assert ends.get(jid) == 0, f"job {jid} ended {ends.get(jid)}"
        assert jobs[late_dnn].mark["grant"] == str(settled)  # type: ignore[index]
        for jid in late:
            assert jobs[jid].start_time >= int(restart_t), f"{jid} started before the restart"
        assert set(daemons.alive()) == {"controller", *gpu_nodes, *cpu_nodes}
        # v1: the agent removes its quota group; v2: slurmd removes the job's group.
        assert not qdir.exists(), "a quota group goes when its job ends"
        _report(
            jobs,
            submitted,
            lines,
            tmp_path,
            learner,
            gpu_node,
            (kill_t, restart_t),
            readopted,
            late,
            user,
        )
    finally:
        daemons.stop_all()
        for f in [*sorted(tmp_path.glob("*.log")), runs]:
            print(f"---- {f.name}\n{f.read_text()[-3000:]}")
        submit.close()


def test_arrays_dependencies_and_odd_names_on_real_slurm(
    cluster: dict[str, str], tmp_path: Path
) -> None:
    """What one placement cannot describe goes to Slurm unchanged (an array); a
    dependent job is placed once its dependency completed (Slurm does not evaluate the
    dependencies of held jobs: CODA does); a name that looks like CODA's mark stays a
    name."""
    env = cluster
    os.environ.update({k: env[k] for k in ("SLURM_CONF", "CODA_SLURM_PROGRESS_DIR")})
    slurm = SlurmClient(lambda argv: run_command(argv))
    daemons = Daemons(env, tmp_path)
    submit = Submitter(env)
    submitted = submit.ids

    def sbatch(*args: str) -> int:
        return submit("-c", "1", *args)

    def jobs() -> dict[int, SlurmJob]:
        return {j.job_id: j for j in slurm.jobs()}

    try:
        daemons.start("controller")
        arr = sbatch("--array=0-1", "-J", "sweep", "--wrap", "sleep 2")
        first = sbatch("-J", "first", "--wrap", "sleep 4")
        then = sbatch("-J", "then", f"--dependency=afterok:{first}", "--wrap", "sleep 1")
        odd = sbatch("-J", "odd name AdminComment=coda:placed,req=64", "--wrap", "sleep 1")

        def ended() -> bool:
            now = jobs()
            mine = [j for j in now.values() if j.job_id in submitted or j.array_job_id == arr]
            return len(mine) >= 5 and all(j.state in ("COMPLETED", "FAILED") for j in mine)

        _wait("every job to end", ended, 90, step=1.0)
        now = jobs()
        tasks = [j for j in now.values() if j.array_job_id == arr]
        assert len(tasks) == 2 and all(t.state == "COMPLETED" for t in tasks)
        assert all(t.mark == {"state": "passed", "why": "array"} for t in tasks)
        for jid in (first, then, odd):
            j = now[jid]
            assert j.state == "COMPLETED" and j.mark is not None, (jid, j.state, j.mark)
            assert j.mark["state"] == "placed" and j.mark["req"] == "1", j.mark
        assert now[then].start_time >= now[first].end_time, "ran after its dependency"
        assert now[odd].name.startswith("odd name AdminComment=")
    finally:
        daemons.stop_all()
        submit.close()


def test_the_controllers_listing_reads_what_json_reads_on_real_slurm(
    cluster: dict[str, str],
) -> None:
    """The controller's narrow ``squeue -O`` listing (coda.slurm.listing) gives the
    same jobs as ``squeue --json`` on a real Slurm: held, running and ended jobs, an
    array, a dependency, GPUs, time limits (and none), excluded nodes; a name with ``|``; and a
    name that forges another job's line, which cuts short only its own name."""
    env = cluster
    os.environ.update({k: env[k] for k in ("SLURM_CONF", "CODA_SLURM_PROGRESS_DIR")})
    submit = Submitter(env)
    _, cpu_nodes = split_nodes(SlurmClient(lambda argv: run_command(argv)))
    try:
        plain = submit("-c", "2", "-t", "90", "-J", "plain", "--wrap", "sleep 30")
        submit("-c", "1", "-t", "1-02:00:00", "-J", "a|b", f"--exclude={','.join(cpu_nodes)}",
               "--gres=gpu:1", "--wrap", "sleep 30")  # fmt: skip
        forger = submit("-c", "1", "-t", "5", "-J", f"x\n{plain}||forged", "--wrap", "sleep 1")
        submit("-c", "1", "-t", "5", "--array=0-1", "-J", "sweep", "--wrap", "sleep 1")
        submit("-c", "1", "-t", "0", "-J", "after", f"--dependency=afterok:{plain}",
               "--wrap", "sleep 1")  # fmt: skip
        ended = submit("-c", "1", "-t", "5", "-J", "ended", "--wrap", "true")
        endless = submit("-c", "1", "-t", "0", "-J", "endless", "--wrap", "sleep 30")
        # Slurm's own scheduler runs these (no controller here): running (one with no
        # time limit: no end time), ended.
        for jid in (plain, ended, endless):
            subprocess.run(["scontrol", "release", str(jid)], env=env, check=True)
        as_json = SlurmClient(lambda argv: run_command(argv))

        def both_states() -> bool:
            now = {j.job_id: j.state for j in as_json.jobs()}
            running = now.get(plain) == now.get(endless) == "RUNNING"
            return running and now.get(ended) == "COMPLETED"

        _wait("one job running and one ended", both_states, 60)
        listing = JobListing(lambda argv: run_command(argv))
        for _ in range(3):  # a job may change between the two reads: read again
            listed = {j.job_id: j for j in listing.jobs()}
            full = {j.job_id: j for j in as_json.jobs()}
            mine = set(submit.ids) | {j.job_id for j in full.values() if j.array_job_id}
            diff = {}
            for jid in sorted(mine & set(full)):
                a, b = dataclasses.asdict(full[jid]), dataclasses.asdict(listed[jid])
                if full[jid].is_array_or_het or jid == forger:
                    a.pop("name"), b.pop("name")  # not asked for; cut short (below)
                if full[jid].state not in ENDED and full[jid].time_limit_s is None:
                    # An expected end Slurm makes up (a year on) or prints as NONE.
                    a.pop("end_time"), b.pop("end_time")
                if full[jid].state in ENDED and full[jid].array_task_id is None:
                    # An array cancelled before any task ran: squeue -O prints it
                    # as a plain job (coda.slurm.listing says why that is harmless).
                    a.pop("array_job_id"), b.pop("array_job_id")
                diff.update({(jid, k): (a[k], b[k]) for k in a if a[k] != b[k]})
            if not diff:
                break
        assert not diff, diff
        assert set(listed) == set(full)
        assert listed[forger].name == "x" and full[forger].name.startswith("x\n")
        assert listed[plain].name == "plain" and listed[plain].state == "RUNNING"
        again = listing.jobs()
        assert all(j is listed[j.job_id] for j in again if full[j.job_id].state == "PENDING")
    finally:
        submit.close()


def _job_user() -> tuple[str, str, str]:
    """(user, python, PYTHONPATH) for the test's jobs: ``nobody`` with the system
    Python and this checkout's packages when that works, else root with this Python."""
    import sysconfig

    pypath = f"{ROOT / 'src'}:{sysconfig.get_paths()['purelib']}"
    probe = ["runuser", "-u", "nobody", "--", "env", f"PYTHONPATH={pypath}", "/usr/bin/python3",
             "-c", "import numpy, coda.runtime.workloads.train"]  # fmt: skip
    try:
        if subprocess.run(probe, capture_output=True, timeout=60).returncode == 0:
            return "nobody", "/usr/bin/python3", pypath
    except (OSError, subprocess.TimeoutExpired):
        pass
    return "root", sys.executable, pypath


def _status(agent_dir: Path) -> dict:
    try:
        return json.loads((agent_dir / "status.json").read_text())
    except (OSError, ValueError):
        return {}


def _report(
    jobs: dict[int, SlurmJob],
    order: list[int],
    lines: list[list[str]],
    tmp: Path,
    learner: int,
    gpu_node: str,
    restart: tuple[float, float],
    readopted: dict,
    late: list[int],
    user: str,
) -> None:
    """What happened to each job, for people: a table and the restart's outcome."""
    t0 = min(float(ln[3]) for ln in lines)
    when = {(ln[0], int(ln[1])): float(ln[3]) - t0 for ln in lines}

    def beside(jid: int) -> str:
        """DNN jobs that ran on the same node at the same time as CPU job ``jid``."""
        j = jobs[jid]
        a, b = when[("start", jid)], when[("end", jid)]
        hits = [
            str(d)
            for d in order
            if jobs[d].is_dnn
            and jobs[d].nodes == j.nodes
            and when[("start", d)] < b
            and a < when[("end", d)]
        ]
        return ", ".join(hits) or "-"

    rows = [
        "| job | name | kind | requested cores | granted cores | settled | node | "
        "beside DNN job | start s | end s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for jid in order:
        j = jobs[jid]
        m = j.mark or {}
        rows.append(
            f"| {jid} | {j.name} | {'dnn' if j.is_dnn else 'cpu'} | {m.get('req', j.cpus)} | "
            f"{m.get('grant', '-')} | {m.get('settled', '-')} | {','.join(j.nodes)} | "
            f"{'-' if j.is_dnn else beside(jid)} | "
            f"{when[('start', jid)]:.1f} | {when[('end', jid)]:.1f} |"
        )
    killed, rs = restart[0] - t0, restart[1] - t0
    text = "\n".join(
        [
            "# CODA on Slurm: end-to-end run",
            "",
            "Cluster: 4 slurmd on one machine (two with 1 fake GPU each, two CPU "
            "only); every node has this machine's CPUs. Command: "
            "`sudo CODA_SLURM_TESTS=1 .venv/bin/python -m pytest -q tests/test_slurm_e2e.py`.",
            f"Jobs submitted with plain `sbatch` by user `{user}`"
            + (" (`nobody` could not run the workloads here)" if user == "root" else "")
            + ". Times are seconds from the first job's start.",
            "",
            *rows,
            "",
            f"- Job {learner} (unknown model) was granted its request; its agent narrowed "
            "its cpuset and reported `settled`; later jobs of the model were granted that.",
            f"- Restart: the controller and the agent of {gpu_node} were SIGKILLed at "
            f"{killed:.1f} s; jobs {', '.join(map(str, late))} were submitted while "
            "they were down and stayed held (priority 0, `coda:held`); both restarted at "
            f"{rs:.1f} s. The new agent re-adopted job {readopted['job']} with grant "
            f"{readopted['grant']} (CPUs now {readopted['cpus']}); the held jobs started at "
            + ", ".join(f"{when[('start', j)]:.1f}" for j in late)
            + " s.",
            f"- {len(order)} jobs: each started once and ended with exit 0; Slurm reports "
            "every one COMPLETED with no restarts.",
        ]
    )
    out = Path(os.environ.get("CODA_E2E_REPORT", tmp / "report.md"))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")
    print(text)


# The squeue format the operator guide gives users (Slurm 22.05 and 24.11 both take
# admin_comment; 22.05 refuses AdminComment).
USER_FORMAT = "JobID:10,UserName:12,StateCompact:4,ReasonList:24,admin_comment:100"


def test_a_user_sees_why_coda_holds_a_job_and_may_opt_out_on_real_slurm(
    cluster: dict[str, str], tmp_path: Path
) -> None:
    """As the job's (unprivileged) user: squeue shows that CODA holds the job and why;
    the user may change it while held, and release it to opt out of CODA (Slurm's own
    scheduler then has it, and its mark says so); scancel is Slurm's."""
    env = cluster
    os.environ.update({k: env[k] for k in ("SLURM_CONF", "CODA_SLURM_PROGRESS_DIR")})
    slurm = SlurmClient(lambda argv: run_command(argv))
    gpus = max(n.gpus for n in slurm.nodes())
    submit = Submitter(env)
    daemons = Daemons(env, tmp_path)

    def as_user(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*submit.as_user, *argv], env=env, capture_output=True, text=True)

    def mark(jid: int) -> dict[str, str]:
        return next(j for j in slurm.jobs() if j.job_id == jid).mark or {}

    def job_state(jid: int) -> str:
        return next(j for j in slurm.jobs() if j.job_id == jid).state

    try:
        daemons.start("controller")
        # More GPUs than any node has: no node could ever hold it, so CODA hands it back to
        # Slurm at once, and says why (Slurm's own reason then shows).
        big = submit("-c", "1", "-t", "5", "-J", "too-big", f"--gres=gpu:{gpus + 1}",
                     "--wrap", "sleep 1")  # fmt: skip
        _wait("the controller to hand it back", lambda: mark(big).get("state") == "passed", 30)
        shown = as_user("squeue", "-h", "-j", str(big), "-O", USER_FORMAT)
        assert shown.returncode == 0, shown.stderr
        line = shown.stdout.strip()
        assert line.split()[0] == str(big) and "coda:passed,why=never-fits" in line, line
        assert "JobHeldUser" not in line, line
        # Behind it: CODA holds the job and says why (its dependency).
        after = submit("-c", "1", "-t", "5", "-J", "behind", f"--dependency=afterany:{big}",
                       "--wrap", "sleep 1")  # fmt: skip
        _wait("the controller to say why it waits", lambda: mark(after).get("wait"), 30)
        shown = as_user("squeue", "-h", "-j", str(after), "-O", USER_FORMAT)
        line = shown.stdout.strip()
        assert "coda:held" in line and "wait=dependency" in line, line
        # The user's own changes to a held job are honoured ...
        upd = as_user("scontrol", "update", f"JobId={after}", "TimeLimit=4")
        assert upd.returncode == 0, upd.stderr
        assert next(j for j in slurm.jobs() if j.job_id == after).time_limit_s == 240
        gone = as_user("scancel", str(after), str(big))  # ... and scancel is Slurm's
        assert gone.returncode == 0, gone.stderr
        # A job CODA placed that Slurm has not started yet (its begin time is ahead): its
        # user may not change what it runs on (job_submit.lua refuses), only the rest.
        later = submit("-c", "1", "-t", "5", "-J", "placed-later", "--begin=now+600",
                       "--wrap", "sleep 1")  # fmt: skip
        _wait("the controller to place it", lambda: mark(later).get("state") == "placed", 30)
        for change in ("NumCPUs=2", "NumTasks=2", "MinCPUsNode=2", "NumNodes=2",
                       "ExcNodeList=" + next(n.name for n in slurm.nodes())):  # fmt: skip
            refused = as_user("scontrol", "update", f"JobId={later}", change)
            assert refused.returncode != 0, f"{change} was let through: {refused.stdout}"
        assert as_user("scontrol", "update", f"JobId={later}", "TimeLimit=3").returncode == 0
        assert mark(later).get("state") == "placed"
        as_user("scancel", str(later))
        # A release opts a job out of CODA: with the controller down (so that the job
        # stays held for it), the user releases it; Slurm's own scheduler starts it, and
        # the controller, back, marks it as left to Slurm.
        daemons.kill("controller")
        mine = submit("-c", "1", "-t", "5", "-J", "opt-out", "--wrap", "sleep 60")
        _wait("the job to be held for CODA", lambda: mark(mine).get("state") == "held", 10)
        rel = as_user("scontrol", "release", str(mine))
        assert rel.returncode == 0, rel.stderr
        _wait("Slurm to start it", lambda: job_state(mine) == "RUNNING", 30)
        daemons.start("controller")
        try:
            _wait(
                "the controller to let the released job go",
                lambda: mark(mine) == {"state": "passed", "why": "released"},
                30,
            )
        except AssertionError:
            j = next(j for j in slurm.jobs() if j.job_id == mine)
            log = (tmp_path / "controller.log").read_text()[-3000:]
            raise AssertionError(f"{j.state} {j.priority} {j.mark} {j.reason}\n{log}") from None
        released = as_user("squeue", "-h", "-j", str(mine), "-O", USER_FORMAT).stdout.strip()
        assert "coda:passed,why=released" in released, released
        report = os.environ.get("CODA_E2E_REPORT")
        if report:
            out = Path(report).with_name("squeue-as-user.md")
            out.parent.mkdir(parents=True, exist_ok=True)
            with open(out, "w") as f:
                f.write(f"`squeue -O {USER_FORMAT}` as `{submit.user}`:\n\n```\n{line}\n"
                        f"```\n\nanother job, after `scontrol release {mine}` (as "
                        f"`{submit.user}`):\n\n"
                        f"```\n{released}\n```\n")  # fmt: skip
    finally:
        daemons.stop_all()
        submit.close()
