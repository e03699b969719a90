"""Run the harness as a child process on an evaluation's bundle (bundle.py), and read what it
reports: the one process of an evaluation that kagent starts, and the one channel it trusts.

The child starts contained (kagent.sandbox.runner), in a new session, with a job file and two
pipes that only it is given: the events' signing key on one, read and closed before any
candidate code runs, and its result channel on the other (not stdout). A line on that channel
it did not sign is the solution writing to it. The time limit is enforced by killing the
child's whole process group. What the child said and how it ended is a ``ChildRun``, which
evaluate.py turns into a verdict, or, where the referee's own error names the device's memory
running out, into one more run with the device alone.
"""

from __future__ import annotations

import dataclasses
import hmac
import importlib.util
import json
import os
import secrets
import selectors
import site
import time
from collections.abc import Callable
from pathlib import Path
from typing import Optional, Protocol

from pydantic import BaseModel, Field

from kagent.sandbox import containment, runner
from kagent.sandbox.bundle import Bundle
from kagent.sandbox.cgroups import ResourceReport
from kagent.sandbox.file_plans import file_plan
from kagent.sandbox.harness.job import Job
from kagent.sandbox.harness.protocol import KEY_BYTES, signature
from kagent.sandbox.lease import open_lease
from kagent.sandbox.scrub import scrubbed_env

# The referee starts as a fresh, isolated interpreter (-I: no PYTHON* variables, no user
# site-packages, no working directory on the import path; -B: no bytecode written into the
# pristine copy; -u: unbuffered), and imports the harness from the pristine copy alone.
REFEREE_FLAGS = ("-I", "-B", "-u", "-c")
REFEREE_BOOTSTRAP = (
    "import json, sys; sys.path[:0] = json.loads(sys.argv.pop(1)); "
    "from kagent_harness.__main__ import main; sys.exit(main())"
)
OUTPUT_TAIL_CHARS = 4000
# After the child exits, how long to wait for stragglers holding the pipe.
DRAIN_GRACE_S = 2.0


class ChildRun(BaseModel):
    events: list[dict]
    forged: list[str] = Field(default_factory=list, description="Lines on the result channel the harness did not sign")
    exit_code: Optional[int]
    timed_out: bool
    stdout_tail: str
    stderr_tail: str
    resources: ResourceReport
    overhead: dict[str, float] = Field(
        default_factory=dict,
        description="Seconds of the child's life outside "
        "its phases: start (spawned to its first event: the jail, the interpreter, "
        "torch), exit (its last event to its whole group stopped)",
    )


def _tail(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - OUTPUT_TAIL_CHARS))
            return f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


class ChildOptions(Protocol):
    """What of an evaluation's options the child runs by (``EvalOptions`` has each of them):
    its interpreter, device and wall-clock limit, the cache, and the solution's HOME (None: a
    fresh one in the bundle)."""

    python: str
    device: str
    timeout_s: float
    cache_dir: Optional[Path]
    home: Optional[Path]


def run_harness_child(
    bundle: Bundle,
    job: Job,
    options: ChildOptions,
    progress: Optional[Callable[[dict], None]] = None,
    alone: bool = False,
) -> ChildRun:
    """Run the harness in a new session, reading its events until done, exit or the limit;
    ``progress`` gets each authentic event as it arrives. ``alone``: under a device lease,
    the evaluation holds it exclusive from its first device work on, not shared."""
    private = bundle.root / "private"
    private.mkdir()
    home = options.home or bundle.root / "home"
    # The solution's own box (spawn.start): its folder and HOME, the harness, the task, and of
    # the cache only the weights it is handed; None where no box is made.
    cache = [options.cache_dir, bundle.cache_staging] if options.cache_dir is not None else []
    weights = [folder / "weights" for folder in cache]
    for folder in (home, *weights):
        folder.mkdir(parents=True, exist_ok=True)
    shown = [bundle.harness.parent, bundle.task_dir, *weights]
    box = containment.solution_box(options.device, [bundle.work, home], shown, [bundle.root, *cache], options.python)
    lease = open_lease(options.device)  # a sweep's device lease, as descriptors (kagent.sandbox.lease)
    lease_field = lease.job_field
    if lease_field is not None and alone:
        lease_field = {**lease_field, "alone": True}
    job = dataclasses.replace(
        job,
        solution_home=str(home),
        pid_namespace=containment.probe().pid_namespace,
        import_paths=_import_paths(),
        gpu_lease=lease_field,
        solution_box=box,  # the solution's own box (spawn.start), None where none is made
    )
    job_file = private / "job.json"
    job.write(job_file)
    out_path, err_path = bundle.root / "stdout.txt", bundle.root / "stderr.txt"
    env = scrubbed_env()  # the solution must not see API keys
    # The referee's HOME is the read-only private folder: nothing the solution writes (its
    # builds' HOME is its own, see the job) can reach a cache the referee's libraries read.
    env["HOME"] = str(private)
    # The referee and the solution's process take turns on the CPU: an OpenMP pool left
    # spinning by one after its turn would steal the cores of the other's next one. Where
    # the steps themselves run on the CPU, each process computes on one thread, so that
    # neither's pool waits on cores the other holds (thread wake-ups made CPU timings swing
    # by 2x between blocks on a 2-core machine).
    env["OMP_WAIT_POLICY"] = "PASSIVE"
    if options.device == "cpu":
        env["OMP_NUM_THREADS"] = "1"
    # The harness stages new cache entries beside the bundle; the cache itself is read-only
    # to the child (see promote_cache).
    writable = [bundle.work, home, bundle.cache_staging]
    show = [bundle.harness.parent, bundle.task_dir, private]
    if options.cache_dir is not None:
        options.cache_dir.mkdir(parents=True, exist_ok=True)
        show.append(options.cache_dir)
    for folder in (home, bundle.cache_staging):  # the solution's folder is there already
        folder.mkdir(parents=True, exist_ok=True)
    # The solution's folder, its HOME and the cache staging area are all it may write; it
    # sees the harness, the task and the cache read-only, and nothing of the user's files or
    # other runs.
    files = file_plan(writable=writable, show=show, python=options.python)
    read_fd, write_fd = os.pipe()
    # The events' signing key goes through a pipe of its own, read and closed by the harness
    # before any candidate code runs: it is in no file and no argument.
    key = secrets.token_bytes(KEY_BYTES)
    key_read, key_write = os.pipe()
    os.write(key_write, key)
    os.close(key_write)
    spawned = time.monotonic()
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        # No network, its own pid namespace, those files and caps on processes and memory where
        # this machine allows; the pipes pass through unshare and the jail, which exec the
        # harness with its fds intact.
        child = runner.start(
            [
                options.python,
                *REFEREE_FLAGS,
                REFEREE_BOOTSTRAP,
                json.dumps([str(bundle.harness.parent), *job.import_paths]),
                "--job",
                str(job_file),
                "--result-fd",
                str(write_fd),
                "--key-fd",
                str(key_read),
            ],
            files,
            env,
            private,
            stdout=out,
            stderr=err,
            pass_fds=(write_fd, key_read, *lease.fds),
        )
    os.close(write_fd)
    os.close(key_read)
    lease.close()  # the referee holds its own copies; a lock must not outlive it here
    received = ResultPipe(read_fd, key)
    try:
        received.read(child, time.monotonic() + options.timeout_s, progress)
    finally:
        os.close(read_fd)
        # Give a finished child a moment to exit by itself; then no mercy for the group.
        finished = child.stop(grace_s=0 if received.timed_out else 10, timed_out=received.timed_out)
    stopped = time.monotonic()
    overhead = {}
    first, last = received.first_event_at, received.last_event_at
    if first is not None and last is not None:
        overhead["start"] = round(first - spawned, 3)
        overhead["exit"] = round(stopped - last, 3)
    # Through a pid namespace's init a death by signal N arrives as 128+N: read it back as -N.
    return ChildRun(
        events=received.events,
        forged=received.forged,
        exit_code=finished.exit_status,
        timed_out=received.timed_out,
        stdout_tail=_tail(out_path),
        stderr_tail=_tail(err_path),
        resources=finished.resources,
        overhead=overhead,
    )


class ResultPipe:
    """The harness's result pipe, as read: its authentic events, and the lines it did not sign."""

    def __init__(self, fd: int, key: bytes):
        self.fd, self.key = fd, key
        self.events: list[dict] = []
        self.forged: list[str] = []
        self.timed_out = False
        self.first_event_at: Optional[float] = None
        self.last_event_at: Optional[float] = None

    def read(self, child: runner.Running, deadline: float, progress: Optional[Callable[[dict], None]]) -> None:
        """Until ``done``, the pipe's end, the child's exit (and a grace for stragglers holding
        the pipe) or the deadline; ``progress`` gets each authentic event as it arrives."""
        buffer, exited_at = b"", None
        selector = selectors.DefaultSelector()
        selector.register(self.fd, selectors.EVENT_READ)
        try:
            while True:
                now = time.monotonic()
                if now >= deadline:
                    self.timed_out = True
                    return
                if child.poll() is not None:
                    exited_at = exited_at or now
                    if now - exited_at > DRAIN_GRACE_S:
                        return  # a straggler holds the pipe: it is killed with the group
                if not selector.select(timeout=min(0.5, deadline - now)):
                    continue
                chunk = os.read(self.fd, 1 << 16)
                if not chunk:
                    return
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    event = authentic_event(line, self.key, len(self.events))
                    if event is None:
                        self.forged.append(line[:200].decode("utf-8", "replace"))
                    else:
                        self.events.append(event)
                        self.last_event_at = time.monotonic()
                        self.first_event_at = self.first_event_at or self.last_event_at
                        if progress is not None:
                            progress(event)
                if self.events and self.events[-1].get("event") == "done":
                    return
        finally:
            selector.close()


def _import_paths() -> list[str]:
    """Where torch lives, if -I would not find it: a user site-packages folder."""
    spec = importlib.util.find_spec("torch")
    user_site = site.getusersitepackages()
    if spec and spec.origin and site.ENABLE_USER_SITE and spec.origin.startswith(user_site + os.sep):
        return [user_site]
    return []


def authentic_event(line: bytes, key: bytes, seq: int) -> Optional[dict]:
    """The event on ``line`` without its signature, or None when the harness did not write it
    (not JSON, a wrong MAC, or out of sequence: a line replayed or left out)."""
    try:
        event = json.loads(line)
    except ValueError:
        return None
    if not isinstance(event, dict) or event.get("seq") != seq:
        return None
    if not hmac.compare_digest(str(event.get("mac", "")), signature(key, event)):
        return None
    return {k: v for k, v in event.items() if k not in ("seq", "mac")}


# What the referee's own errors say when the device's memory ran out: torch's allocator, and
# the math libraries, which allocate a handle's workspace as they create it (on an 80 GB H100
# shared by 4 evaluations: `cusolverDnCreate(handle)` answered
# CUSOLVER_STATUS_INTERNAL_ERROR in the task's reference with 76 of 80 GB in use).
DEVICE_MEMORY_SIGNS = (
    "out of memory",
    "OUT_OF_MEMORY",
    "ALLOC_FAILED",
    "cusolverDnCreate(handle)",
    "cublasCreate(handle)",
)


def device_memory_ran_out(child: ChildRun, aa: bool = False) -> Optional[str]:
    """The referee's own error (the task's code failing, or the harness's) where it names the
    device's memory running out; None otherwise. Only the referee's: a solution's process could
    raise such words to win a second evaluation (its own failures are its verdict). In an A/A
    run (``aa``) both contestants run the task's baseline, nobody's solution: a contestant that
    failed or died with the device's memory named, in its report or in the stderr every
    process of the evaluation writes to, is the task's code failing too (a sweep member's
    baseline died loading on a shared GPU)."""

    def names_memory(text: str) -> bool:
        return any(sign in text for sign in DEVICE_MEMORY_SIGNS)

    for event in child.events:
        text = f"{event.get('reason', '')}\n{event.get('details', '')}"
        referees = event.get("event") in ("task_error", "internal_error") and names_memory(text)
        contestants = (
            aa
            and event.get("event") == "check"
            and event.get("status") in ("crash", "error")
            and names_memory(f"{text}\n{child.stderr_tail}")
        )
        if referees or contestants:
            return str(event.get("reason", ""))[:OUTPUT_TAIL_CHARS]
    return None
