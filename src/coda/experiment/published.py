"""What the CODA paper publishes of its evaluation month (Section VI, Figures 10, 11
and 14), as docs/paper.md reads it: one table that the report's "paper" column and the
fit's targets both take their values from.

Only the month's own figures are here. The production week of Section III (Figures 1
and 2c: a different week, a different load) is context in docs/paper.md, never a
target for the month. Values are fractions 0-1; `text` is how the paper says it, or
how its figure reads (docs/paper.md says how each was read).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Published:
    """One published figure: our metric `key`, per policy (value, as said)."""

    key: str
    label: str
    source: str
    values: dict[str, tuple[float, str]]
    cdf: bool = False  # a point of Figure 11's queuing CDF (its tolerance is wider)


# The month's figures. "Fig. 11" values are the CDF at its markers (3 s ... 10^4 s),
# read from the PDF's vector data ("over T" is 1 - the CDF at T); "Sec. VI-B, Fig. 11"
# values are the text's, which the figure shows within half a point.
MONTH: tuple[Published, ...] = (
    Published("gpu_util_busy", "GPU utilisation (busy share of active GPUs)", "Sec. VI-B",
              {"fifo": (0.454, "45.4%"), "drf": (0.447, "44.7%"), "coda": (0.621, "62.1%")}),
    Published("gpu_active_queued", "GPU active rate while jobs queue", "Sec. VI-B",
              {"fifo": (0.835, "83.5%"), "drf": (0.833, "83.3%"), "coda": (0.912, "91.2%")}),
    Published("gpu_frag_cores", "GPU fragmentation from too few cores", "Sec. VI-C",
              {"fifo": (0.143, "14.3%"), "drf": (0.146, "14.6%"), "coda": (0.01, "<1%")}),
    Published("gpu_util_busy_time_avg", "busy share of active GPUs, time-averaged", "Fig. 10",
              {"fifo": (0.456, "45.6%"), "drf": (0.457, "45.7%"), "coda": (0.617, "61.7%")}),
    Published("gpu_util_allocated", "GPU active rate, time-averaged", "Fig. 10",
              {"fifo": (0.812, "81.2%"), "drf": (0.822, "82.2%"), "coda": (0.687, "68.7%")}),
    Published("gpu_active_over_90_time_share", "time with GPU active rate over 90%", "Fig. 10",
              {"fifo": (0.22, "~22%"), "drf": (0.26, "~26%"), "coda": (0.112, "~11%")}),
    Published("cpu_within_10s_share", "CPU jobs placed within 10 s", "Sec. VI-B, Fig. 11",
              {"fifo": (0.874, "87.4%"), "drf": (0.878, "87.8%"), "coda": (0.912, "91.2%")},
              cdf=True),
    Published("cpu_within_1h_share", "CPU jobs placed within 1 h", "Fig. 11",
              {"fifo": (0.971, "97.1%"), "drf": (0.979, "97.9%"), "coda": (0.986, "98.6%")},
              cdf=True),
    Published("cpu_within_1e4s_share", "CPU jobs placed within 10^4 s", "Fig. 11",
              {"fifo": (1.0, "100%"), "drf": (1.0, "100%"), "coda": (1.0, "100%")}, cdf=True),
    Published("dnn_within_10s_share", "DNN jobs started within 10 s", "Fig. 11",
              {"fifo": (0.469, "46.9%"), "drf": (0.527, "52.7%"), "coda": (0.927, "92.7%")},
              cdf=True),
    Published("dnn_queue_over_3min_share", "DNN jobs queuing over 3 min", "Fig. 11",
              {"fifo": (0.504, "50.4%"), "drf": (0.401, "40.1%"), "coda": (0.054, "5.4%")},
              cdf=True),
    Published("dnn_queue_over_10min_share", "DNN jobs queuing over 10 min", "Sec. VI-B, Fig. 11",
              {"fifo": (0.431, "43.1%"), "drf": (0.289, "28.9%")}, cdf=True),
    Published("dnn_queue_over_1h_share", "DNN jobs queuing over 1 h", "Sec. VI-B, Fig. 11",
              {"fifo": (0.278, "27.8%"), "drf": (0.143, "14.3%")}, cdf=True),
    Published("dnn_within_1e4s_share", "DNN jobs started within 10^4 s", "Fig. 11",
              {"fifo": (1.0, "100%"), "drf": (1.0, "100%"), "coda": (1.0, "100%")}, cdf=True),
    Published("dnn_no_queue_share", "DNN jobs not queuing", "Sec. VI-B",
              {"coda": (0.921, "92.1%")}),
    Published("cpu_within_180s_share", "CPU jobs placed within 3 min", "Sec. VI-B",
              {"coda": (0.945, "94.5%")}),
    Published("dnn_more_cores_share", "DNN jobs granted 1-5 cores more", "Fig. 14",
              {"coda": (0.571, "57.1%")}),
    Published("dnn_fewer_cores_share", "DNN jobs granted 1-20 cores fewer", "Fig. 14",
              {"coda": (0.336, "33.6%")}),
    # "Profiling steps of 90 s; every job settled within 3-4 steps (about 6 min)".
    Published("allocator_probes_per_search", "core levels probed per search", "Sec. VI-F",
              {"coda": (3.5, "3-4")}),
    Published("allocator_settle_s", "time from start to a settled core count", "Sec. VI-F",
              {"coda": (360.0, "about 6 min")}),
)  # fmt: skip

BY_KEY = {p.key: p for p in MONTH}


def paper_value(key: str, policy: str) -> float | None:
    """The paper's value of `key` under `policy`, None where it publishes none."""
    p = BY_KEY.get(key)
    entry = p.values.get(policy) if p else None
    return entry[0] if entry else None
