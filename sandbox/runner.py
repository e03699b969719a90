"""The one way kagent runs a contained process: wrapped in what contains it here
(containment.contained: the jail, namespaces, cgroup, rlimits), started in a session of its
own with stdin closed, and at its end the whole process group killed, reaped and its cgroup
read and removed.

Every process run for the model goes through here: the evaluation's referee
(sandbox/harness_child.py), and the model's shell commands, background jobs, compiles and
profiles (tools/base.py, tools/jobs.py). ``run`` waits for the end, or the time limit;
``start`` hands back a ``Running`` process for callers that read it while it runs (the
evaluation's result pipe) or leave it running (a background job), and which must ``stop`` it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Optional, Union

from kagent.sandbox import containment
from kagent.sandbox.cgroups import ResourceReport
from kagent.sandbox.file_plans import FilePlan, with_writable_build_caches

Output = Union[int, IO[bytes], None]


@dataclass(frozen=True)
class Finished:
    """How a contained process ended."""

    returncode: int  # as Popen reads it: through the pid namespace's jail a death by signal N is 128+N
    timed_out: bool  # killed at its time limit
    seconds: float
    resources: ResourceReport  # what its cgroup saw: limits hit, peak memory

    @property
    def exit_status(self) -> int:
        """The status as the command itself would have reported it: a death by signal N as -N."""
        return containment.exit_status(self.returncode)


class Running:
    """A contained process that has started. Its thread of origin must outlive it (see
    containment.dying_with_this_process): the caller stops it before that thread ends."""

    def __init__(self, proc: subprocess.Popen, box: containment.Contained):
        self.proc, self.box = proc, box
        self.started = time.monotonic()
        self._finished: Optional[Finished] = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def poll(self) -> Optional[int]:
        """The return code once it ended by itself, else None."""
        return self.proc.poll()

    def wait(self, timeout_s: Optional[float]) -> bool:
        """Wait for its end, at most ``timeout_s`` (None: for ever); True when it ended."""
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return False
        return True

    def kill(self) -> None:
        """SIGKILL its whole process group: with a pid namespace, the jail and with it every
        process the command started, setsid or not. Safe to call from any thread, and again."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def stop(self, grace_s: float = 0.0, timed_out: bool = False) -> Finished:
        """End it: wait up to ``grace_s`` for it to end by itself, then kill the group, reap it
        and read and remove its cgroup. Only the first call acts; later ones repeat its answer."""
        if self._finished is None:
            if grace_s > 0 and self.proc.poll() is None:
                self.wait(grace_s)
            self.kill()
            self.proc.wait()
            resources = self.box.report()
            self.box.close()
            self._finished = Finished(
                returncode=self.proc.returncode,
                timed_out=timed_out,
                seconds=round(time.monotonic() - self.started, 3),
                resources=resources,
            )
        return self._finished


def start(
    argv: list[str],
    files: Optional[FilePlan],
    env: dict[str, str],
    cwd: Path,
    stdout: Output,
    stderr: Output,
    limits: Optional[containment.Limits] = None,
    pass_fds: Sequence[int] = (),
) -> Running:
    """Start ``argv`` contained, in ``cwd`` with ``env``, seeing the files ``files`` lays out
    (None: the files as they are), its output to ``stdout`` and ``stderr``; ``pass_fds`` are
    inherited (unshare and the jail exec the command, so they stay open). Build caches that
    ``files`` would not let it write are left out of its environment
    (file_plans.with_writable_build_caches)."""
    box = containment.contained(argv, limits or containment.Limits(), files)
    if files is not None:
        env = with_writable_build_caches(env, files)
    try:
        proc = subprocess.Popen(
            box.argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            pass_fds=tuple(pass_fds),
            start_new_session=True,
            preexec_fn=box.preexec,
        )
    except BaseException:
        box.close()
        raise
    return Running(proc, box)


def run(
    argv: list[str],
    timeout_s: float,
    files: Optional[FilePlan],
    env: dict[str, str],
    cwd: Path,
    stdout: Output,
    stderr: Output,
    limits: Optional[containment.Limits] = None,
) -> Finished:
    """``start`` it and wait for its end; at ``timeout_s`` its whole process group is killed."""
    running = start(argv, files, env, cwd, stdout, stderr, limits)
    ended = False
    try:
        ended = running.wait(timeout_s)
    finally:
        finished = running.stop(timed_out=not ended)
    return finished
