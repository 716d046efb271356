"""A job spec from the options of ``coda submit`` and ``coda run`` (or their ``--spec``
file), checked as the submitting user sees it."""

from __future__ import annotations

import json
import os
import shutil
import stat
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from coda import strict_json
from coda.params import AsciiIntRange
from coda.runtime.cgroups import parse_cpus
from coda.runtime.jobspec import MAX_CORES, MAX_GPUS, MAX_SPEC_BYTES, JobSpec, SpecError
from coda.runtime.timelimit import FORMS, parse_time_limit
from coda.strict_json import StrictJSONError
from coda.text import clip

MAX_SPEC_FILE = 2 * MAX_SPEC_BYTES
F = TypeVar("F", bound=Callable[..., Any])  # a click command function, decorated in place


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


def spec_options(f: F) -> F:
    """The job spec's options and its command: the same for ``submit`` and ``run``."""
    opts = [
        click.option("--name", default="", help="Job name [default: the program's name]."),
        click.option(
            "--cores",
            type=AsciiIntRange(1, MAX_CORES),
            default=None,
            help=f"Cores asked for, 1-{MAX_CORES} [default: 1].",
        ),
        click.option(
            "--gpus",
            type=AsciiIntRange(0, MAX_GPUS),
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
        click.option(
            "--cwd",
            type=click.Path(exists=True, file_okay=False),
            default=None,
            help="Working directory of the job [default: this one].",
        ),
        click.option(
            "--time",
            "time_limit_s",
            type=TimeLimit(),
            default=None,
            metavar="DURATION",
            help=f"Time limit, as Slurm's --time: {FORMS}; at most 366 days [default: "
            "none]. The agent plans backfill with it and stops the job when it is reached "
            "(SIGTERM, then SIGKILL).",
        ),
        click.option(
            "--checkpoints",
            is_flag=True,
            default=None,
            help="The job checkpoints: taken back for a DNN job's cores, it loses only its "
            "work since its last checkpoint (CODA may then lend it a GPU node's spare cores; "
            "a job that does not say so loses its whole run).",
        ),
        click.option(
            "--spec",
            "spec_file",
            type=click.Path(exists=True, dir_okay=False),
            default=None,
            help="Job spec as JSON: {argv, name, cores, gpus, model, cwd, env, time_limit_s, "
            "checkpoints}.",
        ),
        click.argument("command", nargs=-1, type=click.UNPROCESSED),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def _read_spec(spec_file: str) -> bytes:
    """The spec file's bytes (at most one more than a spec may have). Opened without
    waiting: a FIFO that no process writes is an error, not a hang (one that a process
    writes, such as <(...), reads as usual)."""
    fd = os.open(spec_file, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        fifo = stat.S_ISFIFO(os.fstat(fd).st_mode)
        os.set_blocking(fd, True)
        f = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with f:
        raw = f.read(MAX_SPEC_FILE + 1)
    if fifo and not raw:
        raise click.ClickException(f"{spec_file}: a FIFO that no process writes")
    return raw


def build_spec(kw: dict[str, Any]) -> JobSpec:
    """The spec that the --spec file and the options (which win) describe, with the
    submitter's PATH and an absolute working directory."""
    spec_file = kw.get("spec_file")
    if spec_file:
        try:
            raw = _read_spec(spec_file)
            if len(raw) > MAX_SPEC_FILE:
                raise click.ClickException(f"{spec_file}: larger than {MAX_SPEC_FILE} bytes")
            data = strict_json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as e:
            raise click.ClickException(f"{spec_file}: not UTF-8 text: {e.reason}") from None
        except json.JSONDecodeError as e:
            raise click.ClickException(f"{spec_file}: not valid JSON: {e}") from None
        except StrictJSONError as e:
            raise click.ClickException(f"{spec_file}: {e}") from None
        except ValueError as e:  # an integer of over 4,300 digits
            raise click.ClickException(f"{spec_file}: unreadable JSON: {str(e)[:80]}") from None
        except (OSError, RecursionError) as e:
            why = getattr(e, "strerror", None) or e  # the path is said once, first
            raise click.ClickException(f"{spec_file}: cannot read it: {why}") from None
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
        ("checkpoints", "checkpoints"),
    ):
        if kw.get(opt) not in (None, ""):
            setattr(spec, key, kw[opt])
    given: set[str] = set()
    for pair in kw.get("env_pairs", ()):
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"--env {clip(pair)}: expected KEY=VALUE")
        if key in given:  # the last would win, silently
            raise click.BadParameter(f"--env {clip(key)} is given twice")
        given.add(key)
        spec.env[key] = value
    # The job finds its programs as its submitter does (the agent's own PATH, root's
    # perhaps, is never passed on).
    if "PATH" not in spec.env and os.environ.get("PATH"):
        spec.env["PATH"] = os.environ["PATH"]
    if spec.cwd:
        spec.cwd = os.path.abspath(spec.cwd)
    return spec


def validate_spec(spec: JobSpec, node: dict[str, Any], spec_file: str | None = None) -> None:
    """The spec's own checks and the program's existence, as the submitting user sees
    them (the agent checks the spec again: it trusts nothing a client sends). With a
    spec file, an error names it (what the options set is checked with it)."""
    where = f"{spec_file} (with the options): " if spec_file else ""
    node_cores = len(parse_cpus(node.get("cpus", "") or "")) or None
    node_gpus = node.get("gpus")
    try:
        spec.validate(node_cores, node_gpus if isinstance(node_gpus, int) else None)
    except SpecError as e:
        raise click.ClickException(f"{where}{e}") from None
    prog = spec.argv[0]
    if "/" in prog:
        path = prog if os.path.isabs(prog) else os.path.join(spec.cwd, prog)
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise click.ClickException(f"{where}program {prog!r} is not an executable file")
    elif shutil.which(prog, path=spec.env.get("PATH", os.environ.get("PATH"))) is None:
        raise click.ClickException(f"{where}program {prog!r} is not on PATH")
