"""The stated range of every number CODA reads from a file or a cluster spec, in one place.

Trace loaders, the node-list reader, the cluster-spec parser and the profile reader take
their bounds from here, and docs/trace-formats.md shows `markdown_table()` (a test keeps
the two equal). A value outside its range, or not finite, is a bad row (traces) or a
one-line error naming file, line and column (node lists, specs, profiles).

The caps are far above any real cluster and chosen so that every job total fits the
JobTable's int32 columns and build_workload's packed shape key (< 2^16 GPUs or nodes
per node, < 2^24 cores per node), and so that no input row can make work or memory
scale with a value in it (PAI's inst_num is capped, so is a spec's node count).
"""

from __future__ import annotations

from dataclasses import dataclass

YEAR_S = 365 * 86_400

# Cluster shape.
MAX_NODES = 100_000  # nodes in one cluster (spec or node list)
MAX_NODE_GPUS = 64
MAX_NODE_CORES = 4_096
MAX_NODE_MEM_MIB = 16 * 1024 * 1024  # 16 TiB
MAX_NODE_BW_GBPS = 1e9  # GB/s of one node; what-if runs use 1e9 for "unlimited"

# One job (totals over its nodes).
MAX_JOB_NODES = 10_000  # also PAI inst_num: instances of one task
MAX_JOB_GPUS = 65_535
MAX_JOB_CORES = 10_000_000
MAX_JOB_MEM_MIB = 10**11  # about 93 PiB
MAX_DURATION_S = 10 * YEAR_S
MAX_TIME_LIMIT_S = 366 * 86_400  # a user's time limit (coda submit --time); Slurm's
# own limits above it (sbatch -t 1000-0 is accepted) are read as given, not capped

# Time.
MAX_SPAN_S = 100 * YEAR_S  # last arrival minus first arrival
MAX_ABS_TIME = 10**20  # a raw time stamp in any unit (epoch nanoseconds are ~1.7e18)

# Input size.
MAX_LINE_CHARS = 1 << 16  # one physical line of a CSV file
MAX_TRACE_JOBS = 2_000_000  # jobs one trace may make (PAI rows make up to 10,000 each)
MAX_PROFILE_BYTES = 16 * 1024 * 1024
MAX_PROFILE_MODELS = 1_000  # models in one profile set (every ordered pair is precomputed)


@dataclass(frozen=True, slots=True)
class Limit:
    """Closed range [lo, hi] of one field; `unit` is what the number counts."""

    lo: float
    hi: float
    unit: str

    def holds(self, v: float) -> bool:
        return self.lo <= v <= self.hi  # False for nan


TIME = Limit(-MAX_ABS_TIME, MAX_ABS_TIME, "time stamp, s (exact; made relative)")
DURATION = Limit(0, MAX_DURATION_S, "s")

# Whole-job totals, checked on every kept job whatever the format computed them from.
JOB = {
    "gpus": Limit(0, MAX_JOB_GPUS, "GPUs"),
    "cores": Limit(1, MAX_JOB_CORES, "cores"),
    "mem_mib": Limit(0, MAX_JOB_MEM_MIB, "MiB"),
    "nodes": Limit(1, MAX_JOB_NODES, "nodes"),
    "duration": DURATION,
}

# Per input format: column -> range of the raw value in the file.
FIELDS: dict[str, dict[str, Limit]] = {
    "openb": {
        "cpu_milli": Limit(0, MAX_JOB_CORES * 1000, "millicores"),
        "memory_mib": Limit(0, MAX_JOB_MEM_MIB, "MiB"),
        "num_gpu": Limit(0, MAX_JOB_GPUS, "GPUs"),
        "gpu_milli": Limit(0, 1000, "thousandths of a GPU"),
        "creation_time": TIME,
        "scheduled_time": TIME,
        "deletion_time": TIME,
    },
    "helios": {
        "gpu_num": Limit(0, MAX_JOB_GPUS, "GPUs"),
        "cpu_num": Limit(0, MAX_JOB_CORES, "cores"),
        "node_num": Limit(0, MAX_JOB_NODES, "nodes"),
        "submit_time": TIME,
        "start_time": TIME,
        "end_time": TIME,
        "duration": DURATION,
    },
    "helios-derived": {
        "gpu_num": Limit(0, MAX_JOB_GPUS, "GPUs"),
        "cpu_num": Limit(0, MAX_JOB_CORES, "cores"),
        "node_num": Limit(0, MAX_JOB_NODES, "nodes"),
        "interval": Limit(0, MAX_SPAN_S, "s"),
        "run_time": DURATION,
    },
    "pai": {
        "inst_num": Limit(1, MAX_JOB_NODES, "instances"),
        "start_time": TIME,
        "end_time": TIME,
        "plan_cpu": Limit(0, MAX_NODE_CORES * 100, "% of a core, per instance"),
        "plan_mem": Limit(0, MAX_NODE_MEM_MIB // 1024, "GB, per instance"),
        "plan_gpu": Limit(0, MAX_NODE_GPUS * 100, "% of a GPU, per instance"),
    },
    "csv": {
        "submit_s": TIME,
        "duration_s": DURATION,
        "gpus": Limit(0, MAX_JOB_GPUS, "GPUs"),
        "cores": Limit(0, MAX_JOB_CORES, "cores (0 is a bad row)"),
        "mem_mib": Limit(0, MAX_JOB_MEM_MIB, "MiB"),
        "nodes": Limit(1, MAX_JOB_NODES, "nodes"),
    },
    "node list": {
        "cpu_milli": Limit(1000, MAX_NODE_CORES * 1000, "millicores"),
        "memory_mib": Limit(0, MAX_NODE_MEM_MIB, "MiB"),
        "gpu": Limit(0, MAX_NODE_GPUS, "GPUs"),
    },
    "cluster spec": {
        "count": Limit(1, MAX_NODES, "nodes (all groups together too)"),
        "gpus": Limit(0, MAX_NODE_GPUS, "GPUs per node"),
        "cores": Limit(1, MAX_NODE_CORES, "cores per node"),
        "mem": Limit(1, MAX_NODE_MEM_MIB // 1024, "GiB per node"),
        "bw": Limit(0.001, MAX_NODE_BW_GBPS, "GB/s per node"),
    },
}

# Profile-set values (see workload/perf.py), by the kind of quantity a key holds.
PROFILE = {
    "cores": Limit(0, MAX_NODE_CORES, "optimal cores (>= 1), or CPUs per GPU (> 0)"),
    "throughput": Limit(0, 1e12, "relative training throughput"),
    "bw_gbps": Limit(0, MAX_NODE_BW_GBPS, "GB/s (> 0)"),
    "slowdown": Limit(1, 100, "iteration-time factor"),
    "excess": Limit(0, 99, "slowdown - 1 (multi_gpu_floor)"),
    "floor_gpus": Limit(1, 1024, "GPU count (multi_gpu_floor key)"),
    "pressure": Limit(0, 1, "fraction of node bandwidth (> 0, ascending)"),
    "weight": Limit(0, 1e6, "mixture weight"),
    "gbps_per_core": Limit(0, 1000, "GB/s per core (node: > 0)"),
    "jitter": Limit(0, 0.999, "fraction"),
    "busy": Limit(0, 1, "share of time or of full speed (gpu_busy)"),
}

# Other caps, as (name, value, unit), for the documentation table.
CAPS = (
    ("nodes in a cluster (spec or node list)", MAX_NODES, "nodes"),
    ("span of arrivals (last - first)", MAX_SPAN_S, "s (100 years)"),
    ("job runtime", MAX_DURATION_S, "s (10 years)"),
    ("job time limit (coda submit --time)", MAX_TIME_LIMIT_S, "s (366 days)"),
    ("GPUs / cores / MiB / nodes of one job", "65535 / 10^7 / 10^11 / 10000", "totals"),
    ("one physical CSV line", MAX_LINE_CHARS, "characters"),
    ("jobs made from one trace", MAX_TRACE_JOBS, "jobs"),
    ("profile-set file", MAX_PROFILE_BYTES, "bytes"),
    ("models in one profile set", MAX_PROFILE_MODELS, "models"),
)


def _num(v: float | int | str) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, float) and not v.is_integer():
        return f"{v:g}"
    v = int(v)
    return f"{v:.0e}".replace("e+", "e") if abs(v) >= 10**12 else str(v)


def markdown_table() -> str:
    """The ranges as the Markdown tables docs/trace-formats.md shows."""
    out = ["| input | field | min | max | unit |", "|---|---|---|---|---|"]
    for fmt, fields in FIELDS.items():
        for col, lim in fields.items():
            out.append(f"| {fmt} | `{col}` | {_num(lim.lo)} | {_num(lim.hi)} | {lim.unit} |")
    for col, lim in JOB.items():
        out.append(f"| every job | `{col}` | {_num(lim.lo)} | {_num(lim.hi)} | {lim.unit} |")
    for key, lim in PROFILE.items():
        out.append(f"| profile set | {key} | {_num(lim.lo)} | {_num(lim.hi)} | {lim.unit} |")
    out += ["", "| cap | value | unit |", "|---|---|---|"]
    out += [f"| {name} | {_num(v)} | {unit} |" for name, v, unit in CAPS]
    return "\n".join(out)


def plain_number(text: str) -> bool:
    """Whether a number's text is ASCII without '_': Python's float() and int() also
    take other scripts' digits (٣), full-width ones and '_' separators, which no trace,
    spec or command line means. Every reader of numbers refuses those."""
    return text.isascii() and "_" not in text
