"""What every kind of evaluation shares: phases, check events, the solution's process."""
from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from . import bandwidth, environment, launches, timing, watchdog
from .exchange import Arena, bytes_needed
from .loading import CandidateError, DiskCache, TaskError
from .protocol import Channel
from .remote import LeftRunning, SolutionFailed, SolutionProcess, make_non_dumpable


class EvaluationBase:
    def __init__(self, job: dict, channel: Channel):
        self.job = job
        self.channel = channel
        self.device = torch.device(job["device"])
        self.cache = DiskCache(Path(job["cache_dir"]) if job.get("cache_dir") else None,
                               Path(job["cache_staging"]) if job.get("cache_staging") else None,
                               identity=job.get("cache_identity"))
        self.phase_seconds: dict[str, float] = {}
        self.hidden_seeds: list[int] = []
        self._phase_start = time.perf_counter()
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise TaskError(f"device {self.device} asked for, but torch {torch.__version__} sees no CUDA device")
        if self.device.type == "cuda" and self.device.index is None:
            # One device, named by index: the solution's process and the exchange arena use it too.
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.environment = environment.describe(self.device)
        self.channel.send("environment", **self.environment)
        self.launch_solution()

    def phase(self, name: str) -> None:
        """Close the phase that has been running since the last call, under ``name``."""
        now = time.perf_counter()
        self.phase_seconds[name] = round(now - self._phase_start, 3)
        self._phase_start = now
        self.channel.send("phase", name=name, seconds=self.phase_seconds[name])

    def seal_cache(self) -> None:
        """Called just before the candidate is loaded: nothing is written to the cache after
        this, and the agent side keeps only the files listed here, unchanged."""
        self.channel.send("cache_sealed", files=self.cache.seal())

    def send_check(self, name: str, status: str, reason: str, **extra: Any) -> bool:
        self.channel.send("check", name=name, status=status, reason=reason, **extra)
        return status == "pass"

    def bandwidth(self) -> dict:
        bw = bandwidth.copy_bandwidth(self.device, self.environment, self.cache)
        self.channel.send("bandwidth", **bw)
        return bw

    def clocks(self) -> dict:
        return environment.gpu_clocks(self.device.index or 0) if self.device.type == "cuda" else {}

    def report_launches(self, who: str, step: Callable[[], Any], **context: Any) -> None:
        """Profile one warmed call of the trusted ``step`` and send what ran on the device."""
        step()  # warm
        self.channel.send("launches", who=who, **context, **launches.count_launches(self.device, step))

    # -- the solution's process ----------------------------------------------------------------
    def launch_solution(self) -> None:
        """Start the solution's process early: until it is asked to load the solution, it runs
        only the harness's code, and its interpreter and torch start meanwhile."""
        make_non_dumpable()  # before any other process of the evaluation exists
        scratch = Path(tempfile.mkdtemp(prefix="kagent-solution-"))
        env = dict(os.environ)
        if self.job.get("solution_home"):
            env["HOME"] = self.job["solution_home"]  # its builds' cache; the referee's HOME is not its to write
        self.solution = SolutionProcess(self.device, scratch, env, bool(self.job.get("pid_namespace")))
        self.solution.launch()
        self.solution.watchdog = watchdog.StepWatchdog(
            self.solution.process.pid, self.device, _triton_cache(env), notify=self.channel.send, gpu_id=self._gpu_id(),
            hang_after_s=float(self.job.get("hang_after_s") or watchdog.HANG_AFTER_S))

    def _gpu_id(self) -> str | None:
        """The GPU as nvidia-smi names it: by UUID (its index may differ from torch's)."""
        uuid = self.environment.get("gpu_uuid")
        if uuid:
            return uuid if str(uuid).startswith("GPU-") else f"GPU-{uuid}"
        return str(self.device.index) if self.device.type == "cuda" else None

    def start_solution(self, arena_bytes: int, interlude: Callable[[], Any]) -> SolutionProcess:
        """The solution's process, connected through an arena of ``arena_bytes``; its empty
        requests are timed each after ``interlude``, a step of the baseline's.

        Called once everything trusted is built and the cache is sealed. From here on this
        process runs no solution code: it asks the solution's process and reads the arena."""
        def interlude_done() -> None:
            interlude()
            timing.synchronize(self.device)

        self.exchange_dir = Path(tempfile.mkdtemp(prefix="kagent-exchange-", dir=_shared_memory_dir()))
        self.solution.connect(Arena.create(self.device, arena_bytes, self.exchange_dir),
                              self.solution.watchdog.time_baseline(interlude_done))
        return self.solution

    def solution_facts(self) -> dict:
        """How the solution's process is held, for the record of its load check."""
        solution = self.solution
        facts = {"solution_pid": solution.process.pid, "arena_bytes": solution.arena.nbytes,
                 "pid_namespace": solution.pid_namespace, "request_floor_ms": round(solution.request_floor_ms, 4)}
        if solution.probe is not None:
            facts.update(probe_idle_ms=round(solution.probe.idle_ms, 4),
                         probe_limit_ms=round(solution.probe.limit_ms, 4))
        return facts

    def close_solution(self) -> None:
        solution = getattr(self, "solution", None)
        if solution is not None:
            solution.close()
            if hasattr(solution, "arena"):
                solution.arena.close()

    def weights_file(self, weights: dict, cached: Path | None) -> str:
        """A file the solution's process loads the reference's weights from: the cache's own
        entry where there is one, else a copy in the exchange folder."""
        if cached is not None:
            return str(cached)
        path = self.exchange_dir / "weights.pt"
        torch.save({k: v.detach().cpu() for k, v in weights.items()}, path)
        return str(path)

    def solution_failed(self, check: str, err: CandidateError) -> bool:
        """Send the check that ``err`` fails: work left running is hidden work; a process that
        died is a crash; anything else the solution's error at ``check``. Always False."""
        if isinstance(err, LeftRunning):
            return self.send_check("hidden_work", "fail", err.message)
        if isinstance(err, watchdog.Hung):
            return self.send_check(check, "timeout", f"{err.message}. The evaluation ended there, and the "
                                   f"solution's processes were killed", diagnosis=err.diagnosis)
        crashed = isinstance(err, SolutionFailed) and err.crashed
        return self.send_check(check, "crash" if crashed else "error", err.message, details=err.details)

    def solution_launches(self, who: str, method: str, args: list, **context: Any) -> None:
        """Launches of one call, as the solution's own process profiles them: the count comes
        from code the solution controls, so it informs and decides no verdict."""
        solution = self.solution
        solution.slots.reset()
        try:
            reply = solution.request({"op": "launches", "method": method, "what": f"{who} {method}",
                                      "args": solution.put(args)}, "profiling its launches")
            report = reply.get("report")
            if not isinstance(report, dict):
                report = {}
        except CandidateError as err:
            if isinstance(err, watchdog.Hung):  # still running: the baseline's count that follows must run alone
                solution.process.kill()
                solution.process.wait()
            report = {"launches": None, "note": err.message}
        allowed = ("launches", "kernels", "distinct_kernels", "single_launch", "cuda_graph_replay",
                   "torch_compile", "note")
        self.channel.send("launches", who=who, **context, **{k: v for k, v in report.items() if k in allowed},
                          reported_by="the solution's process")


def _triton_cache(env: dict[str, str]) -> Path:
    """Where Triton keeps its compiled kernels for a process with ``env``."""
    if env.get("TRITON_CACHE_DIR"):
        return Path(env["TRITON_CACHE_DIR"])
    return Path(env.get("TRITON_HOME") or env.get("HOME") or Path.home()) / ".triton" / "cache"


def _shared_memory_dir() -> str | None:
    """/dev/shm where it can be written (the jail gives each evaluation its own), else the
    temporary folder."""
    return "/dev/shm" if os.access("/dev/shm", os.W_OK) else None


def arena_bytes_for(*trees: Any) -> int:
    """Room in the arena for every tree at once, with slack for alignment."""
    return sum(bytes_needed(t) for t in trees) + (1 << 20)
