"""The device lease: timed work alone on the device, checks side by side, every hold recorded,
and an evaluation under a lease says its timing held it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from rich.console import Console

from kagent.agent.cli.views import result_view
from kagent.core.errors import KagentError
from kagent.sandbox.cgroups import ResourceReport
from kagent.sandbox.evaluate import EvalOptions, evaluate
from kagent.sandbox.harness import lease as harness_lease
from kagent.sandbox.harness.lease import Lease
from kagent.sandbox.harness.remote import REREADS_ALONE, SHARED_REPROBES, LeftRunning, Watch
from kagent.sandbox.harness_child import ChildRun, device_memory_ran_out
from kagent.sandbox.lease import HOLDER_ENV, LEASE_DIR_ENV, exclusive_here, lease_name, open_lease, read_records
from kagent.sandbox.results import Verdict
from kagent.tasks import resolve_task

from conftest import WAIT_S, run_eval


@pytest.fixture
def lease_dir(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "leases"
    monkeypatch.setenv(LEASE_DIR_ENV, str(folder))
    monkeypatch.setenv(HOLDER_ENV, "test-holder")
    return folder


def _lease(holder: str) -> Lease:
    files = open_lease("cpu")
    gate, lock, log = files.fds
    return Lease(gate, lock, log, holder, files.name)


def _waiters_on(path: Path) -> list[int]:
    """The processes blocked in flock on ``path``: /proc/locks marks a waiter with '->' before
    the lock's kind, mode, access, pid and device:inode."""
    inode, waiters = f":{path.stat().st_ino}", []
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if "->" in fields and len(fields) > fields.index("->") + 5:
            at = fields.index("->")
            if fields[at + 5].endswith(inode):
                waiters.append(int(fields[at + 4]))
    return waiters


def _someone_waits_on(path: Path) -> bool:
    return bool(_waiters_on(path))


def test_the_lease_of_a_gpu_is_the_physical_one():
    assert lease_name("cuda:1", host="node", visible="4,6") == "node-gpu6"
    assert lease_name("cuda", host="node", visible="") == "node-gpu0"
    assert lease_name("cuda:0", host="node", visible="GPU-3f2a") == "node-gpuGPU-3f2a"
    assert lease_name("cpu", host="my host") == "my_host-cpu"


def test_no_folder_no_lease(monkeypatch):
    monkeypatch.delenv(LEASE_DIR_ENV, raising=False)
    files = open_lease("cpu")
    assert files.job_field is None and files.fds == ()
    with exclusive_here("cpu", "profile"):
        pass


def test_shared_holders_overlap_and_an_exclusive_one_waits_for_them_all(lease_dir):
    first, second, timer = _lease("a"), _lease("b"), _lease("c")
    first.acquire("shared", "checks")
    second.acquire("shared", "checks")  # at once: both hold it
    got = threading.Event()

    def time_it() -> None:
        timer.acquire("exclusive", "timing")
        got.set()

    waiter = threading.Thread(target=time_it)
    waiter.start()
    time.sleep(0.3)
    assert not got.is_set()
    # While the exclusive holder waits at the gate, a new shared holder waits behind it.
    late = _lease("d")
    late_got = threading.Event()
    late_thread = threading.Thread(target=lambda: (late.acquire("shared", "checks"), late_got.set()))
    late_thread.start()
    time.sleep(0.3)
    assert not late_got.is_set()
    first.release()
    time.sleep(0.2)
    assert not got.is_set()
    second.release()
    waiter.join(5)
    assert got.is_set() and not late_got.is_set()
    timer.release()
    late_thread.join(5)
    assert late_got.is_set()
    late.release()
    for lease in (first, second, timer, late):
        lease.close()
    records = read_records(lease_dir / f"{lease_name('cpu')}.jsonl")
    assert [(r.holder, r.kind) for r in records] == [
        ("a", "shared"),
        ("b", "shared"),
        ("c", "exclusive"),
        ("d", "shared"),
    ]
    exclusive = records[2]
    assert exclusive.acquired_at >= max(r.released_at for r in records[:2])
    assert records[3].acquired_at >= exclusive.released_at
    assert exclusive.waited_s >= 0.5


def test_the_descriptors_do_not_reach_a_process_it_starts(lease_dir):
    """The solution's process must not get the lock: it could unlock it or hold it for ever."""
    lease = _lease("a")
    probe = "import os, sys; print([fd for fd in map(int, sys.argv[1:]) if os.path.exists(f'/proc/self/fd/{fd}')])"
    fds = [str(lease.gate_fd), str(lease.lock_fd), str(lease.log_fd)]
    out = subprocess.run([sys.executable, "-c", probe, *fds], close_fds=False, capture_output=True, text=True)
    assert out.stdout.strip() == "[]"
    lease.close()


def test_a_killed_holder_frees_the_lease(lease_dir, tmp_path):
    files = open_lease("cpu")
    gate, lock, log = files.fds
    holder = textwrap.dedent(f"""
        import time
        from kagent.sandbox.harness.lease import Lease
        Lease({gate}, {lock}, {log}, "killed", "x").acquire("exclusive", "timing")
        print("held", flush=True)
        time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", holder], pass_fds=files.fds, stdout=subprocess.PIPE, text=True)
    files.close()
    assert proc.stdout.readline().strip() == "held"
    other = _lease("next")
    proc.kill()
    proc.wait()
    other.acquire("exclusive", "timing")  # would hang if the dead process kept it
    other.close()
    records = read_records(lease_dir / f"{lease_name('cpu')}.jsonl")
    assert [r.holder for r in records] == ["next"]  # the killed hold never ended, so it is not there


CALIBRATION = "calibrating the requests' floor and the device probe"

KB = '''
import torch


class Model(torch.nn.Module):
    """Doubles."""

    def forward(self, x):
        return x * 2


def get_inputs():
    return [torch.randn(8, 8)]


def get_init_inputs():
    return []
'''


def _evaluate_beside(other_member: Callable[[], None], kagent_home: Path, tmp_path: Path, source: str = KB):
    """An A/A evaluation of a small KernelBench task while ``other_member`` runs in a thread."""
    path = tmp_path / "task" / "double.py"
    path.parent.mkdir()
    path.write_text(source)
    beside = threading.Thread(target=other_member)
    beside.start()
    result = run_eval(resolve_task(str(path)), None, kagent_home, mode="aa")
    beside.join()
    return result


def test_an_evaluation_waits_for_the_lease_with_torch_imported_and_its_result_says_it_timed_alone(
    lease_dir, kagent_home, tmp_path
):
    """Its start and imports are host work: it asks for the lease just before its first work on
    the device, so it waits for another member's timing with torch imported already; and its
    result says how long it waited, and that it timed with the device alone."""
    blocker = _lease("someone timing")
    blocker.acquire("exclusive", "timing")
    lock_file = lease_dir / f"{lease_name('cpu')}.lock"
    seen: dict = {}

    def release_once_the_evaluation_waits() -> None:
        try:
            deadline = time.monotonic() + WAIT_S
            while not (waiters := _waiters_on(lock_file)) and time.monotonic() < deadline:
                time.sleep(0.02)
            seen["maps"] = [Path(f"/proc/{pid}/maps").read_text() for pid in waiters]
        except PermissionError:
            seen["maps"] = None  # another user's process: nothing to read here
        finally:
            time.sleep(1.0)
            blocker.release()

    result = _evaluate_beside(release_once_the_evaluation_waits, kagent_home, tmp_path)
    blocker.close()
    assert result.verdict is Verdict.PASS, result.reason
    (timing,) = [hold for hold in result.gpu_leases if hold.what == "timing"]
    assert timing.kind == "exclusive" and timing.holder == "test-holder" and timing.lease == lease_name("cpu")
    records = read_records(lease_dir / f"{lease_name('cpu')}.jsonl")
    mine = [r for r in records if r.holder == "test-holder"]
    # Shared from its start; alone for the timing, last (and for the bandwidth, measured once
    # per machine, then shared again); one hold after the other.
    assert (mine[0].kind, mine[0].what) == ("shared", "evaluation (aa)")
    assert (mine[-1].kind, mine[-1].what) == ("exclusive", "timing")
    alone = [r.what for r in mine if r.kind == "exclusive"]
    assert set(alone) <= {"timing", "bandwidth", CALIBRATION}
    # What timing gives back from every block is measured with the device alone too, before
    # the solution is loaded (another member's work would raise it).
    assert alone.count(CALIBRATION) == 1 and alone.index(CALIBRATION) < alone.index("timing")
    assert all(later.acquired_at >= earlier.released_at for earlier, later in zip(mine, mine[1:], strict=False))
    # It waited for the blocker at its start (which let go a second after it saw it wait), a
    # phase of its own in the result's split of the wall time.
    assert mine[0].waited_s >= 0.9 and result.phases["gpu_lease"] >= 0.9
    if seen["maps"] is None:
        pytest.skip("the waiting process's memory map cannot be read by this user")
    assert seen["maps"], "no evaluation waited for the lease"
    assert all("libtorch" in maps for maps in seen["maps"])


# A KernelBench task whose inputs, drawn by the referee for each check after its calibration,
# wait until another member waits at the lease's gate: the evaluation's checks cannot end before
# that member asks, however late its thread is scheduled on a busy host (a CI host once let
# the ~80-ms window between the calibration and the timing pass unseen).
KB_CHECKS_WAIT_FOR_ANOTHER = KB.replace(
    "def get_inputs():",
    """def get_inputs():
    import sys
    import time
    lease = sys.modules.get("kagent_harness.lease")  # the referee's; None in the contestants' processes
    current = lease and lease._current
    if current is not None and current.hold and current.hold["what"].startswith("evaluation (after calibrating"):
        deadline = time.monotonic() + 60
        while not current.exclusive_waiting() and time.monotonic() < deadline:
            time.sleep(0.01)
    return _inputs()


def _inputs():""",
)


def test_an_evaluation_steps_aside_at_its_next_step_for_another_that_times(lease_dir, kagent_home, tmp_path):
    """Another member asks for the device alone while this evaluation checks: it gets it at the
    evaluation's next step, not when the evaluation's checks are over."""
    assert KB_CHECKS_WAIT_FOR_ANOTHER != KB  # its get_inputs found and made to wait
    log = lease_dir / f"{lease_name('cpu')}.jsonl"
    other = _lease("another member")

    def time_once_the_evaluation_checks() -> None:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline and not (log.exists() and CALIBRATION in log.read_text()):
            time.sleep(0.02)  # its calibration is over: it shares the device for its checks now
        other.acquire("exclusive", "timing")
        time.sleep(0.3)
        other.release()

    result = _evaluate_beside(time_once_the_evaluation_checks, kagent_home, tmp_path, KB_CHECKS_WAIT_FOR_ANOTHER)
    other.close()
    assert result.verdict is Verdict.PASS, result.reason
    records = read_records(log)
    mine = [r for r in records if r.holder == "test-holder"]
    (theirs,) = [r for r in records if r.holder == "another member"]
    aside = [r for r in mine if r.what.startswith("evaluation (after stepping aside")]
    assert aside, [(r.kind, r.what) for r in mine]
    # It gave its shared hold back for the other's, shared again only after it, and went on checking.
    assert any(abs(r.released_at - theirs.acquired_at) < 0.25 and r.kind == "shared" for r in mine)
    assert aside[0].acquired_at >= theirs.released_at
    assert all(not (r.acquired_at < theirs.released_at and theirs.acquired_at < r.released_at) for r in mine)


# A KernelBench task whose loading in the referee finds the device's memory full whenever it
# holds the lease shared (as when 4 evaluations filled an 80 GB H100, 2026-12-06), or always.
KB_OUT_OF_MEMORY = (
    KB
    + """

def get_init_inputs():
    import sys
    lease = sys.modules.get("kagent_harness.lease")  # the referee's; None in the contestants' processes
    if lease is not None and lease.held() in WHEN:
        raise RuntimeError("CUDA error: out of memory")
    return []
"""
)


def _evaluate_short_of_memory(when: tuple, kagent_home: Path, tmp_path: Path, events: list):
    path = tmp_path / "task" / "double.py"
    path.parent.mkdir()
    path.write_text(KB_OUT_OF_MEMORY + f"\nWHEN = {when!r}\n")
    options = EvalOptions(
        device="cpu", scale="smoke", cache_dir=kagent_home, rounds=2, timeout_s=WAIT_S, min_request_ms=0, mode="aa"
    )
    return evaluate(resolve_task(str(path)), None, options, progress=events.append)


def test_an_evaluation_whose_device_memory_ran_out_while_shared_runs_again_with_the_device_alone(
    lease_dir, kagent_home, tmp_path
):
    events: list = []
    result = _evaluate_short_of_memory(("shared",), kagent_home, tmp_path, events)
    assert result.verdict is Verdict.PASS, result.reason
    assert "out of memory" in (result.ran_alone_after or "")
    assert [e["event"] for e in events].count("device_memory_ran_out") == 1
    mine = [r for r in read_records(lease_dir / f"{lease_name('cpu')}.jsonl") if r.holder == "test-holder"]
    # The first run shared the device and stopped at the task's loading; the second held it
    # alone from its first device work to its end, between its timed pieces too.
    assert (mine[0].kind, mine[0].what) == ("shared", "evaluation (aa)")
    assert (mine[1].kind, mine[1].what) == ("exclusive", "evaluation (aa)")
    assert all(r.kind == "exclusive" for r in mine[1:]) and any(r.what == "timing" for r in mine[1:])
    console = Console(record=True, width=100)
    console.print(result_view(result))
    assert "evaluated a second time with the device alone" in " ".join(console.export_text().split())


def test_memory_that_runs_out_with_the_device_alone_too_is_the_task_s_error(lease_dir, kagent_home, tmp_path):
    events: list = []
    with pytest.raises(KagentError, match="the task cannot be evaluated: .*out of memory"):
        _evaluate_short_of_memory(("shared", "exclusive"), kagent_home, tmp_path, events)
    assert [e["event"] for e in events].count("device_memory_ran_out") == 1  # one second run, not more
    mine = [r for r in read_records(lease_dir / f"{lease_name('cpu')}.jsonl") if r.holder == "test-holder"]
    assert [r.kind for r in mine] == ["shared", "exclusive"]


def test_without_a_lease_memory_that_runs_out_is_reported_at_once(kagent_home, tmp_path, monkeypatch):
    monkeypatch.delenv(LEASE_DIR_ENV, raising=False)
    # No lease: the referee's hold reads None; the task fails on it as it would on a full device.
    events: list = []
    with pytest.raises(KagentError, match="the task cannot be evaluated: .*out of memory"):
        _evaluate_short_of_memory((None,), kagent_home, tmp_path, events)
    assert not [e for e in events if e["event"] == "device_memory_ran_out"]


# The same task, its loading killing the process that stands in for the solution in an A/A run
# (the baseline's own and the referee's load it fine), with torch's words on the stderr, as a
# sweep member's did on a shared GPU (2026-12-07): both contestants run the task's baseline
# there, so that death is the task's code failing, not a solution's verdict.
KB_CONTESTANT_DIES_OUT_OF_MEMORY = KB.replace(
    """    def forward(self, x):""",
    """    def __init__(self):
        import os, sys
        super().__init__()
        argv = sys.argv
        if "--non-dumpable" in argv and argv[argv.index("--non-dumpable") + 1] == "0":  # not the baseline's
            print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", file=sys.stderr,
                  flush=True)
            os._exit(1)

    def forward(self, x):""",
)


def test_an_a_a_run_whose_baseline_ran_out_of_device_memory_runs_again_alone(lease_dir, kagent_home, tmp_path):
    path = tmp_path / "task" / "double.py"
    path.parent.mkdir()
    path.write_text(KB_CONTESTANT_DIES_OUT_OF_MEMORY)
    options = EvalOptions(
        device="cpu", scale="smoke", cache_dir=kagent_home, rounds=2, timeout_s=WAIT_S, min_request_ms=0, mode="aa"
    )
    events: list = []
    result = evaluate(resolve_task(str(path)), None, options, progress=events.append)
    # It dies alone too (the memory here never frees): once more, not more, and said so.
    assert result.verdict is Verdict.CRASH and "died while loading" in result.reason, result.reason
    assert [e["event"] for e in events].count("device_memory_ran_out") == 1
    assert result.ran_alone_after is not None
    mine = [r for r in read_records(lease_dir / f"{lease_name('cpu')}.jsonl") if r.holder == "test-holder"]
    assert [r.kind for r in mine][:1] == ["shared"] and "exclusive" in [r.kind for r in mine]


SAYS_OUT_OF_MEMORY = """
import torch


class ModelNew(torch.nn.Module):
    def forward(self, x):
        raise RuntimeError("CUDA error: out of memory")  # hoping for a second draw of secret cases
"""


def test_a_solution_that_says_the_device_s_memory_ran_out_wins_no_second_evaluation(lease_dir, kagent_home, tmp_path):
    task = tmp_path / "task" / "double.py"
    task.parent.mkdir()
    task.write_text(KB)
    solution = tmp_path / "work" / "solution.py"
    solution.parent.mkdir()
    solution.write_text(SAYS_OUT_OF_MEMORY)
    events: list = []
    options = EvalOptions(
        device="cpu", scale="smoke", cache_dir=kagent_home, rounds=2, timeout_s=WAIT_S, min_request_ms=0, mode="check"
    )
    result = evaluate(resolve_task(str(task)), solution, options, progress=events.append)
    assert result.verdict is not Verdict.PASS and "out of memory" in result.reason, result.reason
    assert result.ran_alone_after is None and not [e for e in events if e["event"] == "device_memory_ran_out"]
    mine = [r for r in read_records(lease_dir / f"{lease_name('cpu')}.jsonl") if r.holder == "test-holder"]
    # One evaluation, shared from its start: none that held the device alone from its start.
    starts = [r for r in mine if r.what == "evaluation (check)"]
    assert [r.kind for r in starts] == ["shared"], [(r.kind, r.what) for r in mine]


def test_only_the_referee_s_own_errors_count_as_the_device_s_memory_running_out():
    def child(*events: dict) -> ChildRun:
        return ChildRun(
            events=list(events),
            exit_code=0,
            timed_out=False,
            stdout_tail="",
            stderr_tail="",
            resources=ResourceReport(),
        )

    assert (
        device_memory_ran_out(
            child(
                {
                    "event": "task_error",
                    "reason": "the task's reference.salient_state "
                    "failed: RuntimeError: cusolver error: CUSOLVER_STATUS_INTERNAL_ERROR, when "
                    "calling `cusolverDnCreate(handle)`",
                }
            )
        )
        is not None
    )
    assert (
        device_memory_ran_out(
            child({"event": "internal_error", "reason": "x", "details": "torch.OutOfMemoryError: CUDA out of memory"})
        )
        is not None
    )
    # A solution's own words (its check failing, its output) win it no second evaluation.
    assert (
        device_memory_ran_out(
            child(
                {
                    "event": "check",
                    "name": "fixed_seeds",
                    "status": "error",
                    "reason": "RuntimeError: CUDA error: out of memory",
                }
            )
        )
        is None
    )
    assert device_memory_ran_out(child({"event": "task_error", "reason": "no shape with context 7"})) is None
    # A solution's process dying with the words on the stderr: its verdict, outside an A/A run.
    died = child(
        {
            "event": "check",
            "name": "load",
            "status": "crash",
            "reason": "the solution's process died while loading the solution (exit code 1)",
        }
    )
    died.stderr_tail = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert device_memory_ran_out(died) is None
    assert device_memory_ran_out(died, aa=True) is not None  # in an A/A run that process runs the baseline


def test_a_shared_holder_steps_aside_only_for_one_waiting_to_hold_it_alone(evaluation_lease, lease_dir):
    assert not harness_lease.step_aside()  # nobody waits: it keeps its hold
    timer = _lease("timer")
    waiting = threading.Thread(target=lambda: (timer.acquire("exclusive", "timing"), time.sleep(0.3), timer.release()))
    waiting.start()
    deadline = time.monotonic() + WAIT_S
    while not _someone_waits_on(lease_dir / f"{lease_name('cpu')}.lock") and time.monotonic() < deadline:
        time.sleep(0.02)
    assert harness_lease.step_aside()  # returns once the other's hold is over, sharing again
    waiting.join(5)
    assert evaluation_lease.hold is not None and evaluation_lease.hold["kind"] == "shared"
    timer.close()
    records = read_records(lease_dir / f"{lease_name('cpu')}.jsonl")
    assert [(r.holder, r.kind) for r in records] == [("checking", "shared"), ("timer", "exclusive")]
    assert records[1].acquired_at >= records[0].released_at
    assert evaluation_lease.hold["acquired_at"] >= records[1].released_at


def test_the_profile_tool_holds_the_lease_alone(lease_dir, kimi, kagent_home, tmp_path):
    from kagent.sandbox.evaluate import EvalOptions
    from kagent.sandbox.scrub import scrubbed_env
    from kagent.tools import default_tools
    from kagent.tools.base import ToolContext

    from conftest import reference_solution

    workspace = tmp_path / "ws"
    (workspace / "task").mkdir(parents=True)
    reference_solution(kimi, workspace)
    ctx = ToolContext(
        workspace=workspace, task=kimi, eval_options=EvalOptions(device="cpu", scale="smoke", cache_dir=kagent_home)
    )
    ctx.env = {**scrubbed_env(), "PATH": str(Path(sys.executable).parent)}  # no ncu: the profiler alone
    profile = next(tool for tool in default_tools() if tool.spec.name == "profile")
    out = profile.run({"steps": 1}, ctx)
    assert not out.is_error, out.content
    (hold,) = read_records(lease_dir / f"{lease_name('cpu')}.jsonl")
    assert (hold.kind, hold.what, hold.holder) == ("exclusive", "profile", "test-holder")


class ScriptedProbe:
    """The device probe's readings, in order (on the CPU there is no device to probe)."""

    idle_ms, limit_ms = 0.3, 1.0

    def __init__(self, *readings: float):
        self.readings = list(readings)

    def milliseconds(self) -> float:
        return self.readings.pop(0)


@pytest.fixture
def evaluation_lease(lease_dir, monkeypatch):
    """This process as an evaluation's referee that holds the lease shared, as it does while checking."""
    mine = _lease("checking")
    mine.acquire("shared", "evaluation (check)")
    monkeypatch.setattr(harness_lease, "_current", mine)
    yield mine
    mine.close()


def _watch(probe: ScriptedProbe) -> Watch:
    watch = Watch(torch.device("cpu"), pid_namespace=False)
    watch.probe = probe  # type: ignore[assignment]
    return watch


def test_a_busy_probe_while_sharing_is_read_again_and_one_idle_reading_settles_it(evaluation_lease, lease_dir):
    """Another member's steps delay the probe for moments: the solution's process is stopped, so
    one reading within the limit shows it left nothing pending, without waiting for the device."""
    watch = _watch(ScriptedProbe(4.5, 2.0, 3.0, 0.5))
    assert watch.check("running a step") == 0.5
    assert watch.confirmed == [{"what": "running a step", "first_ms": 4.5, "again_ms": 0.5, "alone": False}]
    assert evaluation_lease.hold is not None and evaluation_lease.hold["kind"] == "shared"
    assert not [r for r in read_records(lease_dir / f"{lease_name('cpu')}.jsonl") if r.kind == "exclusive"]


def test_a_probe_busy_at_every_reading_while_sharing_is_asked_again_with_the_device_alone(evaluation_lease, lease_dir):
    """Busy through every reading (the device saturated by other members): the last word is a
    reading with the device alone, after the other members let go."""
    other = _lease("another member")
    other.acquire("shared", "evaluation (check)")
    letting_go = threading.Timer(0.5, other.release)
    letting_go.start()
    watch = _watch(ScriptedProbe(4.5, *[4.0] * SHARED_REPROBES, 0.4))  # the last: with the device alone
    started = time.monotonic()
    assert watch.check("running a step") == 0.4
    assert time.monotonic() - started >= 0.45  # it waited for the other member to let go
    assert watch.confirmed == [{"what": "running a step", "first_ms": 4.5, "again_ms": 0.4, "alone": True}]
    assert evaluation_lease.hold is not None and evaluation_lease.hold["kind"] == "shared"  # sharing again
    letting_go.join()  # its release has logged (closing before would release a second time)
    other.close()
    records = read_records(lease_dir / f"{lease_name('cpu')}.jsonl")
    (confirming,) = [r for r in records if r.kind == "exclusive"]
    assert confirming.holder == "checking" and confirming.what == "confirming an idle device after running a step"
    assert confirming.acquired_at >= max(r.released_at for r in records if r.holder == "another member")


def test_work_left_behind_still_fails_with_the_device_alone(evaluation_lease):
    watch = _watch(ScriptedProbe(*[4.5] * (SHARED_REPROBES + 2)))
    with pytest.raises(LeftRunning, match=r"took 4\.500 ms, then 4\.500 ms with the device alone"):
        watch.check("loading the solution")


def test_a_probe_over_its_limit_while_timing_alone_or_without_a_lease_fails_only_when_every_reading_is_over_it(
    evaluation_lease, monkeypatch
):
    # A reading over the limit is read again, up to REREADS_ALONE times: work left running
    # delays every reading.
    assert REREADS_ALONE == 2
    watch = _watch(ScriptedProbe(0.9, 1.2, 1.3, 1.1, 1.2, 1.2, 1.2, 1.2, 1.2, 1.2))
    assert watch.check("a timed block") == 0.9  # within the limit: read once
    with harness_lease.exclusive("timing", shared_after=False):
        with pytest.raises(LeftRunning, match=r"took 1\.200 ms, then 1\.300, 1\.100 ms with the device alone \(idle"):
            watch.check("a timed block")
    # Under a lease, no longer holding it (after the timing, as here): no advice on leases.
    with pytest.raises(LeftRunning, match=r"took 1\.200 ms, then 1\.200, 1\.200 ms \(idle"):
        watch.check("closing")
    monkeypatch.setattr(harness_lease, "_current", None)
    with pytest.raises(LeftRunning, match=r"evaluations that share a GPU must share its lease \(\$KAGENT_GPU_LEASE\)"):
        watch.check("running a step")
    assert [c["alone"] for c in watch.confirmed] == [True, False, False]
    assert watch.probe.readings == []  # type: ignore[attr-defined]


def test_one_slow_reading_alone_is_read_again_and_what_delayed_it_is_charged(evaluation_lease):
    """The host's jitter once took an honest baseline's probe just over its limit (0.515 against
    0.510 ms, H200): a second reading within it passes, and the first reading stands, so work
    that ended meanwhile still counts against the block."""
    watch = _watch(ScriptedProbe(1.2, 0.4))
    with harness_lease.exclusive("timing", shared_after=False):
        assert watch.check("a timed block") == 1.2
    assert watch.confirmed == [{"what": "a timed block", "first_ms": 1.2, "again_ms": 0.4, "alone": True}]


def test_two_slow_readings_in_a_row_alone_are_settled_by_a_third(evaluation_lease):
    """A fast kernel on an H100 read 0.726 then 0.685 ms against 0.511 allowed, once in 9 first
    readings over the limit (2026-12-05): a third reading within it passes; the first stands."""
    watch = _watch(ScriptedProbe(1.4, 1.3, 0.35))
    with harness_lease.exclusive("timing", shared_after=False):
        assert watch.check("a timed block") == 1.4
    assert watch.confirmed == [{"what": "a timed block", "first_ms": 1.4, "again_ms": 0.35, "alone": True}]


def test_a_reread_far_over_its_limit_fails_without_reading_further(evaluation_lease):
    # Just over, then far over: work left behind took the device; no third reading is taken.
    watch = _watch(ScriptedProbe(1.2, 2.5, 0.4))
    with harness_lease.exclusive("timing", shared_after=False):
        with pytest.raises(LeftRunning, match=r"took 1\.200 ms, then 2\.500 ms with the device alone"):
            watch.check("a timed block")
    assert watch.probe.readings == [0.4]  # type: ignore[attr-defined]


def test_a_reading_far_over_its_limit_fails_at_once(evaluation_lease):
    # More than twice the limit (1.0 ms here): what work left behind reads (1.98 ms against
    # 0.54 allowed on an H200), never the host's jitter. One reading: a second would pass.
    watch = _watch(ScriptedProbe(2.5, 0.4))
    with harness_lease.exclusive("timing", shared_after=False):
        with pytest.raises(LeftRunning, match=r"took 2\.500 ms with the device alone \(idle"):
            watch.check("a timed block")
    assert watch.confirmed == []


def test_staging_a_timed_block_reads_no_probe_and_the_block_does():
    """A timed block's staging is followed at once by the block, in the same process: work the
    staging left delays the block, so only the block's answer is probed (a probe after the
    staging read a context switch that calibration never sees, and failed an honest kernel)."""
    watch = _watch(ScriptedProbe(0.4))  # one reading: a second would fail the test
    assert watch.check("staging the inputs of timed steps", probe=False) == 0.0
    assert watch.check("running steps 1-8 of a timed chain") == 0.4
    assert watch.probe.readings == []  # type: ignore[attr-defined]


def test_a_check_says_which_probes_were_asked_again_during_it(tmp_path):
    from kagent.sandbox.harness.base import EvaluationBase
    from kagent.sandbox.harness.protocol import Channel

    # Without its processes (the constructor starts them): what send_check reads, only.
    evaluation = EvaluationBase.__new__(EvaluationBase)
    evaluation.channel, evaluation._probes_reported = Channel(None), 0
    evaluation.watch = _watch(ScriptedProbe())
    evaluation.send_check("load", "pass", "loaded")
    evaluation.watch.confirmed.append({"what": "running a step", "first_ms": 4.5, "again_ms": 0.5, "alone": False})
    evaluation.send_check("fixed_seeds", "pass", "all seeds")
    evaluation.send_check("chained", "pass", "all chains")
    load, fixed, chained = evaluation.channel.sent
    assert "probes_asked_again" not in load and "probes_asked_again" not in chained
    assert fixed["probes_asked_again"] == [{"what": "running a step", "first_ms": 4.5, "again_ms": 0.5, "alone": False}]


def test_a_probed_answer_with_the_referee_s_own_work_in_flight_is_a_harness_bug():
    """The probe after an answer reads any other context's work as the solution's: an H200
    round failed every evaluation when the workers drew secret cases beside the solution's
    load. The harness must never probe then; on the CPU too, where nothing is probed, it
    crashes as the bug it is."""
    watch = Watch(torch.device("cpu"), pid_namespace=False)
    watch.trusted_in_flight = lambda: "reference worker 1: computing a secret case"
    with pytest.raises(AssertionError, match="reference worker 1: computing a secret case"):
        watch.check("loading the solution")
    assert watch.check("staging the inputs of timed steps", probe=False) == 0.0  # no probe: nothing to misread
    watch.trusted_in_flight = lambda: ""
    assert watch.check("loading the solution") == 0.0
