"""The per-step watchdog (sandbox/harness/watchdog.py): a step that hangs once the solution is
built ends the evaluation early, with the check, the request, whether a compiler ran, the GPU
(or that there is none) and the solution's CPU use; a compile in progress is waited for."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from kagent.sandbox.evaluate import EvalOptions, evaluate
from kagent.sandbox.harness import watchdog
from kagent.sandbox.harness.watchdog import Hung, StepWatchdog
from kagent.sandbox.results import Verdict
from kagent.sandbox.timeouts import HANG_AFTER_S

from conftest import WAIT_S, check_named, reference_solution

# The solution's second step waits at a barrier that no one else will ever reach, as a
# kernel whose second launch finds its grid barrier's counter carried over from the first.
# It waits asleep: a core of a 2-core machine spun for the whole wait slows every other test.
SECOND_STEP_SPINS = """
import time as _time

_steps_taken = [0]
_reference_step = Model.step


def _spins_on_its_second_step(self, hidden, state):
    _steps_taken[0] += 1
    if _steps_taken[0] == 2:
        arrived = torch.zeros(1)
        while arrived[0] < 2:  # the barrier: a second arrival that never comes
            _time.sleep(0.05)
    return _reference_step(self, hidden, state)


Model.step = _spins_on_its_second_step
"""


def test_a_step_that_hangs_after_the_build_is_diagnosed_at_the_watchdog_s_limit(kimi, kagent_home, tmp_path):
    solution = reference_solution(kimi, tmp_path / "sol", patch=SECOND_STEP_SPINS)
    loaded_at: list[float] = []

    def progress(event: dict) -> None:
        if event.get("event") == "check" and event.get("name") == "load":
            loaded_at.append(time.monotonic())

    # A limit of 4 s instead of the default 60 (held by the test of the limits below): the
    # evaluation's own limit far beyond it.
    options = dict(device="cpu", scale="smoke", cache_dir=kagent_home, mode="check", timeout_s=WAIT_S, hang_after_s=4)
    result = evaluate(kimi, solution, EvalOptions(**options), progress=progress)
    ended_at = time.monotonic()
    assert result.verdict is Verdict.TIMEOUT, result.reason
    hung = check_named(result, "fixed_seeds")
    assert hung is not None and hung.status == "timeout"
    diagnosis = hung.data["diagnosis"]
    assert diagnosis["request"] == 2 and diagnosis["what"] == "running a step"
    assert diagnosis["compiler_running"] is False and diagnosis["gpu_sampled"] is False
    # It spins, but on a shared machine it may get little of a CPU: the share is sampled, not judged here.
    assert isinstance(diagnosis["solution_cpu_pct"], int) and diagnosis["solution_cpu_pct"] >= 0
    for words in (
        "fixed_seeds: hung: no answer for",
        "while running a step",
        "the 2nd request after the build",
        "no compiler was running",
        "no GPU: the evaluation runs on the CPU",
        "the solution's process used",
        "The evaluation ended there",
    ):
        assert words in result.reason, result.reason
    # From the end of the build (the first step comes right after) to the verdict.
    assert loaded_at and ended_at - loaded_at[0] < 30, ended_at - loaded_at[0]
    assert 4 <= diagnosis["waited_s"] < 15


# A step that hangs only when the solution's process counts its launches, after the timing.
HANGS_WHEN_ITS_LAUNCHES_ARE_COUNTED = """
import sys as _sys

_reference_step = Model.step


def _hangs_in_the_launch_count(self, hidden, state):
    frame = _sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "op_launches":
            while True:
                pass
        frame = frame.f_back
    return _reference_step(self, hidden, state)


Model.step = _hangs_in_the_launch_count
"""


def test_a_hang_in_the_launch_count_is_noted_and_its_process_killed(kimi, kagent_home, tmp_path):
    # The count informs and decides nothing: the verdict stands, the count says why it is missing.
    # On a CPU nothing is counted and the solution is never asked, so the hang never comes.
    device = "cuda" if torch.cuda.is_available() else "cpu"
    solution = reference_solution(kimi, tmp_path / "sol", patch=HANGS_WHEN_ITS_LAUNCHES_ARE_COUNTED)
    result = evaluate(
        kimi,
        solution,
        EvalOptions(
            device=device,
            scale="smoke",
            cache_dir=kagent_home,
            contexts=[16],
            rounds=1,
            min_request_ms=0,
            hang_after_s=3,
            timeout_s=WAIT_S,
        ),
    )
    assert result.verdict is Verdict.PASS, result.reason
    candidate = result.launches_of("candidate")
    assert candidate is not None and candidate.launches is None
    assert ("hung: no answer for" if device == "cuda" else "counted on CUDA devices only") in candidate.note
    assert result.launches_of("baseline") is not None


# -- the watchdog on its own ---------------------------------------------------------------------
@pytest.fixture
def compiler(tmp_path: Path):
    """A process standing in for the solution's, with a child named ptxas (a copy of sleep)."""
    ptxas = tmp_path / "ptxas"
    shutil.copy(shutil.which("sleep"), ptxas)
    parent = subprocess.Popen([sys.executable, "-c", f"import subprocess; subprocess.run([{str(ptxas)!r}, '600'])"])
    for _ in range(100):
        if "ptxas" in StepWatchdog(parent.pid, "cpu", tmp_path / "none", HANG_AFTER_S).compilers():
            break
        time.sleep(0.05)
    yield parent
    _kill_children(parent.pid)
    parent.kill()
    parent.wait()


def _kill_children(pid: int) -> None:
    for entry in os.listdir("/proc"):
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if entry.isdigit() and int(fields[1]) == pid:
            os.kill(int(entry), 9)


def _watch(dog: StepWatchdog, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        dog.check("running a step")
        time.sleep(0.05)


def test_a_running_compiler_is_waited_for_and_said(compiler, tmp_path: Path):
    said: list[dict] = []
    dog = StepWatchdog(
        compiler.pid,
        "cpu",
        tmp_path / "triton",
        hang_after_s=0.5,
        notify=lambda event, **fields: said.append({"event": event, **fields}),
    )
    dog.begin({"op": "call"})  # before the build: not watched
    _watch(dog, 0.8)
    dog.begin({"op": "load"})
    _watch(dog, 0.8)
    dog.begin({"op": "call"})
    _watch(dog, 1.2)  # past the limit, but ptxas runs
    assert said and said[0]["event"] == "watchdog" and said[0]["compilers"] == ["ptxas"]
    assert len(said) == 1  # said once per request
    _kill_children(compiler.pid)
    with pytest.raises(Hung) as hung:
        _watch(dog, 3.0)
    assert "no compiler was running" in hung.value.message and hung.value.diagnosis["request"] == 1


def test_a_write_to_tritons_cache_restarts_the_wait(tmp_path: Path):
    cache = tmp_path / "triton"
    (cache / "old-kernel").mkdir(parents=True)
    dog = StepWatchdog(os.getpid(), "cpu", cache, hang_after_s=0.6)
    dog.begin({"op": "load"})
    dog.begin({"op": "chain", "steps": 4, "chains": 2})
    time.sleep(0.4)
    (cache / "new-kernel").mkdir()  # a stage of a compile, as Triton writes it
    _watch(dog, 0.5)  # 0.9 s since the request began, 0.5 since the write
    with pytest.raises(Hung) as hung:
        _watch(dog, 2.0)
    assert "Triton's cache was last written 0 s into the request" in hung.value.message


def test_the_limit_is_60_s_or_20_baseline_steps_per_step_of_the_request():
    assert EvalOptions(device="cpu").hang_after_s == 60.0  # what an evaluation gets unless told
    dog = StepWatchdog(os.getpid(), "cpu", Path("/nonexistent"), HANG_AFTER_S)
    assert dog.limit_for({"op": "call"}) == 60.0
    dog.time_baseline(lambda: time.sleep(0.01))()
    assert len(dog.baseline_steps_s) == 1 and dog.baseline_steps_s[0] >= 0.01
    dog.baseline_steps_s = [0.5, 0.5, 9.0]  # the median: 0.5 s a baseline step
    assert dog.limit_for({"op": "call"}) == 60.0
    assert dog.limit_for({"op": "chain", "steps": 8, "chains": 2}) == 20 * 16 * 0.5
    assert dog.limit_for({"op": "repeat", "steps": 10}) == 20 * 10 * 0.5
    assert dog.limit_for({"op": "launches"}) == 60.0


def test_the_cpu_time_of_a_process_is_read_from_proc():
    before = watchdog._cpu_seconds(os.getpid())
    spent = time.process_time()
    while time.process_time() - spent < 0.3:  # CPU time, however busy the machine is
        pass
    assert watchdog._cpu_seconds(os.getpid()) - before >= 0.25
    assert watchdog._cpu_seconds(2**22 + 12345) is None  # no such process


def test_gpu_samples_read_through_nvidia_smi(tmp_path: Path, monkeypatch):
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho '$*' >> \"$(dirname \"$0\")/calls\"\necho '100, 0'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    sample = watchdog.gpu_utilisation("GPU-1234", samples=2)
    assert sample["busy_pct"] == 100 and sample["memory_pct"] == 0 and sample["readings"] == [(100, 0), (100, 0)]
    assert "grid-barrier deadlock" in watchdog.likely_cause({"gpu": sample, "solution_cpu_pct": 100})
    fake.write_text("#!/bin/sh\necho 'No devices were found' >&2\nexit 6\n")
    assert "No devices were found" in watchdog.gpu_utilisation("GPU-1234", samples=1)["error"]


@pytest.mark.parametrize(
    "busy, memory, cpu, words",
    [
        (100, 0, 100, "grid-barrier deadlock"),
        (97, 60, 100, "moving data"),
        (0, 0, 100, "hang is on the host: the solution's process keeps a CPU busy"),
        (0, 0, 0, "is asleep"),
        (50, 5, 0, "partly busy (50%)"),
    ],
)
def test_what_the_samples_point_to(busy, memory, cpu, words):
    assert words in watchdog.likely_cause({"gpu": {"busy_pct": busy, "memory_pct": memory}, "solution_cpu_pct": cpu})
    assert watchdog.parse_utilisation(f"{busy}, {memory}\n") == (busy, memory)
    assert watchdog.parse_utilisation("[N/A], [N/A]") is None
