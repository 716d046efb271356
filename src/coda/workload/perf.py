"""The performance model of DNN and CPU jobs, kept as data (profiles/*.json).

A profile set says, per DNN model, how training speed depends on the cores a job
gets on each node, how much memory bandwidth it uses, how much a bandwidth-hungry
co-runner slows it, and whether it is PCIe-heavy. The simulator engine reads it
only through `JobPerf` (per job shape, cached) and `ProfileSet`. The equations that
combine these values, their provenance and every assumption are in
docs/performance-model.md.
"""

from __future__ import annotations

import copy
import json
import math
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from coda.workload import limits
from coda.workload.jobs import JobTable
from coda.workload.traces._common import clip as _clip
from coda.workload.traces._common import shown as _shown

PROFILE_DIR = Path(__file__).parent / "profiles"
SCHEMA = "coda-profile-set/1"
TABLE_COLUMNS = ("1N1G", "1N2G", "1N4G", "2N2G")
_ONE_NODE_POINTS = ((1, "1N1G"), (2, "1N2G"), (4, "1N4G"))


@dataclass(frozen=True, slots=True)
class JobPerf:
    """Per-node performance of one DNN job shape (model, GPUs per node, nodes)."""

    model: str
    curve_x: tuple[float, ...]  # cores per node, ascending, first 0.0
    curve_y: tuple[float, ...]  # relative training speed in [0, 1], nondecreasing, last 1.0
    c_opt: float  # smallest cores per node at which speed reaches 1.0 (a curve_x value)
    bw_gbps: float  # memory bandwidth per node at full speed (GB/s)
    slowdown_p: tuple[float, ...]  # co-runner pressures, (0.0, 0.25, 0.5, 0.75, 0.95)
    slowdown_s: tuple[float, ...]  # iteration-time factor per pressure, incl. multi-GPU floor
    pcie_heavy: bool

    def __post_init__(self) -> None:
        # Checked once per shape (shapes are cached), so the hot methods need no checks.
        xs, ys = self.curve_x, self.curve_y
        if len(xs) < 2 or len(xs) != len(ys):
            raise ValueError(f"{self.model}: curve needs >= 2 points of equal length")
        if xs[0] != 0.0 or any(b <= a for a, b in zip(xs, xs[1:], strict=False)):
            raise ValueError(f"{self.model}: curve_x must start at 0.0 and ascend: {xs}")
        if ys[-1] != 1.0 or any(b < a for a, b in zip(ys, ys[1:], strict=False)) or ys[0] < 0:
            raise ValueError(f"{self.model}: curve_y must be nondecreasing in [0,1], last 1.0")
        k = xs.index(self.c_opt) if self.c_opt in xs else -1
        if k < 1 or ys[k] != 1.0 or ys[k - 1] >= 1.0:
            raise ValueError(f"{self.model}: c_opt {self.c_opt} is not where the curve hits 1.0")
        ps, ss = self.slowdown_p, self.slowdown_s
        if len(ps) != len(ss) or ps[0] != 0.0 or ss[0] != 1.0:
            raise ValueError(f"{self.model}: slowdown table must start at (0.0, 1.0)")
        if any(b <= a for a, b in zip(ps, ps[1:], strict=False)) or min(ss) < 1.0:
            raise ValueError(f"{self.model}: slowdown pressures must ascend, factors >= 1")

    def core_speed(self, cores: float) -> float:
        """Relative speed with `cores` per node: piecewise-linear over the curve."""
        xs = self.curve_x
        if cores >= xs[-1]:
            return 1.0
        if cores <= 0.0:
            return 0.0
        i = bisect_right(xs, cores)  # xs[i-1] <= cores < xs[i], 1 <= i < len(xs)
        ys = self.curve_y
        x0 = xs[i - 1]
        y0 = ys[i - 1]
        return y0 + (ys[i] - y0) * (cores - x0) / (xs[i] - x0)

    def slowdown(self, pressure: float) -> float:
        """Iteration-time factor under co-runner bandwidth `pressure` (fraction of node)."""
        ps = self.slowdown_p
        if pressure >= ps[-1]:
            return self.slowdown_s[-1]
        if pressure <= 0.0:
            return 1.0
        i = bisect_right(ps, pressure)
        ss = self.slowdown_s
        p0 = ps[i - 1]
        s0 = ss[i - 1]
        return s0 + (ss[i] - s0) * (pressure - p0) / (ps[i] - p0)


# ----------------------------------------------------------------------------- schema


class _Reader:
    """Reads a profile-set dict; every error names the file and the dotted key."""

    def __init__(self, origin: str) -> None:
        self.origin = origin

    def fail(self, key: str, message: str) -> ValueError:
        return ValueError(f"profile set {self.origin}: key {key!r}: {message}")

    def get(self, d: dict[str, Any], key: str, where: str) -> Any:
        full = f"{where}.{key}" if where else key
        if not isinstance(d, dict):
            raise self.fail(where or "<root>", "must be an object")
        if key not in d:
            raise self.fail(full, "missing")
        return d[key]

    def number(
        self,
        value: Any,
        key: str,
        *,
        positive: bool = False,
        minimum: float = 0.0,
        kind: str | None = None,
    ) -> float:
        """A finite number >= minimum (> 0 if positive), at most limits.PROFILE[kind].hi."""
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(key, f"must be a number, got {_clip(value)}")
        try:
            v = float(value)
        except OverflowError:  # an int beyond float range
            v = math.inf
        top = limits.PROFILE[kind].hi if kind else math.inf
        if not math.isfinite(v) or v < minimum or (positive and v <= 0) or v > top:
            bound = "> 0" if positive else f">= {minimum:g}"
            if kind:
                bound += f" and <= {top:g} ({limits.PROFILE[kind].unit})"
            raise self.fail(key, f"must be finite and {bound}, got {_clip(value)}")
        return v

    def numbers(self, value: Any, key: str, n: int | None = None, **kw: Any) -> tuple[float, ...]:
        if not isinstance(value, list) or (n is not None and len(value) != n):
            raise self.fail(key, f"must be a list of {n if n is not None else 'some'} numbers")
        return tuple(self.number(v, f"{key}[{i}]", **kw) for i, v in enumerate(value))

    def table(self, d: Any, key: str, kind: str) -> dict[str, float]:
        if not isinstance(d, dict):
            raise self.fail(key, "must be an object with columns " + ", ".join(TABLE_COLUMNS))
        return {
            c: self.number(self.get(d, c, key), f"{key}.{c}", positive=True, kind=kind)
            for c in TABLE_COLUMNS
        }


@dataclass(frozen=True, slots=True)
class _Model:
    name: str
    kind: str  # "table" (CODA optimal cores) or "curve" (Synergy throughput curve)
    cores_table: dict[str, float] | None
    curve_x: tuple[float, ...]  # per GPU, with (0,0) added, cut at saturation
    curve_y: tuple[float, ...]  # normalised to max 1.0
    bw_table: dict[str, float]
    excess: tuple[float, ...]  # slowdown - 1 at the set's pressures (1 GPU)
    pcie_heavy: bool


def _parse_model(r: _Reader, name: str, m: Any, batch: str, n_press: int) -> _Model:
    where = f"models.{name}"
    cores = r.get(m, "cores", where)
    kind = r.get(cores, "kind", f"{where}.cores")
    cores_table = None
    cx: tuple[float, ...] = ()
    cy: tuple[float, ...] = ()
    if kind == "table":
        cores_table = r.table(
            r.get(cores, batch, f"{where}.cores"), f"{where}.cores.{batch}", "cores"
        )
        for col, v in cores_table.items():
            if v < 1:
                raise r.fail(f"{where}.cores.{batch}.{col}", "optimal cores must be >= 1")
    elif kind == "curve":
        xk, yk = f"{where}.cores.cpus_per_gpu", f"{where}.cores.throughput"
        xs = r.numbers(
            r.get(cores, "cpus_per_gpu", f"{where}.cores"), xk, positive=True, kind="cores"
        )
        ys = r.numbers(
            r.get(cores, "throughput", f"{where}.cores"), yk, n=len(xs), kind="throughput"
        )
        if not xs or any(b <= a for a, b in zip(xs, xs[1:], strict=False)):
            raise r.fail(xk, "must be a nonempty ascending list")
        if any(b < a for a, b in zip(ys, ys[1:], strict=False)) or max(ys) <= 0:
            raise r.fail(yk, "must be nondecreasing with a positive maximum")
        # Saturation = first point at the maximum; the flat tail adds nothing.
        top = max(ys)
        k = ys.index(top)
        cx = (0.0, *xs[: k + 1])
        cy = (0.0, *(y / top for y in ys[:k]), 1.0)
    else:
        raise r.fail(f"{where}.cores.kind", f"must be 'table' or 'curve', got {_clip(kind)}")
    bw = r.get(m, "bw_gbps", where)
    bw_table = r.table(r.get(bw, batch, f"{where}.bw_gbps"), f"{where}.bw_gbps.{batch}", "bw_gbps")
    sd = r.numbers(
        r.get(m, "slowdown", where), f"{where}.slowdown", n=n_press, minimum=1.0, kind="slowdown"
    )
    pcie = r.get(m, "pcie", where)
    if pcie not in ("heavy", "light"):
        raise r.fail(f"{where}.pcie", f"must be 'heavy' or 'light', got {_clip(pcie)}")
    return _Model(
        name=name,
        kind=kind,
        cores_table=cores_table,
        curve_x=cx,
        curve_y=cy,
        bw_table=bw_table,
        excess=tuple(s - 1.0 for s in sd),
        pcie_heavy=pcie == "heavy",
    )


def _lsq_line(points: list[tuple[float, float]]) -> tuple[float, float]:
    """(slope, intercept) of the least-squares line through the points."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    sxy = sum((x - mx) * (y - my) for x, y in points)
    slope = sxy / sxx
    return slope, my - slope * mx


def _scale_table(t: dict[str, float], g: int, nodes: int, *, whole: bool) -> float:
    """A 1N1G/1N2G/1N4G/2N2G table value for g GPUs per node on `nodes` nodes.

    One node: the table at g in {1, 2, 4}; otherwise the least-squares line through
    those three (the paper: linear in GPUs with a model-specific slope), kept between
    the 2- and 4-GPU values for g = 3 and at least the 4-GPU value above 4.
    Several nodes: 2N2G is one GPU per node, so it is scaled by g per node.
    """
    if nodes > 1:
        return t["2N2G"] * g
    pts = [(float(x), t[c]) for x, c in _ONE_NODE_POINTS]
    for x, c in _ONE_NODE_POINTS:
        if g == x:
            return t[c]
    slope, intercept = _lsq_line(pts)
    v = intercept + slope * g
    if whole:
        v = float(math.floor(v + 0.5))  # half up, not Python's banker's rounding
    if g < 4:
        lo, hi = sorted((t["1N2G"], t["1N4G"]))
        v = min(max(v, lo), hi)
    else:
        v = max(v, t["1N4G"])
    return max(v, 1.0) if whole else v


class ProfileSet:
    """One performance model (CODA's or Synergy's numbers), loaded from JSON."""

    name: str
    source: str
    models: tuple[str, ...]
    default_mix: dict[str, float]
    node_bw_gbps_per_core: float

    def __init__(self, spec: dict[str, Any], origin: str = "<dict>") -> None:
        r = _Reader(origin)
        if not isinstance(spec, dict):
            raise r.fail("<root>", "must be a JSON object")
        schema = r.get(spec, "schema", "")
        if schema != SCHEMA:
            raise r.fail("schema", f"expected {SCHEMA!r}, got {_clip(schema)}")
        self._spec = spec  # kept so `perturbed` and `to_dict` work on the raw values
        self.name = str(r.get(spec, "name", ""))
        self.source = str(r.get(spec, "source", ""))
        batch = spec.get("batch", "default")
        if batch not in ("default", "max"):
            raise r.fail("batch", f"must be 'default' or 'max', got {_clip(batch)}")
        self.batch: str = batch

        press = r.numbers(
            r.get(spec, "slowdown_pressures", ""),
            "slowdown_pressures",
            positive=True,
            kind="pressure",
        )
        if (
            not press
            or any(b <= a for a, b in zip(press, press[1:], strict=False))
            or press[-1] > 1
        ):
            raise r.fail("slowdown_pressures", "must ascend within (0, 1]")
        self._pressures = (0.0, *press)

        raw_models = r.get(spec, "models", "")
        if not isinstance(raw_models, dict) or not raw_models:
            raise r.fail("models", "must be a nonempty object")
        self._models = {n: _parse_model(r, n, m, batch, len(press)) for n, m in raw_models.items()}
        self.models = tuple(self._models)

        floor = r.get(r.get(spec, "multi_gpu_floor", ""), "gpus", "multi_gpu_floor")
        if not isinstance(floor, dict) or not floor:
            raise r.fail("multi_gpu_floor.gpus", "must be a nonempty object")
        self._floor: dict[int, tuple[float, ...]] = {}
        for k, row in floor.items():
            k = str(k)
            key = f"multi_gpu_floor.gpus.{_shown(k, 20)}"
            top = limits.PROFILE["floor_gpus"].hi
            if not (k.isascii() and k.isdigit() and len(k) <= 6 and 1 <= int(k) <= top):
                raise r.fail(key, f"GPU counts must be whole numbers in [1, {top:g}]")
            self._floor[int(k)] = r.numbers(row, key, n=len(press), kind="excess")
        self._floor = dict(sorted(self._floor.items()))

        pcie = r.get(spec, "pcie", "")
        default_pair = r.number(
            r.get(pcie, "pair_slowdown", "pcie"), "pcie.pair_slowdown", minimum=1, kind="slowdown"
        )
        overrides: dict[tuple[str, str], float] = {}
        raw_overrides = pcie.get("pair_overrides", [])
        if not isinstance(raw_overrides, list):
            raise r.fail("pcie.pair_overrides", "must be a list")
        for i, o in enumerate(raw_overrides):
            key = f"pcie.pair_overrides[{i}]"
            pair = r.get(o, "models", key)
            if (
                not isinstance(pair, list)
                or len(pair) != 2
                or any(p not in self._models for p in pair)
            ):
                raise r.fail(
                    f"{key}.models", f"must be two of {list(self.models)}, got {_clip(pair)}"
                )
            s = r.number(r.get(o, "slowdown", key), f"{key}.slowdown", minimum=1, kind="slowdown")
            overrides[(pair[0], pair[1])] = overrides[(pair[1], pair[0])] = s
        # Every ordered pair precomputed: the engine asks for these in its inner loop.
        self._pcie = {
            (a, b): (
                overrides.get((a, b), default_pair) if ma.pcie_heavy and mb.pcie_heavy else 1.0
            )
            for a, ma in self._models.items()
            for b, mb in self._models.items()
        }

        cpu = r.get(spec, "cpu_jobs", "")
        classes = r.get(cpu, "bw_per_core_classes", "cpu_jobs")
        if not isinstance(classes, list) or not classes:
            raise r.fail("cpu_jobs.bw_per_core_classes", "must be a nonempty list")
        w = [
            r.number(
                r.get(c, "weight", f"cpu_jobs.bw_per_core_classes[{i}]"),
                f"cpu_jobs.bw_per_core_classes[{i}].weight",
                kind="weight",
            )
            for i, c in enumerate(classes)
        ]
        self._cpu_means = np.array(
            [
                r.number(
                    r.get(c, "gbps_per_core", f"cpu_jobs.bw_per_core_classes[{i}]"),
                    f"cpu_jobs.bw_per_core_classes[{i}].gbps_per_core",
                    kind="gbps_per_core",
                )
                for i, c in enumerate(classes)
            ]
        )
        if sum(w) <= 0:
            raise r.fail("cpu_jobs.bw_per_core_classes", "weights must sum to > 0")
        self._cpu_weights = np.array(w) / sum(w)
        self._cpu_jitter = r.number(
            r.get(cpu, "jitter", "cpu_jobs"), "cpu_jobs.jitter", kind="jitter"
        )
        if self._cpu_jitter >= 1:
            raise r.fail("cpu_jobs.jitter", "must be < 1 (bandwidth stays positive)")

        self.node_bw_gbps_per_core = r.number(
            r.get(r.get(spec, "node", ""), "bw_gbps_per_core", "node"),
            "node.bw_gbps_per_core",
            positive=True,
            kind="gbps_per_core",
        )
        mix = r.get(spec, "default_mix", "")
        try:
            self.default_mix = _normalise_mix(mix, self)
        except ValueError as e:
            raise r.fail("default_mix", str(e)) from None
        self._cache: dict[tuple[str, int, int], JobPerf] = {}

    def __repr__(self) -> str:
        return f"ProfileSet({self.name!r}, {len(self.models)} models)"

    def to_dict(self) -> dict[str, Any]:
        """The raw values (a copy), e.g. to record a perturbed set next to results."""
        return copy.deepcopy(self._spec)

    def _floor_row(self, g: int) -> tuple[float, ...]:
        # Linear in g between listed GPU counts; held beyond the first and last.
        ks = list(self._floor)
        if g <= ks[0]:
            return self._floor[ks[0]]
        if g >= ks[-1]:
            return self._floor[ks[-1]]
        i = bisect_right(ks, g)
        k0, k1 = ks[i - 1], ks[i]
        f = (g - k0) / (k1 - k0)
        return tuple(a + (b - a) * f for a, b in zip(self._floor[k0], self._floor[k1], strict=True))

    def job_perf(self, model: str, gpus_per_node: int, nodes: int) -> JobPerf:
        """Performance of `model` with `gpus_per_node` GPUs on each of `nodes` nodes."""
        key = (model, int(gpus_per_node), int(nodes))
        perf = self._cache.get(key)
        if perf is None:
            perf = self._make_perf(*key)
            self._cache[key] = perf
        return perf

    def _make_perf(self, model: str, g: int, nodes: int) -> JobPerf:
        m = self._models.get(model)
        if m is None:
            raise ValueError(
                f"unknown model {model!r} in profile set {self.name!r}; "
                f"valid: {', '.join(self.models)}"
            )
        if g < 1 or nodes < 1:
            raise ValueError(f"gpus_per_node and nodes must be >= 1, got {g}, {nodes}")
        if m.kind == "table":
            assert m.cores_table is not None
            c_opt = _scale_table(m.cores_table, g, nodes, whole=True)
            xs: tuple[float, ...] = (0.0, c_opt)
            ys: tuple[float, ...] = (0.0, 1.0)  # speed = min(1, c / c_opt): pipelined prep
        else:
            # Synergy measured CPUs per GPU; g GPUs on a node need g times the cores.
            xs = tuple(x * g for x in m.curve_x)
            ys = m.curve_y
            c_opt = xs[-1]
        floor = self._floor_row(g)
        return JobPerf(
            model=model,
            curve_x=xs,
            curve_y=ys,
            c_opt=c_opt,
            bw_gbps=_scale_table(m.bw_table, g, nodes, whole=False),
            slowdown_p=self._pressures,
            slowdown_s=(1.0, *(1.0 + max(e, f) for e, f in zip(m.excess, floor, strict=True))),
            pcie_heavy=m.pcie_heavy,
        )

    def pcie_pair_slowdown(self, model_a: str, model_b: str) -> float:
        """Iteration-time factor of each of two jobs sharing a node's PCIe."""
        try:
            return self._pcie[(model_a, model_b)]
        except KeyError:
            bad = model_a if model_a not in self._models else model_b
            raise ValueError(f"unknown model {bad!r}; valid: {', '.join(self.models)}") from None

    def sample_cpu_bw_per_core(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Memory bandwidth per core (GB/s) of n CPU jobs: class mixture with jitter."""
        cls = rng.choice(len(self._cpu_means), size=n, p=self._cpu_weights)
        j = self._cpu_jitter
        return self._cpu_means[cls] * rng.uniform(1.0 - j, 1.0 + j, size=n)

    def perturbed(self, rng: np.random.Generator, magnitude: float) -> ProfileSet:
        """A copy with every profile value scaled by its own U(1-m, 1+m) draw.

        Scaled: optimal cores (Synergy: the curve's x axis, one draw per model),
        DNN bandwidth, slowdown excess (factor - 1), multi-GPU floor, PCIe excess.
        Kept: optimal cores >= 1, slowdown nondecreasing in pressure. CPU-job and
        node bandwidth are not touched (they are explicit assumptions to vary).
        """
        m = float(magnitude)
        if not 0.0 <= m < 1.0:
            raise ValueError(f"perturbation magnitude must be in [0, 1), got {magnitude!r}")

        def draw() -> float:
            return float(rng.uniform(1.0 - m, 1.0 + m))

        def excess_row(row: list[float], base: float) -> list[float]:
            out: list[float] = []
            for v in row:
                out.append(max(base + (v - base) * draw(), out[-1] if out else base))
            return out  # running max keeps the row nondecreasing

        spec = copy.deepcopy(self._spec)
        for name in self.models:
            ms = spec["models"][name]
            cores = ms["cores"]
            if cores["kind"] == "table":
                for batch in ("default", "max"):
                    if batch in cores:
                        cores[batch] = {c: max(1.0, v * draw()) for c, v in cores[batch].items()}
            else:
                f = draw()
                sat = self._models[name].curve_x[-1]
                f = max(f, 1.0 / sat)  # saturation point stays >= 1 CPU per GPU
                cores["cpus_per_gpu"] = [x * f for x in cores["cpus_per_gpu"]]
            for batch in ("default", "max"):
                if batch in ms["bw_gbps"]:
                    ms["bw_gbps"][batch] = {c: v * draw() for c, v in ms["bw_gbps"][batch].items()}
            ms["slowdown"] = excess_row(ms["slowdown"], 1.0)
        fl = spec["multi_gpu_floor"]["gpus"]
        for k in list(fl):
            fl[k] = excess_row(fl[k], 0.0)
        pc = spec["pcie"]
        pc["pair_slowdown"] = 1.0 + (pc["pair_slowdown"] - 1.0) * draw()
        for o in pc.get("pair_overrides", []):
            o["slowdown"] = 1.0 + (o["slowdown"] - 1.0) * draw()
        spec["name"] = f"{self.name}~perturbed{m:g}"
        spec["perturbation"] = {"base": self.name, "magnitude": m}
        return ProfileSet(spec, origin=f"{self.name} perturbed")


# ----------------------------------------------------------------------------- loading


def available_profile_sets() -> list[str]:
    """Names of the profile sets shipped with the package."""
    return sorted(p.stem for p in PROFILE_DIR.glob("*.json"))


def load_profile_set(name_or_path: str = "coda") -> ProfileSet:
    """A shipped set by name ("coda", "synergy") or a JSON file of the same schema."""
    names = available_profile_sets()
    if name_or_path in names:
        path = PROFILE_DIR / f"{name_or_path}.json"
    else:
        path = Path(name_or_path)
        if not path.is_file():
            raise ValueError(
                f"unknown profile set {name_or_path!r}: not a file, and the "
                f"available names are {', '.join(names)}"
            )
    try:
        with path.open("rb") as f:
            raw = f.read(limits.MAX_PROFILE_BYTES + 1)
    except OSError as e:
        raise ValueError(f"profile set {path}: cannot read: {e.strerror or e}") from None
    if len(raw) > limits.MAX_PROFILE_BYTES:
        raise ValueError(f"profile set {path}: larger than {limits.MAX_PROFILE_BYTES} bytes")
    try:
        spec = json.loads(raw.decode("utf-8-sig"))
    except UnicodeDecodeError as e:
        raise ValueError(f"profile set {path}: not UTF-8 text at byte {e.start}") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"profile set {path}: invalid JSON: {e}") from None
    except (ValueError, RecursionError) as e:  # an int of > 4300 digits; nesting too deep
        raise ValueError(f"profile set {path}: unreadable JSON: {_clip(str(e), 80)}") from None
    return ProfileSet(spec, origin=str(path))


def _normalise_mix(mix: Any, profiles: ProfileSet) -> dict[str, float]:
    if not isinstance(mix, dict) or not mix:
        raise ValueError("mix must be a nonempty mapping of model -> weight")
    out: dict[str, float] = {}
    for k, v in mix.items():
        if k not in profiles.models:
            valid = ", ".join(profiles.models)
            raise ValueError(f"unknown model {_clip(k)} in mix; valid: {valid}")
        top = limits.PROFILE["weight"].hi
        if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v <= top:
            raise ValueError(
                f"mix weight of {_clip(k)} must be a finite number >= 0 and <= {top:g}, "
                f"got {_clip(v)}"
            )
        out[k] = float(v)
    total = sum(out.values())
    if total <= 0:
        raise ValueError("mix weights must sum to > 0")
    return {k: v / total for k, v in out.items() if v > 0}


def parse_mix(text: str, profiles: ProfileSet) -> dict[str, float]:
    """ "AlexNet=2,ResNet50=1" -> normalised weights; "uniform" -> equal weights.

    Names match case-insensitively; a bare name means weight 1.
    """
    text = text.strip()
    if text.lower() == "uniform":
        return {m: 1.0 / len(profiles.models) for m in profiles.models}
    canon = {m.lower(): m for m in profiles.models}
    valid = ", ".join(profiles.models)
    weights: dict[str, float] = {}
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        name, sep, w = part.partition("=")
        name = name.strip()
        model = canon.get(name.lower())
        if model is None:
            raise ValueError(f"unknown model {name!r} in mix {text!r}; valid: {valid}")
        if model in weights:
            raise ValueError(f"model {model!r} given twice in mix {text!r}")
        try:
            weight = float(w) if sep else 1.0
        except ValueError:
            raise ValueError(
                f"weight of {model!r} in mix {text!r} is not a number: {w!r}"
            ) from None
        weights[model] = weight
    if not weights:
        raise ValueError(
            f"empty mix {text!r}; use 'uniform' or e.g. 'AlexNet=2,ResNet50=1' ({valid})"
        )
    return _normalise_mix(weights, profiles)


# ----------------------------------------------------------------------------- workload


@dataclass
class Workload:
    """A job table with the performance model applied: who runs what, how much work."""

    jobs: JobTable
    model: np.ndarray  # int16 index into model_names; -1 for CPU jobs
    model_names: tuple[str, ...]
    cpu_bw_per_core: np.ndarray  # float64 GB/s per core; 0.0 for DNN jobs
    work: np.ndarray  # float64 seconds at full speed (DNN: duration * speed(requested))
    profiles: ProfileSet
    seed: int
    mix: dict[str, float]

    def __len__(self) -> int:
        return len(self.jobs)


def _ceil_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return -(-a // b)


def build_workload(
    jobs: JobTable, profiles: ProfileSet, seed: int, mix: dict[str, float] | None = None
) -> Workload:
    """Assign models to DNN jobs and bandwidth to CPU jobs; convert durations to work.

    Deterministic for a seed: models are drawn first (DNN jobs in table order), then
    the CPU jobs' bandwidth. A DNN job's trace duration is taken as its run at the
    cores it asked for, ceil(cores / nodes) per node, so its work at full speed is
    duration * core_speed(requested), with GPUs per node = ceil(gpus / nodes).
    """
    norm_mix = _normalise_mix(mix if mix is not None else profiles.default_mix, profiles)
    rng = np.random.default_rng(seed)
    names = profiles.models
    n = len(jobs)
    is_dnn = np.asarray(jobs.gpus) > 0
    dnn = np.flatnonzero(is_dnn)
    cpu = np.flatnonzero(~is_dnn)

    model = np.full(n, -1, dtype=np.int16)
    p = np.array([norm_mix.get(m, 0.0) for m in names])
    model[dnn] = rng.choice(len(names), size=dnn.size, p=p / p.sum())
    cpu_bw = np.zeros(n, dtype=np.float64)
    cpu_bw[cpu] = profiles.sample_cpu_bw_per_core(rng, cpu.size)

    work = np.asarray(jobs.duration, dtype=np.float64).copy()
    if dnn.size:
        nodes = np.maximum(jobs.nodes[dnn].astype(np.int64), 1)
        g = np.maximum(_ceil_div(jobs.gpus[dnn].astype(np.int64), nodes), 1)
        req = np.maximum(_ceil_div(jobs.cores[dnn].astype(np.int64), nodes), 1)
        mi = model[dnn].astype(np.int64)
        if g.max() >= 1 << 16 or nodes.max() >= 1 << 16 or req.max() >= 1 << 24:
            raise ValueError("job shape out of range (>= 65536 GPUs/nodes or 2^24 cores per node)")
        # One speed per distinct (model, g, nodes, cores) shape: a few thousand, not 1e6.
        key = (((mi << 16) | g) << 16 | nodes) << 24 | req
        uniq, inv = np.unique(key, return_inverse=True)
        speeds = np.empty(uniq.size, dtype=np.float64)
        for i, k in enumerate(uniq.tolist()):
            r = k & 0xFFFFFF
            nd = (k >> 24) & 0xFFFF
            gg = (k >> 40) & 0xFFFF
            mm = k >> 56
            s = profiles.job_perf(names[mm], gg, nd).core_speed(float(r))
            if not s > 0.0:  # cannot happen for cores >= 1; guards a malformed custom curve
                raise ValueError(f"{names[mm]} with {r} cores/node has speed {s}; work undefined")
            speeds[i] = s
        work[dnn] = work[dnn] * speeds[inv.reshape(-1)]
    return Workload(
        jobs=jobs,
        model=model,
        model_names=names,
        cpu_bw_per_core=cpu_bw,
        work=work,
        profiles=profiles,
        seed=seed,
        mix=norm_mix,
    )
