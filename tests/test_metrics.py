"""Prometheus metrics through prometheus_client (coda.runtime.metrics): the agent's
and the Slurm controller's collectors, the atomic textfile, and the HTTP server that
answers in the caller's thread, scraped for real and parsed back with the client
library's own parsers."""

from __future__ import annotations

import gzip
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from coda.cli import main
from coda.runtime import metrics
from coda.runtime.metrics import (
    MetricsServer,
    agent_registry,
    render,
    write_textfile,
)
from coda.slurm.client import SlurmClient
from coda.slurm.controller import Controller
from coda.slurm.metrics import controller_registry
from tests.test_slurm_controller import FakeSlurm


# ------------------------------------------------------------------ a fake agent
def fake_job(row_id: int, name: str, kind: str = "cpu", cpus: int = 2, **kw: Any) -> Any:
    job = SimpleNamespace(job_id=name, kind=kind, cores=kw.get("cores", cpus), quota=0.5)
    return SimpleNamespace(
        row_id=row_id,
        job=job,
        cpus=list(range(cpus)),
        throughput=kw.get("throughput"),
        stalled=kw.get("stalled", False),
    )


def fake_agent(*jobs: Any, node: bool = True) -> Any:
    return SimpleNamespace(
        ticks=7,
        last_tick_s=0.25,
        node=SimpleNamespace(cores=16, free_cores=10, gpus=2, free_gpus=1, bw_gbps=0.0, bw_used=0.0)
        if node
        else None,
        jobs=SimpleNamespace(running={m.row_id: m for m in jobs}),
        decisions=SimpleNamespace(
            counters={"scheduler:start": 3, "allocator:set_cores": 2, "quota_up": 9}
        ),
        source=SimpleNamespace(info={}),
        lock=threading.Lock(),
    )


def families(text: str) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


# What the agent exported before prometheus_client: dashboards rely on it.
AGENT_METRICS = {
    "coda_agent_ticks": ("counter", "Control periods run."),
    "coda_agent_tick_seconds": ("gauge", "Duration of the last control period's work."),
    "coda_node_cores": ("gauge", "Cores the agent manages."),
    "coda_node_free_cores": ("gauge", "Cores no job holds."),
    "coda_node_gpus": ("gauge", "GPUs on the node."),
    "coda_node_free_gpus": ("gauge", "GPUs no job holds."),
    "coda_job_cores": ("gauge", "Cores (cpuset size) a running job holds."),
    "coda_job_requested_cores": ("gauge", "Cores a running job asked for."),
    "coda_job_quota": ("gauge", "CPU quota as a fraction of the job's cores (1 = none)."),
    "coda_job_throughput": ("gauge", "Last measured throughput, samples/s (job units)."),
    "coda_job_stalled": ("gauge", "1 while a job's progress reports are missing."),
    "coda_agent_decisions": ("counter", "Decisions by component and action."),
}


def test_agent_metrics_keep_their_names_types_and_help() -> None:
    agent = fake_agent(fake_job(1, "prep#1"), fake_job(2, "bert#2", "dnn", 3, throughput=41.5))
    text = render(agent)
    fams = families(text)
    assert {n: (f.type, f.documentation) for n, f in fams.items()} == AGENT_METRICS
    assert "# TYPE coda_agent_ticks_total counter" in text  # the name as it was
    assert "# TYPE coda_agent_decisions_total counter" in text
    got = samples(text)
    job2 = (("job", "2"), ("kind", "dnn"), ("name", "bert#2"))
    assert got[("coda_agent_ticks_total", ())] == 7
    assert got[("coda_agent_tick_seconds", ())] == 0.25
    assert got[("coda_node_free_cores", ())] == 10 and got[("coda_node_gpus", ())] == 2
    assert got[("coda_job_cores", job2)] == 3 and got[("coda_job_throughput", job2)] == 41.5
    assert got[("coda_job_quota", job2)] == 0.5 and got[("coda_job_stalled", job2)] == 0
    # A job with no measurement yet has no throughput sample, not a made-up 0.
    assert [s.labels["job"] for s in fams["coda_job_throughput"].samples] == ["2"]
    decisions = {
        tuple(sorted(s.labels.items())): s.value for s in fams["coda_agent_decisions"].samples
    }
    assert decisions == {
        (("action", "set_cores"), ("component", "allocator")): 2,
        (("action", "start"), ("component", "scheduler")): 3,
        # Every control loop's own decisions, 0 from the start.
        (("action", "set-cores"), ("component", "allocator")): 0,
        (("action", "set-quota"), ("component", "eliminator")): 0,
    }  # quota_up has no component: internal, not exported


def test_an_agent_not_started_yet_exports_no_node_and_no_jobs() -> None:
    fams = families(render(fake_agent(node=False)))
    assert "coda_node_cores" not in fams
    assert fams["coda_job_cores"].samples == []
    assert fams["coda_agent_ticks"].samples[0].value == 7


def test_the_collector_reads_the_live_state_at_every_collection() -> None:
    agent = fake_agent()
    registry = agent_registry(agent)
    assert registry.get_sample_value("coda_agent_ticks_total") == 7
    agent.ticks = 8
    agent.jobs.running[5] = fake_job(5, "late#5", cpus=4)
    assert registry.get_sample_value("coda_agent_ticks_total") == 8
    labels = {"job": "5", "name": "late#5", "kind": "cpu"}
    assert registry.get_sample_value("coda_job_cores", labels) == 4


def test_registries_are_per_agent_not_global() -> None:
    from prometheus_client import REGISTRY

    a, b = fake_agent(), fake_agent()
    b.ticks = 100
    ra, rb = agent_registry(a), agent_registry(b)  # no "duplicated timeseries" error
    assert ra.get_sample_value("coda_agent_ticks_total") == 7
    assert rb.get_sample_value("coda_agent_ticks_total") == 100
    assert REGISTRY.get_sample_value("coda_agent_ticks_total") is None


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_any_job_name_is_escaped_and_parses_back_exactly(name: str) -> None:
    text = render(fake_agent(fake_job(1, name)))
    (s,) = families(text)["coda_job_cores"].samples
    assert s.labels == {"job": "1", "name": name, "kind": "cpu"}


def test_names_with_quotes_newlines_and_backslashes() -> None:
    name = 'a "quoted"\nname \\ with\\n a fake escape'
    text = render(fake_agent(fake_job(1, name)))
    assert 'name="a \\"quoted\\"\\nname \\\\ with\\\\n a fake escape"' in text
    assert families(text)["coda_job_cores"].samples[0].labels["name"] == name


def test_a_name_utf8_cannot_carry_is_exported_as_an_escape() -> None:
    name = "bad\udc80name"  # a lone surrogate: what json.loads makes of "\\udc80"
    text = render(fake_agent(fake_job(1, name)))
    (s,) = families(text)["coda_job_cores"].samples
    assert s.labels["name"] == "bad\\udc80name"


# ------------------------------------------------------------------ the textfile
def test_textfile_is_written_whole_and_private(tmp_path: Path) -> None:
    path = tmp_path / "metrics.prom"
    write_textfile(agent_registry(fake_agent(fake_job(1, "a#1"))), path)
    old = path.open()  # a reader in the middle of a scrape
    agent = fake_agent()
    agent.ticks = 99
    write_textfile(agent_registry(agent), path)
    assert families(old.read())["coda_agent_ticks"].samples[0].value == 7  # its file, whole
    old.close()
    assert families(path.read_text())["coda_agent_ticks"].samples[0].value == 99
    assert path.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.prom"]  # no temp left


def test_a_failed_textfile_write_keeps_the_last_file(tmp_path: Path) -> None:
    path = tmp_path / "metrics.prom"
    write_textfile(agent_registry(fake_agent()), path)
    before = path.read_text()
    broken = fake_agent()
    broken.node = SimpleNamespace()  # no cores: the collector fails mid-way
    with pytest.raises(AttributeError):
        write_textfile(agent_registry(broken), path)
    assert path.read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.prom"]


# ------------------------------------------------------------------ HTTP
def serve_while(server: MetricsServer, client: Callable[[], None], limit: float = 15.0) -> None:
    """Run ``client`` in a helper thread while this thread does what the agent does
    between ticks: ``server.wait``."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            client()
        except BaseException as e:  # re-raised in the test's thread
            errors.append(e)

    t = threading.Thread(target=run)
    t.start()
    end = time.monotonic() + limit
    while t.is_alive() and time.monotonic() < end:
        server.wait(0.05)
    t.join(timeout=5)
    assert not t.is_alive(), "the client never finished"
    if errors:
        raise errors[0]


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def test_scrape_over_http_parses_back_to_the_agent_state() -> None:
    agent = fake_agent(fake_job(3, 'say "hi"\n\\o/', "dnn", 2, throughput=9.0))
    server = MetricsServer("127.0.0.1", 0, agent_registry(agent))
    base = f"http://127.0.0.1:{server.port}"
    got: dict[str, Any] = {}

    def client() -> None:
        got["plain"] = get(f"{base}/metrics")
        agent.ticks = 8  # the next scrape sees the state as it is then
        got["root"] = get(f"{base}/")
        got["om"] = get(f"{base}/metrics", {"Accept": "application/openmetrics-text"})
        got["gzip"] = get(f"{base}/metrics", {"Accept-Encoding": "gzip"})
        got["404"] = get(f"{base}/nope")

    try:
        serve_while(server, client)
    finally:
        server.close()
    status, headers, body = got["plain"]
    assert status == 200
    assert headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    fams = families(body.decode())
    assert set(fams) == set(AGENT_METRICS)
    (s,) = fams["coda_job_throughput"].samples
    assert s.labels == {"job": "3", "name": 'say "hi"\n\\o/', "kind": "dnn"} and s.value == 9.0
    assert families(got["root"][2].decode())["coda_agent_ticks"].samples[0].value == 8
    status, headers, body = got["om"]
    assert headers["Content-Type"].startswith("application/openmetrics-text")
    om = {f.name: f for f in openmetrics_families(body.decode())}
    assert om["coda_job_throughput"].samples[0].labels["name"] == 'say "hi"\n\\o/'
    assert om["coda_agent_ticks"].type == "counter"
    status, headers, body = got["gzip"]
    assert headers.get("Content-Encoding") == "gzip"
    assert "coda_agent_ticks" in families(gzip.decompress(body).decode())
    assert got["404"][0] == 404


def test_a_stalled_client_holds_the_loop_for_the_timeout_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(metrics, "REQUEST_TIMEOUT_S", 0.5)
    server = MetricsServer("127.0.0.1", 0, agent_registry(fake_agent()))
    slow = socket.create_connection(("127.0.0.1", server.port))
    took: dict[str, float] = {}

    def client() -> None:
        # Trickles a byte at a time, each well within any per-read timeout.
        for b in b"GET /metrics HTTP/1.0\r\n":
            try:
                slow.send(bytes([b]))
            except OSError:
                took["cut"] = 1  # the server gave up on it and closed: what should happen
                break
            time.sleep(0.1)
        t0 = time.monotonic()
        status, _, body = get(f"http://127.0.0.1:{server.port}/metrics")
        took["next"] = time.monotonic() - t0
        took["status"] = status

    t0 = time.monotonic()
    try:
        serve_while(server, client)
    finally:
        slow.close()
        server.close()
    assert took["cut"] == 1 and took["status"] == 200
    assert took["next"] < 2.0  # answered at once once the trickler was dropped
    assert time.monotonic() - t0 < 6.0


@pytest.mark.slow
def test_idle_connections_do_not_hold_up_a_scrape() -> None:
    """Twelve connections that say nothing delayed a scrape by 13 s when the server
    answered one at a time; each now has a thread of its own."""
    server = MetricsServer("127.0.0.1", 0, agent_registry(fake_agent()))
    server.serve_in_background()
    idle = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(12)]
    try:
        time.sleep(0.2)  # all accepted, each waiting for its request
        t0 = time.monotonic()
        status, _, _ = get(f"http://127.0.0.1:{server.port}/metrics")
        took = time.monotonic() - t0
    finally:
        for c in idle:
            c.close()
        server.close()
    assert status == 200
    assert took < metrics.REQUEST_TIMEOUT_S  # not behind even one idle connection


def test_a_client_that_sends_nothing_then_leaves_is_harmless() -> None:
    server = MetricsServer("127.0.0.1", 0, agent_registry(fake_agent()))
    got: dict[str, int] = {}

    def client() -> None:
        socket.create_connection(("127.0.0.1", server.port)).close()
        junk = socket.create_connection(("127.0.0.1", server.port))
        junk.sendall(b"\x00\xff garbage\r\n\r\n")
        junk.recv(1024)
        junk.close()
        flood = socket.create_connection(("127.0.0.1", server.port))
        try:  # headers without end, past the cap: dropped, not buffered for ever
            flood.sendall(b"GET /metrics HTTP/1.0\r\n" + b"X: " + b"y" * 40_000)
        except OSError:
            pass
        try:
            got["flood"] = len(flood.recv(1024))  # closed without an answer
        except ConnectionResetError:  # closed with our bytes unread: the same
            got["flood"] = 0
        flood.close()
        got["status"] = get(f"http://127.0.0.1:{server.port}/metrics")[0]

    try:
        serve_while(server, client)
    finally:
        server.close()
    assert got == {"flood": 0, "status": 200}


def test_a_port_in_use_is_an_oserror() -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        with pytest.raises(OSError):
            MetricsServer("127.0.0.1", taken.getsockname()[1], agent_registry(fake_agent()))
    finally:
        taken.close()
    with pytest.raises(OSError):
        MetricsServer("no such host.invalid", 0, agent_registry(fake_agent()))


def test_the_server_binds_where_it_is_told() -> None:
    server = MetricsServer("127.0.0.1", 0, agent_registry(fake_agent()))
    try:
        assert server.httpd.socket.getsockname()[0] == "127.0.0.1"
    finally:
        server.close()


# ------------------------------------------------------------------ the Slurm controller
def make_fake() -> FakeSlurm:
    f = FakeSlurm()
    f.node("c1", 8)
    f.node("g1", 16, gpus=2)
    return f


def controller_samples(ctl: Controller) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return samples(generate_latest(controller_registry(ctl)).decode())


def test_controller_metrics_follow_its_cycles(tmp_path: Path) -> None:
    fake = make_fake()
    fake.job(1, "resnet", 8, gpus_pn=1)
    fake.job(2, "prep", 2)
    ctl = Controller(SlurmClient(fake.run), tmp_path, wall=lambda: 1000.0)
    ctl.allocator.learned.record(("1000:resnet", 1, 1), 3)  # type: ignore[union-attr]
    assert len(ctl.cycle()) == 2
    got = controller_samples(ctl)
    assert got[("coda_controller_cycles_total", ())] == 1
    assert got[("coda_controller_placements_total", (("kind", "dnn"),))] == 1
    assert got[("coda_controller_placements_total", (("kind", "cpu"),))] == 1
    assert got[("coda_controller_cores_requested_total", (("kind", "dnn"),))] == 8
    assert got[("coda_controller_cores_granted_total", (("kind", "dnn"),))] == 3
    assert got[("coda_controller_jobs", (("coda", "held"),))] == 2  # as the cycle began
    assert got[("coda_controller_jobs", (("coda", "placed"),))] == 0
    assert got[("coda_controller_learned_shapes", ())] == 1
    assert got[("coda_controller_cycle_seconds_count", ())] == 1
    assert got[("coda_controller_cycle_seconds_bucket", (("le", "+Inf"),))] == 1
    last = got[("coda_controller_last_cycle_seconds", ())]
    assert 0 < last == got[("coda_controller_cycle_seconds_sum", ())]
    ctl.cycle()
    got = controller_samples(ctl)
    assert got[("coda_controller_cycles_total", ())] == 2
    assert got[("coda_controller_jobs", (("coda", "placed"),))] == 2
    assert got[("coda_controller_jobs", (("coda", "held"),))] == 0
    assert got[("coda_controller_placements_total", (("kind", "dnn"),))] == 1  # not twice
    assert got[("coda_controller_cycle_seconds_count", ())] == 2
    # Buckets are cumulative and end at the count.
    buckets = sorted(
        (float(dict(lb)["le"]), v)
        for (n, lb), v in got.items()
        if n == "coda_controller_cycle_seconds_bucket"
    )
    assert [v for _, v in buckets] == sorted(v for _, v in buckets) and buckets[-1][1] == 2
    # What a Prometheus that asks for OpenMetrics gets is valid OpenMetrics (the strict
    # parser checks the histogram's buckets, sum and count, and counters' names).
    from prometheus_client.openmetrics.exposition import generate_latest as om_latest

    om = {f.name: f for f in openmetrics_families(om_latest(controller_registry(ctl)).decode())}
    assert om["coda_controller_cycle_seconds"].type == "histogram"
    assert om["coda_controller_placements"].type == "counter"


def test_controller_counts_refusals_passes_and_slurm_errors(tmp_path: Path) -> None:
    fake = make_fake()
    fake.job(30, "resnet", 4, gpus_pn=1)
    arr = fake.job(31, "sweep", 1)
    arr["array_job_id"] = 31
    fake.fail.append(lambda argv: argv[:3] == ["scontrol", "update", "JobId=30"])
    ctl = Controller(SlurmClient(fake.run), tmp_path, wall=lambda: 1000.0)
    assert ctl.cycle() == []
    got = controller_samples(ctl)
    assert got[("coda_controller_refusals_total", (("reason", "placement_update"),))] == 1
    assert got[("coda_controller_passed_total", (("why", "array"),))] == 1
    assert got[("coda_controller_placements_total", (("kind", "dnn"),))] == 0
    fake.fail[:] = [lambda argv: argv[0] == "squeue"]
    with pytest.raises(Exception, match="timed out"):
        ctl.cycle()
    got = controller_samples(ctl)
    assert got[("coda_controller_cycle_errors_total", ())] == 1
    assert got[("coda_controller_cycles_total", ())] == 2
    assert got[("coda_controller_cycle_seconds_count", ())] == 2  # the failed one too


def test_run_exports_after_every_cycle_and_idles_through_the_given_wait(tmp_path: Path) -> None:
    fake = make_fake()
    ctl = Controller(SlurmClient(fake.run), tmp_path)
    seen: list[int] = []
    idled: list[float] = []
    ctl.run(
        lambda: ctl.cycles >= 3 and len(seen) == 3,
        period_s=0.05,
        after_cycle=lambda: seen.append(ctl.cycles),
        idle=lambda s: (idled.append(s), time.sleep(s)),
    )
    assert seen == [1, 2, 3]
    assert idled and all(0 <= s <= 0.1 for s in idled)


# ------------------------------------------------------------------ `coda slurm controller`
@pytest.fixture
def slurm_bin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """squeue lists one held CPU job, always as held; scontrol knows one node and
    accepts everything (so the read-back after each placement finds it not taken)."""
    import json

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    job = {"job_id": 8, "name": "prep", "user_id": 1000, "job_state": "PENDING", "cpus": 2,
           "node_count": 1, "tres_per_node": "", "nodes": "", "priority": 0,
           "admin_comment": "coda:held", "state_reason": "JobHeldUser"}  # fmt: skip
    (tmp_path / "jobs.json").write_text(json.dumps({"jobs": [job]}))
    node = "NodeName=c1 CPUAlloc=0 CPUTot=8 CPUEfctv=8 Gres=(null) State=IDLE Partitions=main"
    scripts = {
        # The --json listing, or the controller's narrow listing of the same job.
        "squeue": (
            f"#!{sys.executable}\nimport json, sys\n"
            "from coda.slurm.fake_squeue import answer\n"
            f"jobs = json.load(open({str(tmp_path / 'jobs.json')!r}))['jobs']\n"
            "out = answer(['squeue', *sys.argv[1:]], jobs)\n"
            "sys.stdout.write(json.dumps({'jobs': jobs}) if out is None else out)\n"
        ),
        "scontrol": f'#!/bin/sh\ncase "$1" in show) echo "{node}";; esac\n',
    }
    for name, text in scripts.items():
        f = bin_dir / name
        f.write_text(text)
        f.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return tmp_path


def test_controller_once_writes_the_metrics_file(slurm_bin: Path) -> None:
    sd = slurm_bin / "state"
    r = CliRunner().invoke(main, ["slurm", "controller", "--once", "--state-dir", str(sd)])
    assert r.exit_code == 0, r.output
    got = samples((sd / "metrics.prom").read_text())
    assert got[("coda_controller_cycles_total", ())] == 1
    assert got[("coda_controller_jobs", (("coda", "held"),))] == 1
    assert got[("coda_controller_refusals_total", (("reason", "placement_not_taken_whole"),))] == 1


def test_controller_with_a_port_in_use_says_so_in_one_line(slurm_bin: Path) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        r = CliRunner().invoke(
            main,
            ["slurm", "controller", "--state-dir", str(slurm_bin / "s"), "--metrics-port",
             str(port)],
        )  # fmt: skip
    finally:
        taken.close()
    assert r.exit_code == 1
    assert r.output.strip().splitlines() == [
        f"Error: metrics port 127.0.0.1:{port}: Address already in use"
    ]
    bad = CliRunner().invoke(main, ["slurm", "controller", "--metrics-port", "70000"])
    assert bad.exit_code == 2 and "--metrics-port" in bad.output
    # A host the resolver cannot even encode (IDNA): one line too, not a traceback.
    odd = CliRunner().invoke(
        main,
        ["slurm", "controller", "--state-dir", str(slurm_bin / "t"), "--metrics-port", "0",
         "--metrics-host", "a..b"],
    )  # fmt: skip
    assert odd.exit_code == 1 and odd.output.startswith("Error: metrics port a..b:0: "), odd.output
    assert len(odd.output.strip().splitlines()) == 1


@pytest.mark.slow
def test_a_running_controller_serves_its_metrics(slurm_bin: Path) -> None:
    sd = slurm_bin / "state"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "coda.cli", "slurm", "controller", "--state-dir", str(sd),
           "--period", "0.2", "--metrics-port", "0"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env)  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "metrics on 127.0.0.1:" in line, line
        port = int(line.rsplit(":", 1)[1])
        deadline = time.monotonic() + 20
        while True:  # until a cycle has run (the first may still be under way)
            status, _, body = get(f"http://127.0.0.1:{port}/metrics")
            got = samples(body.decode())
            if got[("coda_controller_cycles_total", ())] >= 1 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert status == 200
        assert got[("coda_controller_cycles_total", ())] >= 1
        refused = ("coda_controller_refusals_total", (("reason", "placement_not_taken_whole"),))
        assert got[refused] == got[("coda_controller_cycles_total", ())]  # one per cycle
        prom = sd / "metrics.prom"  # written after the cycle the server counted
        deadline = time.monotonic() + 10
        while not prom.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "coda_controller_cycles" in families(prom.read_text())
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out
    assert "controller stopped after" in out


def test_every_controller_counter_and_wait_reason_is_there_from_the_start(
    tmp_path: Path,
) -> None:
    from coda.cycle.reasons import CODES, GPUS
    from coda.slurm.controller import KINDS, PASS_WHYS, REFUSALS

    fake = make_fake()
    ctl = Controller(SlurmClient(fake.run), tmp_path, wall=lambda: 1000.0)
    got = controller_samples(ctl)  # before any cycle
    for kind in KINDS:
        for name in ("placements", "cores_requested", "cores_granted"):
            assert got[(f"coda_controller_{name}_total", (("kind", kind),))] == 0
    for reason in REFUSALS:
        assert got[("coda_controller_refusals_total", (("reason", reason),))] == 0
    for why in PASS_WHYS:
        assert got[("coda_controller_passed_total", (("why", why),))] == 0
    for code in CODES:
        assert got[("coda_controller_waiting_jobs", (("reason", code),))] == 0
    assert got[("coda_controller_requeues_total", ())] == 0
    assert got[("coda_controller_requeue_lost_core_seconds_total", ())] == 0
    # A job too big for every GPU node waits, and the gauge says why.
    fake.job(40, "huge", 4, gpus_pn=8)
    ctl.cycle()
    got = controller_samples(ctl)
    waiting = {
        dict(lb)["reason"]: v for (n, lb), v in got.items() if n == "coda_controller_waiting_jobs"
    }
    assert sum(waiting.values()) == 1 and waiting[GPUS] + waiting["never"] == 1, waiting


def test_a_slurm_agent_exports_each_jobs_grant() -> None:
    from types import SimpleNamespace

    from coda.slurm.metrics import slurm_agent_registry

    agent = fake_agent(fake_job(1, "prep#1"), fake_job(2, "bert#2", "dnn", 3))
    agent.source.info = {2: SimpleNamespace(grant=[0, 1, 2, 3, 4, 5])}  # job 1: not adopted yet
    got = samples(generate_latest(slurm_agent_registry(agent)).decode())
    job2 = (("job", "2"), ("kind", "dnn"), ("name", "bert#2"))
    assert got[("coda_job_granted_cores", job2)] == 6 and got[("coda_job_cores", job2)] == 3
    assert [k for k in got if k[0] == "coda_job_granted_cores"] == [
        ("coda_job_granted_cores", job2)
    ]
    assert got[("coda_agent_ticks_total", ())] == 7  # the node agent's families too


def _doc_table(section: str) -> dict[str, str]:
    """docs/prometheus.md's table of a daemon's families: name -> type."""
    doc = (Path(__file__).parent.parent / "docs" / "prometheus.md").read_text()
    block = doc.split(f"<!-- metric-families:{section}:begin -->", 1)[1]
    block = block.split(f"<!-- metric-families:{section}:end -->", 1)[0]
    rows = [r.split("|") for r in block.strip().splitlines()[2:]]
    return {r[1].strip().strip("`"): r[2].strip() for r in rows}


def test_the_metrics_doc_names_every_family_the_daemons_export(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from coda.slurm.metrics import slurm_agent_registry

    agent = fake_agent(fake_job(1, "bert#1", "dnn", 3, throughput=2.0))
    agent.source.info = {1: SimpleNamespace(grant=[0, 1, 2, 3])}
    agent.node.bw_gbps = 10.0  # a bus measured and declared: its gauge too
    exported = families(generate_latest(slurm_agent_registry(agent)).decode())
    assert {n: f.type for n, f in exported.items()} == {
        n.removesuffix("_total"): t for n, t in _doc_table("agent").items()
    }
    ctl = Controller(SlurmClient(make_fake().run), tmp_path, wall=lambda: 1000.0)
    exported = families(generate_latest(controller_registry(ctl)).decode())
    assert {n: f.type for n, f in exported.items()} == {
        n.removesuffix("_total"): t for n, t in _doc_table("controller").items()
    }
