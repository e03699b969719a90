"""Background jobs: a long command started now and looked at later (a build, a sweep of
probes), contained like every shell command (sandbox/runner.py, the jail), its output in the
workspace under build/jobs/ (which git ignores), killed when the model stops it, at its time
limit, or when the run's exploration ends (``close``).

A job lives in this kagent process: after a crash and a resume there are none, and a job
started in the turn that was cut is answered as interrupted, as a shell command is.
"""

from __future__ import annotations

import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Optional

from pydantic import Field

from kagent.sandbox import runner
from kagent.tools.base import (
    UNKNOWN,
    Args,
    BaseTool,
    FileEffect,
    ToolContext,
    ToolError,
    ToolFacts,
    ToolOutcome,
    cap,
    command_sandbox,
)

LOG_DIR = Path("build") / "jobs"  # in the workspace; build/ is ignored by its git
DEFAULT_LIMIT_S = 1800.0
# A wait ends by this time unless told otherwise: long enough for a build, short enough that the
# budget line comes back to the model now and then.
DEFAULT_WAIT_S = 600.0
MAX_RUNNING = 4
TAIL_BYTES = 64 << 10  # of a log, only its end is read


@dataclass
class Job:
    number: int
    command: str
    log: Path  # relative to the workspace
    running: runner.Running
    limit_s: float
    limit_reached: threading.Event
    timer: threading.Timer
    ended: Optional[runner.Finished] = None
    how: str = field(default="")  # how it ended: exited, stopped, killed at its limit, at the run's end

    def is_running(self) -> bool:
        return self.ended is None and self.running.poll() is None

    def settle(self, how: str) -> runner.Finished:
        """Reap it if it has ended by itself, else kill it now, ``how`` saying why."""
        if self.ended is None:
            if self.limit_reached.is_set():
                how = "killed at its time limit"
            elif self.running.poll() is not None:
                how = "exited"
            self.timer.cancel()
            self.ended = self.running.stop(timed_out=self.limit_reached.is_set())
            self.how = how
        return self.ended

    def state(self) -> str:
        if self.is_running():
            return f"running for {time.monotonic() - self.running.started:.1f} s (limit {self.limit_s:.0f} s)"
        done = self.settle("exited")
        limits = "".join(f"; {problem}" for problem in done.resources.problems())
        if self.how == "exited":
            return f"exited with code {done.returncode} after {done.seconds:.1f} s{limits}"
        return f"{self.how} after {done.seconds:.1f} s, with every process it started{limits}"

    def line(self) -> str:
        return f"job {self.number}: {self.state()}: {self.command[:120]}"


class JobsArgs(Args):
    action: Literal["start", "status", "wait", "stop", "list"] = Field(
        description="start: run `command` in the background; status: how job `job` is doing and the end of its "
        "log; wait: block until job `job` ends or timeout_s passes (default "
        f"{DEFAULT_WAIT_S:.0f} s), then as status; stop: kill job `job` and every process it started; list: every "
        "job of this run"
    )
    command: Optional[str] = Field(None, min_length=1, description="start: a bash command line, run in the workspace")
    job: Optional[int] = Field(None, ge=1, description="status, stop: the job's number")
    timeout_s: Optional[float] = Field(
        None,
        gt=0,
        le=6 * 3600,
        description=f"start: seconds before it is killed (default {DEFAULT_LIMIT_S:.0f}); wait: the most seconds "
        f"to wait (default {DEFAULT_WAIT_S:.0f})",
    )
    tail_lines: int = Field(40, ge=0, le=400, description="status, stop: lines of the log's end to show")


class Jobs(BaseTool):
    name = "jobs"
    description = (
        f"Run a long command in the background and look at it later. start: run `command` (bash, in "
        f"the workspace, sandboxed as the shell is) and return its job number at once; its stdout and "
        f"stderr go to {LOG_DIR}/<job>.log in the workspace. status: running or how it ended, and the "
        f"end of its log. wait: block until it ends (or timeout_s passes), then as status: one call "
        f"instead of a turn per poll. stop: kill it and every process it started. list: all jobs. A job is killed "
        f"at its timeout_s (default {DEFAULT_LIMIT_S:.0f} s), when you stop it, and when the run's "
        f"exploration ends; at most {MAX_RUNNING} run at once. A running job shares the CPU and GPU "
        f"with check and benchmark: stop it before you time anything."
    )
    Arguments = JobsArgs
    # A job runs any command, for as long as it lives, and dies with kagent: a call a crash cut
    # short is not made again, and what the jobs did to the files cannot be told from the trace.
    facts = ToolFacts(
        changes_files=True,
        rerun_after_crash=False,
        interrupted_answer=(
            "interrupted: kagent stopped while this jobs call was being answered, and it was not made again: every "
            "background job died with kagent, and one being started may have run in part. The workspace is back as it "
            "was before the call; start again the jobs you need."
        ),
    )

    def file_change(self, args: dict) -> FileEffect:
        return UNKNOWN

    def __init__(self) -> None:
        super().__init__()
        self.jobs: dict[int, Job] = {}

    def execute(self, args: JobsArgs, ctx: ToolContext) -> ToolOutcome:
        if args.action == "start":
            return self._start(args, ctx)
        if args.action == "list":
            lines = [job.line() for job in self.jobs.values()]
            return ToolOutcome(content="\n".join(lines) or "no jobs yet", data={"jobs": len(lines)})
        job = self._job(args.job)
        if args.action == "stop":
            job.settle("stopped")
        waited = ""
        if args.action == "wait":
            waited = self._wait(job, ctx.timeout(args.timeout_s or DEFAULT_WAIT_S))
        tail = _tail(ctx.workspace / job.log, args.tail_lines, ctx.max_output_chars)
        content = f"{waited}{job.line()}\nlog {job.log}" + (f", its last lines:\n{tail}" if tail else ": nothing yet")
        return ToolOutcome(
            content=content,
            data={
                "job": job.number,
                "running": job.is_running(),
                "exit_code": job.ended.returncode if job.ended else None,
                "how": job.how,
            },
        )

    @staticmethod
    def _wait(job: Job, seconds: float) -> str:
        """Block until ``job`` ends or ``seconds`` pass; what the wait came to, as a line."""
        started = time.monotonic()
        while job.is_running() and time.monotonic() - started < seconds:
            time.sleep(min(0.2, seconds))
        waited = time.monotonic() - started
        if job.is_running():
            return f"waited {waited:.0f} s; job {job.number} is still running.\n"
        return f"waited {waited:.1f} s for job {job.number} to end.\n"

    def _job(self, number: Optional[int]) -> Job:
        if number is None:
            raise ToolError("give the job's number (job=N); action=list shows them")
        if number not in self.jobs:
            known = ", ".join(map(str, self.jobs)) or "none"
            raise ToolError(
                f"there is no job {number} (jobs of this run: {known}; jobs do not survive a restart of kagent)"
            )
        return self.jobs[number]

    def _start(self, args: JobsArgs, ctx: ToolContext) -> ToolOutcome:
        if not args.command:
            raise ToolError("start needs a command")
        running = [str(job.number) for job in self.jobs.values() if job.is_running()]
        if len(running) >= MAX_RUNNING:
            raise ToolError(
                f"{MAX_RUNNING} jobs are running already ({', '.join(running)}): stop one or wait for one to end"
            )
        limit = ctx.timeout(args.timeout_s or DEFAULT_LIMIT_S)
        number = max(self.jobs, default=0) + 1
        log = LOG_DIR / f"{number}.log"
        (ctx.workspace / LOG_DIR).mkdir(parents=True, exist_ok=True)
        env, files = command_sandbox(ctx)
        with open(ctx.workspace / log, "wb") as out:
            started = runner.start(
                ["bash", "-c", args.command], files, env, ctx.workspace, stdout=out, stderr=subprocess.STDOUT
            )
        reached = threading.Event()

        def at_the_limit() -> None:  # from the timer's thread: a kill only, the reaping is settle's
            reached.set()
            started.kill()

        timer = threading.Timer(limit, at_the_limit)
        timer.daemon = True
        timer.start()
        self.jobs[number] = Job(number, args.command, log, started, limit, reached, timer)
        return ToolOutcome(
            content=f"job {number} started: its output goes to {log}; it is killed after "
            f"{limit:.0f} s, when you stop it, or when the run's exploration ends. "
            f"action=status with job={number} shows how it is doing.",
            data={"job": number, "log": str(log), "limit_s": limit},
        )

    def under_way(self) -> str:
        """Every job of the run and how it is doing (a job that ended, too: a model waiting for one
        learns that it is over)."""
        return "\n".join(job.line() for job in self.jobs.values())

    def close(self) -> None:
        """The run's exploration is over: every job still running is killed."""
        for job in self.jobs.values():
            job.settle("killed at the run's end")


def _tail(path: Path, lines: int, limit: int) -> str:
    """The last ``lines`` lines of the log, capped to ``limit`` characters."""
    if lines == 0 or not path.exists():
        return ""
    with open(path, "rb") as log:
        size = log.seek(0, 2)
        log.seek(max(0, size - TAIL_BYTES))
        text = log.read().decode("utf-8", errors="replace")
    return cap("\n".join(text.splitlines()[-lines:]), limit)
