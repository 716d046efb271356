"""`coda experiment regimes`: CODA's gain over `fifo` and over `static-separate` across
cores per GPU, CPU-job share and offered GPU load (docs/regimes.md).

Per cell (r, share, load) and seed, four runs on the same generated workload:
`fifo` and `coda` on the shared cluster (the paper's GPU servers with C = round(5 r)
cores each, no CPU-only servers), `static-separate` and `coda` on the split cluster (the
same GPU servers plus CPU-only servers of C cores, sized by the bundled openb node list's
ratio of CPU-only to GPU-server cores). Runs go through the paper experiment's `run_one`
(coda.experiment.paper) in a process pool; a failed run is recorded with its one-line
error and the others go on. Aggregation and outputs: coda.report.regimes_report.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from coda.experiment.paper import ESTIMATES, MAX_SEEDS, POLICY_OPTIONS, PaperRecord, Run, run_many
from coda.study.config import MAX_LOAD, PAPER_CLUSTER, RunConfig
from coda.workload.cluster import load_node_list, parse_cluster_spec
from coda.workload.generate import PaperParams, generate, write_csv
from coda.workload.jobs import JobTable
from coda.workload.limits import MAX_NODE_CORES, MAX_TRACE_JOBS, plain_number
from coda.workload.scaling import max_reachable_load, scale_to_load, window_bounds
from coda.workload.traces import bundled_nodes_path

DEFAULT_CORES_PER_GPU = (3.0, 5.6, 8.0, 16.0)
DEFAULT_CPU_SHARES = (0.25, 0.5, 0.75)
DEFAULT_LOADS = (0.8, 1.2, 1.6)
# DNN jobs per workload: sized so that the default grid (36 cells x 4 runs) takes 15-20 min
# on 2 cores with --workers 2 (docs/regimes.md, "Cost"). Counted in DNN jobs, not
# in all jobs: --loads fixes the GPU demand per window, so equal DNN counts give every
# CPU share the same measurement window at a load.
DEFAULT_DNN_JOBS = 1500
TARGET = "coda"
SHARED, SPLIT = "shared", "split"
# Each baseline with the cluster it is compared on; coda runs on both.
BASELINES: dict[str, str] = {"fifo": SHARED, "static-separate": SPLIT}
CLUSTERS: dict[str, tuple[str, ...]] = {
    SHARED: ("fifo", TARGET),
    SPLIT: ("static-separate", TARGET),
}
PAPER_CORES = 28  # per server, the paper's two 14-core Xeon Gold 6132
PAPER_CPU_SHARE = PaperParams().cpu_share
PRESET_JOBS = PaperParams().n_jobs
WARMUP = RunConfig().warmup  # the measurement window prepare() uses, for the load checks


class OptionError(ValueError):
    """A bad command-line value; `option` names the option (the CLI exits 2)."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(message)
        self.option = option


# ---------------------------------------------------------------- the clusters


@cache
def gpu_servers() -> tuple[tuple[int, int], ...]:
    """(count, GPUs) per server shape of the paper cluster (PAPER_CLUSTER), in its order."""
    shapes = Counter(n.gpus for n in parse_cluster_spec(PAPER_CLUSTER).nodes)
    return tuple((count, gpus) for gpus, count in shapes.items())


def gpu_server_count() -> int:
    return sum(n for n, _ in gpu_servers())


def total_gpus() -> int:
    return sum(n * g for n, g in gpu_servers())


def gpus_per_server() -> float:
    return total_gpus() / gpu_server_count()  # 5 on the paper cluster


def cores_per_server(r: float) -> int:
    """C = r x the paper cluster's mean GPUs per server, rounded half up (r 5.6: 28)."""
    return int(math.floor(r * gpus_per_server() + 0.5))


@cache
def openb_core_ratio() -> tuple[int, int]:
    """(cores on CPU-only servers, cores on GPU servers) in the bundled openb node list."""
    nodes = load_node_list(bundled_nodes_path()).nodes
    cpu = sum(n.cores for n in nodes if n.gpus == 0)
    gpu = sum(n.cores for n in nodes if n.gpus > 0)
    return cpu, gpu


def cpu_servers() -> int:
    """CPU-only servers of the split cluster: of C cores each, as many as make their cores
    the openb list's share of the GPU servers' cores (a production cluster with separate
    partitions; chosen before any run and the same for every cell: 14 on 80 GPU servers)."""
    cpu, gpu = openb_core_ratio()
    return max(1, int(math.floor(gpu_server_count() * cpu / gpu + 0.5)))


def cluster_spec(r: float, split: bool) -> str:
    """The shared cluster "60x4g{C}c,20x8g{C}c", or it plus the CPU-only servers."""
    c = cores_per_server(r)
    groups = [f"{n}x{g}g{c}c" for n, g in gpu_servers()]
    if split:
        groups.append(f"{cpu_servers()}x0g{c}c")
    return ",".join(groups)


# ---------------------------------------------------------------- options


def parse_values(text: str, option: str) -> tuple[float, ...]:
    """A comma-separated list of finite numbers, each once, in the order given."""
    out: list[float] = []
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        if not plain_number(item):
            raise OptionError(option, f"{item!r} is not a plain ASCII number")
        try:
            v = float(item)
        except ValueError:
            raise OptionError(option, f"{item!r} is not a number") from None
        if not math.isfinite(v):
            raise OptionError(option, f"{item!r} is not a finite number")
        if v in out:
            raise OptionError(option, f"{item!r} is given twice")
        # File names and labels print values with :g (6 significant digits).
        if any(f"{v:g}" == f"{w:g}" for w in out):
            raise OptionError(option, f"{item!r} is indistinguishable from another value")
        out.append(v)
    if not out:
        raise OptionError(option, "no value given")
    return tuple(out)


@dataclass(frozen=True)
class RegimesConfig:
    """One `coda experiment regimes` invocation; validate() checks it as a whole."""

    out: Path
    cores_per_gpu: tuple[float, ...] = DEFAULT_CORES_PER_GPU
    cpu_shares: tuple[float, ...] = DEFAULT_CPU_SHARES
    loads: tuple[float, ...] = DEFAULT_LOADS
    dnn_jobs: int = DEFAULT_DNN_JOBS
    seeds: int = 1
    workers: int = 1

    def validate(self) -> None:
        if not 1 <= self.dnn_jobs <= MAX_TRACE_JOBS:
            raise OptionError("--jobs", f"must be in [1, {MAX_TRACE_JOBS}], got {self.dnn_jobs}")
        top = MAX_NODE_CORES / gpus_per_server()
        for name, values in (
            ("--cores-per-gpu", self.cores_per_gpu),
            ("--cpu-shares", self.cpu_shares),
            ("--loads", self.loads),
        ):
            if not values:
                raise OptionError(name, "no value given")
            dup = [v for i, v in enumerate(values) if v in values[:i]]
            if dup:
                raise OptionError(name, f"{dup[0]:g} is given twice")
        seen: dict[int, float] = {}
        for r in self.cores_per_gpu:
            c = cores_per_server(r) if 0 < r <= top else 0
            if not (0 < r <= top and c >= 1):
                raise OptionError(
                    "--cores-per-gpu",
                    f"{r:g} must be in (0, {top:g}] and give at least one core per server "
                    f"(C = round({gpus_per_server():g} r))",
                )
            if c in seen:
                raise OptionError(
                    "--cores-per-gpu", f"{seen[c]:g} and {r:g} give the same {c} cores per server"
                )
            seen[c] = r
        for s in self.cpu_shares:
            if not 0 < s < 1:
                raise OptionError("--cpu-shares", f"{s:g} must be in (0, 1)")
            n = jobs_for(self.dnn_jobs, s)
            n_cpu = math.floor(n * s + 0.5)  # as the generator counts them
            if not 1 <= n_cpu < n:
                # A cell labelled with a CPU share whose workload has no job of a kind.
                raise OptionError(
                    "--cpu-shares",
                    f"{s:g} with --jobs {self.dnn_jobs} gives no {'CPU' if n_cpu < 1 else 'DNN'}"
                    f" job ({n} jobs in all): use a larger share or more --jobs",
                )
            if n > MAX_TRACE_JOBS:
                raise OptionError(
                    "--cpu-shares",
                    f"{s:g} with --jobs {self.dnn_jobs} needs {jobs_for(self.dnn_jobs, s):,} "
                    f"jobs; at most {MAX_TRACE_JOBS:,}",
                )
        for load in self.loads:
            if not 0 < load <= MAX_LOAD:
                raise OptionError("--loads", f"{load:g} must be in (0, {MAX_LOAD:g}]")
        if not 1 <= self.seeds <= MAX_SEEDS:
            raise OptionError("--seeds", f"must be in [1, {MAX_SEEDS}], got {self.seeds}")
        if self.workers < 1:
            raise OptionError("--workers", f"must be >= 1, got {self.workers}")

    def cells(self) -> list[Cell]:
        """Every (r, share, load), in the grid's order (r, then share, then load)."""
        return [
            Cell(r, s, load)
            for r in self.cores_per_gpu
            for s in self.cpu_shares
            for load in self.loads
        ]


@dataclass(frozen=True, order=True)
class Cell:
    cores_per_gpu: float
    cpu_share: float
    load: float

    @property
    def cores(self) -> int:
        return cores_per_server(self.cores_per_gpu)

    def label(self) -> str:
        return f"r {self.cores_per_gpu:g} share {self.cpu_share:g} load {self.load:g}"


# ---------------------------------------------------------------- workloads


def jobs_for(dnn_jobs: int, share: float) -> int:
    """All jobs of a workload with this many DNN jobs and CPU-job share."""
    return max(1, int(math.floor(dnn_jobs / (1.0 - share) + 0.5)))


def params_for(dnn_jobs: int, share: float) -> PaperParams:
    """The paper preset with this CPU share, sized to about dnn_jobs DNN jobs at the
    paper's rate (the rate does not matter: --loads rescales the arrivals)."""
    base = PaperParams()
    n = jobs_for(dnn_jobs, share)
    return dataclasses.replace(base, n_jobs=n, days=base.days * n / PRESET_JOBS, cpu_share=share)


def clip_cores(table: JobTable, cores: int) -> tuple[JobTable, int, int]:
    """No job asks for more than one server's cores (the preset's own rule for its 28):
    requests above `cores` are cut to it. Returns the table and the DNN and CPU jobs cut."""
    over = table.cores > cores
    dnn = table.gpus > 0
    if not over.any():
        return table, 0, 0
    clipped = dataclasses.replace(table, cores=np.minimum(table.cores, cores).astype(np.int32))
    return clipped, int((over & dnn).sum()), int((over & ~dnn).sum())


def demand_per_gpu(table: JobTable) -> tuple[float, float]:
    """(CPU jobs' core-seconds, DNN jobs' core-seconds) per DNN GPU-second: at offered GPU
    load L on G GPUs the jobs ask for about (sum) x L x G cores."""
    dur = table.duration.astype(np.float64)
    dnn = table.gpus > 0
    gpu_s = float((table.gpus * dur)[dnn].sum())
    if gpu_s <= 0:
        return math.nan, math.nan
    cores = table.cores.astype(np.float64) * dur
    return float(cores[~dnn].sum()) / gpu_s, float(cores[dnn].sum()) / gpu_s


@dataclass(frozen=True)
class GeneratedWorkload:
    """One generated (share, seed) workload as a server of `cores` cores sees it."""

    cpu_share: float
    seed: int
    cores: int
    path: Path
    jobs: int
    dnn_jobs: int
    clipped_dnn: int
    clipped_cpu: int
    cpu_cores_per_gpu: float
    dnn_cores_per_gpu: float
    max_load: float
    window_h: dict[float, float]  # per reachable load, the measurement window in hours

    def core_load(self, load: float, split: bool) -> float:
        """Offered core load at this GPU load: cores asked / cores there (the shared
        cluster: every job's on every server; split: CPU jobs' on the CPU-only servers)."""
        gpus = total_gpus()
        if split:
            return self.cpu_cores_per_gpu * load * gpus / (cpu_servers() * self.cores)
        demand = (self.cpu_cores_per_gpu + self.dnn_cores_per_gpu) * load * gpus
        return demand / (gpu_server_count() * self.cores)

    def to_dict(self) -> dict[str, Any]:
        return {
            "cpu_share": self.cpu_share,
            "seed": self.seed,
            "cores_per_server": self.cores,
            "file": self.path.name,
            "jobs": self.jobs,
            "dnn_jobs": self.dnn_jobs,
            "cpu_jobs": self.jobs - self.dnn_jobs,
            "clipped_dnn_jobs": self.clipped_dnn,
            "clipped_cpu_jobs": self.clipped_cpu,
            "cpu_cores_per_gpu": self.cpu_cores_per_gpu,
            "dnn_cores_per_gpu": self.dnn_cores_per_gpu,
            "max_reachable_load": self.max_load,
            "window_h": [{"load": k, "hours": v} for k, v in self.window_h.items()],
        }


WorkloadKey = tuple[float, int, int]  # (cpu share, seed, cores per server)


def write_workloads(cfg: RegimesConfig) -> dict[WorkloadKey, GeneratedWorkload]:
    """Generate every (share, seed) workload into the out dir (before the pool, so that no
    two workers write one file), one file per core cap that changes it; then check that
    every load can be reached (an OptionError naming --loads otherwise)."""
    cfg.out.mkdir(parents=True, exist_ok=True)
    caps = sorted({cores_per_server(r) for r in cfg.cores_per_gpu})
    out: dict[WorkloadKey, GeneratedWorkload] = {}
    written: set[Path] = set()
    for share in cfg.cpu_shares:
        params = params_for(cfg.dnn_jobs, share)
        for seed in range(cfg.seeds):
            base = generate(params, seed)
            top = max_reachable_load(base, total_gpus(), WARMUP)  # cutting cores keeps it
            windows = {load: window_hours(base, load) for load in cfg.loads if load < top}
            base_path = cfg.out / f"workload-share{share:g}-seed{seed}.csv"
            for c in caps:
                table, cut_dnn, cut_cpu = clip_cores(base, c)
                path = base_path
                if cut_dnn or cut_cpu:
                    path = base_path.with_name(f"{base_path.stem}-max{c}c.csv")
                if path not in written:  # an uncut table once for every cap above it
                    write_csv(table, path)
                    written.add(path)
                cpu_k, dnn_k = demand_per_gpu(table)
                out[(share, seed, c)] = GeneratedWorkload(
                    share,
                    seed,
                    c,
                    path,
                    len(table),
                    int((table.gpus > 0).sum()),
                    cut_dnn,
                    cut_cpu,
                    cpu_k,
                    dnn_k,
                    top,
                    windows,
                )
    check_loads(cfg, out)
    return out


def window_hours(table: JobTable, load: float) -> float:
    """The measurement window at this load (arrivals rescaled as prepare() does), in hours:
    a window not much longer than the jobs' runtimes lets faster jobs pack more of their
    work into it (docs/regimes.md, "Window")."""
    scaled, _ = scale_to_load(table, total_gpus(), load, WARMUP)
    w0, w1 = window_bounds(scaled.submit, WARMUP)
    return (w1 - w0) / 3600.0


def check_loads(cfg: RegimesConfig, workloads: dict[WorkloadKey, GeneratedWorkload]) -> None:
    # scale_to_load needs load < the ceiling; say so once, before hours of runs.
    top = max(cfg.loads)
    worst = min(workloads.values(), key=lambda w: w.max_load)
    if top >= worst.max_load:
        raise OptionError(
            "--loads",
            f"{top:g} cannot be reached with --jobs {cfg.dnn_jobs}: the share "
            f"{worst.cpu_share:g} seed {worst.seed} workload offers at most "
            f"{worst.max_load:.3f} x {total_gpus()} GPUs however its arrivals are compressed; "
            "raise --jobs or lower the load",
        )


# ---------------------------------------------------------------- runs


@dataclass(frozen=True)
class CellRun:
    cell: Cell
    cluster: str  # SHARED or SPLIT
    policy: str
    seed: int
    run: Run


@dataclass
class CellRecord:
    cell: Cell
    cluster: str
    policy: str
    seed: int
    record: PaperRecord

    @property
    def ok(self) -> bool:
        return self.record.ok


def plan(cfg: RegimesConfig, workloads: dict[WorkloadKey, GeneratedWorkload]) -> list[CellRun]:
    """Every run, the costliest first (most jobs, highest load) so that the pool's last
    runs are short ones."""
    runs = []
    for cell in cfg.cells():
        for seed in range(cfg.seeds):
            w = workloads[(cell.cpu_share, seed, cell.cores)]
            for cluster, policies in CLUSTERS.items():
                config = RunConfig(
                    trace=str(w.path),
                    cluster=cluster_spec(cell.cores_per_gpu, cluster == SPLIT),
                    load=cell.load,
                    seed=seed,
                    policy=POLICY_OPTIONS,
                )
                for p in policies:
                    runs.append(CellRun(cell, cluster, p, seed, Run(seed, p, config, False)))
    order = {(r.cell, r.cluster, r.policy, r.seed): i for i, r in enumerate(runs)}
    jobs = {s: jobs_for(cfg.dnn_jobs, s) for s in cfg.cpu_shares}
    return sorted(
        runs,
        key=lambda r: (
            -jobs[r.cell.cpu_share] * r.cell.load,
            order[(r.cell, r.cluster, r.policy, r.seed)],
        ),
    )


def run_all(
    cfg: RegimesConfig,
    workloads: dict[WorkloadKey, GeneratedWorkload],
    on_done: Callable[[CellRecord, int, int], None] | None = None,
) -> list[CellRecord]:
    """Run the plan inline (workers 1) or in a spawn process pool, each run through the
    paper experiment's ``run_many``; ``on_done(record, done, total)`` as each run finishes.
    Returned in the grid's order."""
    runs = plan(cfg, workloads)
    records: list[CellRecord] = []

    def done(i: int, rec: PaperRecord) -> None:
        run = runs[i]
        records.append(CellRecord(run.cell, run.cluster, run.policy, run.seed, rec))
        if on_done:
            on_done(records[-1], len(records), len(runs))

    run_many([r.run for r in runs], cfg.workers, done)
    cells = {c: i for i, c in enumerate(cfg.cells())}
    clusters = list(CLUSTERS)
    records.sort(
        key=lambda r: (
            cells[r.cell],
            clusters.index(r.cluster),
            CLUSTERS[r.cluster].index(r.policy),
            r.seed,
        )
    )
    return records


# ---------------------------------------------------------------- setting


def setting(
    cfg: RegimesConfig, workloads: dict[WorkloadKey, GeneratedWorkload], command: str
) -> dict[str, Any]:
    """results.json's `setting`: every choice of the grid, and the command that reruns it."""
    cpu, gpu = openb_core_ratio()
    servers = ", ".join(f"{n} x {g} GPUs" for n, g in gpu_servers())
    return {
        "grid": {
            "cores_per_gpu": list(cfg.cores_per_gpu),
            "cpu_shares": list(cfg.cpu_shares),
            "loads": list(cfg.loads),
        },
        "paper_cell": {
            "cores_per_gpu": PAPER_CORES / gpus_per_server(),
            "cpu_share": PAPER_CPU_SHARE,
        },
        "dnn_jobs": cfg.dnn_jobs,
        "seeds": cfg.seeds,
        "workers": cfg.workers,
        "estimates": ESTIMATES,
        "gpu_servers": f"{servers} ({gpu_server_count()} servers, {total_gpus()} GPUs; "
        f"study.config.PAPER_CLUSTER {PAPER_CLUSTER})",
        "clusters": [
            {
                "cores_per_gpu": r,
                "cores_per_server": cores_per_server(r),
                SHARED: cluster_spec(r, split=False),
                SPLIT: cluster_spec(r, split=True),
            }
            for r in cfg.cores_per_gpu
        ],
        "cpu_partition": {
            "servers": cpu_servers(),
            "rule": "CPU-only servers of C cores each, as many as make their cores the "
            "bundled openb node list's ratio of CPU-only to GPU-server cores "
            f"({cpu:,} / {gpu:,} = {cpu / gpu:.3f}) of the GPU servers' cores: "
            f"round({gpu_server_count()} x {cpu / gpu:.3f}) = {cpu_servers()}",
            "openb_cpu_only_cores": cpu,
            "openb_gpu_server_cores": gpu,
        },
        "workload": (
            f"the paper preset (coda trace generate --preset paper) with the cell's CPU share, "
            f"about {cfg.dnn_jobs:,} DNN jobs and share / (1 - share) CPU jobs per DNN job; "
            "seed s is the same workload for every r and load; requests above a server's C "
            "cores cut to C"
        ),
        "load_basis": "offered GPU load: GPU demand inside the measurement window / "
        "(GPUs x window), arrivals rescaled (docs/metrics.md); the same arrivals on both "
        "clusters (both have the same GPUs)",
        "workloads": [w.to_dict() for w in workloads.values()],
        "command": command,
    }
