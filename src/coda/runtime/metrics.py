"""Prometheus metrics of CODA's daemons, through the standard client library.

A collector reads the daemon's live state at scrape time (the node agent's, or the
Slurm controller's), in a registry of its own: several daemons in one process (tests)
never share or clash. The same registry is written to ``<state-dir>/metrics.prom``
every period (atomically, for node-exporter's textfile collector) and, with
``--metrics-port``, served over HTTP by :class:`MetricsServer`.

The daemons serve scrapes from a thread of the server's own (``serve_in_background``),
each request in a thread of its own for 2 s at most, so a slow or silent client holds
up neither a period nor another scrape; a collector takes the daemon's lock, so a
scrape sees the state between two periods, never half of one (and waits for a period
under way). The agent launches jobs without ``preexec_fn`` in its own process, so a
fork while the server's thread holds a lock cannot deadlock a child. ``wait(seconds)``
answers requests in the caller's thread instead, for a caller that idles between
periods.
"""

from __future__ import annotations

import io
import os
import select
import socket
import socketserver
import sys
import threading
import time
from collections.abc import Callable, Iterable
from http.server import HTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from prometheus_client import CollectorRegistry, generate_latest, write_to_textfile
from prometheus_client.exposition import MetricsHandler
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString as _untyped_float_to_go

# prometheus_client leaves it unannotated: a float in, its text as Go prints it out.
float_to_go = cast(Callable[[float], str], _untyped_float_to_go)

if TYPE_CHECKING:
    from coda.runtime.agent import NodeAgent

# A scrape may hold the daemon's loop this long to send its request, and as long again
# to take the answer: a client that stalls (or trickles bytes) cannot stall the daemon.
REQUEST_TIMEOUT_S = 2.0
MAX_REQUEST_BYTES = 16 * 1024  # a GET's request line and headers; more is not a scrape
METRICS_PATHS = ("/metrics", "/")


def label_value(v: object) -> str:
    """A label value the exposition can always encode (a job name from a JSON spec may
    hold a lone surrogate, which UTF-8 cannot carry): such code points as escapes."""
    return str(v).encode("utf-8", "backslashreplace").decode("utf-8")


# ------------------------------------------------------------ the node agent
JOB_LABELS = ("job", "name", "kind")
# Decisions every control loop makes, present (0) from the start: a dashboard's rate()
# and an alert on them see a series before the first one.
LOOP_DECISIONS = (("allocator", "set-cores"), ("eliminator", "set-quota"))


class AgentCollector(Collector):
    """The node agent's state as metric families (names, types, labels and help as
    the agent has always exported them; dashboards depend on them)."""

    def __init__(self, agent: NodeAgent[Any]) -> None:
        self.agent = agent

    def collect(self) -> Iterable[Metric]:
        with self.agent.lock:  # between two ticks: one consistent picture
            return list(self._collect())

    def _collect(self) -> Iterable[Metric]:
        a = self.agent
        yield CounterMetricFamily("coda_agent_ticks_total", "Control periods run.", value=a.ticks)
        yield GaugeMetricFamily(
            "coda_agent_tick_seconds",
            "Duration of the last control period's work.",
            value=a.last_tick_s,
        )
        node = a.node
        if node is not None:
            for name, help_, value in (
                ("coda_node_cores", "Cores the agent manages.", node.cores),
                ("coda_node_free_cores", "Cores no job holds.", node.free_cores),
                ("coda_node_gpus", "GPUs on the node.", node.gpus),
                ("coda_node_free_gpus", "GPUs no job holds.", node.free_gpus),
            ):
                yield GaugeMetricFamily(name, help_, value=value)
            if node.bw_gbps > 0:  # measured (resctrl MBM) and declared (--bus-gbps) only
                yield GaugeMetricFamily(
                    "coda_node_bus_gbps",
                    "Memory traffic on the node's bus, GB/s (resctrl MBM counters).",
                    value=node.bw_used,
                )
        cores = GaugeMetricFamily(
            "coda_job_cores", "Cores (cpuset size) a running job holds.", labels=JOB_LABELS
        )
        requested = GaugeMetricFamily(
            "coda_job_requested_cores", "Cores a running job asked for.", labels=JOB_LABELS
        )
        quota = GaugeMetricFamily(
            "coda_job_quota",
            "CPU quota as a fraction of the job's cores (1 = none).",
            labels=JOB_LABELS,
        )
        throughput = GaugeMetricFamily(
            "coda_job_throughput",
            "Last measured throughput, samples/s (job units).",
            labels=JOB_LABELS,
        )
        stalled = GaugeMetricFamily(
            "coda_job_stalled", "1 while a job's progress reports are missing.", labels=JOB_LABELS
        )
        # list(): one step under the GIL, so a scrape from the server's thread never sees
        # the control loop change the dict half-way.
        for m in list(a.jobs.running.values()):
            lv = [str(m.row_id), label_value(m.job.job_id), label_value(m.job.kind)]
            cores.add_metric(lv, len(m.cpus))
            requested.add_metric(lv, m.job.cores)
            quota.add_metric(lv, m.job.quota)
            if m.throughput is not None:
                throughput.add_metric(lv, m.throughput)
            stalled.add_metric(lv, float(m.stalled))
        yield from (cores, requested, quota, throughput, stalled)
        decisions = CounterMetricFamily(
            "coda_agent_decisions_total",
            "Decisions by component and action.",
            labels=("component", "action"),
        )
        counts = dict.fromkeys(LOOP_DECISIONS, 0)
        for key, value in a.decisions.counters.items():
            if ":" in key:  # other counters (quota_up, ...) are internal
                component, action = key.split(":", 1)
                counts[(component, action)] = value
        for (component, action), value in sorted(counts.items()):
            decisions.add_metric([label_value(component), label_value(action)], value)
        yield decisions


def agent_registry(agent: NodeAgent[Any]) -> CollectorRegistry:
    """A registry of its own that reads ``agent``'s live state at every collection."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(AgentCollector(agent))
    return registry


# ------------------------------------------------------------ output
def write_textfile(registry: CollectorRegistry, path: str | os.PathLike[str]) -> None:
    """Write the registry's text exposition to ``path`` atomically (a temporary file
    beside it, then a rename: a reader sees the old file or the new one, whole), mode
    0600 like every file in the state directory."""
    write_to_textfile(os.fspath(path), registry)
    os.chmod(path, 0o600)


class _Handler(MetricsHandler):
    """The client library's handler, bounded in time and size, at /metrics (and /)."""

    timeout = REQUEST_TIMEOUT_S  # StreamRequestHandler: the socket's timeout (the reply)

    def setup(self) -> None:
        super().setup()
        self.rfile = io.BytesIO(self._read_request())

    def _read_request(self) -> bytes:
        """The request line and headers, read under one deadline for all of them (the
        socket's timeout alone restarts at every byte). Incomplete: nothing, and
        http.server closes the connection without an answer."""
        deadline = time.monotonic() + REQUEST_TIMEOUT_S
        buf = b""
        while b"\r\n\r\n" not in buf and b"\n\n" not in buf:
            left = deadline - time.monotonic()
            if left <= 0 or len(buf) > MAX_REQUEST_BYTES:
                return b""
            self.connection.settimeout(left)
            try:
                chunk = self.connection.recv(4096)
            except TimeoutError:
                return b""
            if not chunk:
                return b""
            buf += chunk
        self.connection.settimeout(REQUEST_TIMEOUT_S)
        return buf

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path.split("?", 1)[0] not in METRICS_PATHS:
            self.send_error(404)
            return
        super().do_GET()


class _Server(socketserver.ThreadingMixIn, HTTPServer):
    """Each request in a thread of its own, at most MAX_CONCURRENT at once (more are
    closed unanswered): a client that connects and says nothing holds one thread for
    REQUEST_TIMEOUT_S, never the scrapes beside it."""

    daemon_threads = True
    block_on_close = False
    MAX_CONCURRENT = 64

    def __init__(self, host: str, port: int, handler: type[_Handler]) -> None:
        # IPv4 or IPv6, as the host says (a bad host is a socket.gaierror: an OSError).
        self.address_family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        self._slots = threading.BoundedSemaphore(self.MAX_CONCURRENT)
        super().__init__((host, port), handler)
        self.socket.setblocking(False)  # a client gone between select and accept: no wait

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def server_bind(self) -> None:
        socketserver.TCPServer.server_bind(self)  # not HTTPServer's: no reverse DNS lookup
        self.server_name, self.server_port = str(self.server_address[0]), self.server_address[1]

    def handle_error(
        self, request: socket.socket | tuple[bytes, socket.socket], client_address: object
    ) -> None:
        if isinstance(sys.exc_info()[1], OSError):
            return  # the client went away or stalled: its problem, not the daemon's
        super().handle_error(request, client_address)


class MetricsServer:
    """``registry`` over HTTP at /metrics, answered by ``wait`` in the caller's thread
    (see the module's docstring). The client library's handler does the exposition,
    its content negotiation (OpenMetrics for a Prometheus that asks for it) and gzip.

    Raises OSError if it cannot bind ``host``:``port`` (0: any free port, see ``port``)."""

    def __init__(self, host: str, port: int, registry: CollectorRegistry) -> None:
        self.httpd = _Server(host, port, _Handler.factory(registry))
        self.httpd.timeout = 0  # handle_request: only what select found ready
        self.port: int = self.httpd.server_address[1]
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def serve_in_background(self) -> None:
        """Answer scrapes from a thread of the server's own, each in a thread of its
        own (2 s at most): a slow or silent client delays neither other scrapes nor the
        daemon's loop."""

        def loop() -> None:
            while not self._stop.is_set():
                self.wait(0.2)

        self._thread = threading.Thread(target=loop, name="coda-metrics", daemon=True)
        self._thread.start()

    def wait(self, seconds: float) -> None:
        """Idle up to ``seconds``, answering requests that arrive meanwhile."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            ready, _, _ = select.select([self.httpd.socket], [], [], left)
            if ready:
                self.httpd.handle_request()

    def close(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=5)
        self.httpd.server_close()


def textfile_exporter(
    registry: CollectorRegistry, path: Path, say: Callable[[str], None]
) -> Callable[[], None]:
    """A function that writes ``registry`` to ``path`` (``write_textfile``). A failure
    (disk full) is logged when it first happens and when it ends, and never stops the
    daemon that calls it every period."""
    failing = {"error": ""}

    def export() -> None:
        try:
            write_textfile(registry, path)
        except OSError as e:
            if str(e) != failing["error"]:
                say(f"cannot write {path}: {e.strerror or e}")
            failing["error"] = str(e)
            return
        if failing["error"]:
            say(f"{path}: written again")
            failing["error"] = ""

    return export


def render(agent: NodeAgent[Any]) -> str:
    """The agent's metrics as text (format 0.0.4)."""
    return generate_latest(agent_registry(agent)).decode("utf-8")
