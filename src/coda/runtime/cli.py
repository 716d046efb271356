"""Command line of the node runtime: ``coda agent``, ``submit``, ``run``, ``status``, ``cancel``.

Registered on the main ``coda`` group by ``register``; imports stay lazy so the
simulator's commands do not pay for them.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from coda.params import FiniteFloat
from coda.runtime.cgroups import MAX_CPU_ID, parse_cpus
from coda.runtime.client import AgentClient, ClientError, connect, socket_path
from coda.runtime.control import SOCKET_NAME, ControlServer
from coda.runtime.statedir import StateDirError, secure_dir
from coda.runtime.store import (
    ACTIVE,
    FINAL,
    MAX_CORES,
    MAX_GPUS,
    MAX_JOB_ID,
    MAX_LOG_TAIL,
    MAX_SPEC_BYTES,
    JobSpec,
    SpecError,
    Store,
    StoreError,
)
from coda.runtime.timelimit import FORMS, format_time_limit, parse_time_limit

MAX_SPEC_FILE = 2 * MAX_SPEC_BYTES
T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])  # a click command function, decorated in place

SYSTEM_STATE_DIR = "/var/lib/coda"
JOB_ID = click.IntRange(min=1, max=MAX_JOB_ID)


if TYPE_CHECKING:
    _FloatParamType = click.ParamType[float]
else:  # older click (>= 8.1 is supported) cannot subscript ParamType at run time
    _FloatParamType = click.ParamType


class TimeLimit(_FloatParamType):
    """A Slurm time limit (``--time 1-02:00:00``), as seconds."""

    name = "duration"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, float):
            return value
        try:
            return parse_time_limit(str(value))
        except ValueError as e:
            self.fail(str(e), param, ctx)


def default_state_dir() -> str:
    """$CODA_STATE_DIR; else the node's agent (/var/lib/coda) for root, or for anyone
    while a root agent listens there; else the user's own."""
    env = os.environ.get("CODA_STATE_DIR")
    if env:
        return env
    if os.geteuid() == 0 or socket_path(SYSTEM_STATE_DIR).exists():
        return SYSTEM_STATE_DIR
    return str(Path.home() / ".local" / "state" / "coda")


def _state_dir_option(f: F) -> F:
    return click.option(
        "--state-dir",
        # Not readable=True: a root agent's state directory is closed to its users.
        type=click.Path(file_okay=False, readable=False),
        default=default_state_dir,
        show_default="$CODA_STATE_DIR, else /var/lib/coda as root or while its agent runs, "
        "else ~/.local/state/coda",
        help="Where the agent keeps its database and job logs (0700; its socket and "
        "progress files are in STATE_DIR.run).",
    )(f)


def _client(state_dir: str, create: bool = False) -> AgentClient:
    try:
        return connect(state_dir, create=create)
    except (ClientError, StateDirError, StoreError) as e:
        raise click.ClickException(str(e)) from None


def _ask(state_dir: str, call: Callable[[AgentClient], T]) -> tuple[AgentClient, T]:
    """One request to the node's jobs, its errors as one line; the client is closed."""
    client = _client(state_dir)
    try:
        return client, call(client)
    except ClientError as e:
        raise click.ClickException(str(e)) from None
    finally:
        client.close()


class AgentLock:
    """One agent per state directory: an exclusive flock held for the agent's life."""

    def __init__(self, state_dir: Path, what: str = "agent") -> None:
        self.path = state_dir / f"{what}.lock"
        self.what = what
        self._fd: int | None = None

    def acquire(self) -> None:
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._fd)
            self._fd = None
            raise click.ClickException(
                f"another {self.what} is running on {self.path.parent} (lock {self.path} is held)"
            ) from None
        os.ftruncate(self._fd, 0)
        os.write(self._fd, f"{os.getpid()}\n".encode())

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    @staticmethod
    def held(state_dir: Path) -> bool:
        path = state_dir / "agent.lock"
        if not path.exists():
            return False
        fd = os.open(path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return False
        except BlockingIOError:
            return True
        finally:
            os.close(fd)


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


def parse_tunes(items: tuple[str, ...]) -> dict[str, str]:
    """``--tune PART.FIELD=VALUE`` options as a dict (values checked by tune_policy)."""
    tune: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or "." not in key:
            raise click.BadParameter(f"{item!r}: expected PART.FIELD=VALUE", param_hint="--tune")
        tune[key.strip()] = value.strip()
    return tune


def policy_options(f: F) -> F:
    """--policy, --tune and --quiet: shared by every daemon that drives a policy."""
    opts = [
        click.option("--policy", default="coda", show_default=True,
                     help="Policy (coda policies list)."),
        click.option("--tune", "tunes", multiple=True, metavar="PART.FIELD=VALUE",
                     help="Override a policy knob, e.g. eliminator.step_down=0.5 "
                     "(see docs/runtime.md)."),
        click.option("--quiet", is_flag=True),
    ]  # fmt: skip
    for o in reversed(opts):
        f = o(f)
    return f


def control_loop_options(f: F) -> F:
    """--period, --window, --stall (and policy_options): the node agent's control loop,
    the same for `coda agent` and `coda slurm agent`."""
    opts = [
        click.option("--period", type=FiniteFloat(min=0.05, max=3600), default=1.0,
                     show_default=True, help="Control period, seconds (0.05-3600)."),
        click.option("--window", type=FiniteFloat(min=0.05, max=3600), default=2.0,
                     show_default=True,
                     help="Throughput window, seconds (0.05-3600): one allocator sample "
                     "per window."),
        click.option("--stall", type=FiniteFloat(min=0.1, max=86400), default=15.0,
                     show_default=True,
                     help="Seconds (0.1-86400) without progress after which a job's samples "
                     "are not trusted."),
    ]  # fmt: skip
    for o in reversed(opts):
        f = o(f)
    return policy_options(f)


def checked_policy(policy: str, tunes: tuple[str, ...]) -> dict[str, str]:
    """The policy name checked and the --tune options parsed, or a usage error."""
    from coda.policy import POLICIES

    if policy not in POLICIES:
        raise click.BadParameter(f"unknown policy {policy!r}; known: {', '.join(POLICIES)}")
    return parse_tunes(tunes)


def checked_loop(
    policy: str, tunes: tuple[str, ...], period: float, window: float
) -> dict[str, str]:
    """checked_policy, plus the control loop's own rule: a window spans whole periods."""
    tune = checked_policy(policy, tunes)
    if window < period:
        raise click.BadParameter("--window must be at least --period")
    return tune


def locked_state_dir(state_dir: str, what: str = "agent") -> tuple[Path, AgentLock]:
    """The daemon's state directory with its lock held: created 0700, or an existing one
    of this user's that nobody else can write, tightened to 0700 (else one line, exit 1).
    Files it makes are 0600 (umask)."""
    os.umask(0o077)
    try:
        sd = secure_dir(state_dir)
    except StateDirError as e:
        raise click.ClickException(str(e)) from None
    lock = AgentLock(sd, what)
    lock.acquire()
    return sd, lock


def timestamped(quiet: bool) -> Callable[[str], None]:
    """A daemon's log line writer: ``HH:MM:SS message`` on stdout, or nothing."""
    if quiet:
        return lambda m: None
    return lambda m: click.echo(f"{time.strftime('%H:%M:%S')} {m}")


def register(main: click.Group) -> None:
    main.add_command(agent)
    main.add_command(submit)
    main.add_command(run)
    main.add_command(status)
    main.add_command(cancel)
    main.add_command(logs)


# ------------------------------------------------------------------- agent
@click.command()
@_state_dir_option
@control_loop_options
@click.option(
    "--gpus",
    type=click.IntRange(min=0, max=MAX_GPUS),
    default=None,
    help=f"GPUs on this node, 0-{MAX_GPUS} [default: /dev/nvidia0.. devices found].",
)
@click.option("--cpus", "cpu_list", default=None, help="CPUs to manage, e.g. 0-7 [default: all].")
@click.option(
    "--cgroup",
    "cg_version",
    type=click.Choice(["auto", "v1", "v2"]),
    default="auto",
    show_default=True,
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
    type=click.IntRange(min=0, max=65535),
    default=None,
    help="Serve Prometheus metrics on this port (0: any free port).",
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
    cpu_list: str | None,
    cg_version: str,
    cgroup_parent: str,
    cgroup_mounts: str,
    cgroup_prefix: str,
    metrics_port: int | None,
    stop_jobs_on_exit: bool,
    tunes: tuple[str, ...],
    quiet: bool,
) -> None:
    """Run the node agent: start queued jobs in their own cgroups, slim DNN jobs'
    cpusets (allocator) and throttle co-located CPU jobs (eliminator)."""
    from coda.runtime.agent import AgentConfig, NodeAgent
    from coda.runtime.cgroups import CgroupError, detect
    from coda.runtime.metrics import MetricsServer, agent_registry, textfile_exporter
    from coda.runtime.resctrl import Resctrl
    from coda.runtime.service import AgentService

    tune = checked_loop(policy, tunes, period, window)
    sd, lock = locked_state_dir(state_dir)
    if gpus is None:
        gpus = sum(1 for p in Path("/dev").glob("nvidia[0-9]*") if p.name[6:].isdigit())
    try:
        cg = detect(
            cgroup_mounts,
            parent=cgroup_parent,
            prefix=cgroup_prefix,
            prefer=None if cg_version == "auto" else cg_version,
        )
    except (CgroupError, ValueError) as e:  # ValueError: a bad --cgroup-parent name
        lock.release()
        raise click.ClickException(f"cgroups: {e}") from None
    if cgroup_prefix:  # a fake tree: emulate the kernel's process lists (see faketree.py)
        from coda.runtime.faketree import LiveProcs

        cg = LiveProcs(cg)
    try:
        store = Store(sd / "coda.db")
    except StoreError as e:
        lock.release()
        raise click.ClickException(str(e)) from None
    say = timestamped(quiet)
    cfg = AgentConfig(
        period_s=period,
        window_s=window,
        stall_s=stall,
        policy=policy,
        gpus=gpus,
        cpus=_parse_cpu_list(cpu_list),
        tune=tune,
    )
    try:
        node_agent = NodeAgent(store, cg, sd, cfg, resctrl=Resctrl(), log=say)
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
    sock = node_agent.run_dir / SOCKET_NAME
    try:
        node_agent.start()
        try:
            service = AgentService(sd / "coda.db")
            control = ControlServer(sock, service, on_exit=service.close)
        except OSError as e:
            raise StateDirError(f"control socket {sock}: {e.strerror or e}") from None
    except (StateDirError, StoreError, CgroupError, OSError) as e:
        # OSError: e.g. mkdir of the parent group without root. Release everything.
        if server is not None:
            server.close()
        node_agent.release_parent()
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
        f"agent on {node.name}: {node.cores} cores, {node.gpus} GPUs, cgroup v{cg.version}, "
        f"policy {policy}, period {period:g} s, state {sd}"
        + (f", metrics on :{server.port}" if server else "")
    )
    (sd / "agent.pid").write_text(f"{os.getpid()}\n")
    export = textfile_exporter(registry, sd / "metrics.prom", say)

    real_tick = node_agent.tick

    def tick_and_export() -> None:
        real_tick()
        export()

    node_agent.tick = tick_and_export  # type: ignore[method-assign]
    failure = ""
    try:
        if server is not None:
            server.serve_in_background()
        node_agent.run(lambda: stop["flag"])
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
        left = len(node_agent.running)
        say("agent stopped" + (f"; {left} job(s) left running for the next agent" if left else ""))
    if failure:
        raise click.ClickException(failure)


# ------------------------------------------------------------ submit / run
def _spec_options(f: F) -> F:
    opts = [
        click.option("--name", default="", help="Job name [default: the program's name]."),
        click.option(
            "--cores",
            type=click.IntRange(1, MAX_CORES),
            default=None,
            help=f"Cores asked for, 1-{MAX_CORES} [default: 1].",
        ),
        click.option(
            "--gpus",
            type=click.IntRange(0, MAX_GPUS),
            default=None,
            help=f"GPUs asked for, 0-{MAX_GPUS}; > 0 makes a DNN job.",
        ),
        click.option(
            "--model",
            default="",
            help="Model name: jobs of one model share what the allocator learns.",
        ),
        click.option(
            "--env", "env_pairs", multiple=True, metavar="KEY=VALUE", help="Extra environment."
        ),
        click.option("--cwd", type=click.Path(exists=True, file_okay=False), default=None),
        click.option(
            "--time",
            "time_limit_s",
            type=TimeLimit(),
            default=None,
            metavar="DURATION",
            help=f"Time limit, as Slurm's --time: {FORMS}; at most 366 days [default: "
            "none]. The agent plans backfill with it.",
        ),
        click.option(
            "--spec",
            "spec_file",
            type=click.Path(exists=True, dir_okay=False),
            default=None,
            help="Job spec as JSON: {argv, name, cores, gpus, model, cwd, env, time_limit_s}.",
        ),
        click.argument("command", nargs=-1, type=click.UNPROCESSED),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def _build_spec(kw: dict[str, Any]) -> JobSpec:
    spec_file = kw.get("spec_file")
    if spec_file:
        try:
            with open(spec_file, "rb") as f:
                raw = f.read(MAX_SPEC_FILE + 1)
            if len(raw) > MAX_SPEC_FILE:
                raise click.ClickException(f"{spec_file}: larger than {MAX_SPEC_FILE} bytes")
            data = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as e:
            raise click.ClickException(f"{spec_file}: not UTF-8 text: {e.reason}") from None
        except json.JSONDecodeError as e:
            raise click.ClickException(f"{spec_file}: not valid JSON: {e}") from None
        except (OSError, RecursionError) as e:
            raise click.ClickException(f"{spec_file}: cannot read it: {e}") from None
        try:
            spec = JobSpec.from_dict(data)
        except SpecError as e:
            raise click.ClickException(f"{spec_file}: {e}") from None
        if kw["command"]:
            raise click.UsageError("give the command either in --spec or after --, not both")
    else:
        spec = JobSpec(argv=list(kw["command"]))
    for key, opt in (
        ("name", "name"),
        ("cores", "cores"),
        ("gpus", "gpus"),
        ("model", "model"),
        ("cwd", "cwd"),
        ("time_limit_s", "time_limit_s"),
    ):
        if kw.get(opt) not in (None, ""):
            setattr(spec, key, kw[opt])
    for pair in kw.get("env_pairs", ()):
        key, sep, value = pair.partition("=")
        if not sep:
            raise click.BadParameter(f"--env {pair!r}: expected KEY=VALUE")
        spec.env[key] = value
    # The job finds its programs as its submitter does (the agent's own PATH, root's
    # perhaps, is never passed on).
    if "PATH" not in spec.env and os.environ.get("PATH"):
        spec.env["PATH"] = os.environ["PATH"]
    if spec.cwd:
        spec.cwd = os.path.abspath(spec.cwd)
    return spec


def _validate(spec: JobSpec, node: dict[str, Any]) -> None:
    """The spec's own checks and the program's existence, as the submitting user sees
    them (the agent checks the spec again: it trusts nothing a client sends)."""
    node_cores = len(parse_cpus(node.get("cpus", "") or "")) or None
    node_gpus = node.get("gpus")
    try:
        spec.validate(node_cores, node_gpus if isinstance(node_gpus, int) else None)
    except SpecError as e:
        raise click.ClickException(str(e)) from None
    prog = spec.argv[0]
    if "/" in prog:
        path = prog if os.path.isabs(prog) else os.path.join(spec.cwd, prog)
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise click.ClickException(f"program {prog!r} is not an executable file")
    elif shutil.which(prog, path=spec.env.get("PATH", os.environ.get("PATH"))) is None:
        raise click.ClickException(f"program {prog!r} is not on PATH")


def _submit(state_dir: str, kw: dict[str, Any]) -> tuple[AgentClient, int]:
    spec = _build_spec(kw)
    client = _client(state_dir, create=True)
    try:
        node = client.status(None, False, 0)["agent"]
        _validate(spec, node)
        job_id = client.submit(spec)
    except ClientError as e:
        client.close()
        raise click.ClickException(str(e)) from None
    except click.ClickException:
        client.close()
        raise
    if not client.via_agent:
        click.echo(
            f"warning: no agent is running on {state_dir}; job {job_id} waits until one "
            f"starts (coda agent --state-dir {state_dir})",
            err=True,
        )
    return client, job_id


@click.command(context_settings={"ignore_unknown_options": True})
@_state_dir_option
@_spec_options
def submit(state_dir: str, **kw: Any) -> None:
    """Queue a job: coda submit --cores 4 --gpus 1 -- python train.py. Prints its id.
    It runs as you (the agent learns who you are from the kernel, not from the spec)."""
    client, job_id = _submit(state_dir, kw)
    client.close()
    click.echo(job_id)


@click.command(context_settings={"ignore_unknown_options": True})
@_state_dir_option
@_spec_options
@click.option("--poll", type=FiniteFloat(min=0.05, max=60), default=0.5, show_default=True)
def run(state_dir: str, poll: float, **kw: Any) -> None:
    """Submit a job and wait for it, showing what CODA decides; exits with its status.
    Ctrl-C cancels the job."""
    client, job_id = _submit(state_dir, kw)
    click.echo(f"job {job_id} submitted")
    seen = 0
    state = ""
    try:
        while True:
            got = client.status(job_id, False, 50)
            row = got["jobs"][0]
            for d in got["decisions"]:
                if d["id"] > seen:
                    seen = d["id"]
                    click.echo(f"  {_fmt_decision(d)}")
            if row.state != state:
                state = row.state
                click.echo(f"job {job_id}: {state}" + (f" ({row.message})" if row.message else ""))
            if row.state in FINAL:
                break
            time.sleep(poll)
    except KeyboardInterrupt:
        _quiet_cancel(client, job_id)
        click.echo(f"job {job_id}: cancel requested", err=True)
        sys.exit(130)
    except ClientError as e:
        raise click.ClickException(str(e)) from None
    finally:
        client.close()
    code = row.exit_code if row.exit_code is not None else 1
    if code < 0:  # killed by signal N: exit 128 + N, as a shell reports it
        code = 128 - code
    sys.exit(0 if row.state == "done" else (code if 0 < code < 256 else 1))


def _quiet_cancel(client: AgentClient, job_id: int) -> None:
    try:
        client.cancel([job_id])
    except ClientError as e:
        click.echo(f"job {job_id}: cancel failed: {e}", err=True)


# --------------------------------------------------------- status / cancel
def _fmt_decision(d: dict[str, Any]) -> str:
    t = time.strftime("%H:%M:%S", time.localtime(d["t"]))
    detail = {k: v for k, v in d["detail"].items() if k != "mono"}
    why = detail.pop("why", None)
    text = " ".join(f"{k}={v}" for k, v in detail.items())
    if isinstance(why, dict) and why.get("levels"):
        lv = ", ".join(f"{c}c: {m[0]:.4g}/s x{m[1]}" for c, m in why["levels"].items())
        text += f" [{why.get('phase')}; measured {lv}]"
    elif why:
        text += f" [{why}]"
    job = f"job {d['job_id']} " if d["job_id"] is not None else ""
    return f"{t} {job}{d['component']}: {d['action']} {text}".rstrip()


@click.command()
@_state_dir_option
@click.argument("job_id", type=JOB_ID, required=False)
@click.option("--all", "show_all", is_flag=True, help="Also list finished jobs (last 50).")
@click.option(
    "--decisions",
    type=click.IntRange(min=0, max=1000),
    default=10,
    show_default=True,
    help="Recent decisions to show.",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def status(
    state_dir: str, job_id: int | None, show_all: bool, decisions: int, as_json: bool
) -> None:
    """Jobs, the cores and quota each holds, throughput, time limit, why a queued job
    waits, and why the agent acted (recent decisions)."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    client, got = _ask(state_dir, lambda c: c.status(job_id, show_all, decisions))
    rows, decs, agent_info = got["jobs"], got["decisions"], got["agent"]
    running = client.via_agent
    if as_json:
        click.echo(
            json.dumps(
                {
                    "agent": {**agent_info, "running": running},
                    "jobs": [r.as_dict() for r in rows],
                    "decisions": decs,
                },
                indent=2,
                default=str,
            )
        )
        return
    console = Console(width=None if sys.stdout.isatty() else 160)
    head = "agent running" if running else "NO AGENT RUNNING"
    if agent_info:
        head += (
            f" on {agent_info.get('node')} (CPUs {agent_info.get('cpus')}, "
            f"{agent_info.get('gpus')} GPUs, policy {agent_info.get('policy')})"
        )
    console.print(head, markup=False, highlight=False)
    table = Table(box=None, header_style="bold")
    for col in (
        "id",
        "name",
        "kind",
        "state",
        "time",
        "cores",
        "cpus",
        "quota",
        "throughput",
        "reference",
        "allocator",
        "wait",
        "note",
    ):
        table.add_column(col)
    for r in rows:
        cells = (
            str(r.id),
            r.name,
            r.kind,
            r.state,
            format_time_limit(r.time_limit_s),
            f"{len(parse_cpus(r.cpus))}/{r.cores}" if r.cpus else f"-/{r.cores}",
            r.cpus or "-",
            f"{r.quota:.2f}" if r.state in ACTIVE else "-",
            f"{r.throughput:.4g}/s" if r.throughput is not None else "-",
            f"{r.reference:.4g}/s" if r.reference is not None else "-",
            r.phase or "-",
            (r.wait_reason or "-") if r.state == "queued" else "-",
            r.message or (f"exit {r.exit_code}" if r.exit_code is not None else ""),
        )
        table.add_row(*(Text(c) for c in cells))  # Text: a job's name is never markup
    console.print(table)
    if decs:
        console.print("\nrecent decisions:")
        for d in decs:
            console.print(f"  {_fmt_decision(d)}", markup=False, highlight=False)


@click.command()
@_state_dir_option
@click.argument("job_ids", type=JOB_ID, nargs=-1, required=True)
def cancel(state_dir: str, job_ids: tuple[int, ...]) -> None:
    """Cancel your jobs: queued ones at once, running ones by the agent (SIGTERM, then
    SIGKILL). Root and the agent's own user may cancel anyone's."""
    _, results = _ask(state_dir, lambda c: c.cancel(list(job_ids)))
    failed = [r for r in results if "error" in r]
    for r in results:
        if "error" not in r:
            extra = " (cancel requested)" if r["state"] in ACTIVE else ""
            click.echo(f"job {r['id']}: {r['state']}{extra}")
    if failed:
        raise click.ClickException("; ".join(r["error"] for r in failed))


@click.command()
@_state_dir_option
@click.argument("job_id", type=JOB_ID)
@click.option("--stderr", "stream", flag_value="stderr", help="The job's stderr.")
@click.option("--stdout", "stream", flag_value="stdout", default=True, help="[default]")
@click.option(
    "--tail",
    type=click.IntRange(0, MAX_LOG_TAIL),
    default=65536,
    show_default=True,
    help=f"Bytes from the end (at most {MAX_LOG_TAIL}).",
)
def logs(state_dir: str, job_id: int, stream: str, tail: int) -> None:
    """Print the end of your job's output (the logs live in the agent's private state)."""
    _, text = _ask(state_dir, lambda c: c.logs(job_id, stream, tail))
    click.echo(text, nl=False)
