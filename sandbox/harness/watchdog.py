"""The per-step watchdog: a request to the solution's process that runs far longer than a
step can take ends the evaluation early, with a diagnosis, instead of at the evaluation's
time limit with none.

Once the solution is built (its import, constructor and weights: the ``load`` request, which
only the evaluation's own time limit bounds), every request is watched. A request of n steps
has hung after ``max(hang_after_s, 20 × n × the baseline's step)`` (the job's; a minute by
default, kagent.sandbox.timeouts: no decode step takes that long) during which no compiler ran:
a compiler process below the solution's (nvcc, ptxas, a C++ compiler, ninja) or a write to
Triton's cache, which Triton makes at each stage of a compile (its first launch of a kernel
compiles in the solution's own process) restarts the wait. So a long compile is waited for, and
said to be one, while a kernel that deadlocks right after its compile is caught a minute later.

The diagnosis says what the referee was asking for (the check, the request, how many steps
answered before it), whether a compiler was running, how busy the GPU was (nvidia-smi,
sampled for a second: a kernel resident all the time that moves no memory is what a
grid-barrier deadlock looks like) and how busy the solution's process was on the CPU.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

from . import process_table
from .remote import SolutionFailed, _descends, _processes

BASELINE_FACTOR = 20.0
# The build, and what comes before it (the referee's own calibration): bounded by the
# evaluation's time limit alone (a load_inline build can take minutes).
UNWATCHED_OPS = frozenset({"attach", "load"})
# Process names (as /proc shows them, at most 15 characters) of the compilers a build runs.
COMPILERS = frozenset(
    {
        "nvcc",
        "ptxas",
        "cicc",
        "cudafe++",
        "fatbinary",
        "nvlink",
        "gcc",
        "g++",
        "cc",
        "c++",
        "cc1",
        "cc1plus",
        "as",
        "ld",
        "ld.gold",
        "collect2",
        "ninja",
        "clang",
        "clang++",
    }
)
SAMPLE_S = 1.0  # how long the GPU and the solution's CPU use are watched for the diagnosis
GPU_SAMPLES = 3


class Hung(SolutionFailed):
    """A request of the solution's process ran past the watchdog's limit; ``diagnosis`` says
    what was seen (plain JSON)."""

    def __init__(self, message: str, diagnosis: dict):
        super().__init__(message)
        self.diagnosis = diagnosis


def steps_in(message: dict) -> int:
    """How many steps (or calls) of the solution a request runs."""
    if message.get("op") in ("chain", "repeat"):
        return max(1, int(message.get("steps", 1))) * max(1, int(message.get("chains", 1)))
    if message.get("op") == "launches":
        return 2  # a warm-up call, then the profiled one
    return 1


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


class StepWatchdog:
    """Watches the requests of one solution's process: ``begin`` each request, ``check``
    while waiting for its reply (``Hung`` when it has hung), ``time_baseline`` wraps the
    baseline step the referee runs between requests, whose duration scales the limit."""

    def __init__(
        self,
        solution_pid: int,
        device: Any,
        triton_cache: Path,
        hang_after_s: float,
        notify: Callable[..., None] = lambda *args, **fields: None,
        gpu_id: Optional[str] = None,
    ):
        self.solution_pid = solution_pid
        self.on_gpu = getattr(device, "type", str(device)) == "cuda"
        self.gpu_id = gpu_id
        self.triton_cache = triton_cache
        self.hang_after_s = hang_after_s
        self.notify = notify
        self.baseline_steps_s: list[float] = []
        self.built = False  # the load request (the build) has been sent: what follows is watched
        self.watched = 0  # requests watched so far
        self.started: Optional[float] = None  # the current request's start; None: not watched
        self.limit_s = hang_after_s
        self.activity = 0.0  # the latest compile seen during the current request (monotonic)
        self.compiling_said = False

    # -- the limit -------------------------------------------------------------------------------
    def time_baseline(self, step: Callable[[], Any]) -> Callable[[], None]:
        """``step`` (a baseline step, synchronized), timed on each call."""

        def timed() -> None:
            began = time.perf_counter()
            step()
            self.baseline_steps_s.append(time.perf_counter() - began)

        return timed

    def limit_for(self, message: dict) -> float:
        steps = steps_in(message)
        if not self.baseline_steps_s:
            return self.hang_after_s
        ordered = sorted(self.baseline_steps_s)
        return max(self.hang_after_s, BASELINE_FACTOR * steps * ordered[len(ordered) // 2])

    def begin(self, message: dict) -> None:
        """A request is about to be sent: watched from now on if the solution is built."""
        if message.get("op") == "load":
            self.built = True
        if not self.built or message.get("op") in UNWATCHED_OPS:
            self.started = None
            return
        self.watched += 1
        self.started = self.activity = time.monotonic()
        self.limit_s = self.limit_for(message)
        self.compiling_said = False

    # -- while waiting -----------------------------------------------------------------------------
    def check(self, what: str) -> None:
        """Raise ``Hung`` when the current request has run past its limit since it began or
        since a compiler last ran; cheap until then."""
        if self.started is None or time.monotonic() - self.activity < self.limit_s:
            return
        compilers = self.compilers()
        written = self.triton_cache_written()
        now = time.monotonic()
        if compilers:
            self.activity = now
        elif written is not None and written > self.activity:
            self.activity = written
        if now - self.activity < self.limit_s:
            if not self.compiling_said:  # once per request: the live view shows it
                self.compiling_said = True
                self.notify(
                    "watchdog",
                    state="compiling",
                    what=what,
                    seconds=round(now - self.started, 1),
                    compilers=compilers,
                    triton_cache_written=written is not None and written > self.started,
                )
            return
        raise self.hung(what, now, written)

    def compilers(self) -> list[str]:
        """Compiler processes running below the solution's process."""
        table = _processes()
        return sorted(
            {
                name
                for pid, (state, _, _, name) in table.items()
                if name in COMPILERS
                and (state not in process_table.DEAD or process_table.alive(pid))
                and _descends(table, pid, self.solution_pid)
            }
        )

    def triton_cache_written(self) -> Optional[float]:
        """When Triton's cache (its folder and each kernel's) was last written, on the
        monotonic clock; None when it does not exist."""
        try:
            entries = [self.triton_cache, *(Path(e.path) for e in os.scandir(self.triton_cache) if e.is_dir())]
            newest = max(path.stat().st_mtime for path in entries)
        except (OSError, ValueError):
            return None
        return time.monotonic() - (time.time() - newest)

    # -- the diagnosis -----------------------------------------------------------------------------
    def hung(self, what: str, now: float, written: Optional[float]) -> Hung:
        assert self.started is not None
        waited = now - self.started
        cpu_before = _cpu_seconds(self.solution_pid)
        sampled_at = time.monotonic()
        gpu = gpu_utilisation(self.gpu_id) if self.on_gpu else None
        time.sleep(max(0.0, SAMPLE_S - (time.monotonic() - sampled_at)))
        cpu_after = _cpu_seconds(self.solution_pid)
        cpu_pct = (
            None
            if cpu_before is None or cpu_after is None
            else 100.0 * (cpu_after - cpu_before) / (time.monotonic() - sampled_at)
        )
        if written is None:
            triton = ""  # no Triton cache: nothing to say about it
        elif written > self.started:
            triton = f" and Triton's cache was last written {written - self.started:.0f} s into the request"
        else:
            triton = " and Triton's cache was not written during the request"
        diagnosis = {
            "what": what,
            "request": self.watched,
            "waited_s": round(waited, 1),
            "limit_s": round(self.limit_s, 1),
            "compiler_running": False,
            "triton_cache": triton.removeprefix(" and ") or None,
            "gpu": gpu,
            "gpu_sampled": self.on_gpu,
            "solution_cpu_pct": None if cpu_pct is None else round(cpu_pct),
        }
        diagnosis["likely"] = likely_cause(diagnosis)
        message = (
            f"hung: no answer for {waited:.0f} s while {what} (the {_ordinal(self.watched)} request after "
            f"the build; limit {self.limit_s:.0f} s); no compiler was running{triton}; "
            f"{_gpu_words(diagnosis)}; {_cpu_words(cpu_pct)}: {diagnosis['likely']}"
        )
        return Hung(message, diagnosis)


def _cpu_seconds(pid: int) -> Optional[float]:
    """User and system CPU time of the process (all its threads) so far."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def gpu_utilisation(gpu_id: Optional[str], samples: int = GPU_SAMPLES) -> dict:
    """nvidia-smi's utilization of the GPU (``gpu_id``: its UUID or index), read ``samples``
    times over about ``SAMPLE_S``: busy is the share of the time a kernel ran, memory the share
    in which device memory was read or written. The median of the readings, or why none."""
    readings, error = [], ""
    for i in range(samples):
        try:
            out = subprocess.run(
                [
                    "nvidia-smi",
                    "--query-gpu=utilization.gpu,utilization.memory",
                    "--format=csv,noheader,nounits",
                    "-i",
                    gpu_id or "0",
                ],
                capture_output=True,
                text=True,
                timeout=10,
            )
        except (OSError, subprocess.SubprocessError) as err:
            return {"error": f"nvidia-smi could not run: {err}"}
        parsed = parse_utilisation(out.stdout)
        if parsed is None:
            error = (out.stderr or out.stdout).strip()[:200] or f"exit code {out.returncode}"
        else:
            readings.append(parsed)
        if i + 1 < samples:
            time.sleep(SAMPLE_S / samples)
    if not readings:
        return {"error": f"nvidia-smi gave no utilization: {error}"}
    busy = sorted(r[0] for r in readings)[len(readings) // 2]
    memory = sorted(r[1] for r in readings)[len(readings) // 2]
    return {"busy_pct": busy, "memory_pct": memory, "readings": readings}


def parse_utilisation(text: str) -> Optional[tuple[int, int]]:
    """(busy %, memory %) from nvidia-smi's ``utilization.gpu,utilization.memory`` CSV line."""
    fields = [f.strip() for f in text.strip().splitlines()[0].split(",")] if text.strip() else []
    if len(fields) != 2 or not all(f.isdigit() for f in fields):
        return None
    return int(fields[0]), int(fields[1])


def likely_cause(diagnosis: dict) -> str:
    """What the samples point to, in a few words."""
    gpu, cpu = diagnosis.get("gpu"), diagnosis.get("solution_cpu_pct")
    if gpu and "busy_pct" in gpu:
        if gpu["busy_pct"] >= 90 and gpu["memory_pct"] <= 10:
            return (
                "likely a grid-barrier deadlock: a kernel stays resident without moving data, as blocks "
                "spinning on a flag or counter that never comes do (a grid larger than can be co-resident, "
                "a barrier some block never reaches, or a counter or epoch carried over from the last launch)"
            )
        if gpu["busy_pct"] >= 90:
            return "a kernel is running and moving data: far slower than a step should be, or looping without end"
        if gpu["busy_pct"] <= 10:
            return "the GPU is idle, so the hang is on the host: " + _host_cause(cpu)
        return f"the GPU is partly busy ({gpu['busy_pct']}%): no single cause stands out"
    return _host_cause(cpu)


def _host_cause(cpu: Optional[float]) -> str:
    if cpu is None:
        return "the solution's process could not be sampled"
    if cpu >= 80:
        return "the solution's process keeps a CPU busy: likely an endless loop or a busy wait"
    if cpu <= 10:
        return "the solution's process is asleep: likely waiting on a lock, a pipe, an event or a sleep"
    return "the solution's process is partly busy on the CPU"


def _gpu_words(diagnosis: dict) -> str:
    gpu = diagnosis.get("gpu")
    if not diagnosis.get("gpu_sampled"):
        return "no GPU: the evaluation runs on the CPU"
    if not gpu or "busy_pct" not in gpu:
        return f"no GPU utilisation sample ({(gpu or {}).get('error', 'none')})"
    return f"the GPU was {gpu['busy_pct']}% busy, {gpu['memory_pct']}% memory"


def _cpu_words(cpu: Optional[float]) -> str:
    return "the solution's CPU use unknown" if cpu is None else f"the solution's process used {cpu:.0f}% of a CPU"
