"""The cyclic collector paused over a stretch of work, and the long-lived heap that
freezes what each stretch leaves alive until a sweep."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from coda.collector import LongLivedHeap, collector_off


class Cell:
    """An object that can refer to itself: cyclic garbage once let go."""

    def __init__(self) -> None:
        self.me: Cell | None = None


def cyclic_garbage() -> weakref.ref[Cell]:
    """A cell that refers to itself, let go: only the collector can free it."""
    cell = Cell()
    cell.me = cell
    return weakref.ref(cell)


@pytest.fixture
def collector_restored() -> Iterator[None]:
    """The collector as it was, and nothing left frozen, whatever the test did."""
    was_on = gc.isenabled()
    try:
        yield
    finally:
        gc.unfreeze()
        (gc.enable if was_on else gc.disable)()


def test_collector_off_restores_the_collector_as_it_was(collector_restored: None) -> None:
    for before in (True, False):
        (gc.enable if before else gc.disable)()
        with collector_off():
            assert not gc.isenabled()
        assert gc.isenabled() is before


def test_a_stretch_freezes_what_it_leaves_alive(collector_restored: None) -> None:
    gc.enable()
    heap = LongLivedHeap(sweep_every=3)
    frozen0 = gc.get_freeze_count()
    with heap.stretch():
        assert not gc.isenabled()
        kept = [Cell() for _ in range(1000)]
    assert gc.isenabled()
    assert gc.get_freeze_count() >= frozen0 + len(kept)
    assert heap.stretches == 1 and not heap.sweep_due


def test_cyclic_garbage_a_stretch_froze_waits_for_the_sweep(collector_restored: None) -> None:
    heap = LongLivedHeap(sweep_every=2)
    with heap.stretch():
        ref = cyclic_garbage()
    gc.collect()
    assert ref() is not None  # frozen: out of the collector's reach
    with heap.stretch():
        pass
    assert heap.sweep_due
    assert heap.sweep() >= 1
    assert ref() is None
    assert heap.stretches == 0 and heap.sweeps == 1 and heap.collected >= 1
    assert not heap.sweep_due


def test_a_stretch_cut_short_freezes_and_restores_too(collector_restored: None) -> None:
    gc.enable()
    heap = LongLivedHeap()
    with pytest.raises(RuntimeError), heap.stretch():
        raise RuntimeError("cut short")
    assert gc.isenabled() and heap.stretches == 1


def test_released_the_frozen_are_collectable_again(collector_restored: None) -> None:
    heap = LongLivedHeap()
    with heap.stretch():
        ref = cyclic_garbage()
    heap.release()
    assert gc.get_freeze_count() == 0 and heap.stretches == 0
    gc.collect()
    assert ref() is None


def test_a_sweep_period_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="sweep_every"):
        LongLivedHeap(sweep_every=0)
