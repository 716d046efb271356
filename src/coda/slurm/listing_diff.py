"""A listing read against the last one: only the lines that differ are looked at.

squeue prints every job Slurm remembers (191,000 lines at 10,000 nodes and 100,000
held jobs), and from one cycle to the next a few hundred of them change. Splitting
the whole text into lines and looking each up cost more than the rest of a cycle, so
the new text is compared with the last one in runs of the last read's whole lines
(where its lines start is kept: a run's compare is one memory compare), and only
where they differ is it cut into lines: the lines in between are the last read's,
kept as their ids and starts (arrays: no line or job object is touched, as a list of
them would touch each one, a cache miss apiece).

The result is what a read of every line gives (``JobListing`` checks its jobs by
line either way): a line that differs is looked up by its text, as every line is on
the slow path. Lines are matched by job id across a difference, so jobs that came,
changed or went in between cost only themselves; the ids Slurm no longer lists are
those passed over in the last read that no differing new line carries. Anything
unusual (a line without an id, a text that is not newline-separated lines, an id on
two lines) gives None: the caller reads every line.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

_ID_START = re.compile(r"([0-9]{1,18})\|")
_GALLOP = 64  # lines compared at once at first where the texts agree
_MOST = 2048  # ... and at most (a run's compare copies it: some 300 KiB)
Starts = np.ndarray[Any, np.dtype[np.int64]]  # where each line of a text starts in it
Ids = np.ndarray[Any, np.dtype[np.int64]]  # the job id of each line of a text
_NONE = 1 << 80  # the id of the line after a text's last: beyond every job id


@dataclass
class Spliced:
    """The new read: each line's job id and where the line starts in its text, the
    lines whose text the last read did not have (by index: the rest are the last read's
    lines of their ids), and the ids of the last read no longer listed. No id is on
    two lines."""

    ids: Ids
    starts: Starts
    differing: list[tuple[int, str]]
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
    old: str, old_starts: Starts, old_ids: Ids, line_of: Mapping[int, str], new: str
) -> Spliced | None:
    """``new`` read against the last read (its text, where its lines start and their
    ids, aligned; ``line_of``: each of those ids' line). The lines in common are not
    touched one by one: their ids and starts are copied as arrays."""
    n_old = len(old) - old.endswith("\n")  # a last newline ends the last line
    n_new = len(new) - new.endswith("\n")
    count = len(old_ids)
    if n_new <= 0 or new.isspace() or n_old <= 0 or len(old_starts) != count:
        return None
    ids: list[Ids] = []  # pieces of the new lines' ids and starts, in order
    starts: list[Starts] = []
    one_ids: list[int] = []  # lines taken one at a time since the last piece
    one_starts: list[int] = []
    differing: list[tuple[int, str]] = []
    n = 0  # lines of the new text so far
    passed: list[int] = []  # ids of old lines that differ from the new text
    differ: set[int] = set()  # ids of new lines that differ from the old text
    i = j = 0  # offsets of the next line in old and new
    li = 0  # index of the line at ``i`` in the last read
    while True:
        if li < count and int(old_starts[li]) != i:
            return None  # its starts are not its text's
        m = _lines_agree(old, old_starts, li, count, new, j)
        if m:  # whole lines in common: the last read's
            nxt = int(old_starts[li + m])
            last = line_of.get(int(old_ids[li + m - 1]))
            if last is None or nxt - int(old_starts[li + m - 1]) != len(last) + 1:
                return None  # its starts are not its lines'
            if one_ids:
                ids.append(np.array(one_ids, np.int64))
                starts.append(np.array(one_starts, np.int64))
                one_ids, one_starts = [], []
            ids.append(old_ids[li : li + m])
            starts.append(old_starts[li : li + m] + (j - i))
            n += m
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
            if m_old is None:
                return None
            old_id = int(m_old.group(1))
            if old_id != int(old_ids[li]) or old_line != line_of.get(old_id):
                return None  # not a line of the last read's (its starts are not its text's)
        if j <= n_new:
            end = new.find("\n", j, n_new)
            new_line = new[j : end if end >= 0 else n_new]
            if old_id != _NONE and new_line == old_line:  # only what followed differed
                one_ids.append(old_id)
                one_starts.append(j)
                n += 1
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
            if new_id in differ:
                return None  # an id on two lines
            differ.add(new_id)
            differing.append((n, new_line))
            one_ids.append(new_id)
            one_starts.append(j)
            n += 1
            j += len(new_line) + 1
        if old_id <= new_id:  # a job that changed, or is no longer listed here
            passed.append(old_id)
            li += 1
            i += len(old_line) + 1
    if li != count:  # the walk and the last read's lines disagree: not ours
        return None
    left = set(passed)
    if any(jid in line_of and jid not in left for jid in differ):
        return None  # an id on a line of the last read's kept and on a new one
    if one_ids:
        ids.append(np.array(one_ids, np.int64))
        starts.append(np.array(one_starts, np.int64))
    gone = [jid for jid in dict.fromkeys(passed) if jid not in differ]
    return Spliced(np.concatenate(ids), np.concatenate(starts), differing, gone)
