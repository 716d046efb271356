"""The controller's read of Slurm's jobs each cycle: a narrow ``squeue -O`` listing.

``squeue --json`` prints about a hundred fields of every job (and ignores filters in
22.05); turning it into objects was most of a cycle on a big queue (about 1 s at
19,000 jobs: docs/results/benchmarks.md, "Slurm controller"). This listing asks for
the fields CODA reads, one line per job, ``|`` between fields, and keeps each job's
last line: a line that did not change gives back the very same ``SlurmJob`` object, so
the cycle's later passes skip it by identity and the work grows with what changed. A
text that changed is read only where it differs from the last (``listing_diff``).

Free text a user writes is never in the listing: a job's name may hold ``|`` and
newlines. The name and the excluded nodes (which ``-O`` cannot print in 22.05) come
from a second query for the jobs whose line changed, ``squeue -j IDS -o %A|%x|%j``,
the name last, and every pending job's once a minute (a user may rename a job or
change what it excludes without changing its line). A line starts a job's record only
if it begins with an asked-for id not yet seen; a line that starts like a record of
another id (a forged one, or one squeue adds) ends the record before it, and both
are asked for again alone (``-j ID -o %x|%j``: the whole answer is that one job's),
at most ``MAX_ALONE`` a read. A forger can only cut short its own job's name. Array
and heterogeneous jobs (passed to Slurm's own scheduler) are not asked for.

One known difference from ``--json``: an array cancelled before any of its tasks
ran is printed by ``-O`` as a plain job (no task id), so it reads as one. Such a job
has ended; it only matters to a dependency on the array, which then reads the same
state from that one record.

The AdminComment comes last on a line: only administrators and CODA write it, and a
``|`` in it stays in it. Times are read in UTC: ``run_command`` runs Slurm's
commands with ``TZ=UTC`` and without ``SLURM_TIME_FORMAT`` or ``SQUEUE_*`` (which
would filter or reformat the listing).
"""

from __future__ import annotations

import calendar
import datetime
import functools
import re
import time
from collections.abc import Callable, Iterable, Sequence
from operator import attrgetter

import numpy as np

from coda.slurm.client import (
    ENDED_STATES,
    Runner,
    SlurmError,
    SlurmJob,
    expand_hostlist,
    gres_gpus,
    parse_mark,
)
from coda.slurm.listing_diff import Ids, Spliced, Starts, line_starts, splice

# squeue -O's names, in the order of a line; admin_comment last (it may hold '|').
FIELDS = (
    "JobID", "ArrayJobID", "ArrayTaskID", "HetJobID", "UserID", "State", "Reason",
    "NumCPUs", "NumNodes", "NumTasks", "tres-per-node", "tres-per-job", "tres-per-task",
    "NodeList", "ReqNodes", "Dependency", "PriorityLong", "SubmitTime", "StartTime",
    "EndTime", "exit_code", "RestartCnt", "TimeLimit", "Requeue", "BatchFlag", "Partition",
    "admin_comment",
)  # fmt: skip
FORMAT = ",".join(f"{f}:0|" for f in FIELDS[:-1]) + f",{FIELDS[-1]}:0"
# --array-unique: a pending array task split off its array keeps its own line (squeue
# would otherwise fold it into the array's).
LISTING = ("squeue", "--noheader", "--all", "--array-unique", "--states=all", "--sort=i",
           f"--Format={FORMAT}")  # fmt: skip
# Names and excluded nodes: asked for in batches (one argv word of ids each); at most
# MAX_ALONE jobs a read asked for alone (suspect readings); every pending job's asked
# for again each NAMES_REFRESH_S (a user may rename a job, or change what it excludes,
# without changing its line).
NAMES_BATCH = 2000
MAX_ALONE = 32
NAMES_REFRESH_S = 60.0
_START = re.compile(r"([0-9]+)\|")
_NAME_START = re.compile(r"([0-9]+)\|([^|\n]*)\|")
_ID = re.compile(r"[0-9]{1,18}")
_EMPTY = ("", "(null)", "N/A")
_ISO = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})")


def _exit_code(text: str, state: str) -> int | None:
    """squeue -O exit_code: a number (22.05), or ``code:signal`` (24.11), which only
    an ended job has (as squeue --json reads it: coda.slurm.client)."""
    if _ID.fullmatch(text):
        return int(text)
    code, sep, sig = text.partition(":")
    if sep and _ID.fullmatch(code) and _ID.fullmatch(sig) and state in ENDED_STATES:
        return int(code)
    return None


def listing_argv() -> list[str]:
    return list(LISTING)


def some_argv(ids: Sequence[int]) -> list[str]:
    """The listing of some jobs only (their ids)."""
    return [*LISTING[:5], f"--jobs={','.join(map(str, ids))}", *LISTING[5:]]


def names_argv(ids: Sequence[int]) -> list[str]:
    return ["squeue", "--noheader", "--all", "--states=all",
            f"--jobs={','.join(map(str, ids))}", "--format=%A|%x|%j"]  # fmt: skip


def name_argv(job_id: int) -> list[str]:
    return ["squeue", "--noheader", "--all", "--states=all", f"--jobs={job_id}",
            "--format=%x|%j"]  # fmt: skip


def _text(v: str) -> str:
    return "" if v in _EMPTY else v


# Slurm's 32-bit "no value" and "infinite" (NO_VAL, INFINITE): printed as numbers by
# -O where --json gives null.
_NO_VALUE = (0xFFFFFFFE, 0xFFFFFFFF)


def _int(v: str, what: str, default: int = 0) -> int:
    if v in _EMPTY:
        return default
    if not (v.isascii() and v.isdigit() and len(v) <= 18):  # _ID, without a regex
        raise ValueError(f"{what} {v!r} is not a whole number")
    n = int(v)
    return default if n in _NO_VALUE else n


def _epoch(v: str, what: str) -> int:
    """``2026-12-02T06:56:34`` (UTC) in epoch seconds; 0 for none (``NONE``: a
    running job without a time limit has no end time; ``Unknown``)."""
    if v in _EMPTY or v in ("Unknown", "None", "NONE", "INFINITE"):
        return 0
    m = _ISO.fullmatch(v)
    if m is not None:  # squeue's own form: without strptime's cost (a restart reads 191k)
        try:
            y, mo, d, h, mi, sec = (int(x) for x in m.groups())
            when = datetime.datetime(y, mo, d, h, mi, sec, tzinfo=datetime.UTC)
        except ValueError:
            pass  # out of range for datetime (a leap second): strptime says
        else:
            return int(when.timestamp())
    try:
        return calendar.timegm(time.strptime(v, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        raise ValueError(f"{what} {v!r} is not a time (YYYY-MM-DDTHH:MM:SS)") from None


def _lenient_epoch(v: str) -> int:
    """An end time (nothing CODA decides by): 0 where it is not a time."""
    try:
        return _epoch(v, "EndTime")
    except ValueError:
        return 0


def _reason(v: str) -> str:
    """Slurm's reason code. ``-O Reason`` prints a job's description instead where it
    has one (``--json`` never does), e.g. "Nodes required for job are DOWN, DRAINED or
    reserved for jobs in higher priority partitions", which Slurm sets with the code
    Resources: a description (words, not a code) reads as Resources, so a placed job
    waiting for its nodes keeps them spoken for."""
    return "Resources" if " " in v else v


def time_limit_s(v: str) -> float | None:
    """``[D-][HH:]MM:SS`` in seconds; None for no limit (UNLIMITED, 0, INVALID)."""
    if v in _EMPTY or v in ("UNLIMITED", "INFINITE", "NOT_SET", "INVALID"):
        return None  # INVALID: squeue's word for a limit over a year (no limit, in effect)
    days, dash, rest = v.rpartition("-")
    parts = rest.split(":")
    if not 2 <= len(parts) <= 3 or not all(p.isascii() and p.isdigit() for p in parts):
        raise ValueError(f"TimeLimit {v!r} is not [D-][HH:]MM:SS")
    if dash and not (days.isascii() and days.isdigit()):
        raise ValueError(f"TimeLimit {v!r} is not [D-][HH:]MM:SS")
    if max(len(days), *map(len, parts)) > 9:  # beyond any limit Slurm keeps (or a float)
        raise ValueError(f"TimeLimit {v[:40]!r} is too long")
    h, m, s = ([0] + [int(p) for p in parts])[-3:]
    total = (int(days or 0) * 24 + h) * 3600 + m * 60 + s
    return float(total) if total else None


# A listing repeats the same few GPU requests, node lists, times and limits thousands
# of times: each text is read once (a restart reads 191,000 lines).
_gpus = functools.lru_cache(maxsize=4096)(gres_gpus)
_hosts = functools.lru_cache(maxsize=16384)(lambda text: tuple(expand_hostlist(text)))
_limit = functools.lru_cache(maxsize=4096)(time_limit_s)
_mark = functools.lru_cache(maxsize=16384)(
    lambda text: None if (m := parse_mark(text)) is None else tuple(m.items())
)


@functools.lru_cache(maxsize=16384)
def _time(v: str, what: str) -> int:
    return _epoch(v, what)


def parse_line(line: str, name: str = "", excluded: Sequence[str] = ()) -> SlurmJob:
    """One line of the listing (its name and excluded nodes from the second query)."""
    f = line.split("|", len(FIELDS) - 1)
    if len(f) != len(FIELDS):
        raise ValueError(f"{len(f)} fields, not {len(FIELDS)}")
    (jid, array_jid, array_tid, het_jid, uid, state, reason, cpus, n_nodes, tasks,
     tpn, tpj, tpt, nodelist, reqnodes, dep, prio, submit, start, end, exit_code,
     restarts, limit, requeue, batch, partition, comment) = f  # fmt: skip
    job_id = _int(jid, "JobID")
    if job_id < 1:
        raise ValueError("no JobID")
    nodes_n = max(1, _int(n_nodes, "NumNodes", 1))
    gpus_pn = _gpus(_text(tpn))
    if not gpus_pn:
        per_job = _gpus(_text(tpj))
        per_task = _gpus(_text(tpt)) * max(1, _int(tasks, "NumTasks", 1))
        gpus_pn = -(-(per_job or per_task) // nodes_n)
    running = state != "PENDING"
    if requeue not in ("0", "1"):
        raise ValueError(f"Requeue {requeue!r} is not 0 or 1")
    if not _ID.fullmatch(batch):
        raise ValueError(f"BatchFlag {batch!r} is not a count")
    in_array = array_tid not in _EMPTY
    comment = _text(comment)
    return SlurmJob(
        job_id=job_id,
        name=name,
        user_id=_int(uid, "UserID"),
        state=state,
        reason=_reason(_text(reason)),
        cpus=max(1, _int(cpus, "NumCPUs", 1)),
        node_count=nodes_n,
        gpus_per_node=gpus_pn,
        nodes=list(_hosts(_text(nodelist))) if running else [],
        required_nodes=list(_hosts(_text(reqnodes))),
        dependency=_text(dep),
        priority=_int(prio, "PriorityLong"),
        mark=None if (mark := _mark(comment)) is None else dict(mark),
        admin_comment=comment,
        submit_time=_time(submit, "SubmitTime"),
        start_time=float(_time(start, "StartTime")) or None if running else None,
        end_time=_lenient_epoch(end),
        exit_code=_exit_code(exit_code, state),
        restarts=_int(restarts, "RestartCnt"),
        time_limit_s=_limit(limit),
        # Slurm requeues batch jobs only (an srun or salloc job shows Requeue=1 too).
        requeueable=requeue == "1" and batch != "0" and int(batch) > 0,
        array_job_id=_int(array_jid, "ArrayJobID") if in_array else 0,
        array_task_id=int(array_tid) if array_tid.isascii() and array_tid.isdigit() else None,
        het_job_id=_int(het_jid, "HetJobID"),
        partitions=[x for x in _text(partition).split(",") if x],
        excluded_nodes=list(excluded),
    )


def _split(text: str) -> list[str]:
    """squeue's output as lines (none for an empty answer)."""
    return text.removesuffix("\n").split("\n") if text and not text.isspace() else []


def split_records(text: str) -> list[str]:
    """The listing's lines, one per job: a line that does not start with an id and
    ``|`` continues the AdminComment above it (an administrator's newline)."""
    out: list[str] = []
    for line in _split(text):
        if _START.match(line) is not None or not out:
            out.append(line)
        else:
            out[-1] += "\n" + line
    return out


def parse_names(text: str, asked: Iterable[int]) -> tuple[dict[int, tuple[str, str]], set[int]]:
    """``%A|%x|%j`` lines for the ids asked: {id: (excluded nodes, name)}, and the ids
    whose reading cannot be trusted (ask for those alone): an id seen twice (a name
    forged its line), and the job whose name runs into a line that starts like a
    record of an id not asked for (a forged line, or a line squeue adds, such as an
    array's task under its array's id: it must not become part of another's name)."""
    want = set(asked)
    got: dict[int, tuple[str, str]] = {}
    suspect: set[int] = set()
    last: int | None = None
    for line in _split(text):
        m = _NAME_START.match(line)
        jid = int(m.group(1)) if m is not None and _ID.fullmatch(m.group(1)) else None
        if m is not None and jid in want and jid not in got:
            got[jid] = (m.group(2), line[m.end() :])
            last = jid
        elif m is not None:
            if jid in got:
                suspect.add(jid)
            if last is not None:
                suspect.add(last)
            last = None  # what follows belongs to no record we can trust
        elif last is not None:
            exc, name = got[last]
            got[last] = (exc, name + "\n" + line)
    return got, suspect


_JOB_ID = attrgetter("job_id")


class JobListing:
    """Slurm's jobs, read with the narrow listing; the same object for a job whose
    line did not change since the last read (objects are shared: read-only). It reads
    what a fresh listing would, but for a job read before whose line it cannot read
    now: that job stays as last read (``unreadable`` says so), where a fresh listing
    would leave it out."""

    def __init__(self, runner: Runner, clock: Callable[[], float] = time.monotonic) -> None:
        self.run = runner
        self.clock = clock
        self._by_line: dict[str, SlurmJob] = {}  # the last read: each line's job
        self._line_of: dict[int, str] = {}  # each job's line in the last read
        # The last read's whole text, and its jobs; None: read the next one through
        # (an empty listing is a text like any other).
        self._last_text: str | None = None
        # Its jobs in order; None: not made yet (``listed()``), each the job of its line:
        # ``_by_line[_line_of[id]]`` for each id of ``_ids``.
        self._jobs: list[SlurmJob] | None = []
        self._ids: Ids = np.zeros(0, np.int64)  # each line's job id
        self._starts: Starts = line_starts([])  # where each line starts in its text
        self.reads = 0
        self._one_per_id = True  # no id in more than one of them
        # Read a changed text only where it differs from the last (``listing_diff``);
        # False: every line, every read.
        self.splice = True
        self._names: dict[int, tuple[list[str], str]] = {}  # id -> (excluded, name)
        self._unsettled: set[int] = set()  # ids the last read left unsettled
        self._refreshed_at = clock()
        self.parsed = 0  # lines parsed anew, over this listing's life
        # Slurm 24.11's squeue has no --array-unique (refused as an unknown option):
        # found at the first read, asked without it from then on.
        self.array_unique = True
        # What the last read found new or changed (new objects), and the ids it no
        # longer saw: what a reader that keeps its own state needs to look at.
        self.changed: list[SlurmJob] = []
        self.gone: list[int] = []
        # Lines the last read could not read ("job N: why"), read again next time: a job
        # read before keeps its last state, a new one is left out.
        self.unreadable: list[str] = []

    def forget(self, job_id: int) -> None:
        """Read this job afresh next time, its name and excluded nodes asked again
        (Slurm refused what CODA wrote for it: what CODA knows may be stale)."""
        self._unread(job_id)
        self._names.pop(job_id, None)
        self._last_text = None

    def _unread(self, job_id: int) -> None:
        """The job's line is parsed again next time it is listed. Its id stays among
        the last read's, so a job that is not listed again is still reported gone."""
        self.listed()  # made while every line still has its job
        line = self._line_of.get(job_id)
        if line is not None:
            self._by_line.pop(line, None)

    def _squeue(self, argv: list[str]) -> str:
        if not self.array_unique:
            return self.run([a for a in argv if a != "--array-unique"])
        try:
            return self.run(argv)
        except SlurmError as e:
            if "--array-unique" not in argv or "squeue --help" not in str(e):
                raise
            # An option this squeue does not know (24.11): once more without it; a
            # failure then is a failure.
            text = self.run([a for a in argv if a != "--array-unique"])
            self.array_unique = False
            return text

    def jobs(self) -> list[SlurmJob]:
        """Every job Slurm lists: ``read()``, then ``listed()``."""
        self.read()
        return self.listed()

    def listed(self) -> list[SlurmJob]:
        """The jobs of the last read, in its order. The list is the listing's own, made
        once per read and only when asked for (most reads keep the jobs as their ids,
        and a list touches every job object, each a cache miss): read it, never change
        it; the next read makes a new one."""
        if self._jobs is None:
            by_line, line_of = self._by_line, self._line_of
            self._jobs = [by_line[line_of[jid]] for jid in self._ids.tolist()]
        return self._jobs

    def read(self) -> None:
        """Read Slurm's jobs: ``changed``, ``gone`` and ``unreadable`` say what this
        read found that the last did not; ``listed()`` gives them all."""
        text = self._squeue(listing_argv())
        now = self.clock()
        self.reads += 1
        refresh = now - self._refreshed_at >= NAMES_REFRESH_S
        if text == self._last_text and not refresh:  # nothing changed: last time's jobs
            self.changed, self.gone = [], []
            return
        by_line = self._by_line
        spliced = None
        # The splice keeps the last read's lines as their ids: each must have its job.
        kept_whole = self._one_per_id and len(by_line) == len(self._line_of)
        if self.splice and not refresh and self._last_text is not None and kept_whole:
            spliced = splice(self._last_text, self._starts, self._ids, self._line_of, text)
        # Until this read is taken whole, the next reads every line: one that fails
        # half-way (a names query that times out) may have forgotten lines.
        self._last_text = None
        gone: list[int] | None = None
        retry: set[int] = set()  # ids to read afresh next time (names not settled)
        if spliced is not None:  # only where the text differs from the last read's
            differing = [(i, line) for i, line in spliced.differing if line not in by_line]
            if differing:
                retry = self._learn_names([line for _, line in differing])
            if not retry and self._take_spliced(text, spliced, differing):
                return
            lines, out = self._spread(spliced)
            gone = spliced.gone
        else:
            lines = _split(text)
            out = list(map(by_line.get, lines))
        fresh = [(i, lines[i]) for i, sj in enumerate(out) if sj is None]
        look_again = False
        records = any(_START.match(line) is None for _, line in fresh)
        if records:
            lines, look_again = split_records(text), True  # an AdminComment's newline
        if refresh:
            self._refreshed_at = now
            retry |= self._refresh(lines)
            look_again = True  # it may have forgotten lines
        if look_again:
            out = list(map(by_line.get, lines))
            fresh = [(i, lines[i]) for i, sj in enumerate(out) if sj is None]
        if fresh and spliced is None:
            retry |= self._learn_names([line for _, line in fresh])
        bad: dict[int, str] = {}  # the index of each line it could not read: why
        for i, line in fresh:
            if retry and self._unknown_pending(line, retry):
                # Read as excluding nothing, it could be placed on a node it excludes.
                jid = line.partition("|")[0]
                bad[i] = f"job {jid}: its name and excluded nodes are not known yet"
                continue
            try:
                out[i] = self._parse(line)
            except ValueError as e:
                # One job's line must not stop the reading of everyone's: said in
                # ``unreadable``, left out (or kept as last read, below), read again
                # next time.
                bad[i] = str(e)
        pairs = [(line, sj) for i, line in fresh if (sj := out[i]) is not None and i not in bad]
        stale: list[str] = []
        if bad:
            # A job read before keeps its last state while its line cannot be read:
            # Slurm still lists it, and taking it for gone would free what it holds.
            last = {sj.job_id: sj for sj in self.listed()}
            for i, why in bad.items():
                jid = lines[i].partition("|")[0]
                if _ID.fullmatch(jid) and (kept := last.get(int(jid))) is not None:
                    out[i] = kept
                    stale.append(lines[i])
                    bad[i] = f"{why} (its last state kept)"
            lines = [x for i, x in enumerate(lines) if out[i] is not None]
            out = [x for x in out if x is not None]
        jobs: list[SlurmJob] = out  # type: ignore[assignment]  # every None filled in
        self.parsed += len(fresh)
        self.changed = [sj for _, sj in pairs]
        self.unreadable = list(bad.values())
        if look_again:
            gone = None  # read another way than the splice read it
        self.gone = self._remember(lines, jobs, pairs, rebuild=bool(stale), gone=gone)
        for line in stale:
            self._by_line.pop(line, None)  # an unreadable line is parsed again next time
        self._jobs = jobs
        for again in retry:
            self._unread(again)
        # Something left to read again: the next read must not take the shortcut.
        self._last_text = None if retry or bad else text
        # The splice takes the last read's lines for its text's lines, one per id.
        self._one_per_id = not records and len(self._line_of) == len(lines)
        if self._last_text is not None and self._one_per_id:  # for a splice, if turned on
            self._starts = line_starts(lines)
            self._ids = np.fromiter(map(_JOB_ID, jobs), np.int64, len(jobs))
        self._unsettled = retry

    def _take_spliced(self, text: str, spliced: Spliced, fresh: list[tuple[int, str]]) -> bool:
        """The read as the splice found it, if each line that differs is read (its
        names known, its line readable): only those lines are looked at. False (and
        nothing taken) where one is not."""
        parsed: list[tuple[str, SlurmJob]] = []
        for _, line in fresh:
            try:
                parsed.append((line, self._parse(line)))
            except ValueError:
                return False  # the whole read says why, and keeps what it must
        self._take_lines(parsed)
        self._drop_ids(spliced.gone)
        self.parsed += len(fresh)
        self.changed = [sj for _, sj in parsed]
        self.gone = spliced.gone
        self.unreadable = []
        self._last_text, self._jobs = text, None
        self._ids, self._starts = spliced.ids, spliced.starts
        self._unsettled = set()
        return True

    def _spread(self, spliced: Spliced) -> tuple[list[str], list[SlurmJob | None]]:
        """The splice's read as every line and its job where read before (None: to
        parse), as a read of every line gives them."""
        line_of, by_line = self._line_of, self._by_line
        # The last read's line of each id; the lines that differ are put in below.
        lines = [line_of.get(jid, "") for jid in spliced.ids.tolist()]
        for i, line in spliced.differing:
            lines[i] = line
        return lines, list(map(by_line.get, lines))

    def _unknown_pending(self, line: str, unsettled: set[int]) -> bool:
        """A pending job whose name and excluded nodes are unsettled and were never
        learned: not to be placed yet. (A running or ended one is read: its cores
        count wherever it runs, and nothing places it.)"""
        f = line.split("|", 6)
        return (
            len(f) > 6
            and f[5] == "PENDING"
            and _ID.fullmatch(f[0]) is not None
            and int(f[0]) in unsettled
            and int(f[0]) not in self._names
        )

    def _parse(self, line: str) -> SlurmJob:
        """One line, with the name and excluded nodes last learned for its job;
        ValueError naming the job for a line it cannot read."""
        jid = line.partition("|")[0]
        excluded, name = self._names.get(int(jid) if _ID.fullmatch(jid) else 0, ([], ""))
        try:
            return parse_line(line, name, excluded)
        except (ValueError, SlurmError) as e:
            raise ValueError(f"job {jid[:20] or '?'}: {e}: {line[:120]!r}") from None

    def _refresh(self, lines: Sequence[str]) -> set[int]:
        """Ask again for the names and excluded nodes of every pending job; those that
        changed are read afresh now (their lines forgotten). Returns the unsettled."""
        pending: list[str] = []
        for line in lines:
            f = line.split("|", 6)
            if len(f) > 6 and f[5] == "PENDING" and _ID.fullmatch(f[0]):
                pending.append(line)
        old = {jid: self._names.get(jid) for jid in (int(x.partition("|")[0]) for x in pending)}
        unsettled = self._learn_names(pending)
        for jid, was in old.items():
            if self._names.get(jid) != was:
                self._unread(jid)
        return unsettled

    def _remember(
        self,
        lines: list[str],
        jobs: list[SlurmJob],
        fresh: list[tuple[str, SlurmJob]],
        rebuild: bool = False,
        gone: list[int] | None = None,
    ) -> list[int]:
        """Keep this read's lines for the next, touching only what changed; returns
        the ids no longer listed. ``rebuild``: made afresh from this read (a line kept
        at its job's last state is in no count the update by changes relies on).
        ``gone``: those ids, known (``splice``)."""
        self._take_lines(fresh)
        line_of = self._line_of
        # line_of holds every id listed, so it is as long as the ids listed only if none
        # is gone (counting ids, not lines: one listed twice must not hide one gone).
        if gone is None:
            live = set(map(_JOB_ID, jobs))
            gone = [jid for jid in line_of if jid not in live] if len(line_of) != len(live) else []
        self._drop_ids(gone)
        # Counts that disagree: an id listed twice.
        if rebuild or len(line_of) != len(lines) or len(self._by_line) != len(lines):
            self._by_line = dict(zip(lines, jobs, strict=True))
            self._line_of = {sj.job_id: line for line, sj in self._by_line.items()}
        return gone

    def _take_lines(self, fresh: Iterable[tuple[str, SlurmJob]]) -> None:
        """Jobs read from new lines: each line stands for its job from now on."""
        by_line, line_of = self._by_line, self._line_of
        for line, sj in fresh:
            old = line_of.get(sj.job_id)
            if old is not None:
                by_line.pop(old, None)
            by_line[line] = sj
            line_of[sj.job_id] = line

    def _drop_ids(self, gone: Iterable[int]) -> None:
        """Jobs no longer listed: their lines and names forgotten."""
        for jid in gone:
            self._by_line.pop(self._line_of.pop(jid), None)
            self._names.pop(jid, None)

    def some(self, ids: Sequence[int]) -> dict[int, SlurmJob]:
        """Some jobs read again now (a read-back after writing to them), by id: their
        names as last learned; the listing's memory is left as it was."""
        if not ids:
            return {}
        want = set(ids)
        out: dict[int, SlurmJob] = {}
        for line in split_records(self._ask(some_argv(ids))):
            jid = line.partition("|")[0]
            if not _ID.fullmatch(jid) or int(jid) not in want:
                continue  # an array's tasks, listed under its id
            try:
                out[int(jid)] = self._parse(line)
            except ValueError:
                continue  # unreadable: not read back (the next listing says why)
        return out

    def _learn_names(self, fresh: Sequence[str]) -> set[int]:
        """Names and excluded nodes of the jobs whose line changed (array and
        heterogeneous jobs left out: Slurm's own scheduler runs them). Returns the ids
        left unsettled: more suspect readings than ``MAX_ALONE`` single queries (a
        flood of forged lines), or no answer for the job; those keep what was learned
        of them before, if anything, and are asked for again at the next read."""
        ids: list[int] = []
        for line in fresh:
            f = line.split("|", 4)
            if len(f) < 5 or not _ID.fullmatch(f[0]):
                continue
            if f[2] not in _EMPTY or f[3] not in _EMPTY:  # array task or het job
                continue
            ids.append(int(f[0]))
        unsettled: set[int] = set()
        alone = MAX_ALONE
        for k in range(0, len(ids), NAMES_BATCH):
            batch = ids[k : k + NAMES_BATCH]
            got, suspect = parse_names(self._ask(names_argv(batch)), batch)
            # Those left unsettled last time first: a flood renewed each read must not
            # starve the same jobs of their single queries for ever.
            for jid in sorted(suspect, key=lambda j: (j not in self._unsettled, j)):
                if alone <= 0:
                    unsettled.add(jid)
                    got.pop(jid, None)
                    continue
                alone -= 1
                exc, sep, name = self._ask(name_argv(jid)).removesuffix("\n").partition("|")
                if sep:
                    got[jid] = (exc, name)
                else:
                    got.pop(jid, None)
            for jid in batch:
                if jid not in got:  # never read as none: its exclusions are unknown
                    unsettled.add(jid)
                    continue
                exc, name = got[jid]
                self._names[jid] = (list(_hosts(_text(exc))), name)
        return unsettled

    def _ask(self, argv: list[str]) -> str:
        """squeue for some jobs; "" when the one job asked for is gone (squeue fails
        for a single unknown id, and prints nothing for several)."""
        try:
            return self._squeue(argv)
        except SlurmError as e:
            if "Invalid job id" in str(e):
                return ""
            raise
