"""`coda slurm status` and `handback` against stand-in Slurm commands on PATH
(recorded 22.05 output shapes); the real cluster runs in test_slurm_e2e.py."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from coda.cli import main

JOBS = [
    {"job_id": 7, "name": "resnet", "user_id": 1000, "job_state": "RUNNING", "cpus": 3,
     "node_count": 1, "tres_per_node": "gres:gpu:1", "nodes": "n1", "priority": 1,
     "admin_comment": "coda:placed,req=8,grant=3,nodes=n1,settled=3",
     "state_reason": "None"},
    {"job_id": 8, "name": "prep", "user_id": 1000, "job_state": "PENDING", "cpus": 2,
     "node_count": 1, "tres_per_node": "", "nodes": "", "priority": 0,
     "admin_comment": "coda:held", "state_reason": "JobHeldUser"},
    {"job_id": 9, "name": "theirs", "user_id": 1001, "job_state": "RUNNING", "cpus": 4,
     "node_count": 1, "tres_per_node": "", "nodes": "n3", "priority": 1,
     "admin_comment": "", "state_reason": "None"},
]  # fmt: skip


@pytest.fixture
def fake_slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """squeue prints JOBS; scontrol appends its argv to a log."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "jobs.json").write_text(json.dumps({"jobs": JOBS}))
    scripts = {
        "squeue": f"#!/bin/sh\ncat {tmp_path / 'jobs.json'}\n",
        "scontrol": f'#!/bin/sh\nif [ "$1 $2" = "show config" ]; then cat {tmp_path / "config"} '
        f'2>/dev/null; exit 0; fi\necho "$@" >> {tmp_path / "scontrol.log"}\n',
    }
    for name, text in scripts.items():
        f = bin_dir / name
        f.write_text(text)
        f.chmod(f.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return tmp_path


def test_status_shows_what_coda_decided(fake_slurm: Path) -> None:
    r = CliRunner().invoke(main, ["slurm", "status", "--json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)["jobs"]
    assert [row["job"] for row in rows] == [7, 8]  # 9 was never CODA's
    assert rows[0]["requested"] == 8 and rows[0]["kind"] == "dnn"
    assert (rows[0]["granted"], rows[0]["settled"], rows[0]["nodes"]) == (3, 3, "n1")
    assert (rows[1]["coda"], rows[1]["granted"], rows[1]["kind"]) == ("held", None, "cpu")
    everything = CliRunner().invoke(main, ["slurm", "status", "--all", "--json"])
    assert len(json.loads(everything.output)["jobs"]) == 3
    table = CliRunner().invoke(main, ["slurm", "status"])
    assert table.exit_code == 0 and "resnet" in table.output and "theirs" not in table.output


def test_handback_releases_the_held_job_only(fake_slurm: Path) -> None:
    r = CliRunner().invoke(main, ["slurm", "handback"])
    assert r.exit_code == 0, r.output
    assert "1 job(s) handed back" in r.output
    log = (fake_slurm / "scontrol.log").read_text().splitlines()
    assert log == ["update JobId=8 AdminComment=coda:passed,why=handback", "release 8"]


def test_handback_warns_while_coda_is_still_switched_on(
    fake_slurm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    from coda.slurm.lease import LeaseRecord

    lease = fake_slurm / "lease"
    lease.write_text(LeaseRecord(4, "ctlhost:1:77:1", time.time(), 10).line())
    (fake_slurm / "config").write_text("JobSubmitPlugins        = lua\nMinJobAge = 300\n")
    r = CliRunner().invoke(main, ["slurm", "handback", "--lease", str(lease)])
    assert r.exit_code == 0, r.output
    assert "warning: controller ctlhost:1:77:1 is active" in r.output
    assert "warning: JobSubmitPlugins=lua is still set" in r.output
    assert "1 job(s) handed back" in r.output  # a warning, not a refusal
    # Switched off as the guide says: no warning.
    lease.write_text(LeaseRecord(4, "-", time.time(), 10).line())
    (fake_slurm / "config").write_text("JobSubmitPlugins        = (null)\n")
    r = CliRunner().invoke(main, ["slurm", "handback", "--lease", str(lease)])
    assert r.exit_code == 0 and "warning" not in r.output, r.output


def test_status_without_slurm_is_one_clear_line(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no squeue anywhere
    r = CliRunner().invoke(main, ["slurm", "status"])
    assert r.exit_code == 1
    assert "squeue: not found" in r.output


def test_slurm_status_shows_any_job_name_as_text(monkeypatch) -> None:
    """A user's job name is shown as it is, never read as rich markup."""
    from click.testing import CliRunner

    from coda.cli import main
    from coda.slurm import client as client_mod
    from coda.slurm.client import SlurmJob

    mark = {"state": "held", "wait": "cores"}
    job = SlurmJob(7, "[/]", 1000, "PENDING", "JobHeldUser", 1, 1, 0, [], [], "", 0, mark)
    monkeypatch.setattr(client_mod.SlurmClient, "jobs", lambda self: [job])
    out = CliRunner().invoke(main, ["slurm", "status"])
    assert out.exit_code == 0, out.output
    assert "[/]" in out.output and "cores" in out.output


def test_slurm_status_escapes_control_characters_in_a_job_name(monkeypatch) -> None:
    """A user's job name must not clear or retitle the terminal of whoever reads it."""
    from coda.slurm import client as client_mod
    from coda.slurm.client import SlurmJob

    name = "\x1b[2J\x1b]0;pwn\x1b\\FAKE"
    job = SlurmJob(
        7, name, 1000, "PENDING", "JobHeldUser", 1, 1, 0, [], [], "", 0, {"state": "held"}
    )
    monkeypatch.setattr(client_mod.SlurmClient, "jobs", lambda self: [job])
    out = CliRunner().invoke(main, ["slurm", "status"], terminal_width=200)
    assert out.exit_code == 0, out.output
    assert "\x1b" not in out.output and "\\x1b[2J" in out.output


@pytest.mark.parametrize(
    "text",
    ["[]", '{"jobs": ["x"]}', '{"jobs": {"a": 1}}', '{"jobs": ' + "[" * 5000 + "]" * 5000 + "}"],
)
def test_slurm_status_reads_any_json_shape_as_one_line(fake_slurm: Path, text: str) -> None:
    (fake_slurm / "jobs.json").write_text(text)
    r = CliRunner().invoke(main, ["slurm", "status"])
    assert r.exit_code == 1 and isinstance(r.exception, SystemExit), r.output
    assert r.output.startswith("Error: squeue --json: cannot read its output")


def test_a_handback_whose_release_fails_leaves_the_job_held_for_coda(fake_slurm: Path) -> None:
    """Marked passed and still held, nobody would ever release it."""
    (fake_slurm / "bin" / "scontrol").write_text(
        f'#!/bin/sh\necho "$@" >> {fake_slurm / "scontrol.log"}\n'
        '[ "$1" = release ] && { echo "Unable to contact slurm controller" >&2; exit 1; }\n'
        "exit 0\n"
    )
    r = CliRunner().invoke(main, ["slurm", "handback"])
    assert r.exit_code == 1 and "Unable to contact" in r.output
    log = (fake_slurm / "scontrol.log").read_text().splitlines()
    assert log == [
        "show config",
        "update JobId=8 AdminComment=coda:passed,why=handback",
        "release 8",
        "update JobId=8 AdminComment=coda:held",
    ]
