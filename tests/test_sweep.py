"""`kagent sweep`'s parts, each on its own: the plan, the record, the budgets, the GPU usage,
the member driver's deadline and lock take-over, the scripted model's delay, the command line.
The sweeps themselves, with their faults, are in tests/test_sweep_faults.py."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kagent.agent.loop.models import make_model
from kagent.agent.loop.models.scripted import parse_spec
from kagent.agent.sweep import member as member_module
from kagent.agent.sweep.driver import Budgets, create_sweep
from kagent.agent.sweep.member import MemberJob, drive_member, heartbeat_path, member_command
from kagent.agent.sweep.plan import SweepSpec, expand_tasks, plan_members
from kagent.agent.sweep.record import (
    MemberEnded,
    MemberLaunched,
    RecordWriter,
    fold,
    read_record,
)
from kagent.agent.sweep.usage import GpuSampler, gpu_usage, read_samples
from kagent.core.errors import KagentError
from kagent.sandbox.lease import LeaseRecord

from conftest import WAIT_S, kagent_counting_torch
from terminal import hearing_ctrl_c

KAGENT = str(Path(sys.executable).parent / "kagent")
KB_TASK = '''
import torch


class Model(torch.nn.Module):
    """{doc}"""

    def __init__(self, factor):
        super().__init__()
        self.factor = factor

    def forward(self, x):
        return x * self.factor


def get_inputs():
    return [torch.randn({rows}, 64)]


def get_init_inputs():
    return [{factor}]
'''
# One solution for all of write_tasks' tasks, so that a script can write it whatever the task.
KB_SOLUTION = """import torch


class ModelNew(torch.nn.Module):
    def __init__(self, factor):
        super().__init__()
        self.factor = factor

    def forward(self, x):
        return torch.mul(x, self.factor)
"""


def write_tasks(folder: Path, count: int = 3) -> Path:
    """KernelBench files times_2.py, times_3.py, ...: each scales its own shape of input."""
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        (folder / f"times_{i + 2}.py").write_text(
            KB_TASK.format(doc=f"Multiplies by {i + 2}.", factor=i + 2, rows=8 * (i + 1))
        )
    return folder


def spec_of(tmp_path: Path, **fields) -> SweepSpec:
    tasks = expand_tasks([str(write_tasks(tmp_path / "tasks"))])
    defaults = dict(
        sweep_id="sweep-20261201-120000-abcd",
        tasks=tasks,
        models=["scripted:x.yaml"],
        branches=2,
        budget_s=600,
        device="cpu",
    )
    return SweepSpec(**{**defaults, **fields})


# -- the plan -----------------------------------------------------------------------------------
def test_members_are_tasks_by_models_by_branches_with_run_ids_of_their_own(tmp_path):
    spec = spec_of(tmp_path, models=["scripted:a.yaml", "scripted:b.yaml"], directions=["fuse everything"])
    members = plan_members(spec)
    assert len(members) == 3 * 2 * 2
    assert [(m.task_name, m.model, m.branch) for m in members[:4]] == [
        ("times_2", "scripted:a.yaml", 1),
        ("times_2", "scripted:a.yaml", 2),
        ("times_2", "scripted:b.yaml", 1),
        ("times_2", "scripted:b.yaml", 2),
    ]
    assert len({m.run_id for m in members}) == 12
    assert members[0].run_id == "times_2-20261201-120000-abcd-m01"
    assert members[0].direction == "fuse everything"
    assert "branch 2 of 2" in members[1].direction and "seed 2" in members[1].direction
    assert plan_members(spec.model_copy(update={"branches": 1, "directions": []}))[0].direction is None


def test_a_folder_of_tasks_is_each_of_them_and_mistakes_are_named(tmp_path):
    folder = write_tasks(tmp_path / "level1")
    (folder / "_helpers.py").write_text("x = 1\n")
    assert [Path(t).name for t in expand_tasks([str(folder)])] == ["times_2.py", "times_3.py", "times_4.py"]
    assert expand_tasks(["02_kimi_linear_decode"]) == ["02_kimi_linear_decode"]
    with pytest.raises(KagentError, match="named twice"):
        expand_tasks([str(folder), str(folder / "times_2.py")])
    (tmp_path / "empty").mkdir()
    with pytest.raises(KagentError, match="holds no task"):
        expand_tasks([str(tmp_path / "empty")])


def test_a_folder_of_tasks_holds_problem_folders_and_files_and_nothing_else(tmp_path):
    """Each kind says what a task of it looks like: a problem folder (its reference.py) and a .py
    file are tasks; a README or a folder of data beside them are not."""
    import shutil

    from kagent.tasks import resolve_task

    folder = write_tasks(tmp_path / "mixed", count=1)
    shutil.copytree(resolve_task("02_kimi_linear_decode").path, folder / "kimi")
    (folder / "README.md").write_text("notes\n")
    (folder / "data").mkdir()
    assert [Path(t).name for t in expand_tasks([str(folder)])] == ["kimi", "times_2.py"]
    assert expand_tasks([str(folder / "kimi")]) == [str((folder / "kimi").resolve())]


def test_a_member_is_an_ordinary_kagent_run_with_its_id_and_direction(tmp_path):
    spec = spec_of(tmp_path, scale="smoke", max_tokens=1000)
    member = plan_members(spec)[1]
    job = MemberJob(
        member=member, sweep_dir=tmp_path, budget_s=300, max_cost_usd=0.5, device="cpu", scale="smoke", max_tokens=1000
    )
    argv = member_command(job, resume=False)
    assert argv[3:5] == ["run", member.task] and argv[argv.index("--run-id") + 1] == member.run_id
    assert argv[argv.index("--direction") + 1] == member.direction
    assert argv[argv.index("--max-cost") + 1] == "0.5" and argv[argv.index("--budget") + 1] == "300"
    assert member_command(job, resume=True)[3:] == [
        "resume",
        member.run_id,
        "--root",
        str(tmp_path / "runs"),
        "--quiet",
    ]


def test_local_slots_share_each_gpu_and_name_it_as_the_member_sees_it(monkeypatch):
    from kagent.agent.sweep.engines import local_slots

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert local_slots("cuda", 2, [0, 1]) == ["0", "1", "0", "1"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")  # the driver's own view: its GPU 1 is the machine's 5
    assert local_slots("cuda", 1, [1]) == ["5"]
    with pytest.raises(KagentError, match="shows 2 GPU"):
        local_slots("cuda", 1, [2])
    assert local_slots("cpu", 2, None) == [None] * (2 * os.cpu_count())


# -- the record ---------------------------------------------------------------------------------
def test_the_record_folds_into_states_and_a_torn_last_line_is_dropped(tmp_path):
    spec = spec_of(tmp_path)
    sweep_dir = create_sweep(spec, root=tmp_path / "runs")
    members = fold(read_record(sweep_dir)).members
    first, second = list(members)[:2]
    writer = RecordWriter(sweep_dir, next_seq=1)
    writer.append(MemberLaunched(run_id=first, resume=False, budget_s=600, engine="local"))
    writer.append(MemberLaunched(run_id=second, resume=False, budget_s=600, max_cost_usd=0.2, engine="local"))
    writer.append(MemberEnded(run_id=first, outcome="ended", run_state="finished"))
    writer.close()
    with open(sweep_dir / "sweep.jsonl", "ab") as f:
        f.write(b'{"v": 1, "type": "member_ended", "run_id": "')  # the driver killed mid-write
    view = fold(read_record(sweep_dir))
    assert view.members[first].ended.run_state == "finished" and not view.members[first].running
    assert view.members[second].running and view.members[second].max_cost_usd == 0.2
    assert [e.seq for e in read_record(sweep_dir)] == [0, 1, 2, 3]
    lines = (sweep_dir / "sweep.jsonl").read_bytes().split(b"\n")
    (sweep_dir / "sweep.jsonl").write_bytes(b"\n".join([lines[0], b"garbage", *lines[1:]]))
    with pytest.raises(KagentError, match="corrupted"):
        read_record(sweep_dir)
    with pytest.raises(KagentError, match="already"):
        create_sweep(spec, root=tmp_path / "runs")


# -- the budgets --------------------------------------------------------------------------------
def test_the_cost_cap_is_shared_out_and_never_promised_twice(tmp_path):
    spec = spec_of(tmp_path, max_cost_usd=1.2)
    view = fold(read_record(create_sweep(spec, root=tmp_path / "runs")))
    states = list(view.members.values())  # 6 members
    budgets = Budgets(spec, view, elapsed=lambda: 0.0)
    shares = [budgets.allow(states[i], members_left=6 - i).max_cost_usd for i in range(2)]
    assert shares == pytest.approx([0.2, 0.2])
    budgets.settle(states[0].member.run_id, 0.05)  # spent 0.05 of its 0.2: 0.15 comes back
    # 1.2 - 0.05 spent - 0.2 promised to the one still running, over the 4 not started.
    assert budgets.allow(states[2], members_left=4).max_cost_usd == pytest.approx((1.2 - 0.05 - 0.2) / 4)
    budgets.settle(states[1].member.run_id, 1.1)  # a member that overran its share (one call too many)
    assert budgets.allow(states[3], members_left=3) is None


def test_the_total_budget_caps_each_member_and_leaves_none_a_sliver(tmp_path):
    spec = spec_of(tmp_path, budget_s=600, total_budget_s=1000)
    view = fold(read_record(create_sweep(spec, root=tmp_path / "runs")))
    states = list(view.members.values())
    clock = [0.0]
    budgets = Budgets(spec, view, elapsed=lambda: clock[0])
    assert budgets.allow(states[0], 6).budget_s == 600
    clock[0] = 700
    assert budgets.allow(states[1], 5).budget_s == 300
    clock[0] = 950
    assert budgets.allow(states[2], 4) is None


# -- the GPU usage ------------------------------------------------------------------------------
def _hold(holder: str, kind: str, start: float, end: float) -> str:
    return LeaseRecord(
        lease="h-gpu0",
        holder=holder,
        host="h",
        pid=1,
        kind=kind,
        what="x",
        requested_at=start - 1,
        acquired_at=start,
        released_at=end,
    ).model_dump_json()


def test_busy_and_timed_fractions_and_overlaps_from_the_lease_records(tmp_path):
    (tmp_path / "leases").mkdir()
    (tmp_path / "leases" / "h-gpu0.jsonl").write_text(
        "\n".join(
            [
                _hold("a", "shared", 100, 130),
                _hold("b", "shared", 110, 140),
                _hold("a", "exclusive", 150, 160),
                _hold("b", "exclusive", 160, 170),
                _hold("a", "shared", 195, 260),
            ]
        )
        + "\n{torn"
    )
    (usage,) = gpu_usage(tmp_path, windows=[(100, 200)])
    assert usage.busy_s == pytest.approx(40 + 20 + 5) and usage.busy_fraction == pytest.approx(0.65)
    assert usage.timed_s == pytest.approx(20) and usage.holds == 5 and usage.timed_holds == 2
    assert usage.overlaps == 0 and usage.waited_s == pytest.approx(5) and usage.holders == ["a", "b"]
    with open(tmp_path / "leases" / "h-gpu0.jsonl", "a") as f:
        f.write("\n" + _hold("c", "shared", 165, 166) + "\n")  # a check during b's timing: the lease failed
    (usage,) = gpu_usage(tmp_path, windows=[(100, 200)])
    assert usage.overlaps == 1


def test_the_sampler_reads_nvidia_smi_into_utilization_per_gpu(tmp_path):
    fake = tmp_path / "nvidia-smi"
    fake.write_text(
        "#!/bin/sh\necho '2026/12/01 10:00:00.000, 0, GPU-aaa, 40, 1200'\n"
        "echo '2026/12/01 10:00:00.000, 1, GPU-bbb, [N/A], 0'\necho '2026/12/01 10:00:01.000, 0, "
        "GPU-aaa, 80, 1200'\n"
    )
    fake.chmod(0o755)
    sampler = GpuSampler(tmp_path / "samples.jsonl", command=[str(fake)]).start()
    sampler.thread.join(10)
    sampler.stop()
    samples = read_samples(tmp_path / "samples.jsonl", windows=[(0, time.time() + 1)])
    assert samples == {f"{socket.gethostname()}-gpu0": [0.4, 0.8]}


# -- the scripted model's delay -----------------------------------------------------------------
def test_a_scripted_model_thinks_for_its_delay(tmp_path):
    script = tmp_path / "s.yaml"
    script.write_text("- text: hello\n")
    model = make_model(f"scripted:{script}?delay=0.4")
    started = time.monotonic()
    assert model.complete("", [], [], 100).message.content[0].text == "hello"
    assert time.monotonic() - started >= 0.4
    assert parse_spec(f"{script}") == (str(script), 0.0)
    for bad in ("?delay=x", "?delay=-1", "?pause=2"):
        with pytest.raises(KagentError, match="delay=<seconds>"):
            parse_spec(f"{script}{bad}")


# -- a member's driver --------------------------------------------------------------------------
SLOW_SCRIPT = (
    "- text: thinking\n  tool_calls: [{name: list_files, arguments: {}}]\n" * 3
    + "- tool_calls: [{name: finish, arguments: {summary: done}}]\n"
)


def _job(tmp_path: Path, **fields) -> MemberJob:
    script = tmp_path / "slow.yaml"
    script.write_text(SLOW_SCRIPT)
    spec = spec_of(tmp_path, models=[f"scripted:{script}?delay=1"], branches=1)
    member = plan_members(spec)[0]
    return MemberJob(
        **{
            "member": member,
            "sweep_dir": tmp_path / "sweep",
            "budget_s": 600,
            "device": "cpu",
            "scale": "smoke",
            **fields,
        }
    )


def _lock_pid(run_dir: Path, driver: threading.Thread) -> int:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline and driver.is_alive():
        try:
            return json.loads((run_dir / "lock").read_text())["pid"]
        except (OSError, ValueError, KeyError):
            time.sleep(0.1)
    pytest.fail("the member's run never took its lock")


def test_a_member_that_hangs_is_ended_at_its_deadline(tmp_path, monkeypatch):
    monkeypatch.setattr(member_module, "STOP_GRACE_S", 1.0)
    # The deadline counts from the process's start: a minute (the least `kagent run` takes)
    # leaves room for a slow start (imports).
    job = _job(tmp_path, budget_s=60, grace_s=2)
    outcome = {}
    driver = threading.Thread(target=lambda: outcome.update(result=drive_member(job)))
    driver.start()
    pid = _lock_pid(job.run_dir, driver)
    os.kill(pid, signal.SIGSTOP)  # a hang: it never goes on, and never hears SIGINT
    driver.join(WAIT_S)
    result = outcome["result"]
    assert result.outcome == "hung" and "past its budget" in result.detail
    assert result.segments[-1].hung and result.segments[-1].exit_code == -signal.SIGKILL
    assert result.segments[-1].ended_at - result.segments[0].started_at < 60 + 2 + 1 + 10  # budget, grace, slack
    beat = json.loads(heartbeat_path(job.sweep_dir, job.member.run_id).read_text())
    assert beat["pid"] == pid and beat["host"] == socket.gethostname()


def test_a_member_that_cannot_start_fails_with_its_reason(tmp_path):
    job = _job(tmp_path)
    job.member.model = "scripted:/no/such/script.yaml"
    result = drive_member(job)
    assert result.outcome == "failed" and "cannot read the script" in result.detail
    assert len(result.segments) == 1


def test_a_dead_workers_lock_on_another_host_is_taken_over_once_its_heartbeat_stops(tmp_path, monkeypatch):
    monkeypatch.setattr(member_module, "STALE_S", 0.3)
    job = _job(tmp_path)
    job.run_dir.mkdir(parents=True)
    lock = job.run_dir / "lock"
    lock.write_text(json.dumps({"pid": 1, "host": "another-node", "since": 0}))
    beat = heartbeat_path(job.sweep_dir, job.member.run_id)
    beat.parent.mkdir(parents=True)
    beat.write_text('{"beat_at": 1}')
    ticking = threading.Thread(target=lambda: (time.sleep(0.1), beat.write_text('{"beat_at": 2}')))
    ticking.start()
    member_module._take_over_a_dead_workers_lock(job)  # its heartbeat changed: its worker lives
    ticking.join()
    assert lock.exists()
    member_module._take_over_a_dead_workers_lock(job)  # unchanged for STALE_S: gone
    assert not lock.exists()


# -- the command line ---------------------------------------------------------------------------
def kagent(*args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [KAGENT, *args],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        cwd=cwd,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["sweep", "times_2.py"], "at least one --model"),
        (["sweep", "--resume", "nosuch", "times_2.py"], "give no tasks or models"),
        (["sweep", "--resume", "nosuch"], "no sweep 'nosuch'"),
        (["sweep", "status"], "no sweep in"),
        (["sweep", "nosuch_task", "-m", "scripted:x.yaml"], "nosuch_task"),
        (["sweep", "02_kimi_linear_decode", "-m", "nosuch:model"], "unknown provider"),
        (["sweep", "02_kimi_linear_decode", "-m", "nosuch:model", "--device", "cuda:1"], "take auto, cpu or cuda"),
    ],
)
def test_bad_sweep_arguments_give_one_clear_message(args, message, tmp_path):
    """At once: before torch is imported (conftest.kagent_counting_torch)."""
    proc = kagent_counting_torch(args, tmp_path)
    assert proc.stdout.strip() == "exit 2 False", proc.stdout + proc.stderr
    assert message in " ".join(proc.stderr.split()), proc.stderr


def test_ray_is_needed_only_for_ray(tmp_path):
    """Without Ray installed, --ray says how to get it; the local engine never imports it."""
    shim = tmp_path / "no_ray"
    (shim / "ray").mkdir(parents=True)
    (shim / "ray" / "__init__.py").write_text("raise ImportError('no ray here')\n")
    script = tmp_path / "s.yaml"
    script.write_text("- tool_calls: [{name: finish, arguments: {summary: done}}]\n")
    write_tasks(tmp_path / "tasks", count=1)
    env = {"PYTHONPATH": str(shim)}
    proc = kagent(
        "sweep",
        str(tmp_path / "tasks"),
        "-m",
        f"scripted:{script}",
        "--ray",
        "auto",
        "--device",
        "cpu",
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 2 and "pip install 'kagent[ray]'" in proc.stderr, proc.stderr
    proc = kagent(
        "sweep",
        str(tmp_path / "tasks"),
        "-m",
        f"scripted:{script}",
        "--device",
        "cpu",
        "--budget",
        "5m",
        "--quiet",
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "| 1 | times_2 |" in proc.stdout and "no_result" in proc.stdout  # it ran, without Ray


def test_sweep_help_lists_its_commands_and_exit_codes():
    proc = kagent("sweep", "--help")
    assert proc.returncode == 0 and "start" in proc.stdout and "status" in proc.stdout
    proc = kagent("sweep", "start", "--help")
    text = " ".join(proc.stdout.split())
    for option in ("--branches", "--ray", "--per-gpu", "--total-budget", "--max-cost", "--resume"):
        assert option in text
    assert "130 interrupted" in text


def test_a_sweep_whose_total_budget_leaves_nothing_skips_its_members(tmp_path):
    script = tmp_path / "s.yaml"
    script.write_text("- tool_calls: [{name: finish, arguments: {summary: done}}]\n")
    write_tasks(tmp_path / "tasks", count=2)
    proc = kagent(
        "sweep",
        str(tmp_path / "tasks"),
        "-m",
        f"scripted:{script}",
        "--device",
        "cpu",
        "--total-budget",
        "30s",
        "--quiet",
        env={"KAGENT_RUNS": str(tmp_path / "runs")},
        cwd=tmp_path,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr  # a member did not run
    assert proc.stdout.count("| skipped |") == 2 and "total budget or cost cap left nothing" in proc.stdout
    (sweep_dir,) = (tmp_path / "runs" / "sweeps").iterdir()
    assert not (sweep_dir / "runs").exists()  # nothing was started


def test_a_member_hears_the_sweep_s_sigint_though_the_sweep_was_started_ignoring_it():
    asks = "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a background job of a script starts
    try:
        heard = [
            subprocess.run(
                [sys.executable, "-c", asks], capture_output=True, text=True, check=True, preexec_fn=preexec
            ).stdout.strip()
            for preexec in (None, member_module.member_preexec())
        ]
    finally:
        signal.signal(signal.SIGINT, previous)
    assert heard == ["False", "True"]


def test_ctrl_c_stops_the_sweep_its_members_record_it_and_resume_says_how(tmp_path):
    script = tmp_path / "slow.yaml"
    script.write_text(SLOW_SCRIPT)
    write_tasks(tmp_path / "tasks", count=1)
    env = {**os.environ, "KAGENT_RUNS": str(tmp_path / "runs")}
    proc = subprocess.Popen(
        [
            KAGENT,
            "sweep",
            str(tmp_path / "tasks"),
            "-m",
            f"scripted:{script}?delay=1",
            "--device",
            "cpu",
            "--quiet",
            "--name",
            "stopped",
        ],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=hearing_ctrl_c,
    )
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline and not any(  # its member waits for its model's first answer
        b'"model_requested"' in trace.read_bytes() for trace in (tmp_path / "runs").glob("sweeps/*/runs/*/trace.jsonl")
    ):
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=WAIT_S)
    assert proc.returncode == 130, err
    (sweep_dir,) = (tmp_path / "runs" / "sweeps").iterdir()
    assert f"kagent sweep --resume {sweep_dir.name}" in err
    view = fold(read_record(sweep_dir))
    (state,) = view.members.values()
    assert state.ended.outcome == "cut" and "Ctrl-C" in state.ended.detail
    status = json.loads((sweep_dir / "runs" / state.member.run_id / "status.json").read_text())
    assert status["state"] == "interrupted"  # the member's run recorded it, and `kagent resume` goes on
    assert json.loads((sweep_dir / "sweep.json").read_text())["members"][0]["state"] == "cut"


def test_a_run_id_is_a_folder_name_and_never_taken_twice(tmp_path):
    script = tmp_path / "s.yaml"
    script.write_text("- tool_calls: [{name: finish, arguments: {summary: done}}]\n")
    env = {"KAGENT_RUNS": str(tmp_path / "runs")}
    proc = kagent(
        "run", "02_kimi_linear_decode", "-m", f"scripted:{script}", "--run-id", "../elsewhere", env=env, cwd=tmp_path
    )
    assert proc.returncode == 2 and "a run id is 1-200 letters" in " ".join(proc.stderr.split())
    (tmp_path / "runs" / "taken").mkdir(parents=True)
    proc = kagent(
        "run",
        "02_kimi_linear_decode",
        "-m",
        f"scripted:{script}",
        "--run-id",
        "taken",
        "--device",
        "cpu",
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 2 and "there is a run taken already" in " ".join(proc.stderr.split()), proc.stderr
    assert "kagent resume taken" in proc.stderr
