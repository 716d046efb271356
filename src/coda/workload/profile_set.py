"""A profile set: one performance model (CODA's or Synergy's numbers) loaded from JSON,
with what it derives per job shape (`JobPerf`), PCIe pair slowdowns, sampled CPU-job
bandwidth and perturbed copies; and finding the shipped sets by name."""

from __future__ import annotations

import copy
import json
import math
from bisect import bisect_right
from pathlib import Path
from typing import Any

import numpy as np

from coda import strict_json
from coda.strict_json import StrictJSONError
from coda.text import clip, shown
from coda.workload import limits
from coda.workload.job_perf import JobPerf
from coda.workload.mix import normalise_mix
from coda.workload.profile_schema import SCHEMA, SpecReader, parse_model

PROFILE_DIR = Path(__file__).parent / "profiles"
_ONE_NODE_POINTS = ((1, "1N1G"), (2, "1N2G"), (4, "1N4G"))


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


def _row_at(rows: dict[int, tuple[float, ...]], g: int) -> tuple[float, ...]:
    """A row of values listed by GPU count (keys ascending), at g GPUs: linear in g
    between listed counts, held beyond the first and last."""
    ks = list(rows)
    if g <= ks[0]:
        return rows[ks[0]]
    if g >= ks[-1]:
        return rows[ks[-1]]
    i = bisect_right(ks, g)
    k0, k1 = ks[i - 1], ks[i]
    f = (g - k0) / (k1 - k0)
    return tuple(a + (b - a) * f for a, b in zip(rows[k0], rows[k1], strict=True))


def _busy_curve(
    rows: dict[int, tuple[float, float, float]] | None, g: int
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The busy curve (speeds, busy shares) of a job with g GPUs per node: through
    (0, 0), (speed_low, busy_low) and (1, busy_full) of the model's rows at g; busy
    share = speed where the set gives no rows (docs/performance-model.md)."""
    if rows is None:
        return (0.0, 1.0), (0.0, 1.0)
    s_low, b_low, b_full = _row_at(dict(rows), g)
    return (0.0, s_low, 1.0), (0.0, b_low, b_full)


class ProfileSet:
    """One performance model (CODA's or Synergy's numbers), loaded from JSON."""

    name: str
    source: str
    models: tuple[str, ...]
    default_mix: dict[str, float]
    node_bw_gbps_per_core: float

    def __init__(self, spec: dict[str, Any], origin: str = "<dict>") -> None:
        r = SpecReader(origin)
        if not isinstance(spec, dict):
            raise r.fail("<root>", "must be a JSON object")
        schema = r.get(spec, "schema", "")
        if schema != SCHEMA:
            raise r.fail("schema", f"expected {SCHEMA!r}, got {clip(schema)}")
        self._spec = spec  # kept so `perturbed` and `to_dict` work on the raw values
        self.name = str(r.get(spec, "name", ""))
        self.source = str(r.get(spec, "source", ""))
        batch = spec.get("batch", "default")
        if batch not in ("default", "max"):
            raise r.fail("batch", f"must be 'default' or 'max', got {clip(batch)}")
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
        if len(raw_models) > limits.MAX_PROFILE_MODELS:  # pairs are precomputed: n squared
            raise r.fail("models", f"{len(raw_models)} models; at most {limits.MAX_PROFILE_MODELS}")
        self._models = {n: parse_model(r, n, m, batch, len(press)) for n, m in raw_models.items()}
        self.models = tuple(self._models)
        # Each model's category (cv, nlp, speech; "" where the set does not say): the
        # paper's allocator starts a first job of a category at a per-category count.
        self.domains: dict[str, str] = {
            n: str(m.get("domain", ""))[:32] if isinstance(m, dict) else ""
            for n, m in raw_models.items()
        }

        floor = r.get(r.get(spec, "multi_gpu_floor", ""), "gpus", "multi_gpu_floor")
        if not isinstance(floor, dict) or not floor:
            raise r.fail("multi_gpu_floor.gpus", "must be a nonempty object")
        self._floor: dict[int, tuple[float, ...]] = {}
        for k, row in floor.items():
            k = str(k)
            key = f"multi_gpu_floor.gpus.{shown(k, 20)}"
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
                or not all(isinstance(p, str) and p in self._models for p in pair)
            ):
                raise r.fail(
                    f"{key}.models", f"must be two of {list(self.models)}, got {clip(pair)}"
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
            self.default_mix = normalise_mix(mix, self)
        except ValueError as e:
            raise r.fail("default_mix", str(e)) from None
        self._cache: dict[tuple[str, int, int], JobPerf] = {}

    def __repr__(self) -> str:
        return f"ProfileSet({self.name!r}, {len(self.models)} models)"

    def to_dict(self) -> dict[str, Any]:
        """The raw values (a copy), e.g. to record a perturbed set next to results."""
        return copy.deepcopy(self._spec)

    def _floor_row(self, g: int) -> tuple[float, ...]:
        return _row_at(self._floor, g)

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
        busy_x, busy_y = _busy_curve(m.busy, g)
        return JobPerf(
            model=model,
            curve_x=xs,
            curve_y=ys,
            c_opt=c_opt,
            bw_gbps=_scale_table(m.bw_table, g, nodes, whole=False),
            slowdown_p=self._pressures,
            slowdown_s=(1.0, *(1.0 + max(e, f) for e, f in zip(m.excess, floor, strict=True))),
            pcie_heavy=m.pcie_heavy,
            busy_x=busy_x,
            busy_y=busy_y,
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
        node bandwidth are not touched (they are explicit assumptions to vary), nor
        the GPU busy curves (a metric's model: they change no decision).
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
        spec = strict_json.loads(raw.decode("utf-8-sig"))
    except StrictJSONError as e:
        raise ValueError(f"profile set {path}: {e}") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"profile set {path}: not UTF-8 text at byte {e.start}") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"profile set {path}: invalid JSON: {e}") from None
    except (ValueError, RecursionError) as e:  # an int of > 4300 digits; nesting too deep
        raise ValueError(f"profile set {path}: unreadable JSON: {clip(str(e), 80)}") from None
    return ProfileSet(spec, origin=str(path))
