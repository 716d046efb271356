"""The ``coda agent`` command: start the node agent (its lock, cgroups, database,
control socket and metrics), run it until a signal, and release it all; and
``spawn_agent``, which starts that command as a child process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import click

from coda.cli.node_daemon import checked_loop, control_loop_options, timestamped
from coda.cli.node_state_dir import locked_state_dir, state_dir_option
from coda.params import AsciiIntRange, FiniteFloat
from coda.runtime.cgroups import MAX_CPU_ID, parse_cpus
from coda.runtime.control import SOCKET_NAME, ControlServer
from coda.runtime.devices import Device, DeviceError, device_of, nvidia_devices
from coda.runtime.jobspec import MAX_GPUS
from coda.runtime.limits import (
    FINISHED_PER_USER_RANGE,
    KEEP_FINISHED_RANGE,
    LOG_BYTES_RANGE,
    SPEC_BYTES_RANGE,
    STATUS_ROWS_RANGE,
    USER_BYTES_RANGE,
    USER_SHARE_RANGE,
    Limits,
)
from coda.runtime.statedir import StateDirError
from coda.runtime.store import Store, StoreError


def spawn_agent(
    state_dir: str | os.PathLike[str],
    args: Sequence[str],
    log: str | os.PathLike[str],
    timeout: float = 30.0,
) -> subprocess.Popen[bytes]:
    """Start ``coda agent --state-dir STATE_DIR ARGS`` in a session of its own (output
    appended to ``log``) and return once it is up: its agent.pid names this process (a
    stale file from a killed agent does not count). For tests, benchmarks and scripts;
    operators run `coda agent` under their service manager."""
    argv = [sys.executable, "-m", "coda.cli", "agent", "--state-dir", str(state_dir), *args]
    with open(log, "ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    pid_file = Path(state_dir) / "agent.pid"
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"coda agent exited with status {proc.returncode}; see {log}")
        try:
            if pid_file.read_text().strip() == str(proc.pid):
                return proc
        except OSError:
            pass
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    raise RuntimeError(f"coda agent did not start within {timeout:g} s; see {log}")


def _gpu_devices(gpus: int | None, paths: Sequence[str]) -> tuple[int, list[Device], str]:
    """The node's GPU count, the device files guarded for them (those named, one per
    GPU, else the /dev/nvidiaN found; those beyond --gpus are refused to every job) and
    what the agent should say of it ("" for nothing)."""
    if not paths:
        found = nvidia_devices("/dev")
        if gpus is None or gpus <= len(found):
            return (len(found) if gpus is None else gpus), found, ""
        why = f"/dev has {len(found)} GPU device files" if found else "/dev has no nvidiaN"
        return (
            gpus,
            [],
            f"GPUs are not isolated: {gpus} declared but {why} (name them with --gpu-device)",
        )
    try:
        devices = [device_of(p) for p in paths]
    except DeviceError as e:
        raise click.BadParameter(str(e), param_hint="--gpu-device") from None
    seen: dict[tuple[str, int, int], str] = {}
    for d in devices:
        key = (d.kind, d.major, d.minor)
        if key in seen:
            raise click.BadParameter(
                f"{d} is the same device as {seen[key]}", param_hint="--gpu-device"
            )
        seen[key] = d.path
    if gpus is not None and gpus != len(devices):
        raise click.BadParameter(
            f"{gpus} GPUs but {len(devices)} device files given", param_hint="--gpu-device"
        )
    if len(devices) > MAX_GPUS:
        raise click.BadParameter(f"at most {MAX_GPUS} GPUs", param_hint="--gpu-device")
    return len(devices), devices, ""


def _parse_cpu_list(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        cpus = parse_cpus(text)
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is not a CPU list like 0-3,6 (ids 0-{MAX_CPU_ID})", param_hint="--cpus"
        ) from None
    if not cpus:
        raise click.BadParameter("the CPU list is empty", param_hint="--cpus")
    return cpus


@click.command()
@state_dir_option
@control_loop_options
@click.option(
    "--gpus",
    type=AsciiIntRange(min=0, max=MAX_GPUS),
    default=None,
    help=f"GPUs on this node, 0-{MAX_GPUS} [default: /dev/nvidia0.. devices found].",
)
@click.option(
    "--gpu-device",
    "gpu_device_paths",
    multiple=True,
    metavar="PATH",
    help="GPU i's device file, given once per GPU in index order (e.g. /dev/nvidia0). A "
    "job's cgroup is refused the files of the GPUs it was not granted (cgroup v1: devices "
    "controller; v2: an eBPF device program); the agent refuses to start if it cannot "
    "[default: /dev/nvidia0.. found, where the kernel lets the agent guard them].",
)
@click.option("--cpus", "cpu_list", default=None, help="CPUs to manage, e.g. 0-7 [default: all].")
@click.option(
    "--bus-gbps",
    type=FiniteFloat(min=0, max=100000),
    default=0.0,
    show_default=True,
    help="The node's memory bandwidth in GB/s. Where resctrl counts memory traffic (MBM), "
    "the bus rules act on it: CPU jobs start on a GPU node only while the bus has room, "
    "and the eliminator's bandwidth gates apply (0: they stand aside).",
)
@click.option(
    "--take-back",
    type=click.Choice(["requeue", "suspend"]),
    default="requeue",
    show_default=True,
    help="What a preemption does to the CPU job whose cores a DNN job needs: requeue "
    "(stopped and queued again: it restarts from its start, or its checkpoint) or "
    "suspend (frozen with the cgroup freezer and thawed where it was once it fits again: "
    "it loses no work but keeps its memory meanwhile).",
)
@click.option(
    "--resctrl-root",
    default="/sys/fs/resctrl",
    show_default=True,
    help="Where resctrl is mounted (a fake tree's, for tests).",
)
@click.option(
    "--cgroup-version",
    "cg_version",
    type=click.Choice(["auto", "1", "2"]),
    default="auto",
    show_default=True,
    help="Cgroup version to drive (auto: what /sys/fs/cgroup is), as `coda slurm agent`'s.",
)
@click.option(
    "--cgroup",
    "old_cg_version",
    type=click.Choice(["auto", "v1", "v2"]),
    default=None,
    hidden=True,
    help="The old spelling of --cgroup-version (auto, v1, v2).",
)
@click.option(
    "--cgroup-parent",
    default="coda",
    show_default=True,
    help="Parent group the agent creates its job groups under.",
)
@click.option(
    "--cgroup-mounts",
    default="/proc/self/mounts",
    show_default=True,
    help="Mount table to find cgroup mounts in (a fake tree's, for tests and benchmarks).",
)
@click.option("--cgroup-prefix", default="", help="Prefix every mount path with this directory.")
@click.option(
    "--metrics-port",
    type=AsciiIntRange(min=0, max=65535),
    default=None,
    help="Serve Prometheus metrics on this port (0: any free port).",
)
@click.option(
    "--max-spec-bytes",
    type=AsciiIntRange(min=SPEC_BYTES_RANGE[0], max=SPEC_BYTES_RANGE[1]),
    default=Limits.spec_bytes,
    show_default=True,
    help="Bytes of command, environment, directory, name and model one job spec may hold.",
)
@click.option(
    "--max-user-bytes",
    type=AsciiIntRange(min=USER_BYTES_RANGE[0], max=USER_BYTES_RANGE[1]),
    default=Limits.user_bytes,
    show_default=True,
    help="Bytes of specs one user's queued and running jobs may hold together.",
)
@click.option(
    "--keep-finished",
    type=FiniteFloat(min=KEEP_FINISHED_RANGE[0], max=KEEP_FINISHED_RANGE[1]),
    default=Limits.keep_finished_s,
    show_default=True,
    help="Seconds a finished job's row, decisions and logs are kept after it ends.",
)
@click.option(
    "--keep-finished-per-user",
    type=AsciiIntRange(min=FINISHED_PER_USER_RANGE[0], max=FINISHED_PER_USER_RANGE[1]),
    default=Limits.finished_per_user,
    show_default=True,
    help="Finished jobs kept per user at most (the oldest go first).",
)
@click.option(
    "--status-rows",
    type=AsciiIntRange(min=STATUS_ROWS_RANGE[0], max=STATUS_ROWS_RANGE[1]),
    default=Limits.status_rows,
    show_default=True,
    help="Jobs one status answer lists at most (it says how many more there are).",
)
@click.option(
    "--user-share",
    type=FiniteFloat(min=USER_SHARE_RANGE[0], max=USER_SHARE_RANGE[1]),
    default=Limits.user_share,
    show_default=True,
    help="Share of the control socket's time one user's requests may take "
    "(root's are not counted).",
)
@click.option(
    "--max-log-bytes",
    type=AsciiIntRange(min=LOG_BYTES_RANGE[0], max=LOG_BYTES_RANGE[1]),
    default=Limits.log_bytes,
    show_default=True,
    help="Bytes of a job's stdout, and of its stderr, kept (the rest is dropped and counted).",
)
@click.option(
    "--max-user-log-bytes",
    type=AsciiIntRange(min=LOG_BYTES_RANGE[0], max=LOG_BYTES_RANGE[1]),
    default=Limits.user_log_bytes,
    show_default=True,
    help="Bytes of logs one user's jobs, running and kept, may hold (the oldest finished "
    "jobs go first).",
)
@click.option(
    "--stop-jobs-on-exit",
    is_flag=True,
    help="Kill running jobs when the agent stops [default: leave them to the next agent].",
)
def agent(
    state_dir: str,
    policy: str,
    period: float,
    window: float,
    stall: float,
    gpus: int | None,
    gpu_device_paths: tuple[str, ...],
    cpu_list: str | None,
    bus_gbps: float,
    take_back: str,
    resctrl_root: str,
    cg_version: str,
    old_cg_version: str | None,
    cgroup_parent: str,
    cgroup_mounts: str,
    cgroup_prefix: str,
    metrics_port: int | None,
    stop_jobs_on_exit: bool,
    max_spec_bytes: int,
    max_user_bytes: int,
    keep_finished: float,
    keep_finished_per_user: int,
    status_rows: int,
    user_share: float,
    max_log_bytes: int,
    max_user_log_bytes: int,
    tunes: tuple[str, ...],
    quiet: bool,
) -> None:
    """Run the node agent: start queued jobs in their own cgroups, slim DNN jobs'
    cpusets (allocator) and throttle co-located CPU jobs (eliminator)."""
    from coda.runtime.agent import AgentConfig
    from coda.runtime.cgroups import CgroupError, detect
    from coda.runtime.local_queue import local_agent
    from coda.runtime.metrics import MetricsServer, agent_registry, textfile_exporter
    from coda.runtime.resctrl import Resctrl
    from coda.runtime.service import AgentService

    tune = checked_loop(policy, tunes, period, window)
    if old_cg_version is not None:
        # click's own `deprecated=` is newer than the click some distributions ship.
        click.echo("coda agent: --cgroup is deprecated: use --cgroup-version auto|1|2", err=True)
        cg_version = old_cg_version.removeprefix("v")
    try:
        limits = Limits(
            spec_bytes=max_spec_bytes,
            user_bytes=max_user_bytes,
            keep_finished_s=keep_finished,
            finished_per_user=keep_finished_per_user,
            status_rows=status_rows,
            user_share=user_share,
            log_bytes=max_log_bytes,
            user_log_bytes=max_user_log_bytes,
        )
    except ValueError as e:
        raise click.BadParameter(str(e)) from None
    gpus, gpu_devices, gpu_note = _gpu_devices(gpus, gpu_device_paths)
    try:
        cg = detect(
            cgroup_mounts,
            parent=cgroup_parent,
            prefix=cgroup_prefix,
            prefer=None if cg_version == "auto" else f"v{cg_version}",
        )
    except (CgroupError, ValueError) as e:  # ValueError: a bad --cgroup-parent name
        raise click.ClickException(f"cgroups: {e}") from None
    problem = cg.enable_device_guard() if gpu_devices else None
    if problem is not None:
        if gpu_device_paths:
            raise click.ClickException(f"--gpu-device: GPUs cannot be isolated: {problem}")
        gpu_note = f"GPUs are not isolated (jobs see only CUDA_VISIBLE_DEVICES): {problem}"
        gpu_devices = []
    if cgroup_prefix:  # a fake tree: emulate the kernel's process lists (see faketree.py)
        from coda.runtime.faketree import LiveProcs

        cg = LiveProcs(cg)
    sd, lock = locked_state_dir(state_dir)
    try:
        store = Store(sd / "coda.db")
    except StoreError as e:
        lock.release()
        raise click.ClickException(str(e)) from None
    say = timestamped(quiet)
    if gpu_note:
        say(gpu_note)
    cfg = AgentConfig(
        period_s=period,
        window_s=window,
        stall_s=stall,
        policy=policy,
        gpus=gpus,
        gpu_devices=gpu_devices,
        cpus=_parse_cpu_list(cpu_list),
        bus_gbps=bus_gbps,
        take_back=take_back,
        tune=tune,
        limits=limits,
    )
    try:
        node_agent = local_agent(store, cg, sd, cfg, resctrl=Resctrl(resctrl_root), log=say)
    except ValueError as e:
        store.close()
        lock.release()
        raise click.BadParameter(str(e), param_hint="--tune") from None
    stop = {"flag": False}

    def on_signal(signum: int, _frame: object) -> None:
        stop["flag"] = True

    try:
        registry = agent_registry(node_agent)
        server = (
            MetricsServer("127.0.0.1", metrics_port, registry) if metrics_port is not None else None
        )
    except OSError as e:
        store.close()
        lock.release()
        raise click.ClickException(f"metrics port {metrics_port}: {e.strerror or e}") from None
    sock = node_agent.source.run_dir / SOCKET_NAME
    try:
        node_agent.start()
        try:
            service = AgentService(sd / "coda.db", limits)
            control = ControlServer(sock, service, on_exit=service.close)
        except OSError as e:
            raise StateDirError(f"control socket {sock}: {e.strerror or e}") from None
    except (StateDirError, StoreError, CgroupError, OSError) as e:
        # OSError: e.g. mkdir of the parent group without root. Release everything.
        if server is not None:
            server.close()
        node_agent.source.parent.release()
        store.close()
        lock.release()
        if isinstance(e, StateDirError | StoreError):
            raise click.ClickException(str(e)) from None
        hint = "" if os.geteuid() == 0 else " (the agent needs root to manage cgroups)"
        raise click.ClickException(f"cgroups: {e}{hint}") from None
    # Handlers only once the agent is up: a failed start leaves the caller's as they were.
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    node = node_agent.node
    assert node is not None
    say(
        f"agent on {node.name}: {node.cores} cores, {node.gpus} GPUs"
        f"{' (isolated)' if gpu_devices else ''}, cgroup v{cg.version}, "
        f"policy {policy}, period {period:g} s, state {sd}"
        + (f", metrics on :{server.port}" if server else "")
    )
    (sd / "agent.pid").write_text(f"{os.getpid()}\n")
    export = textfile_exporter(registry, sd / "metrics.prom", say)
    failure = ""
    try:
        if server is not None:
            server.serve_in_background()
        node_agent.run(lambda: stop["flag"], after_tick=export)
    except StoreError as e:  # the database was damaged under the running agent
        failure = str(e)
    finally:
        control.close()  # no new submissions while the agent leaves
        try:
            node_agent.shutdown(stop_jobs=stop_jobs_on_exit)
        except StoreError as e:
            failure = failure or str(e)
        if server is not None:
            server.close()
        (sd / "agent.pid").unlink(missing_ok=True)
        store.close()
        lock.release()
        left = len(node_agent.jobs.running)
        say("agent stopped" + (f"; {left} job(s) left running for the next agent" if left else ""))
    if failure:
        raise click.ClickException(failure)
