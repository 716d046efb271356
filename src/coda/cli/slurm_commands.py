"""``coda slurm ...``: CODA over a Slurm cluster.

coda slurm controller   one per cluster (next to slurmctld): places held jobs
coda slurm agent        one per node (next to slurmd): cores and throttles
coda slurm status       what CODA did to each job, from Slurm's own records
coda slurm handback     release every held job unchanged (CODA switched off)
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from coda.cli.node_commands import (
    checked_loop,
    checked_policy,
    control_loop_options,
    default_state_dir,
    locked_state_dir,
    policy_options,
    timestamped,
)
from coda.params import AsciiIntRange, FiniteFloat

if TYPE_CHECKING:
    from coda.slurm.cgroups import SlurmJobCgroups
    from coda.slurm.client import SlurmJob
    from coda.slurm.lease import Heartbeat


def _stop_flag() -> dict[str, bool]:
    stop = {"flag": False}

    def on_signal(signum: int, _frame: object) -> None:
        stop["flag"] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return stop


F = TypeVar("F", bound=Callable[..., Any])  # a click command function, decorated in place


def _state_dir(name: str) -> Callable[[F], F]:
    return click.option(
        "--state-dir",
        type=click.Path(file_okay=False),
        default=lambda: f"{default_state_dir()}/{name}",
        show_default=f"<coda state dir>/{name}",
        help="Where this daemon keeps its state (local disk; one daemon per directory).",
    )


@click.group()
def slurm() -> None:
    """Run CODA over a Slurm cluster (see docs/operator.md)."""


@slurm.command()
@_state_dir("slurm-controller")
@click.option("--period", type=FiniteFloat(min=0.1, max=3600), default=1.0, show_default=True,
              help="Seconds between scheduling cycles.")  # fmt: skip
@click.option("--once", is_flag=True, help="Run one cycle and exit.")
@click.option(
    "--metrics-port",
    type=AsciiIntRange(min=0, max=65535),
    default=None,
    help="Serve Prometheus metrics on this port (0: any free port; not with --once). "
    "They are also written to <state-dir>/metrics.prom every cycle.",
)
@click.option(
    "--metrics-host",
    default="127.0.0.1",
    show_default=True,
    help="Address the metrics server binds (job names are in the metrics).",
)
@click.option(
    "--lease",
    "lease_path",
    type=click.Path(dir_okay=False),
    envvar="CODA_SLURM_LEASE",
    default=None,
    show_default="$CODA_SLURM_LEASE, else slurm-controller.lease beside --state-dir",
    help="The lease only the active controller holds, the file job_submit.lua's "
    "coda-slurm.conf names (LEASE=); on storage every controller host shares.",
)
@click.option("--lease-ttl", type=FiniteFloat(min=1, max=3600), default=10.0, show_default=True,
              help="Seconds without a beat before a standby takes the lease over.")  # fmt: skip
@click.option(
    "--standby",
    is_flag=True,
    help="Wait while another controller is active; take over once it is gone.",
)
@policy_options
def controller(
    state_dir: str,
    policy: str,
    period: float,
    once: bool,
    metrics_port: int | None,
    metrics_host: str,
    lease_path: str | None,
    lease_ttl: float,
    standby: bool,
    tunes: tuple[str, ...],
    quiet: bool,
) -> None:
    """Place the jobs job_submit.lua holds: node, GPUs and slimmed cores, then release.

    One controller is active at a time (the lease); a second one refuses to start
    unless it is a --standby."""
    from coda.collector import LongLivedHeap
    from coda.runtime.metrics import MetricsServer, textfile_exporter
    from coda.slurm.client import SlurmClient, SlurmError
    from coda.slurm.controller import Controller
    from coda.slurm.lease import ControllerLease, FencedRunner, Heartbeat
    from coda.slurm.metrics import controller_registry

    tune = checked_policy(policy, tunes)
    if once and standby:
        raise click.UsageError("--once and --standby: a standby runs until it takes over")
    if lease_path is not None and not lease_path.strip():
        raise click.UsageError("--lease: an empty path")
    if standby and not lease_path:
        raise click.UsageError(
            "--standby needs --lease (or $CODA_SLURM_LEASE): the lease the active "
            "controller holds, on storage both hosts share"
        )
    sd, lock = locked_state_dir(state_dir, "controller")
    say = timestamped(quiet)
    lease_path = lease_path or str(sd.parent / "slurm-controller.lease")
    lease = ControllerLease(lease_path, ttl_s=lease_ttl)
    # A cycle at least every 3 periods (and 2 minutes): one that cannot complete gives
    # the lease up for another controller to try.
    heart = Heartbeat(lease, lambda msg: None, stall_s=max(120.0, 3 * period))
    heap = LongLivedHeap(sweep_every=max(1, round(3600 / period)))  # an hour of cycles
    try:
        _take_lease(heart, standby)
        client = SlurmClient(FencedRunner(lease))
        ctl = Controller(client, sd, policy=policy, tune=tune, log=say, heap=heap)
    except ValueError as e:
        lease.release()
        lock.release()
        raise click.ClickException(str(e)) from None
    heart.log = say
    seen = {"end": ctl.stats.last_cycle_end}

    def may_cycle() -> bool:
        ok = heart.active()
        ctl.stats.active, ctl.stats.lease_epoch = ok, lease.epoch or 0
        return ok

    def after_cycle() -> None:
        if ctl.stats.last_cycle_end != seen["end"]:  # a cycle completed
            seen["end"] = ctl.stats.last_cycle_end
            heart.cycled()
        export()

    ctl.stats.active, ctl.stats.lease_epoch = lease.held, lease.epoch or 0
    registry = controller_registry(ctl)
    export = textfile_exporter(registry, sd / "metrics.prom", say)
    server = None
    try:
        if once:
            try:
                ctl.cycle()
            except SlurmError as e:
                raise click.ClickException(str(e)) from None
            finally:
                export()
            return
        if metrics_port is not None:
            try:
                server = MetricsServer(metrics_host, metrics_port, registry)
            except (OSError, ValueError) as e:  # ValueError: a host IDNA cannot encode
                where = f"{metrics_host}:{metrics_port}"
                why = e.strerror if isinstance(e, OSError) and e.strerror else e
                raise click.ClickException(f"metrics port {where}: {why}") from None
        (sd / "controller.pid").write_text(f"{os.getpid()}\n")
        stop = _stop_flag()
        say(
            f"controller up: policy {policy}, period {period:g} s, state {sd}, "
            + (
                f"active (lease {lease.path} epoch {lease.epoch})"
                if lease.held
                else f"standby (lease {lease.path} held by {heart.holder_seen()})"
            )
            + (f", metrics on {metrics_host}:{server.port}" if server else "")
        )
        if server is not None:
            server.serve_in_background()  # a slow scraper never holds up a cycle
        heart.start()
        ctl.run(lambda: stop["flag"], period_s=period, after_cycle=after_cycle,
                may_cycle=may_cycle)  # fmt: skip
        say(f"controller stopped after {ctl.cycles} cycles, {ctl.placed} jobs placed")
    finally:
        heap.release()
        heart.stop()
        if server is not None:
            server.close()
        (sd / "controller.pid").unlink(missing_ok=True)
        try:
            lease.release()  # a standby may take over at once
        except ValueError as e:
            say(f"{e}: the lease is left to expire")
        lock.release()


def _take_lease(heart: Heartbeat, standby: bool) -> None:
    """Take the lease at start. A standby takes it if it is free, else waits for it
    (its heartbeat). Any other controller waits up to the lease's ttl to see whether
    its holder still beats: ValueError (one line) if it does, or if the lease cannot
    be read."""
    lease = heart.lease
    first = None
    end = lease.mono() + lease.ttl + 1.0
    while not heart.beat():
        if heart.error:
            raise ValueError(heart.error)
        if standby:
            return
        rec = lease.last_seen
        if first is None:
            first = rec
        elif rec != first or lease.mono() > end:
            assert rec is not None
            raise ValueError(
                f"lease {lease.path}: controller {rec.holder} is active (epoch {rec.epoch}, "
                "its beat moves); run this one with --standby, or stop that one"
            )
        time.sleep(min(0.5, lease.ttl / 4))


def _board_cgroups(real: SlurmJobCgroups, root: Path, node: str) -> SlurmJobCgroups:
    """The emulated node's groups: its board (root's, made if missing) and the cores
    Slurm declares for it."""
    from coda.runtime.board import Board
    from coda.slurm.board_cgroups import BoardCgroups
    from coda.slurm.client import SlurmClient

    cores = next((n.cpus for n in SlurmClient().nodes() if n.name == node), None)
    if cores is None:
        raise ValueError(f"--board: Slurm has no node named {node!r}")
    if not str(root) or str(root) == ".":
        raise ValueError("--board: an empty directory name")
    path = root.absolute() / node
    path.mkdir(mode=0o755, parents=True, exist_ok=True)
    # Every directory on the way: nobody else may swap one for a symlink (the agent is
    # root and writes grants there): owned by root or this user, not a symlink, not
    # group/world-writable unless sticky (as /tmp and /var/tmp are) above the last two.
    me = os.geteuid()
    for d in [*reversed(path.parents), path]:
        st = d.lstat()
        sticky = bool(st.st_mode & 0o1000) and d not in (path, path.parent)
        if (
            stat.S_ISLNK(st.st_mode)
            or not stat.S_ISDIR(st.st_mode)
            or st.st_uid not in (0, me)
            or (st.st_mode & 0o022 and not sticky)
        ):
            raise ValueError(
                f"--board: {d} must be a directory of root's or this user's, not a symlink, "
                "not group/world-writable"
            )
    return BoardCgroups(real, Board(path, agent_uid=os.geteuid()), cores)


@slurm.command()
@click.option("--node", required=True, help="This node's Slurm name (slurmd -N).")
@_state_dir("slurm-agent")
@control_loop_options
@click.option(
    "--progress-dir",
    type=click.Path(file_okay=False),
    default=lambda: os.environ.get("CODA_SLURM_PROGRESS_DIR", "/run/coda/progress"),
    show_default="$CODA_SLURM_PROGRESS_DIR or /run/coda/progress",
    help="Where Slurm's TaskProlog tells jobs to report progress.",
)
@click.option("--cgroup-root", type=click.Path(file_okay=False), default="/sys/fs/cgroup",
              show_default=True, help="Where the cgroup hierarchy is mounted.")  # fmt: skip
@click.option("--cgroup-version", type=click.Choice(["auto", "1", "2"]), default="auto",
              show_default=True,
              help="Slurm's CgroupPlugin (cgroup/v1 or cgroup/v2); auto: 2 where the root "
                   "is a cgroup2 mount (it has cgroup.controllers), else 1.")  # fmt: skip
@click.option("--restore-on-exit", is_flag=True,
              help="Widen every job back to its Slurm grant when the agent stops.")  # fmt: skip
@click.option(
    "--metrics-port",
    type=AsciiIntRange(min=0, max=65535),
    default=None,
    help="Serve Prometheus metrics on this port (0: any free port). They are also "
    "written to <state-dir>/metrics.prom every period.",
)
@click.option(
    "--metrics-host",
    default="127.0.0.1",
    show_default=True,
    help="Address the metrics server binds (job names are in the metrics).",
)
@click.option(
    "--board",
    "board_root",
    type=click.Path(file_okay=False),
    help="Emulated node: keep jobs' CPUs and quotas on the board under this directory "
    "(<dir>/<node>) instead of their cgroups, for emulated jobs on declared-big test "
    "nodes (deploy/slurm-test-cluster --cores; see coda.runtime.board).",
)
@click.option(
    "--controller-lease",
    type=click.Path(dir_okay=False),
    envvar="CODA_SLURM_LEASE",
    default=None,
    help="The controller's lease (its --lease; $CODA_SLURM_LEASE): when it shows no beat "
    "for --fail-open-after seconds, this agent hands the jobs held for CODA back to "
    "Slurm. Give it to a few agents where the lease's storage is shared.",
)
@click.option("--fail-open-after", type=FiniteFloat(min=1, max=3600), envvar="CODA_SLURM_FAIL_OPEN",
              default=60.0, show_default=True,
              help="Seconds without a controller beat before held jobs go back to Slurm "
                   "(coda-slurm.conf's FAIL_OPEN_S; $CODA_SLURM_FAIL_OPEN).")  # fmt: skip
def agent(
    node: str,
    state_dir: str,
    policy: str,
    period: float,
    window: float,
    stall: float,
    progress_dir: str,
    cgroup_root: str,
    cgroup_version: str,
    restore_on_exit: bool,
    metrics_port: int | None,
    metrics_host: str,
    board_root: str | None,
    controller_lease: str | None,
    fail_open_after: float,
    tunes: tuple[str, ...],
    quiet: bool,
) -> None:
    """Slim DNN jobs' cpusets within their grants and throttle co-located CPU jobs,
    on the jobs Slurm runs on this node."""
    from coda.runtime.agent import AgentConfig
    from coda.runtime.cgroups import CgroupError
    from coda.runtime.metrics import MetricsServer, textfile_exporter
    from coda.runtime.store import Store, StoreError
    from coda.slurm.agent import slurm_node_agent
    from coda.slurm.cgroups import SlurmJobCgroups, cgroup_version_of
    from coda.slurm.client import SlurmClient, SlurmError
    from coda.slurm.failopen import FailOpen
    from coda.slurm.metrics import slurm_agent_registry

    tune = checked_loop(policy, tunes, period, window)
    if controller_lease is not None and not controller_lease.strip():
        raise click.UsageError("--controller-lease: an empty path")
    sd, lock = locked_state_dir(state_dir)
    say = timestamped(quiet)
    try:
        version = (
            cgroup_version_of(cgroup_root) if cgroup_version == "auto" else int(cgroup_version)
        )
        cg = SlurmJobCgroups(node, cgroup_root, version=version)
        if board_root is not None:
            cg = _board_cgroups(cg, Path(board_root), node)
        cfg = AgentConfig(period_s=period, window_s=window, stall_s=stall, policy=policy,
                          tune=tune)  # fmt: skip
        store = Store(sd / "coda.db")
        a = slurm_node_agent(node, SlurmClient(), cg, store, sd, progress_dir, cfg, log=say,
                             restore_on_exit=restore_on_exit)  # fmt: skip
    except (ValueError, StoreError, SlurmError, OSError) as e:
        lock.release()
        raise click.ClickException(str(e)) from None
    registry = slurm_agent_registry(a)
    try:
        server = (
            MetricsServer(metrics_host, metrics_port, registry)
            if metrics_port is not None
            else None
        )
    except (OSError, ValueError) as e:  # ValueError: a host IDNA cannot encode
        store.close()
        lock.release()
        where = f"{metrics_host}:{metrics_port}"
        why = e.strerror if isinstance(e, OSError) and e.strerror else e
        raise click.ClickException(f"metrics port {where}: {why}") from None
    try:
        a.start()
    except (CgroupError, OSError) as e:
        if server is not None:
            server.close()
        store.close()
        lock.release()
        raise click.ClickException(f"agent on {node}: {e}") from None
    stop = _stop_flag()
    assert a.node is not None
    say(f"slurm agent on {node}: {a.node.cores} CPUs, {a.node.gpus} GPUs, {cg.describe()}, "
        f"progress in {progress_dir}, state {sd}"
        + (f", metrics on {metrics_host}:{server.port}" if server else ""))  # fmt: skip
    (sd / "agent.pid").write_text(f"{os.getpid()}\n")
    export = textfile_exporter(registry, sd / "metrics.prom", say)
    watch = (
        FailOpen(SlurmClient(), controller_lease, fail_open_after, say)
        if controller_lease
        else None
    )

    def after_tick() -> None:
        export()
        if watch is not None:
            watch.tick()

    try:
        if server is not None:
            server.serve_in_background()  # a slow scraper never holds up a tick
        a.run(lambda: stop["flag"], after_tick=after_tick)
    finally:
        if server is not None:
            server.close()
        a.shutdown()
        (sd / "agent.pid").unlink(missing_ok=True)
        store.close()
        lock.release()
        say(f"slurm agent on {node} stopped; {len(a.jobs.running)} job(s) keep running")


@slurm.command()
@click.option("--all", "show_all", is_flag=True, help="Also jobs CODA never touched.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: its jobs, a row each.")
def status(show_all: bool, as_json: bool) -> None:
    """Each job as Slurm records it, with what CODA decided: requested vs granted
    cores, where it ran, what its DNN job settled on, and why a job CODA holds still
    waits (the controller's last reason, from the job's AdminComment mark)."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from coda.slurm.client import SlurmClient, SlurmError
    from coda.text import visible

    try:
        jobs = SlurmClient().jobs()
    except SlurmError as e:
        raise click.ClickException(str(e)) from None
    rows = []
    for j in sorted(jobs, key=lambda j: j.job_id):
        if j.mark is None and not show_all:
            continue
        m = j.mark or {}
        rows.append(
            {
                "job": j.job_id,
                "name": j.name,
                "kind": "dnn" if j.is_dnn else "cpu",
                "state": j.state,
                "coda": m.get("state", "-"),
                "nodes": ",".join(j.nodes or j.required_nodes) or "-",
                "requested": j.requested_cores,
                "granted": int(m["grant"]) if m.get("grant", "").isdigit() else None,
                "settled": int(m["settled"]) if m.get("settled", "").isdigit() else None,
                "gpus_per_node": j.gpus_per_node,
                "reason": j.reason,
                "wait": _wait_reason(j),
            }
        )
    if as_json:  # one document, as `coda status --json` prints
        click.echo(json.dumps({"jobs": rows}, indent=2))
        return
    t = Table(title=f"{len(rows)} job(s): cores requested / granted by CODA / settled on")
    heads = ("job", "name", "kind", "state", "coda", "nodes", "req", "grant", "settled",
             "gpus", "reason", "wait")  # fmt: skip
    for c in heads:
        t.add_column(c, no_wrap=c != "name", overflow="fold")
    for r in rows:
        # Text, not markup: a job's name is its user's ("[/]" would crash rich markup),
        # and its control characters are shown escaped (an ESC must not reach a terminal).
        t.add_row(*(Text("-" if v is None else visible(str(v))) for v in r.values()))
    Console(width=max(120, shutil.get_terminal_size().columns)).print(t)


def _wait_reason(j: SlurmJob) -> str:
    """Why CODA has not started a job it holds ("-" for any other job, or none said)."""
    if j.state != "PENDING" or j.mark is None or j.mark.get("state") != "held":
        return "-"
    return j.mark.get("wait") or "-"


@slurm.command()
@click.option(
    "--lease",
    "lease_path",
    type=click.Path(dir_okay=False),
    envvar="CODA_SLURM_LEASE",
    default="/var/lib/coda/slurm-controller.lease",
    show_default="$CODA_SLURM_LEASE or /var/lib/coda/slurm-controller.lease",
    help="The controller's lease: a warning if a controller still beats there.",
)
def handback(lease_path: str) -> None:
    """Release every job held for CODA, unchanged, to Slurm's own scheduler.

    Run it after stopping the controller, removing JobSubmitPlugins=lua from slurm.conf
    and `scontrol reconfigure`: nothing is held any more and the jobs already waiting
    go too. It warns (and goes on) while either is still in place."""

    from coda.slurm.client import SlurmClient, SlurmError, run_command
    from coda.slurm.failopen import hand_back
    from coda.slurm.lease import read_lease

    try:
        rec = read_lease(Path(lease_path))
    except ValueError as e:
        click.echo(f"warning: {e}: cannot tell whether a controller is active", err=True)
        rec = None
    if rec is not None and rec.holder != "-" and abs(rec.age(time.time())) <= rec.ttl:
        click.echo(
            f"warning: controller {rec.holder} is active (lease {lease_path}): it holds new "
            "jobs and may place these first; stop it (and any standby) to switch CODA off",
            err=True,
        )
    try:
        config = run_command(["scontrol", "show", "config"])
    except SlurmError:
        config = ""
    if any(ln.split("=")[0].strip() == "JobSubmitPlugins" and "lua" in ln
           for ln in config.splitlines()):  # fmt: skip
        click.echo(
            "warning: JobSubmitPlugins=lua is still set: new jobs are still held for CODA; "
            "remove it from slurm.conf and `scontrol reconfigure`",
            err=True,
        )
    try:
        n = hand_back(SlurmClient(), log=click.echo)
    except SlurmError as e:
        raise click.ClickException(str(e)) from None
    click.echo(f"{n} job(s) handed back to Slurm")


def register(main: click.Group) -> None:
    main.add_command(slurm)
