"""Prometheus text exposition of the agent's state (format 0.0.4).

Written to ``<state-dir>/metrics.prom`` every period (node-exporter's textfile
collector picks it up) and, with ``--metrics-port``, served over HTTP.
"""

from __future__ import annotations

import os
import select
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from coda.runtime.agent import NodeAgent


def _label(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render(agent: NodeAgent) -> str:
    node = agent.node
    lines: list[str] = []

    def metric(
        name: str, kind: str, help_: str, samples: list[tuple[dict[str, str], float]]
    ) -> None:
        lines.append(f"# HELP {name} {help_}")
        lines.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            lab = ",".join(f'{k}="{_label(v)}"' for k, v in labels.items())
            lines.append(f"{name}{{{lab}}} {value:.6g}" if lab else f"{name} {value:.6g}")

    metric("coda_agent_ticks_total", "counter", "Control periods run.", [({}, agent.ticks)])
    metric(
        "coda_agent_tick_seconds",
        "gauge",
        "Duration of the last control period's work.",
        [({}, agent.last_tick_s)],
    )
    if node is not None:
        metric("coda_node_cores", "gauge", "Cores the agent manages.", [({}, node.cores)])
        metric("coda_node_free_cores", "gauge", "Cores no job holds.", [({}, node.free_cores)])
        metric("coda_node_gpus", "gauge", "GPUs on the node.", [({}, node.gpus)])
        metric("coda_node_free_gpus", "gauge", "GPUs no job holds.", [({}, node.free_gpus)])
    jobs = list(agent.running.values())
    lab = [{"job": str(m.row_id), "name": m.job.job_id, "kind": m.job.kind} for m in jobs]
    metric(
        "coda_job_cores",
        "gauge",
        "Cores (cpuset size) a running job holds.",
        [(lb, len(m.cpus)) for lb, m in zip(lab, jobs, strict=True)],
    )
    metric(
        "coda_job_requested_cores",
        "gauge",
        "Cores a running job asked for.",
        [(lb, m.job.cores) for lb, m in zip(lab, jobs, strict=True)],
    )
    metric(
        "coda_job_quota",
        "gauge",
        "CPU quota as a fraction of the job's cores (1 = none).",
        [(lb, m.job.quota) for lb, m in zip(lab, jobs, strict=True)],
    )
    metric(
        "coda_job_throughput",
        "gauge",
        "Last measured throughput, samples/s (job units).",
        [(lb, m.throughput) for lb, m in zip(lab, jobs, strict=True) if m.throughput is not None],
    )
    metric(
        "coda_job_stalled",
        "gauge",
        "1 while a job's progress reports are missing.",
        [(lb, float(m.stalled)) for lb, m in zip(lab, jobs, strict=True)],
    )
    decisions = sorted(agent.counters.items())
    metric(
        "coda_agent_decisions_total",
        "counter",
        "Decisions by component and action.",
        [
            ({"component": k.split(":", 1)[0], "action": k.split(":", 1)[1]}, v)
            for k, v in decisions
            if ":" in k
        ],
    )
    return "\n".join(lines) + "\n"


def write_file(agent: NodeAgent, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(render(agent))
    os.replace(tmp, path)


class MetricsServer:
    """Serves the last rendered text at /metrics, from the agent's own thread: ``wait``
    answers requests while the agent idles between ticks. No thread, because the agent
    forks jobs (a fork while another thread holds a lock can deadlock the child)."""

    def __init__(self, host: str, port: int) -> None:
        self._text = ""
        outer = self

        class Handler(BaseHTTPRequestHandler):
            timeout = 2.0  # a client that stalls mid-request cannot hold the agent long

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self.path.split("?")[0] not in ("/metrics", "/"):
                    self.send_error(404)
                    return
                body = outer._text.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = HTTPServer((host, port), Handler)
        self.httpd.timeout = 0  # handle_request: only what select found ready
        self.port = self.httpd.server_address[1]

    def update(self, text: str) -> None:
        self._text = text

    def wait(self, seconds: float) -> None:
        """Idle up to ``seconds``, answering requests that arrive meanwhile."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            ready, _, _ = select.select([self.httpd.socket], [], [], left)
            if ready:
                self.httpd.handle_request()

    def close(self) -> None:
        self.httpd.server_close()
