"""Slurm as CODA reads it (coda.slurm.client): host lists, CODA's marks, GRES strings,
``scontrol -o`` records, ``squeue --json`` documents and the commands the client
runs. No Slurm needed: a fake runner answers and records every argv."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coda.slurm.client import (
    HELD,
    JOBS_JSON,
    PLACED,
    SlurmClient,
    SlurmError,
    SlurmJob,
    expand_hostlist,
    format_mark,
    gres_gpus,
    parse_mark,
    parse_scontrol_line,
    run_command,
)

# Recorded from Slurm 22.05 (`scontrol show -o job 1`); note the space in Command.
JOB_LINE = (
    "JobId=1 JobName=resnet UserId=root(0) GroupId=root(0) Priority=0 JobState=PENDING "
    "Reason=JobHeldUser Dependency=(null) NumNodes=1 NumCPUs=2 NumTasks=1 CPUs/Task=2 "
    "ReqB:S:C:T=0:0:*:* TRES=cpu=2,mem=1M,node=1,billing=2 Command=/tmp/my job.sh "
    "WorkDir=/tmp AdminComment=coda:held  StdErr=/tmp/j-1.out TresPerNode=gres:gpu:1"
)

DETAIL_LINE = (
    "JobId=7 JobName=tiny UserId=alice(1000) GroupId=alice(1000) Priority=1 "
    "JobState=RUNNING Reason=None NumNodes=1 NumCPUs=2 "
    "AdminComment=coda:placed,req=2,grant=2,nodes=n1 JOB_GRES=gpu:1 "
    "Nodes=n1 CPU_IDs=0-1 Mem=0 GRES=gpu:1(IDX:0) TresPerNode=gres:gpu:1"
)

NODE_LINES = (
    "NodeName=n1 Arch=x86_64 CoresPerSocket=2  CPUAlloc=1 CPUEfctv=2 CPUTot=2 Gres=gpu:1 "
    "GresUsed=gpu:1 State=MIXED Partitions=main\n"
    "NodeName=n2 Arch=x86_64 CoresPerSocket=4  CPUAlloc=0 CPUTot=8 Gres=(null) "
    "State=DOWN+DRAIN Partitions=main\n"
    "\n"
    "NodeName=n3 CPUAlloc=3 CPUEfctv=6 CPUTot=8 Gres=gpu:a100:4(S:0-1) "
    "GresUsed=gpu:a100:2(IDX:0-1) State=IDLE+DRAIN\n"
)


class Runner:
    """A fake Slurm command runner: answers by argv prefix, records every call."""

    def __init__(self, answers: dict[tuple[str, ...], str] | None = None) -> None:
        self.answers = answers or {}
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str]) -> str:
        argv = list(argv)
        self.calls.append(argv)
        for prefix, out in self.answers.items():
            if tuple(argv[: len(prefix)]) == prefix:
                return out
        return ""


# ------------------------------------------------------------------ host lists
@pytest.mark.parametrize(
    "text, hosts",
    [
        ("n[1-3,5],gpu7", ["n1", "n2", "n3", "n5", "gpu7"]),
        ("n[01-03]", ["n01", "n02", "n03"]),
        ("n[08-10]", ["n08", "n09", "n10"]),
        ("n[8-10]", ["n8", "n9", "n10"]),
        ("n1", ["n1"]),
        ("n1,gpu-a,c3", ["n1", "gpu-a", "c3"]),
        ("n[1-2]-ib", ["n1-ib", "n2-ib"]),
        ("rack[1-2]n[1-2]", ["rack1n1", "rack1n2", "rack2n1", "rack2n2"]),
        ("", []),
    ],
)
def test_expand_hostlist(text: str, hosts: list[str]) -> None:
    assert expand_hostlist(text) == hosts


def test_expand_hostlist_of_none_is_empty() -> None:
    assert expand_hostlist(None) == []  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "text",
    [
        "n[a-3]",
        "n[1-b]",
        "n[]",
        "n[1-3,]",
        "n[1-3",
        "n[3-1]",
    ],
)
def test_malformed_hostlist_is_refused(text: str) -> None:
    with pytest.raises(SlurmError, match="cannot read host list"):
        expand_hostlist(text)


# ------------------------------------------------------------------ marks
def test_mark_round_trip() -> None:
    text = format_mark("placed", req=4, grant=2, nodes="n1+n2", settled=None)
    assert text == "coda:placed,req=4,grant=2,nodes=n1+n2"  # None fields left out
    assert parse_mark(text) == {"state": "placed", "req": "4", "grant": "2", "nodes": "n1+n2"}
    assert parse_mark(format_mark("held")) == {"state": "held"}
    assert format_mark("held") == HELD
    assert format_mark("placed").startswith(PLACED)


@pytest.mark.parametrize("comment", [None, "", "reserved for alice", "CODA:held", "xcoda:held"])
def test_a_comment_that_is_not_codas_has_no_mark(comment: str | None) -> None:
    assert parse_mark(comment) is None


def test_mark_ignores_pairs_without_a_key_or_value_sign() -> None:
    assert parse_mark("coda:placed,req=2,junk,=5,grant=") == {
        "state": "placed",
        "req": "2",
        "grant": "",
    }


@pytest.mark.parametrize("fields", [{"nodes": "n1 n2"}, {"req": "2\t"}, {"x": "a\nb"}])
def test_a_mark_cannot_hold_spaces(fields: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="spaces"):
        format_mark("placed", **fields)


@pytest.mark.parametrize(
    "wait", ["reservation:12", "cores", "filter:IdleGpuReserve", "fifo:12", "gpus", "mem:a_b.c-d+e"]
)
def test_a_wait_reason_is_a_mark_value_and_round_trips(wait: str) -> None:
    text = format_mark("held", req=4, wait=wait)
    assert text == f"coda:held,req=4,wait={wait}"
    assert parse_mark(text) == {"state": "held", "req": "4", "wait": wait}
    assert parse_mark(format_mark("held", wait="")) == {"state": "held", "wait": ""}


@pytest.mark.parametrize(
    "value", ["a,b", "k=v", "a b", "n1/n2", "x;y", "why?", "caf\u00e9", "a\x00b", "(x)"]
)
def test_a_mark_value_outside_its_alphabet_is_refused(value: str) -> None:
    with pytest.raises(ValueError, match="wait="):
        format_mark("held", wait=value)


@pytest.mark.parametrize(
    "state, fields",
    [("held,x=1", {}), ("", {}), ("he ld", {}), ("held", {"a b": 1}), ("held", {"k=": 1})],
)
def test_a_mark_state_or_key_that_would_not_parse_back_is_refused(
    state: str, fields: dict[str, object]
) -> None:
    with pytest.raises(ValueError, match="mark's"):
        format_mark(state, **fields)  # type: ignore[arg-type]


MARK_TEXT = st.text(alphabet="abcXYZ019_.:+-", max_size=30)


@settings(max_examples=200, deadline=None)
@given(
    st.from_regex(r"[A-Za-z0-9_-]{1,12}", fullmatch=True),
    st.dictionaries(st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True), MARK_TEXT, max_size=6),
)
def test_format_then_parse_mark_is_the_identity(state: str, fields: dict[str, str]) -> None:
    fields = {k: v for k, v in fields.items() if k != "state"}  # parse_mark's own key
    assert parse_mark(format_mark(state, **fields)) == {"state": state, **fields}


# ------------------------------------------------------------------ GRES
@pytest.mark.parametrize(
    "text, gpus",
    [
        ("gres:gpu:2", 2),
        ("gres/gpu:a100:2", 2),
        ("gpu:1(IDX:0)", 1),
        ("gpu:a100:2(IDX:0-1)", 2),
        ("gpu=4", 4),
        ("gres/gpu=3", 3),
        ("gpu:0(IDX:N/A)", 0),
        ("", 0),
        (None, 0),
        ("(null)", 0),
        ("gres:mps:100", 0),
        ("gres:gpu:2,gres:mps:100", 2),
        ("gpu:a100:2(IDX:0-1),gpu:v100:1(IDX:2)", 3),
        ("gpu:2(IDX:0,2)", 2),  # an index list with a comma is not a second item
        ("cpu=2,mem=1M,node=1", 0),
        (" gres:gpu:1 , gres:gpu:v100:1 ", 2),
    ],
)
def test_gres_gpus(text: str | None, gpus: int) -> None:
    assert gres_gpus(text) == gpus


@pytest.mark.parametrize("text", ["gres:gpu", "gres:gpu:a100"])
def test_gres_without_a_count_is_one_gpu(text: str) -> None:
    assert gres_gpus(text) == 1


# ------------------------------------------------------------------ scontrol -o
def test_parse_scontrol_line_on_a_recorded_job() -> None:
    f = parse_scontrol_line(JOB_LINE)
    assert f["JobId"] == "1"
    assert f["JobName"] == "resnet"
    assert f["UserId"] == "root(0)"
    assert f["Priority"] == "0"
    assert f["JobState"] == "PENDING"
    assert f["Dependency"] == "(null)"
    assert f["CPUs/Task"] == "2"
    assert f["ReqB:S:C:T"] == "0:0:*:*"
    assert f["TRES"] == "cpu=2,mem=1M,node=1,billing=2"  # '=' inside a value is no key
    assert f["Command"] == "/tmp/my job.sh"  # a value with a space
    assert f["WorkDir"] == "/tmp"
    assert f["AdminComment"] == "coda:held"  # the double space is not part of it
    assert f["StdErr"] == "/tmp/j-1.out"
    assert f["TresPerNode"] == "gres:gpu:1"
    assert "job.sh" not in f and "cpu" not in f and "mem" not in f
    assert parse_mark(f["AdminComment"]) == {"state": "held"}
    assert gres_gpus(f["TresPerNode"]) == 1


def test_parse_scontrol_line_keeps_the_first_of_repeated_keys() -> None:
    f = parse_scontrol_line("JobId=3 Nodes=n1 CPU_IDs=0-1 Nodes=n2 CPU_IDs=2-3")
    assert f["Nodes"] == "n1" and f["CPU_IDs"] == "0-1"
    assert parse_scontrol_line("") == {}


def sq_job(job_id: int, **kw: object) -> dict[str, object]:
    d: dict[str, object] = {
        "job_id": job_id,
        "name": f"job{job_id}",
        "user_id": 1000,
        "job_state": "PENDING",
        "state_reason": "JobHeldUser",
        "cpus": 4,
        "node_count": 1,
        "tres_per_node": "",
        "tres_per_job": "",
        "tres_per_task": "",
        "tasks": 1,
        "nodes": "",
        "required_nodes": "",
        "dependency": "",
        "priority": 0,
        "admin_comment": HELD,
        "submit_time": 1700000000 + job_id,
        "start_time": 0,
        "end_time": 0,
        "exit_code": 0,
        "restart_cnt": 0,
    }
    d.update(kw)
    return d


def client_for(*jobs: dict[str, object]) -> tuple[SlurmClient, Runner]:
    run = Runner({JOBS_JSON: json.dumps({"meta": {}, "jobs": list(jobs)})})
    return SlurmClient(run), run


def test_jobs_reads_squeue_json() -> None:
    client, run = client_for(
        sq_job(1, name="resnet", tres_per_node="gres:gpu:2", cpus=8, user_id=0),
        sq_job(
            2,
            name="prep",
            job_state="RUNNING",
            priority=4294901759,
            admin_comment="coda:placed,req=6,grant=6,nodes=c1",
            nodes="c1",
            required_nodes="c1",
            cpus=6,
            start_time=1700000100,
        ),
        sq_job(3, job_state="COMPLETED", nodes="n[1-2]", node_count=2, exit_code=1),
    )
    jobs = client.jobs()
    assert run.calls == [list(JOBS_JSON)]
    assert [j.job_id for j in jobs] == [1, 2, 3]
    a, b, c = jobs
    assert (a.name, a.user_id, a.state, a.reason) == ("resnet", 0, "PENDING", "JobHeldUser")
    assert a.cpus == 8 and a.gpus_per_node == 2 and a.is_dnn
    assert a.nodes == []  # pending: not placed yet
    assert a.held_for_coda and not a.placed_by_coda
    assert a.requested_cores == 8  # no req in the mark: NumCPUs is the request
    assert a.submit_time == 1700000001
    assert not b.held_for_coda and b.placed_by_coda and not b.is_dnn
    assert b.nodes == ["c1"] and b.required_nodes == ["c1"]
    assert b.requested_cores == 6 and b.mark is not None and b.mark["grant"] == "6"
    assert b.start_time == 1700000100 and b.priority == 4294901759
    assert c.nodes == ["n1", "n2"] and c.node_count == 2 and c.exit_code == 1


def test_requested_cores_come_from_the_mark_once_placed() -> None:
    client, _ = client_for(
        sq_job(1, cpus=1, admin_comment="coda:placed,req=4,grant=1,nodes=g1"),
        sq_job(2, cpus=3, admin_comment="coda:placed,req=x,grant=1,nodes=g1"),
    )
    a, b = client.jobs()
    assert a.requested_cores == 4 and a.cpus == 1
    assert b.requested_cores == 3  # an unreadable req falls back to NumCPUs


@pytest.mark.parametrize(
    "change",
    [
        {"job_state": "RUNNING"},
        {"priority": 1},
        {"admin_comment": ""},
        {"admin_comment": "coda:placed,req=2,grant=2,nodes=n1"},
        {"admin_comment": "coda:held-handed-back"},
    ],
)
def test_held_for_coda_needs_every_condition(change: dict[str, object]) -> None:
    client, _ = client_for(sq_job(1), sq_job(2, **change))
    held, other = client.jobs()
    assert held.held_for_coda
    assert not other.held_for_coda


@pytest.mark.parametrize(
    "kw, gpus_pn",
    [
        ({"tres_per_node": "gres:gpu:2"}, 2),
        ({"tres_per_job": "gres:gpu:4", "node_count": 2}, 2),
        ({"tres_per_job": "gres:gpu:3", "node_count": 2}, 2),  # rounded up per node
        ({"tres_per_task": "gres:gpu:1", "tasks": 4, "node_count": 2}, 2),
        ({"tres_per_task": "gres:gpu:1", "tasks": 0}, 1),  # no task count: one task
        ({}, 0),
    ],
)
def test_gpus_per_node_from_any_tres_field(kw: dict[str, object], gpus_pn: int) -> None:
    client, _ = client_for(sq_job(1, **kw))
    (j,) = client.jobs()
    assert j.gpus_per_node == gpus_pn
    assert j.is_dnn == (gpus_pn > 0)


def test_missing_fields_get_defaults() -> None:
    client, _ = client_for({"job_id": 9})
    (j,) = client.jobs()
    assert (j.cpus, j.node_count, j.gpus_per_node, j.priority) == (1, 1, 0, 0)
    assert j.mark is None and j.exit_code is None and j.nodes == [] and j.dependency == ""


@pytest.mark.parametrize(
    "text",
    ["not json", '{"jobs": [{"name": "no id"}]}', '{"jobs": [{"job_id": "x"}]}', '{"jobs": 3}'],
)
def test_unreadable_squeue_output_is_a_slurm_error(text: str) -> None:
    with pytest.raises(SlurmError, match="squeue --json"):
        SlurmClient(Runner({("squeue",): text})).jobs()


# Recorded from Slurm 22.05.8 (squeue --json, API v0.0.38), fields CODA reads for time
# limits and requeue: `sbatch -t 90`, `--requeue -t 1-02:03:04`, no -t (partition
# MaxTime=INFINITE), `--no-requeue -t 5`, `-t 0`, `-t 1000-00:00:00`, `-t 0:30`; job 2
# after `scontrol requeuehold 2` (restart_cnt 1; its start_time is the begin time).
RECORDED = [
    {"job_id": 1, "job_state": "RUNNING", "state_reason": "None", "time_limit": 90,
     "start_time": 1796121356, "requeue": True, "restart_cnt": 0, "priority": 4294901759},
    {"job_id": 2, "job_state": "PENDING", "state_reason": "JobHeldUser", "time_limit": 1564,
     "start_time": 1796121486, "requeue": True, "restart_cnt": 1, "priority": 0},
    {"job_id": 3, "job_state": "PENDING", "state_reason": "JobHeldUser", "time_limit": None,
     "start_time": 0, "requeue": True, "restart_cnt": 0, "priority": 0},
    {"job_id": 4, "job_state": "PENDING", "state_reason": "JobHeldUser", "time_limit": 5,
     "start_time": 0, "requeue": False, "restart_cnt": 0, "priority": 0},
    {"job_id": 6, "job_state": "PENDING", "state_reason": "JobHeldUser", "time_limit": None,
     "start_time": 0, "requeue": True, "restart_cnt": 0, "priority": 0},
    {"job_id": 7, "job_state": "PENDING", "state_reason": "JobHeldUser", "time_limit": 1440000,
     "start_time": 0, "requeue": True, "restart_cnt": 0, "priority": 0},
    {"job_id": 8, "job_state": "PENDING", "state_reason": "JobHeldUser", "time_limit": 1,
     "start_time": 0, "requeue": True, "restart_cnt": 0, "priority": 0},
]  # fmt: skip


def test_time_limits_start_and_requeue_facts_from_recorded_squeue_json() -> None:
    client, _ = client_for(*RECORDED)
    jobs = {j.job_id: j for j in client.jobs()}
    limits = {jid: j.time_limit_s for jid, j in jobs.items()}
    assert limits == {1: 5400.0, 2: 93840.0, 3: None, 4: 300.0, 6: None, 7: 86400000.0, 8: 60.0}
    assert [jid for jid, j in jobs.items() if not j.requeueable] == [4]
    assert jobs[2].restarts == 1 and all(j.restarts == 0 for jid, j in jobs.items() if jid != 2)
    assert jobs[1].start_time == 1796121356.0
    # Pending: Slurm's start_time is the begin time a requeue set, not a start.
    assert all(jobs[jid].start_time is None for jid in (2, 3, 4, 6, 7, 8))


@pytest.mark.parametrize(
    "value, seconds",
    [
        (90, 5400.0),
        (None, None),
        ("UNLIMITED", None),
        ("unlimited", None),
        ("INFINITE", None),
        ("NOT_SET", None),
        (0, None),  # sbatch -t 0: no limit
        (0xFFFFFFFF, None),  # INFINITE
        (0xFFFFFFFE, None),  # NO_VAL
        (0xFFFFFFFD, 0xFFFFFFFD * 60.0),
        ({"set": True, "infinite": False, "number": 30}, 1800.0),  # API v0.0.39 and later
        ({"set": True, "infinite": True, "number": 0}, None),
        ({"set": False, "infinite": False, "number": 0}, None),
    ],
)
def test_time_limit_forms(value: object, seconds: float | None) -> None:
    client, _ = client_for(sq_job(1, time_limit=value))
    (j,) = client.jobs()
    assert j.time_limit_s == seconds


def test_an_absent_time_limit_or_requeue_is_none_and_not_requeueable() -> None:
    (j,) = SlurmClient(Runner({("squeue",): '{"jobs": [{"job_id": 5}]}'})).jobs()
    assert j.time_limit_s is None and j.requeueable is False and j.restarts == 0
    assert j.start_time is None


@pytest.mark.parametrize(
    "field, value",
    [
        ("time_limit", -1),
        ("time_limit", "90"),
        ("time_limit", 1.5),
        ("time_limit", True),
        ("time_limit", [90]),
        ("time_limit", {"set": True, "infinite": "no", "number": 3}),
        ("time_limit", {"set": True, "infinite": False, "number": "x"}),
        ("start_time", -5),
        ("start_time", "yesterday"),
        ("start_time", 1.5e9),
        ("restart_cnt", -1),
        ("restart_cnt", "2"),
        ("requeue", 1),
        ("requeue", "yes"),
        ("batch_flag", 1),
    ],
)
def test_a_bad_time_or_requeue_field_is_one_line_naming_the_job(field: str, value: object) -> None:
    client, _ = client_for(sq_job(1), sq_job(42, job_state="RUNNING", **{field: value}))
    with pytest.raises(SlurmError) as e:
        client.jobs()
    text = str(e.value)
    assert "\n" not in text and text.startswith("squeue --json: cannot read its output")
    assert "job 42" in text and field in text, text


def test_only_a_batch_job_with_requeue_may_be_requeued() -> None:
    # Slurm refuses to requeue a job srun or salloc made, though it shows requeue too.
    client, _ = client_for(
        sq_job(1, requeue=True),
        sq_job(2, requeue=True, batch_flag=False),
        sq_job(3, requeue=False, batch_flag=True),
    )
    assert [j.requeueable for j in client.jobs()] == [True, False, False]


def test_no_jobs() -> None:
    assert SlurmClient(Runner({("squeue",): '{"jobs": []}'})).jobs() == []
    assert SlurmClient(Runner({("squeue",): "{}"})).jobs() == []


# ------------------------------------------------------------------ nodes
def test_nodes_from_scontrol_show_node() -> None:
    run = Runner({("scontrol", "show", "-o", "-d", "node"): NODE_LINES})
    n1, n2, n3 = SlurmClient(run).nodes()
    assert run.calls[0][:2] == ["scontrol", "show"] and run.calls[0][-1] == "node"
    assert (n1.name, n1.cpus, n1.cpus_alloc, n1.gpus, n1.gpus_used) == ("n1", 2, 1, 1, 1)
    assert n1.state == "MIXED" and n1.usable
    assert n2.cpus == 8  # no CPUEfctv: CPUTot
    assert n2.gpus == 0 and n2.gpus_used == 0
    assert n2.state == "DOWN+DRAIN" and not n2.usable
    assert n3.cpus == 6  # CPUEfctv (specialised cores left out) before CPUTot
    assert (n3.gpus, n3.gpus_used) == (4, 2)
    assert not n3.usable


@pytest.mark.parametrize(
    "state, usable",
    [
        ("IDLE", True),
        ("ALLOCATED", True),
        ("MIXED+PLANNED", True),
        ("COMPLETING", True),
        ("DOWN", False),
        ("IDLE+DRAIN", False),
        ("MIXED+DRAIN", False),
        ("ALLOCATED+FAIL", False),
        ("IDLE+POWERED_DOWN", False),
        ("IDLE+NOT_RESPONDING", False),
        ("RESERVED", False),
        ("IDLE+MAINT", False),
    ],
)
def test_node_usable(state: str, usable: bool) -> None:
    line = f"NodeName=x CPUAlloc=0 CPUTot=4 Gres=(null) State={state}"
    (n,) = SlurmClient(Runner({("scontrol",): line})).nodes()
    assert n.usable is usable


def test_an_unreadable_node_line_is_left_out_and_said() -> None:
    for text in ("NodeName=n1 CPUTot=lots State=IDLE", "CPUTot=4 State=IDLE"):  # no NodeName
        client = SlurmClient(Runner({("scontrol",): text}))
        assert client.nodes() == []
        assert client.unreadable_nodes[0].startswith("scontrol show node: cannot read")


def test_a_node_listed_twice_is_left_out_and_said() -> None:
    text = (
        "NodeName=n1 CPUAlloc=0 CPUTot=4 Gres=(null) State=IDLE\n"
        "NodeName=n2 CPUAlloc=0 CPUTot=4 Gres=(null) State=IDLE\n"
        "NodeName=n1 CPUAlloc=4 CPUTot=4 Gres=(null) State=ALLOCATED\n"
    )
    client = SlurmClient(Runner({("scontrol",): text}))
    assert [n.name for n in client.nodes()] == ["n2"]
    assert client.unreadable_nodes == ["scontrol show node: node 'n1' listed more than once"]
    assert [n.name for n in client.nodes()] == ["n2"]  # the same text: the same answer


# ------------------------------------------------------------------ actions
def test_update_builds_one_scontrol_update() -> None:
    run = Runner()
    SlurmClient(run).update(12, ReqNodeList="g1,g2", NumCPUs=4, MinCPUsNode=2)
    SlurmClient(run).update(12, AdminComment="coda:placed,req=4,grant=2,nodes=g1+g2")
    assert run.calls == [
        ["scontrol", "update", "JobId=12", "ReqNodeList=g1,g2", "NumCPUs=4", "MinCPUsNode=2"],
        ["scontrol", "update", "JobId=12", "AdminComment=coda:placed,req=4,grant=2,nodes=g1+g2"],
    ]


@pytest.mark.parametrize("value", ["a b", "x\ty", "line\nbreak"])
def test_update_refuses_values_with_spaces(value: str) -> None:
    run = Runner()
    with pytest.raises(ValueError, match="spaces"):
        SlurmClient(run).update(3, AdminComment=value)
    assert run.calls == []  # nothing ran


def test_update_and_release_refuse_a_job_id_that_is_not_a_number() -> None:
    run = Runner()
    with pytest.raises(ValueError):
        SlurmClient(run).update("3 Priority=9", NumCPUs=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        SlurmClient(run).release("3,4")  # type: ignore[arg-type]
    assert run.calls == []


def test_release_argv() -> None:
    run = Runner()
    SlurmClient(run).release(41)
    assert run.calls == [["scontrol", "release", "41"]]


def test_requeue_hold_and_start_now_argv() -> None:
    run = Runner()
    client = SlurmClient(run)
    client.requeue_hold(17)
    client.start_now(17)
    client.hold(18)
    assert run.calls == [
        ["scontrol", "requeuehold", "17"],
        ["scontrol", "update", "JobId=17", "StartTime=now"],
        ["scontrol", "hold", "18"],
    ]


@pytest.mark.parametrize("bad", [True, 3.0, 2.9, 0, -4, "17", "17 18", None])
def test_every_action_refuses_what_is_not_a_job_id(bad: object) -> None:
    run = Runner()
    client = SlurmClient(run)
    for act in (client.requeue_hold, client.start_now, client.release, client.hold):
        with pytest.raises(ValueError, match="not a Slurm job id"):
            act(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not a Slurm job id"):
        client.update(bad, NumCPUs=1)  # type: ignore[arg-type]
    assert run.calls == []  # nothing ran: a bool or a float never names some other job


def test_a_refused_requeue_is_a_slurm_error_naming_the_command() -> None:
    # What scontrol says for a job with Requeue=0 (recorded, 22.05.8), through a real run.
    code = (
        "import sys; sys.stderr.write('Requested operation is presently disabled for job 4\\n');"
        " sys.exit(1)"
    )

    def runner(argv: Sequence[str]) -> str:
        return run_command([sys.executable, "-c", code, *argv])

    with pytest.raises(SlurmError, match="presently disabled for job 4") as e:
        SlurmClient(runner).requeue_hold(4)
    assert "requeuehold 4" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(SlurmError, match="presently disabled"):
        SlurmClient(runner).start_now(4)


def test_slurm_job_defaults_say_no_limit_and_not_requeueable() -> None:
    j = SlurmJob(1, "x", 0, "PENDING", "", 1, 1, 0, [], [], "", 0, None)
    assert j.time_limit_s is None and j.requeueable is False and j.start_time is None


def test_runner_errors_pass_through_the_client() -> None:
    def broken(argv: Sequence[str]) -> str:
        raise SlurmError("slurmctld is down")

    client = SlurmClient(broken)
    calls = (client.jobs, client.nodes, lambda: client.release(1), lambda: client.requeue_hold(1))
    for call in calls:
        with pytest.raises(SlurmError, match="slurmctld is down"):
            call()


# ------------------------------------------------------------------ run_command
def test_run_command_returns_stdout() -> None:
    assert run_command([sys.executable, "-c", "print('hi')"]) == "hi\n"


def test_run_command_missing_binary() -> None:
    with pytest.raises(SlurmError, match="not found"):
        run_command(["/nonexistent/scontrol-xyz", "show", "node"])


def test_run_command_failure() -> None:
    with pytest.raises(SlurmError, match="false"):
        run_command(["false"])


def test_run_command_failure_names_the_last_stderr_line() -> None:
    code = "import sys; sys.stderr.write('warming up\\nInvalid job id specified\\n'); sys.exit(1)"
    with pytest.raises(SlurmError, match="Invalid job id specified") as e:
        run_command([sys.executable, "-c", code])
    assert str(e.value).endswith(": Invalid job id specified")  # the last line only


def test_run_command_timeout() -> None:
    with pytest.raises(SlurmError, match="no answer"):
        run_command([sys.executable, "-c", "import time; time.sleep(5)"], timeout_s=0.1)


@pytest.mark.parametrize(
    "line",
    [
        "NodeName=gpu/1 CPUTot=8 CPUAlloc=0 Gres=gpu:1 State=IDLE",  # not a mark value
        "NodeName=n1 CPUTot=" + "9" * 30 + " CPUAlloc=0 State=IDLE",  # no such node
        "NodeName=n1 CPUTot=8 CPUAlloc=0 Gres=gpu:4294967294 State=IDLE",
    ],
)
def test_a_node_it_cannot_use_is_left_out_not_a_crash(line: str) -> None:
    """An odd name crashed the controller when it wrote a placement's mark; a huge
    count overflowed (1 << cores) or built a list of 4 billion GPUs. Left out alone:
    the other nodes are read (the review: refusing the whole read stopped every
    placement on the cluster for one odd node)."""
    good = "NodeName=n2 CPUTot=8192 CPUAlloc=0 Gres=gpu:64 State=IDLE"  # a big SMP node
    client = SlurmClient(lambda argv: line + "\n" + good + "\n")
    assert [n.name for n in client.nodes()] == ["n2"]
    [why] = client.unreadable_nodes
    assert why.startswith("scontrol show node: cannot read")


def test_a_host_list_of_many_bracket_groups_is_refused_not_a_recursion() -> None:
    with pytest.raises(SlurmError, match="too many"):
        expand_hostlist("n[1]" * 1000)
    assert expand_hostlist("a[1-2]b[3]") == ["a1b3", "a2b3"]


def _n(v: int, set_: bool = True, infinite: bool = False) -> dict[str, object]:
    return {"set": set_, "infinite": infinite, "number": v}


def test_squeue_json_of_slurm_24_11_wraps_numbers_and_lists_states() -> None:
    """Slurm 24.11 (Debian 13; met in deploy/cgroup2-guest) wraps numbers as
    {set, infinite, number}, gives job_state as a list and exit_code as an object."""
    client, _ = client_for(
        sq_job(
            2,
            job_state=["RUNNING"],
            user_id=65534,
            cpus=_n(2),
            node_count=_n(1),
            tasks=_n(1),
            priority=_n(4294901759),
            submit_time=_n(1700000002),
            start_time=_n(1700000100),
            end_time=_n(0, set_=False),
            exit_code={"status": ["SUCCESS"], "return_code": _n(0), "signal": {}},
            restart_cnt=_n(0),
            time_limit=_n(0, infinite=True),
            array_job_id=_n(0),
            array_task_id=_n(0, set_=False),
            het_job_id=_n(0),
            nodes="c1",
        ),
        sq_job(3, job_state=["PENDING"], cpus=_n(4), exit_code={"return_code": _n(0)}),
        sq_job(4, job_state=["FAILED"], exit_code={"status": ["ERROR"], "return_code": _n(1)}),
    )
    a, b, c = client.jobs()
    assert (a.state, a.cpus, a.node_count, a.user_id) == ("RUNNING", 2, 1, 65534)
    assert a.priority == 4294901759 and a.submit_time == 1700000002
    assert a.start_time == 1700000100 and a.end_time == 0 and a.exit_code is None
    assert a.time_limit_s is None and a.array_task_id is None and a.nodes == ["c1"]
    # Not ended: no exit code (24.11 says 0; 22.05 and squeue -O say none).
    assert (b.state, b.cpus, b.exit_code, b.nodes) == ("PENDING", 4, None, [])
    assert (c.state, c.exit_code) == ("FAILED", 1)
