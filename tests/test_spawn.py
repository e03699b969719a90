"""The evaluation's other processes are started before the referee imports torch, and adopted
by the evaluation; whatever it did not adopt ends with it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from kagent.sandbox import containment
from kagent.sandbox.file_plans import solution_box_plan
from kagent.sandbox.harness import spawn
from kagent.sandbox.harness.job import Job
from kagent.sandbox.harness.kinds import Kind
from kagent.tasks import KINDS


def _job(kind: str = "mega", **extra) -> Job:
    fields = dict(kind=Kind.read(KINDS[kind].harness()), mode="eval", task="t", solution=None)
    fields.update(scale="smoke", device="cpu")
    fields.update(timeout_s=60.0, hang_after_s=60.0, hidden_seeds=1, cache_dir=None, cache_staging=None)
    return Job(**{**fields, "cache_identity": None, **extra})


def test_a_timed_decode_job_starts_the_solution_the_baseline_and_its_workers_and_all_end_unadopted():
    early = spawn.start_early(_job(reference_workers=2))
    try:
        assert sorted(early) == ["baseline", "solution", "worker 1", "worker 2"]
        argv = {who: started.proc.args for who, started in early.items()}
        assert argv["baseline"][-6:-4] == ["--non-dumpable", "1"] and argv["solution"][-6:-4] == ["--non-dumpable", "0"]
        assert [len(arg) for arg in argv["baseline"]] == [len(arg) for arg in argv["solution"]]
        for who, args in argv.items():  # a fresh, trusted interpreter: -I, or -P -s with no PYTHON* but the seed
            assert (
                args[1:4] == ["-I", "-B", "-u"]
                if who.startswith("worker")
                else args[4:9] == [sys.executable, "-P", "-s", "-B", "-u"]
            )
        assert {started.scratch for who, started in early.items() if who.startswith("worker")} == {
            early["worker 1"].scratch
        }  # the workers share a folder, the contestants have their own
        assert early["solution"].scratch != early["baseline"].scratch
    finally:
        spawn.close_unadopted(early)
    assert all(started.proc.poll() is not None for started in early.values())


def test_check_mode_starts_no_baseline_and_the_cpu_no_workers_by_default():
    early = spawn.start_early(_job(mode="check"))
    try:
        assert list(early) == ["solution"]
    finally:
        spawn.close_unadopted(early)
    assert spawn.reference_workers(_job(device="cuda")) == spawn.DEFAULT_REFERENCE_WORKERS["cuda"]
    assert spawn.reference_workers(_job(device="cuda:1", reference_workers=0)) == 0
    assert spawn.reference_workers(_job(kind="kernelbench", device="cuda")) == 0
    assert spawn.device_name("cuda") == "cuda:0" and spawn.device_name("cuda:1") == "cuda:1"


def test_the_solution_gets_its_own_home_and_nothing_else_of_the_job():
    env = spawn.contestant_env("solution", _job(solution_home="/tmp/solution-home"))
    assert env["HOME"] == "/tmp/solution-home"
    assert spawn.contestant_env("baseline", _job(solution_home="/tmp/solution-home")).get("HOME") != env["HOME"]


LAYOUT_PROBE = """
import os, sys
fields = open("/proc/self/stat").read().rsplit(")", 1)[1].split()
print(hash("kagent"), open("/proc/self/personality").read().strip(), id(sys), fields[25])
"""


def test_both_contestants_start_laid_out_alike_with_nothing_of_python_s_environment_but_the_seed(tmp_path, monkeypatch):
    """Both contestants' interpreters hash alike, and where the system lets address
    randomization be turned off, put their objects and their stack at the same addresses:
    a host-bound step's speed depends on that layout (spawn.alike_python)."""
    monkeypatch.setenv("PYTHONPATH", "/nowhere")
    monkeypatch.setenv("PYTHONINSPECT", "1")
    probe = tmp_path / "probe.py"
    probe.write_text(LAYOUT_PROBE)
    job = _job(solution_home=str(tmp_path / "a-build-home-longer-than-the-referee-s-own-home"))
    seen = {}
    for who in ("solution", "baseline", "solution"):
        env = spawn.contestant_env(who, job)
        assert not {name for name in env if name.startswith("PYTHON")} - {"PYTHONHASHSEED"}
        out = subprocess.run(
            [*spawn.alike_python(), str(probe)], env=env, cwd=tmp_path, capture_output=True, text=True, check=True
        ).stdout.split()
        seen.setdefault(who, []).append(out)
    hashes = {out[0] for outs in seen.values() for out in outs}
    assert len(hashes) == 1
    if int(seen["solution"][0][1], 16) & spawn.ADDR_NO_RANDOMIZE == 0:
        pytest.skip("this system does not let a process turn address randomization off (seccomp)")
    assert seen["solution"][0] == seen["solution"][1] == seen["baseline"][0]  # the heap and the stack alike


def test_the_harness_entry_imports_no_torch_before_it_starts_them():
    """What the child runs first (its __main__ and what that imports) must not import torch:
    the processes it starts would wait for it."""
    code = "import sys; import kagent.sandbox.harness.__main__; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_a_start_that_fails_part_way_leaves_nothing_running(monkeypatch):
    started = []
    real_start = spawn.start

    def start_then_fail(argv, scratch, env, box=None):
        if len(started) == 2:
            raise OSError("no more processes")
        started.append(real_start(argv, scratch, env, box))
        return started[-1]

    monkeypatch.setattr(spawn, "start", start_then_fail)
    with pytest.raises(OSError, match="no more processes"):
        spawn.start_early(_job(reference_workers=2))
    assert len(started) == 2 and all(s.proc.poll() is not None for s in started)


def test_a_start_up_reply_that_is_missing_or_made_up_is_left_out():
    from kagent.sandbox.harness.base import EvaluationBase

    evaluation = EvaluationBase.__new__(EvaluationBase)  # what note_start_up reads, only
    evaluation.start_up, evaluation._started_at = {}, 100.0
    evaluation.note_start_up("baseline", {"ready_at": 103.0, "received_at": 104.0, "handled_ms": 2500.0})
    evaluation.note_start_up("solution", {"ready_at": float("inf"), "received_at": 104.0, "handled_ms": 1.0})
    evaluation.note_start_up("reference worker 1", {"handled_ms": 1.0})
    assert evaluation.start_up == {"baseline": {"ready": 3.0, "asked": 4.0, "loaded": 6.5}}


@pytest.mark.skipif(not containment.probe().solution_box, reason="no box for the solution on this machine")
def test_a_boxed_server_sees_only_its_own_processes_and_folders(tmp_path):
    """The box a solution gets: pid 2 of a pid namespace of its own below the box's pid 1, no
    process of ours in sight, a hidden file gone, its folder writable, nothing else."""
    work, hidden = tmp_path / "work", tmp_path / "hidden"
    for folder in (work, hidden):
        folder.mkdir()
    (hidden / "job.json").write_text("{}")
    box = {"jail": str(containment.JAIL), "plan": solution_box_plan([work], hide=[hidden]).model_dump()}
    probe = (
        "import os, signal, sys\n"
        f"seen = dict(pid=os.getpid(), procs=sorted(int(p) for p in os.listdir('/proc') if p.isdigit()),"
        f" hidden=os.path.exists({str(hidden / 'job.json')!r}))\n"
        f"try:\n    os.kill({os.getpid()}, 0)\n    seen['reached'] = True\n"
        "except OSError:\n    seen['reached'] = False\n"
        f"open({str(work / 'seen')!r}, 'w').write(repr(seen))\n"
    )
    started = spawn.start([sys.executable, "-c", probe], work, dict(os.environ), box)
    try:
        assert started.boxed and started.exchange is not None and started.exchange.is_dir()
        server = started.server_pid()
        assert len(started.box_pids()) == 2 and server not in started.box_pids()
        assert started.proc.wait(timeout=60) == 0
    finally:
        spawn.close_unadopted({"solution": started})
    seen = eval((work / "seen").read_text())
    assert seen["pid"] == 2 and seen["procs"] == [1, 2] and not seen["hidden"]
    # Our pid, as a number, names a process of the box's own or none: never this one.
    assert not seen["reached"] or os.getpid() in (1, 2)
