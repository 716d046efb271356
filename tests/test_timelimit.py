"""Slurm's time-limit syntax as `coda submit --time` reads it (coda.runtime.timelimit):
the six forms parsed exactly, clock fields bounded, the cap, and the written form
`coda status` shows read back to the same seconds."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coda.runtime.timelimit import format_time_limit, parse_time_limit
from coda.workload.limits import MAX_TIME_LIMIT_S


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("90", 5400),  # MM: minutes, any number of them
        ("1", 60),
        ("10:30", 630),  # MM:SS
        ("120:00", 7200),
        ("1:30:00", 5400),  # HH:MM:SS
        ("36:00:00", 129600),  # the leading field is not a clock field
        ("1-02", 93600),  # D-HH
        ("1-02:03", 93780),  # D-HH:MM
        ("1-02:03:04", 93784),  # D-HH:MM:SS
        ("0-00:00:01", 1),
        ("007", 420),  # leading zeros are digits like any other
        ("366-00", MAX_TIME_LIMIT_S),  # the cap itself
    ],
)
def test_the_six_forms(text: str, seconds: int) -> None:
    assert parse_time_limit(text) == float(seconds)


@pytest.mark.parametrize(
    "text, why",
    [
        ("", "not a time limit"),
        ("1:2:3:4", "not a time limit"),
        ("1-2:3:4:5", "not a time limit"),
        ("1-2-3", "not a time limit"),
        ("1-", "not a time limit"),
        ("-1", "not a time limit"),
        ("1:", "not a time limit"),
        ("1.5", "not a time limit"),
        ("1e3", "not a time limit"),
        (" 5", "not a time limit"),
        ("5\n", "not a time limit"),
        ("\u0665", "not a time limit"),  # a digit, but not an ASCII one
        ("1234567890", "not a time limit"),  # more digits than any limit needs
        ("UNLIMITED", "not a time limit"),  # no --time is no limit
        ("1:60", "seconds must be below 60"),
        ("1:00:60", "seconds must be below 60"),
        ("1:60:00", "minutes must be below 60"),
        ("1-00:60", "minutes must be below 60"),
        ("1-24", "hours must be below 24"),
        ("0", "more than 0"),
        ("0-00:00:00", "more than 0"),
        ("366-00:00:01", "over the cap of 366 days"),
        ("527041", "over the cap"),  # minutes
    ],
)
def test_what_is_not_a_time_limit_says_why(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why) as e:
        parse_time_limit(text)
    assert repr(text) in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(
    "seconds, text",
    [(None, "-"), (60, "1:00"), (5400, "1:30:00"), (93840, "1-02:04:00"), (59.2, "1:00"),
     (1, "0:01"), (86400, "1-00:00:00")],
)  # fmt: skip
def test_format_as_squeue_shows_a_limit(seconds: float | None, text: str) -> None:
    assert format_time_limit(seconds) == text


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=1, max_value=MAX_TIME_LIMIT_S))
def test_what_status_shows_reads_back_to_the_same_seconds(seconds: int) -> None:
    assert parse_time_limit(format_time_limit(seconds)) == seconds


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 365),
    st.integers(0, 23),
    st.integers(0, 59),
    st.integers(0, 59),
    st.sampled_from(["D-HH", "D-HH:MM", "D-HH:MM:SS", "HH:MM:SS", "MM:SS", "MM"]),
)
def test_each_form_counts_its_fields(d: int, h: int, m: int, s: int, form: str) -> None:
    text, seconds = {
        "D-HH": (f"{d}-{h:02d}", d * 86400 + h * 3600),
        "D-HH:MM": (f"{d}-{h:02d}:{m:02d}", d * 86400 + h * 3600 + m * 60),
        "D-HH:MM:SS": (f"{d}-{h}:{m}:{s}", d * 86400 + h * 3600 + m * 60 + s),
        "HH:MM:SS": (f"{h}:{m:02d}:{s:02d}", h * 3600 + m * 60 + s),
        "MM:SS": (f"{m}:{s:02d}", m * 60 + s),
        "MM": (f"{m}", m * 60),
    }[form]
    if seconds == 0:
        with pytest.raises(ValueError, match="more than 0"):
            parse_time_limit(text)
    else:
        assert parse_time_limit(text) == seconds
