"""A training-like job: data-loader workers do real CPU work, pipelined with a GPU step.

Run as ``python -m coda.runtime.workloads.train``. Like a PyTorch ``DataLoader`` with
``num_workers=N, prefetch_factor=K``: N forked worker processes each prepare batches
(``zlib`` decompression of synthetic images standing in for JPEG decoding, a random
crop to 7/8 of the side, a random horizontal flip, conversion to float32, per-channel
normalisation, and collation into a (B, C, H, W) float32 batch); batch ``i`` goes to
worker ``i % N`` and at most ``N*K`` batches are being prepared or waiting while the
main process runs the GPU step on the current one. The main process takes batches in
order, runs the step (a CUDA matmul loop sized at start to take about ``--gpu-ms``
when torch sees a GPU and ``--gpu auto``; otherwise a wait of ``--gpu-ms``), and
reports ``B`` samples to :class:`~coda.runtime.progress.Reporter`. So throughput is
about ``min(1 / gpu_ms, cpu_share / prep_time_per_batch)`` batches/s: once data
preparation is the bottleneck it falls about in proportion to the cores given.

Batches pass through a ring of ``N*K + 1`` fixed-size slots in an anonymous shared
mapping (inherited by the forked workers: nothing in /dev/shm to unlink or leak, even
after SIGKILL); the queues carry only small index messages.

Output: a JSON start line (pid, worker pids; not with ``--quiet``), a status line
about every 5 s (not with ``--quiet``), and always a JSON summary as the last line
(batches, samples, seconds, samples_per_s, worker_pids, ...). Exit status: 0 after
the stop condition or SIGTERM/SIGINT (workers stopped and joined first); 1 if a
worker dies or fails (with a message on stderr); 2 for bad options.

Workers are forked children: they inherit the main process's cgroup and cpuset and
set no affinity of their own. They ignore SIGINT and SIGTERM (the main process
stops them) and exit by themselves within a second if the main process is gone.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import mmap
import multiprocessing as mp
import os
import queue
import signal
import sys
import time
import traceback
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Literal, Protocol

import numpy as np

from coda.runtime.progress import Reporter
from coda.runtime.workloads._common import StopSignals, int_at_least, number_above

CHANNELS = 3
POOL_SIZE = 8
MIN_IMAGE_PX = 16
STATUS_INTERVAL_S = 5.0
MAX_RING_BYTES = 16 * 2**30
_POLL_S = 0.2  # how often the main process looks at signals, deadlines and workers

# A worker's message to the main process: a batch is ready (index, prep seconds, prep
# CPU seconds), or the worker failed (worker id, traceback).
Result = tuple[Literal["ok"], int, float, float] | tuple[Literal["error"], int, str]
# (batch index, ring slot) to prepare; None tells the worker to exit.
Task = tuple[int, int] | None


# ---------------------------------------------------------------------------
# Per-batch data preparation (what a worker does)


@dataclass(frozen=True)
class ImagePool:
    """Compressed synthetic images (H, W, C uint8, zlib) and their per-channel stats."""

    px: int
    compressed: tuple[bytes, ...]
    mean: np.ndarray  # (C,) float32, pixel units
    inv_std: np.ndarray  # (C,) float32

    @property
    def crop(self) -> int:
        return crop_size(self.px)

    def batch_shape(self, batch_images: int) -> tuple[int, int, int, int]:
        return (batch_images, CHANNELS, self.crop, self.crop)


def crop_size(px: int) -> int:
    """Side of the random crop taken from a ``px`` x ``px`` image: 7/8 of it."""
    return px * 7 // 8


def synthetic_image(rng: np.random.Generator, px: int) -> np.ndarray:
    """A (px, px, 3) uint8 image with structure: posterised gradients and waves, plus
    sparse noise, so that it compresses (to about 40% with zlib) but not trivially."""
    y, x = np.mgrid[0:px, 0:px].astype(np.float32) / px
    chans = []
    for c in range(CHANNELS):
        a, b, f = rng.uniform(-1.0, 1.0, 3)
        chans.append(
            128 + 60 * a * x + 60 * b * y + 30 * np.sin(2 * np.pi * (3 * f * x + (c + 1) * y))
        )
    img = np.round(np.stack(chans, axis=-1) / 4) * 4
    img += (rng.random(img.shape) < 0.1) * rng.normal(0.0, 8.0, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def make_pool(px: int, seed: int = 0, n: int = POOL_SIZE) -> ImagePool:
    """``n`` distinct compressed images of side ``px`` and their per-channel mean and
    standard deviation (the dataset statistics a normalisation step uses)."""
    if px < MIN_IMAGE_PX:
        raise ValueError(f"image side must be >= {MIN_IMAGE_PX} px")
    rng = np.random.default_rng([seed, 0x1A6E])
    images = [synthetic_image(rng, px) for _ in range(n)]
    pixels = np.stack(images).reshape(-1, CHANNELS).astype(np.float64)
    mean = pixels.mean(axis=0).astype(np.float32)
    std = np.maximum(pixels.std(axis=0), 1e-3).astype(np.float32)
    compressed = tuple(zlib.compress(img.tobytes(), 6) for img in images)
    return ImagePool(px, compressed, mean, (1.0 / std).astype(np.float32))


def batch_rng(seed: int, batch_index: int) -> np.random.Generator:
    """The random stream of one batch: the same batch whichever worker makes it."""
    return np.random.default_rng([seed, batch_index])


_SCRATCH: dict[tuple[int, int], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}


def prep_batch(
    pool: ImagePool,
    rng: np.random.Generator,
    batch_images: int,
    out: np.ndarray | None = None,
    passes: int = 1,
) -> np.ndarray:
    """One batch, (B, C, crop, crop) float32, written into ``out`` when given.

    Per image: decompress ("decode"), random crop, random horizontal flip, into a
    uint8 batch (collate); then on the whole batch: float32, subtract the channel
    mean, divide by the channel std, NHWC -> NCHW (a batched Normalize). ``passes``
    repeats the batched colour jitter and blur (heavier augmentation policies). The
    batched steps work on some 16 MB per batch (B=16), which stays in a shared L3
    alone but not beside a memory-bandwidth co-runner: that is the contention the
    eliminator is for.
    """
    px, crop = pool.px, pool.crop
    shape = pool.batch_shape(batch_images)
    if out is None:
        out = np.empty(shape, dtype=np.float32)
    elif out.shape != shape or out.dtype != np.float32:
        raise ValueError(f"out must be float32 of shape {shape}")
    # Scratch buffers are kept per worker, as a real pipeline's are: the batch stays
    # cache-resident between batches unless a co-runner evicts it.
    key = (batch_images, crop)
    scratch = _SCRATCH.get(key)
    if scratch is None:
        scratch = _SCRATCH[key] = (
            np.empty((batch_images, crop, crop, CHANNELS), dtype=np.uint8),
            np.empty((batch_images, crop, crop, CHANNELS), dtype=np.float32),
            np.empty((batch_images, crop, crop, CHANNELS), dtype=np.float32),
        )
    raw_batch, batch, blurred = scratch
    for i in range(batch_images):
        raw = zlib.decompress(pool.compressed[int(rng.integers(len(pool.compressed)))])
        img = np.frombuffer(raw, dtype=np.uint8).reshape(px, px, CHANNELS)
        top, left = (int(v) for v in rng.integers(0, px - crop + 1, size=2))
        img = img[top : top + crop, left : left + crop]
        raw_batch[i] = img[:, ::-1] if rng.random() < 0.5 else img
    np.copyto(blurred, raw_batch, casting="unsafe")
    for _ in range(passes):
        # Colour jitter per image (brightness, contrast), then a 3-tap horizontal blur:
        # each a pass over the float batch.
        np.copyto(batch, blurred)
        batch *= rng.uniform(0.8, 1.2, size=(batch_images, 1, 1, 1)).astype(np.float32)
        batch += rng.uniform(-20, 20, size=(batch_images, 1, 1, 1)).astype(np.float32)
        np.copyto(blurred, batch)
        blurred[:, :, 1:-1] += batch[:, :, :-2]
        blurred[:, :, 1:-1] += batch[:, :, 2:]
        blurred[:, :, 1:-1] *= np.float32(1 / 3)
    blurred -= pool.mean
    blurred *= pool.inv_std
    np.copyto(out, blurred.transpose(0, 3, 1, 2))
    return out


# ---------------------------------------------------------------------------
# The GPU step


class SleepStep:
    """Stands in for a GPU step: waits ``gpu_ms`` (no CPU used)."""

    name = "sleep"

    def __init__(self, gpu_ms: float):
        self.seconds = gpu_ms / 1000.0

    def __call__(self, batch: np.ndarray) -> None:
        end = time.perf_counter() + self.seconds
        while (left := end - time.perf_counter()) > 0:
            time.sleep(left)


class CudaStep:
    """A real GPU step: copy the batch to the GPU, then a loop of matmuls sized at start
    so that copy + loop take about ``gpu_ms``."""

    name = "cuda"
    N = 2048

    def __init__(self, torch: ModuleType, gpu_ms: float, batch_shape: Sequence[int]):
        self.torch = torch
        self.device = torch.device("cuda")
        gen = torch.Generator().manual_seed(0)
        self.a = torch.randn(self.N, self.N, generator=gen).to(self.device)
        self.b = torch.randn(self.N, self.N, generator=gen).to(self.device)
        self.c = torch.empty_like(self.a)
        self.iters = 0
        dummy = np.zeros(tuple(batch_shape), dtype=np.float32)
        self(dummy)  # warm up (CUDA context, allocator)
        self._matmuls(3)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(3):
            self(dummy)
        copy_s = (time.perf_counter() - t0) / 3
        reps = 20
        t0 = time.perf_counter()
        self._matmuls(reps)
        torch.cuda.synchronize()
        per_s = max((time.perf_counter() - t0) / reps, 1e-7)
        left_s = gpu_ms / 1000.0 - copy_s
        self.iters = max(1, round(left_s / per_s)) if left_s > 0 else 0

    def _matmuls(self, n: int) -> None:
        for _ in range(n):
            self.torch.mm(self.a, self.b, out=self.c)

    def __call__(self, batch: np.ndarray) -> None:
        x = self.torch.from_numpy(batch).to(self.device)
        self._matmuls(self.iters)
        del x
        self.torch.cuda.synchronize()


class GpuStep(Protocol):
    """What the main process runs on each batch (SleepStep or CudaStep)."""

    @property
    def name(self) -> str: ...

    def __call__(self, batch: np.ndarray) -> None: ...


def make_gpu_step(mode: str, gpu_ms: float, batch_shape: Sequence[int]) -> GpuStep:
    """``mode="auto"``: a :class:`CudaStep` when torch imports and sees a GPU, else a
    :class:`SleepStep`; ``"off"``: always the :class:`SleepStep`."""
    if mode == "auto":
        torch: ModuleType | None
        try:
            # Optional and heavy: only when asked. Imported by name since it is not a
            # dependency (type checking runs without it).
            torch = importlib.import_module("torch")
        except Exception:  # any import failure: no GPU step
            torch = None
        if torch is not None and torch.cuda.is_available():
            return CudaStep(torch, gpu_ms, batch_shape)
    return SleepStep(gpu_ms)


# ---------------------------------------------------------------------------
# Worker processes


def _worker(
    wid: int,
    pool: ImagePool,
    shape: tuple[int, ...],
    nslots: int,
    buf: mmap.mmap,
    tasks: mp.Queue[Task],
    results: mp.Queue[Result],
    seed: int,
    parent_pid: int,
    passes: int = 1,
) -> None:
    # The main process decides when workers stop (a signal to the whole process
    # group or cgroup must not kill them under it).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        ring = np.ndarray((nslots, *shape), dtype=np.float32, buffer=buf)
        while True:
            try:
                task = tasks.get(timeout=1.0)
            except queue.Empty:
                if os.getppid() != parent_pid:
                    return  # orphaned: the main process is gone
                continue
            if task is None:
                return
            index, slot = task
            t0, c0 = time.perf_counter(), time.thread_time()
            prep_batch(pool, batch_rng(seed, index), shape[0], out=ring[slot], passes=passes)
            results.put(("ok", index, time.perf_counter() - t0, time.thread_time() - c0))
    except BaseException:  # report anything, then exit non-zero
        results.put(("error", wid, traceback.format_exc()))
        sys.exit(1)


class WorkerFailed(RuntimeError):
    pass


def _describe_exit(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


# ---------------------------------------------------------------------------
# Command line


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m coda.runtime.workloads.train",
        description="A training-like job: data-loader worker processes prepare image batches "
        "on the CPU, pipelined with a GPU step. Reports progress to CODA_PROGRESS_FILE.",
    )
    p.add_argument(
        "--workers",
        type=int_at_least(1),
        default=2,
        help="data-loader worker processes (default 2)",
    )
    p.add_argument(
        "--batch-images", type=int_at_least(1), default=16, help="images per batch (default 16)"
    )
    p.add_argument(
        "--image-px",
        type=int_at_least(MIN_IMAGE_PX),
        default=224,
        help="side of the stored images; batches hold 7/8 crops (default 224)",
    )
    p.add_argument(
        "--augment-passes",
        type=int_at_least(1),
        default=1,
        help="batched colour-jitter + blur passes per batch (default 1)",
    )
    p.add_argument(
        "--gpu-ms",
        type=number_above(0.0, strict=False),
        default=50.0,
        help="GPU step time in ms (default 50)",
    )
    p.add_argument(
        "--prefetch",
        type=int_at_least(1),
        default=2,
        help="batches in flight per worker (default 2)",
    )
    p.add_argument(
        "--seconds", type=number_above(0.0, strict=True), help="stop after this many seconds"
    )
    p.add_argument("--batches", type=int_at_least(1), help="stop after this many batches")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument(
        "--gpu",
        choices=("auto", "off"),
        default="auto",
        help="auto: a CUDA matmul step when torch sees a GPU, else a wait; off: always a wait",
    )
    p.add_argument(
        "--quiet",
        action="store_true",
        help="no start and status lines (the summary is still printed)",
    )
    return p


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    crop = crop_size(args.image_px)
    ring = (args.workers * args.prefetch + 1) * args.batch_images * CHANNELS * crop * crop * 4
    if ring > MAX_RING_BYTES:
        parser.error(
            f"the batch ring would need {ring / 2**30:.1f} GiB "
            f"(limit {MAX_RING_BYTES // 2**30} GiB): "
            "lower --workers, --prefetch, --batch-images or --image-px"
        )
    return args


# ---------------------------------------------------------------------------
# Main process


def run(args: argparse.Namespace) -> int:
    stop = StopSignals()
    pool = make_pool(args.image_px, args.seed)
    n_workers, prefetch, b = args.workers, args.prefetch, args.batch_images
    shape = pool.batch_shape(b)
    nslots = n_workers * prefetch + 1  # + the one the GPU step is using
    slot_bytes = math.prod(shape) * 4
    buf = mmap.mmap(-1, nslots * slot_bytes)  # anonymous, MAP_SHARED: inherited by fork
    ring = np.ndarray((nslots, *shape), dtype=np.float32, buffer=buf)

    ctx = mp.get_context("fork")
    results: mp.Queue[Result] = ctx.Queue()
    tasks: list[mp.Queue[Task]] = [ctx.Queue() for _ in range(n_workers)]
    procs: list[mp.process.BaseProcess] = []
    reporter: Reporter | None = None
    error: str | None = None
    stats = {"batches": 0, "prep_s": 0.0, "prep_cpu_s": 0.0, "prepped": 0}
    t_start = t_first = t_end = time.monotonic()
    gpu_name = "?"
    stopped_by = "?"
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        for w in range(n_workers):
            p = ctx.Process(
                target=_worker,
                args=(
                    w,
                    pool,
                    shape,
                    nslots,
                    buf,
                    tasks[w],
                    results,
                    args.seed,
                    os.getpid(),
                    args.augment_passes,
                ),
                name=f"coda-train-worker-{w}",
                daemon=True,
            )
            p.start()
            procs.append(p)
        step = make_gpu_step(args.gpu, args.gpu_ms, shape)
        gpu_name = step.name
        reporter = Reporter()
        if not args.quiet:
            start = {
                "event": "start",
                "pid": os.getpid(),
                "worker_pids": [p.pid for p in procs],
                "batch_shape": list(shape),
                "gpu": gpu_name,
                "gpu_ms": args.gpu_ms,
                "prefetch": prefetch,
            }
            print(json.dumps(start), flush=True)

        t_start = time.monotonic()
        deadline = t_start + args.seconds if args.seconds else math.inf
        limit = args.batches if args.batches else math.inf
        sent = 0

        def send_until(n: float) -> None:
            nonlocal sent
            while sent < n and sent < limit:
                tasks[sent % n_workers].put((sent, sent % nslots))
                sent += 1

        send_until(n_workers * prefetch)
        ready: set[int] = set()
        i = 0
        last_t, last_i = t_start, 0
        while True:
            now = time.monotonic()
            if stop.signum is not None:
                stopped_by = stop.name
                break
            if i >= limit:
                stopped_by = "batches"
                break
            if now >= deadline:
                stopped_by = "seconds"
                break
            if i not in ready:
                try:
                    msg = results.get(timeout=min(_POLL_S, max(deadline - now, 0.001)))
                except queue.Empty:
                    _check_workers(procs, results)
                    continue
                if msg[0] == "error":
                    raise WorkerFailed(f"data worker {msg[1]} failed:\n{msg[2].rstrip()}")
                ready.add(msg[1])
                stats["prep_s"] += msg[2]
                stats["prep_cpu_s"] += msg[3]
                stats["prepped"] += 1
                continue
            ready.discard(i)
            # Batch i's slot stays with the GPU step; batch i + N*K takes the slot of
            # batch i - 1, whose step is done.
            send_until(i + n_workers * prefetch + 1)
            step(ring[i % nslots])
            reporter.step(b)
            i += 1
            stats["batches"] = i
            now = time.monotonic()
            if i == 1:
                t_first = now
            if not args.quiet and now - last_t >= STATUS_INTERVAL_S:
                rate = (i - last_i) / (now - last_t)
                print(f"train: {rate:.2f} batches/s, {rate * b:.1f} samples/s", flush=True)
                last_t, last_i = now, i
    except WorkerFailed as e:
        error = str(e)
        stopped_by = "error"
    finally:
        t_end = time.monotonic()
        _shutdown(procs, tasks, results)
        if reporter is not None:
            reporter.close()
        del ring
        try:
            buf.close()
        except BufferError:  # a view still exported: the process exit frees it
            pass
        stop.restore()

    batches = stats["batches"]
    seconds = t_end - t_start
    steady = (batches - 1) * b / (t_end - t_first) if batches > 1 and t_end > t_first else 0.0
    prepped = max(stats["prepped"], 1)
    summary = {
        "event": "summary",
        "batches": batches,
        "samples": batches * b,
        "seconds": round(seconds, 3),
        "samples_per_s": round(batches * b / seconds, 2) if seconds > 0 else 0.0,
        "steady_samples_per_s": round(steady, 2),
        "batch_images": b,
        "workers": n_workers,
        "prefetch": prefetch,
        "gpu": gpu_name,
        "gpu_ms": args.gpu_ms,
        "prep_ms": round(stats["prep_s"] / prepped * 1e3, 2),
        "prep_cpu_ms": round(stats["prep_cpu_s"] / prepped * 1e3, 2),
        "stopped_by": stopped_by,
        "pid": os.getpid(),
        "worker_pids": [p.pid for p in procs],
    }
    if error:
        summary["error"] = error.splitlines()[0]
    print(json.dumps(summary), flush=True)
    if error:
        print(f"train: error: {error}", file=sys.stderr, flush=True)
        return 1
    return 0


def _check_workers(procs: Sequence[mp.process.BaseProcess], results: mp.Queue[Result]) -> None:
    for w, p in enumerate(procs):
        if p.exitcode is None:
            continue
        # A worker that failed says why before exiting: prefer its message.
        try:
            while True:
                msg = results.get(timeout=0.1)
                if msg[0] == "error":
                    raise WorkerFailed(f"data worker {msg[1]} failed:\n{msg[2].rstrip()}")
        except queue.Empty:
            pass
        raise WorkerFailed(f"data worker {w} (pid {p.pid}) {_describe_exit(p.exitcode)}")


def _shutdown(
    procs: Sequence[mp.process.BaseProcess],
    tasks: Sequence[mp.Queue[Task]],
    results: mp.Queue[Result],
) -> None:
    """Ask the workers to stop, give them a second, then kill; always join."""
    for q in tasks:
        try:
            q.put(None)
        except (OSError, ValueError):
            pass
    deadline = time.monotonic() + 1.0
    for p in procs:
        p.join(max(deadline - time.monotonic(), 0.0))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join(2.0)
    queues: list[mp.Queue[Any]] = [*tasks, results]
    for q in queues:
        q.cancel_join_thread()
        q.close()


def main(argv: Sequence[str] | None = None) -> int:
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
