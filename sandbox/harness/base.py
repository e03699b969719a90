"""What every kind of evaluation shares: phases, check events, the contestants' processes."""

from __future__ import annotations

import math
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

import torch

from . import bandwidth, building, environment, lease, remote, spawn, watchdog
from .exchange import Arena, bytes_needed, encode
from .job import Job
from .loading import CandidateError, DiskCache, TaskError, digest
from .protocol import Channel, make_non_dumpable
from .remote import ContestantProcess, LeftRunning, SolutionFailed, TrustedFailed, Watch
from .workers import ReferenceWorkers


# Longer than 300 lines: what every kind's evaluation shares acts on the same processes and
# their state (start, connect, calibrate, load, judge a failure, count launches, close); apart,
# each part would take all of that state along.
class EvaluationBase:
    def __init__(
        self, job: Job, channel: Channel, early: dict[str, spawn.Started] | None = None, began: float | None = None
    ):
        """``early``: the evaluation's processes started already (spawn.start_early); each is
        taken out of it when adopted. ``began``: when the evaluation began by time.perf_counter
        (the child's run, before it imported torch and this module): the first phase,
        "imports", runs from there."""
        began = time.perf_counter() if began is None else began
        self.job = job
        self.channel = channel
        self.early = early if early is not None else {}
        self.device = torch.device(job.device)
        self.cache = DiskCache(
            Path(job.cache_dir) if job.cache_dir else None,
            Path(job.cache_staging) if job.cache_staging else None,
            identity=job.cache_identity,
        )
        self.phase_seconds: dict[str, float] = {}
        # Each process's start-up, in seconds from ``began`` (note_start_up; its replies read
        # the machine's monotonic clock).
        self.start_up: dict[str, dict[str, float]] = {}
        self._started_at = time.monotonic() - (time.perf_counter() - began)
        self.hidden_seeds: list[int] = []
        self._phase_start = began
        self.phase("imports")
        # Nothing of this evaluation ran on the device before here (lease.py). The wait for the
        # lease, where there is one, is a phase of its own (not a part of the next one).
        if lease.under_lease():
            lease.begin_device_work(f"evaluation ({job.mode})")
            self.phase("gpu_lease")
        self.late_cache_files: dict[str, str] = {}
        self._probes_reported = 0  # of watch.confirmed, already sent with a check
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise TaskError(f"device {self.device} asked for, but torch {torch.__version__} sees no CUDA device")
        if self.device.type == "cuda" and self.device.index is None:
            # One device, named by index: every process of the evaluation and its arenas use it.
            self.device = torch.device("cuda", torch.cuda.current_device())
        # The processes first: their interpreters and torch start while this one describes
        # the machine (nvidia-smi takes a while).
        self.launch_processes()
        self.environment = environment.describe(self.device)
        self.channel.send("environment", **self.environment)

    def note_start_up(self, who: str, reply: dict) -> None:
        """When ``who``'s process was ready (interpreter, torch, device context), was asked to
        load and had loaded, in seconds from the start of the evaluation, from its reply to
        that request (solution_server.serve): information on where a warm evaluation's time
        goes. (The solution's own figures come from its process, so they decide nothing.)"""
        try:
            ready, asked, handled = (
                float(reply["ready_at"]),
                float(reply["received_at"]),
                float(reply["handled_ms"]) / 1e3,
            )
        except (KeyError, TypeError, ValueError):
            return
        if not all(math.isfinite(value) for value in (ready, asked, handled)):
            return  # what a solution's process made up: no figure of the result may be infinite
        self.start_up[who] = {
            "ready": round(ready - self._started_at, 3),
            "asked": round(asked - self._started_at, 3),
            "loaded": round(asked + handled - self._started_at, 3),
        }

    def phase(self, name: str) -> None:
        """Close the phase that has been running since the last call, under ``name``."""
        now = time.perf_counter()
        self.phase_seconds[name] = round(now - self._phase_start, 3)
        self._phase_start = now
        self.channel.send("phase", name=name, seconds=self.phase_seconds[name])

    def seal_cache(self) -> None:
        """Called just before the solution is loaded: nothing is written to the cache after
        this (but store_late's entries, once the solution's process is gone), and the agent
        side keeps only the files listed here, unchanged."""
        self.channel.send("cache_sealed", files=self.cache.seal())

    def send_check(self, name: str, status: str, reason: str, **extra: Any) -> bool:
        """Send a check's outcome, with the probes read busy during it and asked again (Watch.check)."""
        watch = getattr(self, "watch", None)
        if watch is not None and len(watch.confirmed) > self._probes_reported:
            extra["probes_asked_again"] = watch.confirmed[self._probes_reported :]
            self._probes_reported = len(watch.confirmed)
        self.channel.send("check", name=name, status=status, reason=reason, **extra)
        return status == "pass"

    def bandwidth(self) -> dict:
        bw = bandwidth.copy_bandwidth(self.device, self.environment, self.cache)
        self.channel.send("bandwidth", **bw)
        return bw

    def clocks(self) -> dict:
        return environment.gpu_clocks(self.device.index or 0) if self.device.type == "cuda" else {}

    # -- the processes -----------------------------------------------------------------------
    def launch_processes(self) -> None:
        """Start every process of the evaluation early: until it is asked to load something,
        each runs only the harness's code, and its interpreter and torch start meanwhile.
        The solution's; for a timed run the baseline's, served by the same code; for a
        decode task the reference workers."""
        make_non_dumpable()  # before any other process of the evaluation exists
        self.exchange_dir = Path(tempfile.mkdtemp(prefix="kagent-exchange-", dir=_shared_memory_dir()))
        self.watch = Watch(self.device, self.job.pid_namespace)
        self.solution = self._contestant("solution")
        self.baseline_process = self._contestant("baseline") if self.job.mode != "check" else None
        workers = spawn.reference_workers(self.job)
        self.workers = None
        if workers > 0:
            self.workers = ReferenceWorkers(workers, self.device, dict(os.environ), self.watch, self.early)

    def _contestant(self, who: str) -> ContestantProcess:
        started = self.early.pop(who, None)
        env = spawn.contestant_env(who, self.job)
        process = ContestantProcess(
            who, self.device, started.scratch if started else spawn.scratch(who), env, self.watch
        )
        process.launch(started)
        if who == "solution":
            process.watchdog = watchdog.StepWatchdog(
                process.pid,
                self.device,
                _triton_cache(env),
                notify=self.channel.send,
                gpu_id=self._gpu_id(),
                hang_after_s=self.job.hang_after_s,
            )
        return process

    def _gpu_id(self) -> str | None:
        """The GPU as nvidia-smi names it: by UUID (its index may differ from torch's)."""
        if self.device.type != "cuda":
            return None
        uuid = environment.gpu_uuid(self.device)
        if uuid:
            return uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"
        return str(self.device.index)

    def contestants(self) -> list[ContestantProcess]:
        return [p for p in (self.solution, self.baseline_process) if p is not None]

    def contestant_pids(self) -> list[int]:
        return [p.pid for p in self.contestants()]

    def connect_contestants(self, arena_bytes: int) -> None:
        """Connect each contestant's process through an arena of ``arena_bytes`` of its own."""
        for process in self.contestants():
            # A boxed process's arena goes in the one folder of /dev/shm its box shows it.
            exchange = process.started.exchange if process.started is not None else None
            folder = exchange or Path(tempfile.mkdtemp(prefix=f"{process.who}-", dir=self.exchange_dir))
            arena = Arena.create(self.device, arena_bytes, folder)
            process.connect(arena)
            arena.unlink_file()  # mapped by both now; no other process can open it by name

    def calibrate_contestants(self, interlude: Callable[[], Any]) -> None:
        """Time the contestants' empty requests (remote.calibrate), each pair after
        ``interlude``, work of the referee's own, synchronized.

        Called once everything trusted is built and loaded, before the solution is: from here
        on this process runs no contestant's code; it asks their processes and reads the
        arenas."""

        def interlude_done() -> None:
            interlude()
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)

        # The device alone (under a sweep's lease): another evaluation's work would raise the floor
        # that every timed block gives back, and the probe's limit, as it does their readings.
        with lease.exclusive("calibrating the requests' floor and the device probe"):
            # The watchdog scales its patience by this work's time: a step of the referee's own.
            remote.calibrate(
                self.contestants(), self.solution.watchdog.time_baseline(interlude_done), self.empty_requests
            )
        self.interlude = interlude

    def empty_requests(self, process: ContestantProcess) -> tuple[dict, dict]:
        """The untimed request that stages a timed block's inputs, and the block with no
        step: what calibration times (remote.calibrate)."""
        raise NotImplementedError

    def begin_trusted(self, weights: str, init: list) -> None:
        """Start loading what the referee's own processes need before any solution code runs
        anywhere: the baseline in its process (timed runs), the reference in each worker's.
        Each reads ``weights`` now, while no solution code can touch the file, and meanwhile
        the referee goes on with its own work (``finish_trusted`` waits for them). ``init``,
        the baseline's constructor arguments, may hold tensors only once its process is
        connected (``connect_contestants``)."""
        if self._trusted_begun:
            return
        self._trusted_begun = True
        baseline = self.baseline_process
        if baseline is not None:
            connected = hasattr(baseline, "arena")
            if connected:
                baseline.slots.reset()
            node = baseline.put(init) if connected else encode(init, _no_tensor)
            baseline.begin(self.spec("baseline").request(node, weights))
        if self.workers is not None:
            self.workers.begin_prepare(self.job, weights)

    _trusted_begun = False

    def finish_trusted(self, worker_arena_bytes: int = 0) -> None:
        """Wait for what ``begin_trusted`` started; then share an arena with each worker."""
        baseline = self.baseline_process
        if baseline is not None:
            try:
                self.note_start_up("baseline", baseline.finish("loading the baseline"))
            except TrustedFailed as err:
                raise TaskError(f"the task's baseline failed in its own process: {err.message}\n{err.details}") from err
        if self.workers is not None:
            for i, reply in enumerate(self.workers.finish_prepare()):
                self.note_start_up(f"reference worker {i + 1}", reply)
            self.workers.attach(worker_arena_bytes, self.exchange_dir)

    def spec(self, who: str) -> building.Spec:
        raise NotImplementedError

    def begin_load(self, spec: building.Spec, init: list, weights: Optional[str]) -> float:
        """Ask the solution's process to import and build the solution; the answer is read by
        ``finish_load``, so the referee can work meanwhile. Returns when it was asked."""
        solution = self.solution
        solution.slots.reset()
        solution.begin(spec.request(solution.put(init), weights))
        self._load_label = spec.label
        return time.perf_counter()

    def finish_load(self, asked_at: float) -> bool:
        """The solution's answer to its load: the load check, passed or failed."""
        try:
            reply = self.solution.finish(f"loading {self._load_label}")
        except CandidateError as err:
            return self.solution_failed("load", err)
        self.note_start_up("solution", reply)
        facts = self.solution_facts()
        if isinstance(reply.get("handled_ms"), (int, float)):
            facts["load_seconds"] = round(reply["handled_ms"] / 1e3, 3)
        return self.send_check("load", "pass", "imported, constructed and loaded in a process of its own", **facts)

    def solution_facts(self) -> dict:
        """How the solution's process is held, for the record of its load check."""
        solution = self.solution
        facts = {
            "solution_pid": solution.pid,
            "arena_bytes": solution.arena.nbytes,
            "pid_namespace": self.watch.pid_namespace,
            "request_floor_ms": round(solution.request_floor_ms, 4),
            "baseline_pid": self.baseline_process.pid if self.baseline_process is not None else None,
            "reference_workers": len(self.workers.workers) if self.workers is not None else 0,
        }
        probe = self.watch.probe
        if probe is not None:
            facts.update(probe_idle_ms=round(probe.idle_ms, 4), probe_limit_ms=round(probe.limit_ms, 4))
        return facts

    def close_solution(self) -> None:
        """End every process of the evaluation (the solution's first)."""
        for process in (self.solution, getattr(self, "baseline_process", None)):
            if process is not None:
                process.close()
                if hasattr(process, "arena"):
                    process.arena.unlink_file()
        workers = getattr(self, "workers", None)
        if workers is not None:
            workers.close()

    def weights_file(self, weights: dict, cached: Path | None) -> str:
        """A file every process loads the reference's weights from: the cache's own entry
        where there is one, else a copy in the exchange folder. Each reads it before any
        solution code runs, the solution's process excepted (its own weights are its own)."""
        if cached is not None:
            return str(cached)
        # Where the solution's box shows it (its exchange folder), if it has one.
        boxed = self.solution.started.exchange if self.solution.started is not None else None
        path = (boxed or self.exchange_dir) / "weights.pt"
        torch.save({k: v.detach().cpu() for k, v in weights.items()}, path)
        return str(path)

    def solution_failed(self, check: str, err: CandidateError | TrustedFailed) -> bool:
        """Send the check that ``err`` fails: work left running is hidden work; a process that
        died is a crash; anything else the solution's error at ``check``. Always False."""
        if isinstance(err, LeftRunning):
            return self.send_check("hidden_work", "fail", err.message)
        if isinstance(err, watchdog.Hung):
            return self.send_check(
                check,
                "timeout",
                f"{err.message}. The evaluation ended there, and the solution's processes were killed",
                diagnosis=err.diagnosis,
            )
        if isinstance(err, TrustedFailed):
            return self.send_check(
                check,
                "crash",
                f"{err.message}; the solution's process runs as the same user "
                "and can signal it, so no figure of this evaluation stands",
                details=err.details,
            )
        crashed = isinstance(err, SolutionFailed) and err.crashed
        return self.send_check(check, "crash" if crashed else "error", err.message, details=err.details)

    # -- launches ----------------------------------------------------------------------------
    def count_launches(self, method: str, inputs: Callable[[], list], **context: Any) -> None:
        """Launches of one warmed call of each contestant, each profiled in its own process,
        after the timing (the profiler can leave the process that ran it slower for a while).
        The solution's count comes from code the solution controls (it can rewrite the report
        to one launch), so it informs the model and decides nothing: it is sent as not
        ``counted_outside``, and nothing that ranks attempts or opens a goal reads such a
        count (results.LaunchReport). On a CPU nothing is counted, and the solution is not
        asked. Its process is ended after it. The baseline's is cached by what decides it (the
        baseline's file, the device, torch), in a cache entry staged now that no solution
        code can run."""
        if self.device.type == "cuda":
            report = self._profiled(self.solution, method, inputs())
        else:
            report = {"launches": None, "note": "kernel launches are counted on CUDA devices only"}
        self._report(report, "candidate", "the solution's process", context, counted_outside=False)
        self.phase("launches")
        self.solution.close()
        self.phase("solution_closed")
        self._baseline_launches(method, inputs, context)
        self.phase("baseline_launches")

    def _baseline_launches(self, method: str, inputs: Callable[[], list], context: dict) -> None:
        baseline = self.baseline_process
        assert baseline is not None, "launches are counted in the modes that time, which start the baseline's process"
        spec = self.spec("baseline")
        key = digest(
            "launches", Path(spec.path), spec.cls, method, self.environment.get("gpu_name"), torch.__version__, context
        )
        cached = self.cache.load("launches", key, torch.device("cpu"))
        if isinstance(cached, dict):
            self._report({**cached, "cached": True}, "baseline", "the baseline's process", context)
            return
        report = self._profiled(baseline, method, inputs())
        self._report(report, "baseline", "the baseline's process", context)
        if report.get("launches") is not None:
            files = self.cache.store_late("launches", key, report)
            if files:
                self.channel.send("cache_staged", files=files)

    def _profiled(self, process: ContestantProcess, method: str, args: list) -> dict:
        process.slots.reset()
        try:
            reply = process.request(
                {"op": "launches", "method": method, "what": f"{process.who} {method}", "args": process.put(args)},
                "profiling its launches",
            )
            report = reply.get("report")
            return report if isinstance(report, dict) else {}
        except (CandidateError, TrustedFailed) as err:
            return {"launches": None, "note": getattr(err, "message", str(err))}

    def _report(self, report: dict, who: str, by: str, context: dict, counted_outside: bool = True) -> None:
        allowed = (
            "launches",
            "kernels",
            "distinct_kernels",
            "single_launch",
            "cuda_graph_replay",
            "torch_compile",
            "note",
            "device_ms",
            "cached",
        )
        self.channel.send(
            "launches",
            who=who,
            **context,
            **{k: v for k, v in report.items() if k in allowed},
            reported_by=by,
            counted_outside=counted_outside,
        )


def _no_tensor(value: Any) -> dict:
    raise TaskError("a contestant's constructor arguments must hold no tensor here")


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
