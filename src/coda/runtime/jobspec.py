"""A job spec: what a user submits, and the checks that keep it runnable and sandboxed.

Every limit on what one spec may hold lives here; the agent and the CLI both check a
spec with ``JobSpec.validate`` (the agent again on receipt: it trusts no client).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coda.workload.limits import MAX_NODE_CORES, MAX_NODE_GPUS, MAX_TIME_LIMIT_S

# Used with fullmatch: `$` alone would let a trailing newline through.
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
ENV_KEY_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# What one job spec may hold: enough for any real job, small enough that a hostile spec
# cannot make the agent or the database carry megabytes per job.
MAX_ARGS = 4096
MAX_ENV = 1024
MAX_SPEC_BYTES = 1 << 20  # a spec's text fields together, as stored (``stored_sizes``)
MAX_CORES = MAX_NODE_CORES  # a job runs on this one node: the simulator's node caps
MAX_GPUS = MAX_NODE_GPUS
MAX_TIME_LIMIT = MAX_TIME_LIMIT_S


class SpecError(ValueError):
    """A job spec that cannot run; the message says what to change."""


def _utf8(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8 (no lone surrogates: the database, the shim's
    exec and every terminal need real text)."""
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def _whole(value: Any, what: str, lo: int, hi: int) -> int:
    # bool is an int to Python but never a core count to a user.
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise SpecError(f"{what} must be a whole number in [{lo}, {hi}], got {value!r}")
    return value


def checked_time_limit(value: Any, what: str) -> float | None:
    """A time limit in seconds, or None for none."""
    if value is None:
        return None
    # Range first: it is False for nan and needs no float() of a huge int.
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not (0 < value <= MAX_TIME_LIMIT)
    ):
        raise SpecError(
            f"{what} must be seconds in (0, {MAX_TIME_LIMIT}] (366 days), or null for no "
            f"limit, got {value!r}"
        )
    return float(value)


@dataclass
class JobSpec:
    """What a user submits. ``argv`` runs without a shell."""

    argv: list[str]
    name: str = ""
    cores: int = 1
    gpus: int = 0
    model: str = ""
    cwd: str = ""
    env: dict[str, str] = field(default_factory=dict)
    time_limit_s: float | None = None  # None: no limit
    # The job says it checkpoints: a requeue (for a DNN job's cores) loses only its work
    # since its last checkpoint. Otherwise CODA assumes it loses its whole run.
    checkpoints: bool = False

    @property
    def kind(self) -> str:
        return "dnn" if self.gpus > 0 else "cpu"

    def validate(
        self, node_cores: int | None = None, node_gpus: int | None = None, probe_cwd: bool = True
    ) -> None:
        """Raise SpecError for anything that could not run or could escape its sandbox.

        ``probe_cwd``: also check that the working directory exists, as whoever calls
        this. The root agent passes False: as root it would tell any user whether a
        directory exists anywhere (``/root/...``); the job enters it as its own user when
        it starts, and fails then (as for any program it cannot run)."""
        if not isinstance(self.argv, list) or not self.argv:
            raise SpecError("the command is empty: give the program and its arguments")
        if not all(isinstance(a, str) for a in self.argv):
            raise SpecError("every command argument must be a string")
        if len(self.argv) > MAX_ARGS:
            raise SpecError(f"the command has {len(self.argv)} arguments; at most {MAX_ARGS}")
        if any("\0" in a for a in self.argv):
            raise SpecError("command arguments must not contain NUL bytes")
        if not self.argv[0]:
            raise SpecError("the program name is empty")
        for what, v in (("name", self.name), ("model", self.model), ("cwd", self.cwd)):
            if not isinstance(v, str):
                raise SpecError(f"{what} must be a string, got {type(v).__name__}")
        if not isinstance(self.env, dict):
            raise SpecError("env must be an object of strings")
        if len(self.env) > MAX_ENV:
            raise SpecError(f"env has {len(self.env)} variables; at most {MAX_ENV}")
        rule = "1-64 letters, digits, '_', '.' or '-', starting with a letter or digit"
        if not self.name:
            program = Path(self.argv[0]).name or "job"
            if not NAME_RE.fullmatch(program):
                raise SpecError(
                    f"the program's name {program!r} cannot serve as the job name ({rule}):"
                    " give a name (--name, or name in the spec)"
                )
            self.name = program
        if not NAME_RE.fullmatch(self.name):
            raise SpecError(f"job name {self.name!r} is not allowed: use {rule}")
        _whole(self.cores, "cores", 1, MAX_CORES)
        _whole(self.gpus, "gpus", 0, MAX_GPUS)
        self.time_limit_s = checked_time_limit(self.time_limit_s, "the time limit")
        if not isinstance(self.checkpoints, bool):
            raise SpecError(f"checkpoints must be true or false, got {self.checkpoints!r}")
        if node_cores is not None and self.cores > node_cores:
            raise SpecError(f"asks for {self.cores} cores but this node has {node_cores}")
        if node_gpus is not None and self.gpus > node_gpus:
            raise SpecError(f"asks for {self.gpus} GPUs but this node has {node_gpus}")
        if self.model and not NAME_RE.fullmatch(self.model):
            raise SpecError(f"model name {self.model!r} is not allowed (same rule as job names)")
        if not self.cwd:
            self.cwd = os.getcwd()
        if "\0" in self.cwd or not os.path.isabs(self.cwd):
            raise SpecError(f"working directory {self.cwd!r} is not an absolute path")
        if probe_cwd and not os.path.isdir(self.cwd):
            raise SpecError(f"working directory {self.cwd!r} is not an existing absolute path")
        for k, v in self.env.items():
            if not isinstance(k, str) or not ENV_KEY_RE.fullmatch(k):
                raise SpecError(f"environment variable name {k!r} is not allowed")
            if not isinstance(v, str) or "\0" in v:
                raise SpecError(f"environment variable {k} must be a string without NUL bytes")
            if k.startswith("CODA_"):
                raise SpecError(f"environment variable {k}: CODA_* variables are set by the agent")
        for what, texts in (
            ("command", self.argv),
            ("working directory", [self.cwd]),
            ("environment", [*self.env, *self.env.values()]),
        ):
            if not all(_utf8(t) for t in texts):
                raise SpecError(f"the {what} is not valid UTF-8 text")
        size = sum(self.stored_sizes().values())
        if size > MAX_SPEC_BYTES:
            raise SpecError(f"the spec holds {size} bytes as stored; at most {MAX_SPEC_BYTES}")

    @property
    def stored_argv(self) -> str:
        """The command as the database holds it: JSON, non-ASCII text as UTF-8 (as
        ``json.loads`` reads back), control characters escaped."""
        return json.dumps(self.argv, ensure_ascii=False)

    @property
    def stored_env(self) -> str:
        return json.dumps(self.env, ensure_ascii=False)

    def stored_sizes(self) -> dict[str, int]:
        """Bytes each text field takes in the database (its JSON for the command and
        environment): what every cap counts, the same way for every check."""

        def n(text: str) -> int:
            return len(text.encode("utf-8", "surrogatepass"))

        return {
            "argv": n(self.stored_argv),
            "env": n(self.stored_env),
            "cwd": n(self.cwd),
            "name": n(self.name),
            "model": n(self.model),
        }

    @classmethod
    def from_dict(cls, d: Any) -> JobSpec:
        """A spec from a JSON object, with clear errors for unknown or mistyped keys."""
        if not isinstance(d, dict):
            raise SpecError("a job spec must be a JSON object")
        known = {"argv", "name", "cores", "gpus", "model", "cwd", "env", "time_limit_s",
                 "checkpoints"}  # fmt: skip
        extra = sorted(repr(k) for k in set(d) - known)
        if extra:
            raise SpecError(f"unknown key(s) in job spec: {', '.join(extra)}")
        if "argv" not in d:
            raise SpecError("job spec needs 'argv': the program and its arguments, as a list")
        env = d.get("env", {})
        if not isinstance(env, dict):
            raise SpecError("'env' must be an object of strings")
        argv = d["argv"]
        if not isinstance(argv, list):
            raise SpecError("'argv' must be a list of strings")
        spec = cls(
            argv=list(argv),
            name=d.get("name", ""),
            cores=d.get("cores", 1),
            gpus=d.get("gpus", 0),
            model=d.get("model", ""),
            cwd=d.get("cwd", ""),
            env=dict(env),
            time_limit_s=checked_time_limit(d.get("time_limit_s"), "'time_limit_s'"),
            checkpoints=d.get("checkpoints", False),
        )
        if not isinstance(spec.checkpoints, bool):
            raise SpecError(f"'checkpoints' must be true or false, got {spec.checkpoints!r}")
        # Types now, so that a wrong one is this error and never a crash further on.
        for what in ("name", "model", "cwd"):
            if not isinstance(getattr(spec, what), str):
                raise SpecError(
                    f"'{what}' must be a string, got {type(getattr(spec, what)).__name__}"
                )
        _whole(spec.cores, "'cores'", 1, MAX_CORES)
        _whole(spec.gpus, "'gpus'", 0, MAX_GPUS)
        if not all(isinstance(a, str) for a in spec.argv):
            raise SpecError("'argv' must be a list of strings")
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in spec.env.items()):
            raise SpecError("'env' must be an object of strings")
        return spec

    def as_dict(self) -> dict[str, Any]:
        return {
            "argv": list(self.argv),
            "name": self.name,
            "cores": self.cores,
            "gpus": self.gpus,
            "model": self.model,
            "cwd": self.cwd,
            "env": dict(self.env),
            "time_limit_s": self.time_limit_s,
        }
