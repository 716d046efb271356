"""bench/perf_growth.py: samples charged to the innermost compiled function, per job."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench_module import load_bench

pg = load_bench("perf_growth")

# Three samples in ``perf script`` form: a dictionary lookup inside a compiled function
# called from another (charged to the inner one), a compiled function's own time, and
# one with no compiled frame at all.
SCRIPT = """\
python 2741 11131.059690:    5000000 cpu-clock: \n\
\t          198a24 _Py_dict_lookup+0x2a4 (/usr/lib/libpython3.11.so.1.0)
\t           7323a CPyDict_Get+0x1a (/x/ae5c__mypyc.so)
\t           8e3dd CPyDef_allocator___AdaptiveAllocator____track+0xed (/x/ae5c__mypyc.so)
\t           8e3ff CPyDef_controls____sample_all+0x11 (/x/ae5c__mypyc.so)

python 2741 11131.064718:    3000000 cpu-clock: \n\
\t          1a5d89 Py_DECREF+0xa19 (inlined)
\t          1a5d89 CPyDef_controls____sample_all+0xa19 (/x/ae5c__mypyc.so)

python 2741 11131.069690:    2000000 cpu-clock: \n\
\t          167b9e __strlen_evex+0xde (/usr/lib/libc.so.6)
"""


def test_each_sample_goes_to_its_innermost_compiled_function() -> None:
    got = pg.charge(SCRIPT.splitlines(keepends=True))
    assert got == {
        "allocator___AdaptiveAllocator____track": 5_000_000,
        "controls____sample_all": 3_000_000,
        pg.OUTSIDE: 2_000_000,
    }


def test_growth_is_per_job_and_sorted_by_growth() -> None:
    small = pg.charge(SCRIPT.splitlines())
    large = pg.charge(SCRIPT.replace("3000000", "90000000").splitlines())
    rows = pg.growth_rows(small, 1000, large, 10_000)
    assert rows[0] == ("controls____sample_all", 3.0, 9.0)  # ns / 1e3 / jobs
    assert [r[0] for r in rows[1:]] == [pg.OUTSIDE, "allocator___AdaptiveAllocator____track"]


def test_bad_profiles_get_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = tmp_path / "good.txt"
    good.write_text(SCRIPT)
    not_perf = tmp_path / "passwd.txt"
    not_perf.write_text("root:x:0:0:root:/root:/bin/bash\n")
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    for argv in (
        [str(good), "10", str(not_perf), "10"],
        [str(good), "10", str(empty), "10"],
        [str(good), "10", str(tmp_path / "missing.txt"), "10"],
    ):
        assert pg.main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("perf_growth: ") and err.count("\n") == 1, err
    with pytest.raises(SystemExit) as e:
        pg.main([str(good), "0", str(good), "10"])
    assert e.value.code == 2
    assert "at least 1" in capsys.readouterr().err
    assert pg.main([str(good), "10000", str(good), "20000"]) == 0
    out = capsys.readouterr().out
    assert "| all samples | 1.0 | 0.5 | -0.5 |" in out
