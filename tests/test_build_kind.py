"""coda.build_kind: which files the compiled build compiles, and which build runs."""

from __future__ import annotations

from pathlib import Path

from coda.build_kind import build_kind, compiled_files, module_name


def test_compiled_files_take_the_folders_and_files_named_less_the_exceptions(
    tmp_path: Path,
) -> None:
    pkg = tmp_path / "coda"
    for rel in ("cycle/__init__.py", "cycle/scheduler.py", "cycle/invariant.py",
                "sim/engine.py", "sim/paper_metrics.py", "sim/result.py", "policy/state.py",
                "workload/job_perf.py", "workload/perf.py", "runtime/agent.py",
                "slurm/listing.py", "slurm/listing_diff.py", "slurm/view.py",
                "slurm/wait_marks.py", "slurm/index.py", "slurm/ready.py",
                "slurm/client.py", "slurm/controller.py"):  # fmt: skip
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text("")
    got = [f.relative_to(pkg).as_posix() for f in compiled_files(pkg)]
    assert got == [
        "cycle/__init__.py",
        "cycle/scheduler.py",
        "policy/state.py",
        "sim/engine.py",
        "workload/job_perf.py",
        "slurm/listing.py",
        "slurm/listing_diff.py",
        "slurm/view.py",
        "slurm/wait_marks.py",
        "slurm/index.py",
        "slurm/ready.py",
        "slurm/client.py",
    ]
    assert module_name(pkg, pkg / "cycle/__init__.py") == "coda.cycle"
    assert module_name(pkg, pkg / "workload/job_perf.py") == "coda.workload.job_perf"


def test_the_tests_run_the_pure_build() -> None:
    assert build_kind() == "pure"
