"""Reading a trace file as CSV records, safely: regular files only, bounded line
length, undecodable bytes, NUL bytes and unbalanced quotes made bad lines (not a bad
file), and every record numbered by its line so that errors can name it."""

from __future__ import annotations

import csv
import os
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO

from coda.text import clip
from coda.workload import limits
from coda.workload.jobs import TraceFormatError


def _norm(name: str) -> str:
    return name.strip().lower()


def _open(path: str) -> IO[str]:
    # Regular files only: a FIFO would block the open (and detection opens the file
    # twice), /dev/zero never ends, /proc files lie about their size.
    try:
        st = os.stat(path)
    except OSError as e:
        raise TraceFormatError(path, 1, None, f"cannot read it: {e.strerror or e}") from None
    if not stat.S_ISREG(st.st_mode):
        raise TraceFormatError(path, 1, None, "not a regular file (a device, FIFO or directory)")
    # surrogateescape: an undecodable byte becomes a lone surrogate that _lines() spots,
    # so the line (not the whole file) is bad. utf-8-sig drops a byte-order mark.
    try:
        return open(path, newline="", encoding="utf-8-sig", errors="surrogateescape")
    except OSError as e:
        raise TraceFormatError(path, 1, None, f"cannot read it: {e.strerror or e}") from None


def _lines(f: IO[str], bad: list[tuple[int, str]]) -> Iterator[str]:
    """Physical lines of f for csv.reader; a line that cannot be a record is recorded in
    `bad` as (line, reason) and replaced by a blank line, so line numbers stay right."""
    limit = limits.MAX_LINE_CHARS

    def readline(at: int) -> str:
        try:
            return f.readline(limit)
        except OSError as e:  # a read error carries no file name: say which file
            raise TraceFormatError(f.name, at, None, f"cannot read it: {e.strerror or e}") from None

    n = 0
    while True:
        line = readline(n + 1)
        if not line:
            return
        n += 1
        if len(line) == limit and line[-1] not in "\r\n":
            while line and line[-1] not in "\r\n":  # drop the rest, a bounded read at a time
                line = readline(n)
            bad.append((n, f"line longer than {limit} characters"))
            yield "\n"
            continue
        if not line.isascii():
            try:
                line.encode("utf-8")
            except UnicodeEncodeError:
                bad.append((n, "not UTF-8 text (undecodable bytes)"))
                yield "\n"
                continue
        if "\x00" in line:
            bad.append((n, "contains a NUL byte"))
            yield "\n"
            continue
        if '"' in line and line.count('"') & 1:
            # A record is one line: an unbalanced quote would make the reader swallow
            # the lines after it into one field (thousands of rows lost as one bad row).
            bad.append((n, "unbalanced quote (a quoted field must end on its line)"))
            yield "\n"
            continue
        yield line


def read_header(path: str | Path) -> list[str]:
    """The first CSV record of a file, normalised (stripped, lower case); [] if empty."""
    path = str(path)
    bad: list[tuple[int, str]] = []
    with _open(path) as f:
        reader = csv.reader(_lines(f, bad))
        try:
            for fields in reader:
                if bad:
                    raise TraceFormatError(path, bad[0][0], None, bad[0][1])
                if fields and any(x.strip() for x in fields):
                    return [_norm(x) for x in fields]
        except csv.Error as e:
            raise TraceFormatError(path, reader.line_num, None, f"unreadable CSV: {e}") from None
    if bad:
        raise TraceFormatError(path, bad[0][0], None, bad[0][1])
    return []


def iter_rows(
    path: str | Path,
    required: Sequence[str],
    optional: Sequence[str] = (),
    *,
    headerless: Sequence[str] | None = None,
) -> Iterator[tuple[int, dict[str, str] | TraceFormatError]]:
    """Yield (line, row) for each data record; line is 1-based and the header is line 1.

    A record that cannot be a row (wrong number of fields, undecodable bytes, a NUL
    byte, an overlong line, broken CSV quoting) is yielded as a TraceFormatError in
    place of the row, so that the caller decides whether it is fatal (skip_bad_rows).
    A missing header or missing required column raises at once: that is a wrong
    file, not a bad row. Blank lines are not records and are not counted.
    With `headerless` (column names of a format that ships without a header, like
    PAI), a first record naming none of the known columns is read as data.
    """
    path = str(path)
    known = {*required, *optional}
    bad: list[tuple[int, str]] = []
    with _open(path) as f:
        reader = csv.reader(_lines(f, bad))
        first = None
        while first is None:
            try:
                r = next(reader)
            except StopIteration:
                raise TraceFormatError(
                    path, 1, None, "file is empty: expected a header line"
                ) from None
            except csv.Error as e:
                raise TraceFormatError(
                    path, reader.line_num, None, f"unreadable CSV: {e}"
                ) from None
            if r and any(x.strip() for x in r):
                first = r
        header = [_norm(x) for x in first]
        pending: list[str] | None = None
        if headerless is not None and not known.intersection(header):
            names = list(headerless)
            pending = first  # the first record is data
        else:
            missing = [c for c in required if c not in header]
            if missing:
                raise TraceFormatError(
                    path,
                    reader.line_num,
                    ", ".join(missing),
                    f"missing required column(s) {', '.join(missing)}; "
                    f"header is {clip(','.join(header), 200)}",
                )
            # A column read twice is ambiguous (a reader would keep the last copy).
            twice = sorted({c for c in header if c in known and header.count(c) > 1})
            if twice:
                raise TraceFormatError(
                    path,
                    reader.line_num,
                    ", ".join(twice),
                    f"column(s) {', '.join(twice)} named more than once; "
                    f"header is {clip(','.join(header), 200)}",
                )
            names = header
        width = len(names)
        for line, why in bad:  # bad lines before the first record
            yield line, TraceFormatError(path, line, None, why)
        bad.clear()
        if pending is not None:
            yield _record(path, reader.line_num, names, pending)
        while True:  # one pass of the for loop, resumed after each broken CSV record
            try:
                for fields in reader:
                    if bad:
                        yield from _flush(path, bad)
                    if len(fields) == width:  # the common case first: it is the hot loop
                        yield reader.line_num, dict(zip(names, fields, strict=False))
                    elif fields and (len(fields) > 1 or fields[0].strip()):
                        yield _record(path, reader.line_num, names, fields)
                break
            except csv.Error as e:
                line_num = reader.line_num
                yield from _flush(path, bad)
                err = TraceFormatError(path, line_num, None, f"unreadable CSV: {e}")
                yield line_num, err
        yield from _flush(path, bad)


def _flush(
    path: str, bad: list[tuple[int, str]]
) -> Iterator[tuple[int, dict[str, str] | TraceFormatError]]:
    for line, why in bad:
        yield line, TraceFormatError(path, line, None, why)
    bad.clear()


def _record(
    path: str, line: int, names: list[str], fields: list[str]
) -> tuple[int, dict[str, str] | TraceFormatError]:
    if len(fields) != len(names):
        msg = f"expected {len(names)} fields, found {len(fields)}"
        return line, TraceFormatError(path, line, None, msg)
    return line, dict(zip(names, fields, strict=False))
