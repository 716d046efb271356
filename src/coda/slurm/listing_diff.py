"""A listing read against the last one: only the lines that differ are looked at.

squeue prints every job Slurm remembers (191,000 lines at 10,000 nodes and 100,000
held jobs), and from one cycle to the next a few hundred of them change. Splitting
the whole text into lines and looking each up cost more than the rest of a cycle, so
the new text is compared with the last one in runs of the last read's whole lines
(where its lines start is kept: a run's compare is one memory compare), and only
where they differ is it cut into lines: the lines in between are the last read's,
with their jobs.

The result is what a read of every line gives (``JobListing`` checks its jobs by
line either way): a line that differs is looked up by its text, as every line is on
the slow path. Lines are matched by job id across a difference, so jobs that came,
changed or went in between cost only themselves; the ids Slurm no longer lists are
those passed over in the last read that no differing new line carries. Anything
unusual (a line without an id, a text that is not newline-separated lines, a last
read with an id twice) gives None: the caller reads every line.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from coda.slurm.client import SlurmJob

_ID_START = re.compile(r"([0-9]{1,18})\|")
_GALLOP = 64  # lines compared at once at first where the texts agree
_MOST = 2048  # ... and at most (a run's compare copies it: some 300 KiB)
Starts = np.ndarray[Any, np.dtype[np.int64]]  # where each line of a text starts in it
_NONE = 1 << 80  # the id of the line after a text's last: beyond every job id


@dataclass
class Spliced:
    """The new read: its lines and where each starts in its text, each line's job
    where its text was read before (None where it must be parsed), the indices of
    those Nones' lines, and the ids of the last read no longer listed."""

    lines: list[str]
    starts: Starts
    jobs: list[SlurmJob | None]
    fresh: list[int]
    gone: list[int]


def line_starts(lines: Sequence[str]) -> Starts:
    """Where each of a text's lines starts in it (lines joined by newlines)."""
    ends = np.cumsum(np.fromiter(map(len, lines), np.int64, len(lines)) + 1)
    return np.concatenate((np.zeros(1, np.int64), ends[:-1])) if len(lines) else ends


def _lines_agree(old: str, old_starts: Starts, li: int, count: int, new: str, j: int) -> int:
    """How many of old's lines from index ``li`` on (its last line excepted) the new
    text holds from offset ``j``, each with its newline: runs of whole lines compared
    at once (a compare of a run is one copy of it and a memory compare), doubling
    while they agree, halving where they do not."""
    taken, step = 0, _GALLOP
    last = count - 1  # the last line may lack its newline: the caller reads it alone
    if li >= last:
        return 0
    at = int(old_starts[li])
    while li + taken < last:
        m = min(step, last - li - taken)
        end = int(old_starts[li + taken + m])
        if new.startswith(old[at:end], j):
            taken += m
            j += end - at
            at = end
            step = min(2 * step, _MOST)
        elif m == 1:
            break
        else:
            step = m // 2
    return taken


def splice(
    old: str,
    old_starts: Starts,
    old_lines: Sequence[str],
    old_jobs: Sequence[SlurmJob],
    new: str,
    by_line: Mapping[str, SlurmJob],
) -> Spliced | None:
    """``new`` read against the last read (its text, where its lines start, its lines
    and their jobs, aligned; ``by_line``: every line of it to its job)."""
    n_old = len(old) - old.endswith("\n")  # a last newline ends the last line
    n_new = len(new) - new.endswith("\n")
    count = len(old_lines)
    if n_new <= 0 or new.isspace() or n_old <= 0 or len(old_starts) != count:
        return None
    lines: list[str] = []
    jobs: list[SlurmJob | None] = []
    starts: list[Starts] = []  # pieces of the new lines' starts, in order
    fresh: list[int] = []
    passed: list[int] = []  # ids of old lines that differ from the new text
    differing: set[int] = set()  # ids of new lines that differ from the old text
    i = j = 0  # offsets of the next line in old and new
    li = 0  # index of the line at ``i`` in old_lines
    while True:
        if li < count and int(old_starts[li]) != i:
            return None  # its starts are not its text's
        m = _lines_agree(old, old_starts, li, count, new, j)
        if m:  # whole lines in common: the last read's
            nxt = int(old_starts[li + m])
            if nxt - int(old_starts[li + m - 1]) != len(old_lines[li + m - 1]) + 1:
                return None  # its starts are not its lines'
            lines.extend(old_lines[li : li + m])
            jobs.extend(old_jobs[li : li + m])
            starts.append(old_starts[li : li + m] + (j - i))
            li += m
            j += nxt - i
            i = nxt
        # The next lines differ (or one text has ended): one line at a time, by id.
        old_line = new_line = ""
        old_id = new_id = _NONE
        if li < count:
            end = old.find("\n", i, n_old)
            old_line = old[i : end if end >= 0 else n_old]
            m_old = _ID_START.match(old_line)
            if m_old is None or old_line != old_lines[li]:
                return None  # not a line of the last read's (its starts are not its text's)
            old_id = int(m_old.group(1))
        if j <= n_new:
            end = new.find("\n", j, n_new)
            new_line = new[j : end if end >= 0 else n_new]
            if old_id != _NONE and new_line == old_line:  # only what followed differed
                lines.append(old_line)
                jobs.append(old_jobs[li])
                starts.append(np.array([j], np.int64))
                li += 1
                i += len(old_line) + 1
                j += len(new_line) + 1
                continue
            m_new = _ID_START.match(new_line)
            if m_new is None:
                return None
            new_id = int(m_new.group(1))
        if old_id == _NONE and new_id == _NONE:
            break
        if new_id <= old_id:  # a job new, or changed (the same id on both sides)
            differing.add(new_id)
            sj = by_line.get(new_line)
            if sj is None:
                fresh.append(len(lines))
            lines.append(new_line)
            jobs.append(sj)
            starts.append(np.array([j], np.int64))
            j += len(new_line) + 1
        if old_id <= new_id:  # a job that changed, or is no longer listed here
            passed.append(old_id)
            li += 1
            i += len(old_line) + 1
    if li != count:  # the walk and the last read's lines disagree: not ours
        return None
    gone = [jid for jid in dict.fromkeys(passed) if jid not in differing]
    return Spliced(lines, np.concatenate(starts), jobs, fresh, gone)
