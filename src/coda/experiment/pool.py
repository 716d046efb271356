"""Running an experiment's independent runs inline or in a process pool."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def run_each(
    items: Sequence[T],
    work: Callable[[T], R],
    workers: int,
    failed: Callable[[T, Exception], R],
    on_done: Callable[[int, R], None],
) -> None:
    """``work`` on each item, inline (at most one worker) or in a spawn process pool;
    ``on_done(i, result)`` is called in this process as item ``i`` finishes (in any
    order). A worker that dies gives ``failed(item, error)`` as that item's result and
    the others go on. ``work`` must be importable by name (a module's function)."""
    workers = min(workers, len(items))
    if workers <= 1:
        for i, item in enumerate(items):
            on_done(i, work(item))
        return
    # spawn, not fork: the caller may run threads (the progress bar's refresher).
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        futures = {pool.submit(work, item): i for i, item in enumerate(items)}
        for future in as_completed(futures):
            i = futures[future]
            try:
                result = future.result()
            except Exception as exc:  # noqa: BLE001 - a worker died: record, go on
                result = failed(items[i], exc)
            on_done(i, result)
