"""One member, driven as ordinary `kagent run` and `kagent resume` processes, on any engine.

The member's run is a subprocess of whoever drives it (a thread of the local engine, a Ray
worker), so a member that crashes takes nothing else down; it dies with its driver (a
parent-death signal), so a killed worker leaves nothing running behind. Whether it starts or
goes on is read from disk each time: a run folder with a config is resumed, which is exactly
what a Ray retry of a killed worker needs. A run killed before it recorded its end is resumed
up to ``retries`` times; one still running past its budget and the grace is ended as hung.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from kagent.agent.outcome import ENDINGS, EXIT_USAGE
from kagent.agent.report.run_list import read_summary
from kagent.agent.storage.lock import LOCK_NAME, lock_holder
from kagent.agent.sweep.plan import Member
from kagent.sandbox.containment import dying_with_this_process
from kagent.sandbox.lease import HOLDER_ENV, LEASE_DIR_ENV

# How a member's driving ended, for the sweep: ended: the run recorded how it ended (its state
# says which); hung: still running past its deadline, and ended there; failed: it could not
# run (bad usage, or cut more often than allowed); cut: stopped with the sweep (Ctrl-C), or
# its driver died: `kagent sweep --resume` goes on with it; skipped: the sweep's total budget
# or cost cap left nothing for it.
Outcome = Literal["ended", "hung", "failed", "cut", "skipped"]
HEARTBEAT_S = 5.0
# A member's heartbeat unchanged this long: the worker that drove it is gone.
STALE_S = 3 * HEARTBEAT_S
# After Ctrl-C, how long a run has to record that it was interrupted before it is killed.
STOP_GRACE_S = 20.0
LOG_TAIL_CHARS = 1500


class MemberJob(BaseModel):
    """All a worker needs to drive one member; plain data, so that it travels to a Ray worker."""

    model_config = ConfigDict(extra="forbid")
    member: Member
    sweep_dir: Path
    budget_s: float = Field(description="Its wall-clock budget, as its `kagent run` gets it")
    max_cost_usd: Optional[float] = None
    max_tokens: Optional[int] = None
    device: Literal["cpu", "cuda"]
    scale: Optional[str] = None
    run_config: Optional[str] = None
    retries: int = 2
    grace_s: float = 120.0
    gpu: Optional[str] = Field(
        None,
        description="CUDA_VISIBLE_DEVICES for the member (the local engine's slot); "
        "None: as the worker has it (Ray sets it)",
    )

    @property
    def run_dir(self) -> Path:
        return runs_of(self.sweep_dir) / self.member.run_id


class Segment(BaseModel):
    """One process of the member's run."""

    model_config = ConfigDict(extra="forbid")
    command: Literal["run", "resume"]
    host: str
    pid: int
    gpus: str = Field(description="CUDA_VISIBLE_DEVICES it ran with ('' for none)")
    started_at: float
    ended_at: float
    exit_code: Optional[int] = Field(description="Negative: killed by that signal")
    hung: bool = False


class MemberOutcome(BaseModel):
    model_config = ConfigDict(extra="forbid")
    run_id: str
    outcome: Outcome
    run_state: Optional[str] = Field(None, description="The run's own state (kagent runs), when it has one")
    exit_code: Optional[int] = None
    detail: str = ""
    segments: list[Segment] = Field(default_factory=list)


def runs_of(sweep_dir: Path) -> Path:
    return Path(sweep_dir) / "runs"


def heartbeat_path(sweep_dir: Path, run_id: str) -> Path:
    return Path(sweep_dir) / "members" / f"{run_id}.json"


def drive_member(job: MemberJob, stop: Callable[[], bool] = lambda: False) -> MemberOutcome:
    """Run the member until its run records an end, hangs, fails or ``stop()`` says so."""
    run_dir, segments = job.run_dir, list[Segment]()
    for _ in range(job.retries + 1):  # its first segment, then a resume for each cut allowed
        summary = read_summary(run_dir) if run_dir.is_dir() else None
        if (
            summary is not None
            and summary.state in ENDINGS
            and summary.state != "interrupted"
            and (run_dir / "report.json").is_file()
        ):
            # Its run ended already: a worker retried after the run had recorded its end.
            return _outcome(job, "ended", summary.state, None, segments)
        resume = (run_dir / "config.json").is_file()
        if not resume and run_dir.exists():
            shutil.rmtree(run_dir)  # a start killed before it wrote its config: nothing of it to keep
        elif resume:
            _take_over_a_dead_workers_lock(job)
        spent = summary.elapsed_s if summary is not None else 0.0
        segment = _run_segment(job, resume, deadline_s=max(0.0, job.budget_s - spent) + job.grace_s, stop=stop)
        segments.append(segment)
        summary = read_summary(run_dir) if run_dir.is_dir() else None
        state = summary.state if summary is not None else None
        if segment.hung:
            return _outcome(
                job,
                "hung",
                state,
                segment.exit_code,
                segments,
                f"still running {job.grace_s:.0f} s past its budget: ended",
            )
        if state in ENDINGS and segment.exit_code == ENDINGS[state].exit_code:
            return _outcome(job, "ended", state, segment.exit_code, segments)
        if stop():
            return _outcome(job, "cut", state, segment.exit_code, segments, "stopped with the sweep")
        if not (run_dir / "config.json").is_file() or segment.exit_code == EXIT_USAGE:
            # It never became a run (a bad model spec, a missing key), or kagent refused it.
            return _outcome(
                job,
                "failed",
                state,
                segment.exit_code,
                segments,
                f"`kagent {segment.command}` exited with {segment.exit_code}: {_log_tail(job)}",
            )
        # Killed (a signal, Ctrl-C) or died before recording its end: go on from the trace.
    return _outcome(
        job,
        "failed",
        state,
        segments[-1].exit_code,
        segments,
        f"cut {len(segments)} times, more than --retries {job.retries} allows: {_log_tail(job)}",
    )


def _outcome(
    job: MemberJob,
    outcome: Outcome,
    state: Optional[str],
    exit_code: Optional[int],
    segments: list[Segment],
    detail: str = "",
) -> MemberOutcome:
    return MemberOutcome(
        run_id=job.member.run_id,
        outcome=outcome,
        run_state=state,
        exit_code=exit_code,
        detail=detail,
        segments=segments,
    )


def member_command(job: MemberJob, resume: bool) -> list[str]:
    """The kagent command line of the member's next segment."""
    kagent = [sys.executable, "-m", "kagent.agent.cli"]
    if resume:
        return [*kagent, "resume", job.member.run_id, "--root", str(runs_of(job.sweep_dir)), "--quiet"]
    member = job.member
    argv = [
        *kagent,
        "run",
        member.task,
        "--model",
        member.model,
        "--run-id",
        member.run_id,
        "--budget",
        f"{max(1.0, job.budget_s):.0f}",
        "--device",
        job.device,
        "--quiet",
    ]
    for option, value in (
        ("--scale", job.scale),
        ("--max-cost", job.max_cost_usd),
        ("--max-tokens", job.max_tokens),
        ("--config", job.run_config),
        ("--direction", member.direction),
    ):
        if value is not None:
            argv += [option, str(value)]
    return argv


def _run_segment(job: MemberJob, resume: bool, deadline_s: float, stop: Callable[[], bool]) -> Segment:
    env = {
        **os.environ,
        "KAGENT_RUNS": str(runs_of(job.sweep_dir)),
        LEASE_DIR_ENV: str(Path(job.sweep_dir) / "leases"),
        HOLDER_ENV: job.member.run_id,
    }
    if job.gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = job.gpu
    log = Path(job.sweep_dir) / "logs" / f"{job.member.run_id}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    argv = member_command(job, resume)
    started = time.time()
    with open(log, "ab") as out:
        where = f"{socket.gethostname()}, CUDA_VISIBLE_DEVICES={env.get('CUDA_VISIBLE_DEVICES', '')!r}"
        out.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} on {where}: {' '.join(argv)}\n".encode())
        out.flush()
        # Its own session, so that the whole of it can be signalled; it dies with this thread.
        proc = subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=member_preexec(),
        )
    beat = heartbeat_path(job.sweep_dir, job.member.run_id)
    hung, next_beat = False, 0.0
    try:
        while proc.poll() is None:
            now = time.time()
            if now >= next_beat:
                _write_heartbeat(beat, proc.pid, env.get("CUDA_VISIBLE_DEVICES", ""), started)
                next_beat = now + HEARTBEAT_S
            if now - started > deadline_s:
                hung = True
                _stop(proc)
            elif stop():
                _stop(proc)
            time.sleep(0.5)
    finally:
        if proc.poll() is None:
            _stop(proc)
    return Segment(
        command="resume" if resume else "run",
        host=socket.gethostname(),
        pid=proc.pid,
        gpus=env.get("CUDA_VISIBLE_DEVICES", ""),
        started_at=started,
        ended_at=time.time(),
        exit_code=proc.returncode,
        hung=hung,
    )


def member_preexec() -> Callable[[], None]:
    """A member's step between fork and exec: it dies with this thread, and it hears SIGINT,
    the sweep's request to stop (``_stop``), even where the sweep was started with SIGINT
    ignored (a background job of a shell without job control is, and exec keeps an ignored
    signal ignored): else every stop would wait out its grace and end in SIGKILL, with no
    interruption recorded."""
    die_with_parent = dying_with_this_process()

    def preexec() -> None:
        die_with_parent()
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    return preexec


def _stop(proc: subprocess.Popen) -> None:
    """Ctrl-C to the run's group (it records itself as interrupted), then SIGKILL if it lingers."""
    for sig, wait_s in ((signal.SIGINT, STOP_GRACE_S), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait_s)
            break
        except subprocess.TimeoutExpired:
            continue


def _write_heartbeat(path: Path, pid: int, gpus: str, started: float) -> None:
    """Where the member runs and that its driver lives: rewritten every HEARTBEAT_S."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(
        json.dumps(
            {
                "host": socket.gethostname(),
                "driver_pid": os.getpid(),
                "pid": pid,
                "gpus": gpus,
                "started_at": started,
                "beat_at": time.time(),
            }
        )
    )
    os.replace(tmp, path)


def read_heartbeat(sweep_dir: Path, run_id: str) -> Optional[dict]:
    try:
        return json.loads(heartbeat_path(sweep_dir, run_id).read_text())
    except (OSError, ValueError):
        return None


def _take_over_a_dead_workers_lock(job: MemberJob) -> None:
    """Resuming on another host than the one that last drove the run (Ray retried it there):
    the run's lock names a process this host cannot check, which the lock respects. The
    member's heartbeat tells: unchanged for STALE_S, its worker is gone, and its lock goes."""
    holder = lock_holder(job.run_dir)
    if holder is None or holder.get("host") == socket.gethostname():
        return  # free, or this host's: `kagent resume` itself takes over a dead process's lock
    first = read_heartbeat(job.sweep_dir, job.member.run_id)
    time.sleep(STALE_S)
    if read_heartbeat(job.sweep_dir, job.member.run_id) != first:
        return  # its worker lives: `kagent resume` says who drives it, and the member fails
    (job.run_dir / LOCK_NAME).unlink(missing_ok=True)


def _log_tail(job: MemberJob) -> str:
    log = Path(job.sweep_dir) / "logs" / f"{job.member.run_id}.log"
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return " ".join(text[-LOG_TAIL_CHARS:].split())[-LOG_TAIL_CHARS:]
