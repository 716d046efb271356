"""What an operator copies from deploy/: the service units are sandboxed and keep their
state where systemd makes it; the guide's Slurm settings are the test cluster's; every
script answers --help without doing anything."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
UNITS = sorted((ROOT / "deploy" / "systemd").glob("*.service"))
SCRIPTS = ["deploy/slurm-test-cluster", "deploy/walkthrough", "deploy/cgroup2-guest"]


def unit_values(unit: Path, key: str) -> list[str]:
    return [ln.split("=", 1)[1] for ln in unit.read_text().splitlines() if ln.startswith(f"{key}=")]


@pytest.mark.parametrize("unit", UNITS, ids=lambda u: u.name)
def test_each_unit_keeps_its_state_in_its_state_directory(unit: Path) -> None:
    (state,) = unit_values(unit, "StateDirectory")
    (mode,) = unit_values(unit, "StateDirectoryMode")
    assert mode == "0700"
    (start,) = unit_values(unit, "ExecStart")
    assert f"--state-dir /var/lib/{state} " in start
    assert unit_values(unit, "NoNewPrivileges") == ["yes"]
    assert unit_values(unit, "UMask") == ["0077"]


@pytest.mark.parametrize("unit", UNITS, ids=lambda u: u.name)
def test_each_unit_is_sandboxed(unit: Path) -> None:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed")
    p = subprocess.run([tool, "security", "--offline=yes", str(unit)],
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    if "--offline" in p.stderr:
        pytest.skip("systemd-analyze predates --offline (systemd 250)")
    m = re.search(r"Overall exposure level for \S+: ([0-9.]+)", p.stdout)
    assert m is not None, p.stdout[-500:] + p.stderr[-500:]
    assert float(m.group(1)) <= 3.5, p.stdout


def _guide_settings() -> dict[str, str]:
    text = (ROOT / "docs" / "operator.md").read_text()
    block = text.split("**Slurm settings CODA relies on**", 1)[1].split("```", 2)[1]
    return dict(
        ln.split("=", 1) for ln in block.splitlines() if "=" in ln and not ln.startswith("#")
    )


def test_the_guide_asks_for_the_settings_the_test_cluster_runs() -> None:
    guide = _guide_settings()
    assert {"JobSubmitPlugins", "ProctrackType", "TaskPlugin", "MinJobAge",
            "ConstrainCores", "Prolog", "TaskProlog"} <= guide.keys()  # fmt: skip
    cluster = (ROOT / "deploy" / "slurm-test-cluster").read_text()
    for key, value in guide.items():
        if key in ("Prolog", "Epilog", "TaskProlog"):  # the cluster's own directory
            name = value.rsplit("/", 1)[1]
            assert re.search(rf"^{key}=\$DIR/etc/{re.escape(name)}$", cluster, re.M), key
        elif key == "JobSubmitPlugins":
            assert 'submit="JobSubmitPlugins=lua"' in cluster
        else:
            assert re.search(rf"^{key}={re.escape(value)}$", cluster, re.M), (key, value)


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_deploy_script_answers_help(script: str, tmp_path: Path) -> None:
    for flag in ("--help", "-h"):
        p = subprocess.run([str(ROOT / script), flag], capture_output=True, text=True,
                           timeout=30, cwd=tmp_path)  # fmt: skip
        assert p.returncode == 0, p.stderr
        assert len(p.stdout.splitlines()) >= 5 and "#" not in p.stdout.splitlines()[0]
        assert list(tmp_path.iterdir()) == []
