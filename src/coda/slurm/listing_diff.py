"""A listing read against the last one: only the lines that differ are looked at.

squeue prints every job Slurm remembers (191,000 lines at 10,000 nodes and 100,000
held jobs), and from one cycle to the next a few hundred of them change. Splitting
the whole text into lines and looking each up cost more than the rest of a cycle, so
the new text is compared with the last one in large blocks (a block compare is a
memory compare), and only where they differ is it cut into lines: the lines in
between are the last read's, with their jobs.

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

from coda.slurm.client import SlurmJob

_ID_START = re.compile(r"([0-9]{1,18})\|")
_BLOCK = 1 << 15  # characters compared at once while the texts agree
_NONE = 1 << 80  # the id of the line after a text's last: beyond every job id


@dataclass
class Spliced:
    """The new read: its lines, each line's job where its text was read before (None
    where it must be parsed), the indices of those Nones' lines, and the ids of the
    last read no longer listed."""

    lines: list[str]
    jobs: list[SlurmJob | None]
    fresh: list[int]
    gone: list[int]


def _agree(a: str, i: int, b: str, j: int) -> int:
    """How many characters ``a`` from ``i`` and ``b`` from ``j`` have in common."""
    n = min(len(a) - i, len(b) - j)
    k, step = 0, _BLOCK
    while k < n:
        s = min(step, n - k)
        if a[i + k : i + k + s] == b[j + k : j + k + s]:
            k += s
        elif s == 1:
            break
        else:
            step = max(1, s // 2)
    return k


def splice(
    old_text: str,
    old_lines: Sequence[str],
    old_jobs: Sequence[SlurmJob],
    text: str,
    by_line: Mapping[str, SlurmJob],
) -> Spliced | None:
    """``text`` read against the last read (its text, lines and their jobs, aligned;
    ``by_line``: every line of it to its job)."""
    old = old_text.removesuffix("\n")
    new = text.removesuffix("\n")
    if not new or new.isspace() or not old or len(old_lines) != old.count("\n") + 1:
        return None
    lines: list[str] = []
    jobs: list[SlurmJob | None] = []
    fresh: list[int] = []
    passed: list[int] = []  # ids of old lines that differ from the new text
    differing: set[int] = set()  # ids of new lines that differ from the old text
    i = j = 0  # offsets of the next line in old and new
    li = 0  # index of the line at ``i`` in old_lines
    n_old, n_new = len(old), len(new)
    while True:
        k = _agree(old, i, new, j)
        if i + k == n_old and j + k == n_new:  # the same to the end
            lines.extend(old_lines[li:])
            jobs.extend(old_jobs[li:])
            li = len(old_lines)
            break
        cut = new.rfind("\n", j, j + k)
        if cut >= 0:  # whole lines in common: the last read's
            m = new.count("\n", j, cut + 1)
            lines.extend(old_lines[li : li + m])
            jobs.extend(old_jobs[li : li + m])
            li += m
            i += cut + 1 - j
            j = cut + 1
        # The next lines differ (or one text has ended): one line at a time, by id.
        old_line = new_line = ""
        old_id = new_id = _NONE
        if li < len(old_lines):
            end = old.find("\n", i)
            old_line = old[i : end if end >= 0 else n_old]
            m_old = _ID_START.match(old_line)
            if m_old is None:
                return None
            old_id = int(m_old.group(1))
        if j <= n_new:
            end = new.find("\n", j)
            new_line = new[j : end if end >= 0 else n_new]
            if old_id != _NONE and new_line == old_line:  # only what followed differed
                lines.append(old_line)
                jobs.append(old_jobs[li])
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
            j += len(new_line) + 1
        if old_id <= new_id:  # a job that changed, or is no longer listed here
            passed.append(old_id)
            li += 1
            i += len(old_line) + 1
    if li != len(old_lines):  # the walk and the last read's lines disagree: not ours
        return None
    gone = [jid for jid in dict.fromkeys(passed) if jid not in differing]
    return Spliced(lines, jobs, fresh, gone)
