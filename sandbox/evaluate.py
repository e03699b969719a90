"""Evaluate a solution: the agent side of the harness.

Static rules first; then a pristine, read-only copy of the task and of the GPU-side harness
(kagent.sandbox.harness) is made in a fresh temporary folder, the solution's folder is
copied beside it, and a new child process runs the harness there. The child reports over a
pipe that only it was given (not stdout); the parent enforces the time limit by killing the
child's whole process group, and afterwards checks by hash that the pristine copy is intact.
"""
# Longer than 600 lines: the agent side of an evaluation, whole until its split (issue 49).

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import importlib.util
import json
import os
import secrets
import selectors
import shutil
import site
import stat
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal, Optional

from pydantic import BaseModel, Field, ValidationError

from kagent.core.errors import KagentError
from kagent.sandbox import containment, runner, static_checks
from kagent.sandbox.harness.job import Job
from kagent.sandbox.harness.kinds import Kind
from kagent.sandbox.harness.protocol import KEY_BYTES, signature
from kagent.sandbox.harness.regular_files import read_regular
from kagent.sandbox.lease import LeaseRecord, lease_folder, open_lease
from kagent.sandbox.results import (
    Bandwidth,
    CheckResult,
    Determinism,
    Environment,
    EvalResult,
    LaunchReport,
    ShapeTiming,
    StaticFinding,
    Verdict,
    check_verdict,
)
from kagent.sandbox.scrub import scrubbed_env
from kagent.sandbox.timeouts import EVAL_TIMEOUT_S, HANG_AFTER_S
from kagent.tasks import KINDS, TaskRef

HARNESS_SOURCE = Path(__file__).resolve().parent / "harness"
HARNESS_PACKAGE = "kagent_harness"
# The referee starts as a fresh, isolated interpreter (-I: no PYTHON* variables, no user
# site-packages, no working directory on the import path; -B: no bytecode written into the
# pristine copy; -u: unbuffered), and imports the harness from the pristine copy alone.
REFEREE_FLAGS = ("-I", "-B", "-u", "-c")
REFEREE_BOOTSTRAP = (
    "import json, sys; sys.path[:0] = json.loads(sys.argv.pop(1)); "
    "from kagent_harness.__main__ import main; sys.exit(main())"
)
# A solution folder is copied whole (its kernels, headers, helpers); past this it is refused.
MAX_SOLUTION_BYTES = 64 << 20
# Never copied: history, caches, build outputs and the model's scratch area (scratch scripts,
# dumps), none of which a solution runs from.
SKIPPED_NAMES = {"__pycache__", ".git", "build", "scratch", ".ipynb_checkpoints"}
# A single file larger than this is not copied either: a debug dump, not a kernel's source (an
# 84 MB dump at the top of a workspace blocked every evaluation of one run).
MAX_COPIED_FILE_BYTES = 16 << 20
OUTPUT_TAIL_CHARS = 4000
# After the child exits, how long to wait for stragglers holding the pipe.
DRAIN_GRACE_S = 2.0


class EvalOptions(BaseModel):
    """How to evaluate: every field has a default suited to the scale."""

    mode: Literal["eval", "check", "aa"] = Field(
        "eval", description="eval: check and time; check: correctness only; aa: the baseline timed against itself"
    )
    device: str = Field("cpu", description="torch device for the run: cpu, cuda, cuda:1")
    scale: Literal["smoke", "full"] = Field("smoke", description="smoke: tiny config for CPUs and CI")
    contexts: Optional[list[int]] = Field(None, description="Context lengths to time (default: all of the scale)")
    rounds: Optional[int] = Field(
        None,
        ge=1,
        description="Timed chains per contestant at the shape with the "
        "longest chain (shorter chains run more, to as many steps)",
    )
    warmup: Optional[int] = Field(None, ge=0, description="Untimed warm-up steps per contestant and shape")
    block_steps: Optional[int] = Field(
        None,
        ge=1,
        description="The fewest consecutive steps per timed block; "
        "the contestants alternate block by block (default 1)",
    )
    judged_chains: Optional[int] = Field(
        None,
        ge=0,
        description="Timed chains of each shape judged step by step against the reference afterwards, "
        "chosen at random (default 4; more catch a rarer wrong run, each costs the reference's steps)",
    )
    min_request_ms: Optional[float] = Field(
        None,
        ge=0,
        description="The least a timed request to a contestant's "
        "process should last: one whose step takes a quarter of it or more runs "
        "blocks of block_steps; any other as many steps per block as that takes, "
        "a fast one its whole chain several times per request (default 10 ms; "
        "0: blocks of block_steps)",
    )
    reference_workers: Optional[int] = Field(
        None,
        ge=0,
        description="Processes that compute a decode task's secret "
        "cases beside the referee (None: 4 on CUDA, 0 on the CPU)",
    )
    timeout_s: float = Field(
        EVAL_TIMEOUT_S,
        gt=0,
        description="Wall-clock limit for the child process (the second run of "
        "an evaluation whose device memory ran out while shared gets what is left of it)",
    )
    hang_after_s: float = Field(
        HANG_AFTER_S,
        gt=0,
        description="Once the solution is built, a request to it that runs this "
        "long (or 20x the baseline's time for its steps, if more) with no compiler running "
        "has hung: the evaluation ends with a diagnosis (sandbox/harness/watchdog.py)",
    )
    cache_dir: Optional[Path] = Field(None, description="Where reference weights, outputs and bandwidth are cached")
    home: Optional[Path] = Field(
        None,
        description="The solution's HOME, where its builds are cached (torch "
        "extensions, Triton); None: a fresh one per evaluation",
    )
    hidden_seeds: Optional[int] = Field(
        None,
        ge=1,
        description="Seeds drawn at run time, unknown to the solution (None: the task kind's hidden_seeds)",
    )
    atol: Optional[float] = Field(
        None,
        description="KernelBench files: absolute tolerance of allclose (None: KernelBench's for "
        "the output's precision, 1e-4 fp32, 1e-2 fp16 and bf16)",
    )
    rtol: Optional[float] = Field(None, description="KernelBench files: relative tolerance of allclose (as atol)")
    eval_mode: bool = Field(
        False,
        description="KernelBench files: both models in eval mode (default: left in training mode, "
        "as KernelBench leaves them, unless the problem file sets EVAL_MODE = True)",
    )
    correct_trials: Optional[int] = Field(
        None, ge=1, description="KernelBench files: input sets drawn from seed 42 as KernelBench does (None: 5)"
    )
    python: str = Field(default_factory=lambda: sys.executable, description="Interpreter for the child")

    def hidden_seeds_for(self, kind: str) -> int:
        """How many seeds an evaluation of a task of ``kind`` draws at run time."""
        return self.hidden_seeds or KINDS[kind].hidden_seeds


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _tree_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def hash_tree(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root``, by relative path."""
    return {str(path.relative_to(root)): _sha256(path.read_bytes()) for path in _tree_files(root)}


class Pristine:
    """Source files as this process first read them. Every evaluation copies from here, so
    code that patched kagent's harness or a task on disk changes no later evaluation of this
    process; where no jail keeps code from those files, an evaluation also compares them with
    the snapshot afterwards and puts them back (see ``Bundle.tampering``)."""

    def __init__(self, root: Path, files: list[Path]):
        self.root = root
        self.content = {str(f.relative_to(root)): f.read_bytes() for f in files}

    def hashes(self) -> dict[str, str]:
        return {name: _sha256(data) for name, data in self.content.items()}

    def write(self, dest: Path) -> None:
        for name, data in self.content.items():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            (dest / name).write_bytes(data)

    def restore_changed(self) -> list[str]:
        """The source files that differ from the snapshot, each written back."""
        changed = []
        for name, data in self.content.items():
            path = self.root / name
            try:
                same = path.read_bytes() == data
            except OSError:
                same = False
            if not same:
                changed.append(name)
                path.write_bytes(data)
        return changed


HARNESS = Pristine(HARNESS_SOURCE, _tree_files(HARNESS_SOURCE))
_TASKS: dict[Path, Pristine] = {}


def pristine_task(task: TaskRef) -> Pristine:
    """The task's files as this process first read them."""
    if task.path not in _TASKS:
        _TASKS[task.path] = Pristine(task.root, task.files())
    return _TASKS[task.path]


def _copy_solution(solution: Path, dest: Path) -> None:
    total = 0
    sizes: dict[Path, int] = {}

    def ignore(folder: str, names: list[str]) -> list[str]:
        nonlocal total
        skipped = []
        for name in names:
            path = Path(folder) / name
            if name in SKIPPED_NAMES or name.startswith(".") or path.is_symlink():
                skipped.append(name)
            elif path.is_file():
                size = path.stat().st_size
                if size > MAX_COPIED_FILE_BYTES:
                    skipped.append(name)
                else:
                    total += size
                    sizes[path] = size
        if total > MAX_SOLUTION_BYTES:
            largest = sorted(sizes, key=lambda p: -sizes[p])[:5]
            raise KagentError(
                f"the solution's folder {solution.parent} holds more than {MAX_SOLUTION_BYTES >> 20} MiB of files "
                f"an evaluation copies; the largest: "
                + ", ".join(f"{p.relative_to(solution.parent)} ({sizes[p] / 2**20:.1f} MiB)" for p in largest),
                hint="move data files under scratch/ or build/ (an evaluation copies neither, nor any file over "
                f"{MAX_COPIED_FILE_BYTES >> 20} MiB), or delete them",
            )
        return skipped

    shutil.copytree(solution.parent, dest, ignore=ignore)


def _make_read_only(root: Path) -> None:
    for path in [root, *root.rglob("*")]:
        mode = path.stat().st_mode
        path.chmod(mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def _make_writable(root: Path) -> None:
    for path in [root, *root.rglob("*")]:
        try:
            path.chmod(path.stat().st_mode | stat.S_IWUSR)
        except OSError:
            pass


class Bundle:
    """The temporary folder of one evaluation."""

    def __init__(self, tmp: Path, task: TaskRef, solution: Optional[Path]):
        self.root = tmp
        self.harness = tmp / "lib" / HARNESS_PACKAGE
        self.task_dir = tmp / "task"
        self.work = tmp / "solution"
        self.cache_staging = tmp / "cache-new"
        self.sources = {"harness": HARNESS, "task": pristine_task(task)}
        HARNESS.write(self.harness)
        self.task_dir.mkdir()
        self.sources["task"].write(self.task_dir)
        # Where the task lies in the copy: its folder, or its file in it.
        self.task_path = self.task_dir / task.path.relative_to(task.root)
        if solution is not None:
            _copy_solution(solution, self.work)
            self.solution: Optional[Path] = self.work / solution.name
        else:
            self.work.mkdir()
            self.solution = None
        # The pristine copy: what the source said, checked again after the run.
        self.expected = {name: source.hashes() for name, source in self.sources.items()}
        self.read_only = [self.harness.parent, self.task_dir]
        for folder in self.read_only:
            _make_read_only(folder)

    def tampering(self) -> list[str]:
        """Files of the pristine copy that were changed, added or removed; and, where the
        jail cannot keep the code away from them, source files (kagent's installed harness,
        the task's folder) that changed on disk during the run: those are put back.

        Inside the jail those sources are read-only to the code, so a change there came from
        outside (someone editing kagent while it runs) and is neither blamed nor undone;
        evaluations in this process go on copying from the snapshot either way."""
        changed = []
        for name, folder in (("harness", self.harness), ("task", self.task_dir)):
            now = hash_tree(folder)
            want = self.expected[name]
            changed += [f"{name}/{f}" for f in sorted(set(now) | set(want)) if now.get(f) != want.get(f)]
        if not containment.probe().files:
            for name, source in self.sources.items():
                changed += [f"installed {name} {source.root / f} (restored)" for f in source.restore_changed()]
        return changed

    def digest(self) -> dict[str, str]:
        return {
            name: hashlib.sha256(json.dumps(h, sort_keys=True).encode()).hexdigest()
            for name, h in self.expected.items()
        }


def _job(task: TaskRef, bundle: Bundle, options: EvalOptions) -> Job:
    """The harness's job for this evaluation, less how the referee runs (run_child adds it)."""
    return Job(
        kind=Kind(**task.kind_of.harness()),  # the harness knows a kind only from its job
        mode=options.mode,
        task=str(bundle.task_path),
        solution=str(bundle.solution) if bundle.solution else None,
        scale=options.scale,
        device=options.device,
        timeout_s=options.timeout_s,
        hang_after_s=options.hang_after_s,
        hidden_seeds=options.hidden_seeds_for(task.kind),
        cache_dir=str(options.cache_dir) if options.cache_dir else None,
        cache_staging=str(bundle.cache_staging) if options.cache_dir else None,
        # Cache entries built from other task or harness files are rebuilt, not trusted.
        cache_identity=hashlib.sha256(json.dumps(bundle.digest(), sort_keys=True).encode()).hexdigest(),
        contexts=options.contexts,
        rounds=options.rounds,
        warmup=options.warmup,
        block_steps=options.block_steps,
        min_request_ms=options.min_request_ms,
        judged_chains=options.judged_chains,
        reference_workers=options.reference_workers,
        atol=options.atol,
        rtol=options.rtol,
        eval_mode=options.eval_mode,
        correct_trials=options.correct_trials,
    )


class ChildRun(BaseModel):
    events: list[dict]
    forged: list[str] = Field(default_factory=list, description="Lines on the result channel the harness did not sign")
    exit_code: Optional[int]
    timed_out: bool
    stdout_tail: str
    stderr_tail: str
    resources: containment.ResourceReport
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


def run_child(
    bundle: Bundle,
    job: Job,
    options: EvalOptions,
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
    files = containment.file_plan(writable=writable, show=show, python=options.python)
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


def promote_cache(staging: Path, cache_dir: Path, events: list[dict]) -> list[str]:
    """Move into the cache what the harness staged before any candidate code ran.

    The harness lists each staged file and its hash in a signed ``cache_sealed`` event just
    before it loads the solution, and after that stages only what it writes once the
    solution's process is gone (``cache_staged``: the baseline's launch count). Only those
    files, unchanged, are kept: whatever the solution wrote into the staging folder (a
    poisoned weight file, a bandwidth that would switch the physics check off) never reaches a
    later evaluation. Each is read as bytes, from a regular file reached through no link (a
    link, or a folder replaced by one, would lead to a file the solution can rewrite later),
    hashed as read, and those very bytes written into a new file of the cache: nothing of the
    staging folder, no inode and no link, becomes part of the cache.
    """
    sealed: dict = next((e.get("files", {}) for e in events if e.get("event") == "cache_sealed"), {})
    # Entries staged after the seal, once no solution code could run any more (the baseline's
    # launch count), each with the hash of the bytes the referee wrote.
    for event in events:
        if event.get("event") == "cache_staged":
            sealed = {**sealed, **event.get("files", {})}
    promoted = []
    for name, digest in sealed.items():
        data = read_regular(staging, name)  # None for a link, a non-regular file, or none at all
        if data is None or _sha256(data) != digest:
            continue
        target = cache_dir / name
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        with open(partial, "wb") as f:
            f.write(data)
        os.replace(partial, target)  # one atomic rename: a reader sees the old entry or the new
        promoted.append(name)
    return promoted


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


def _syntax_error(solution: Path) -> Optional[CheckResult]:
    """The load check's error for a solution that does not compile, said at once: the harness
    would say the same only once it has imported torch and built the reference's outputs and
    secret cases (7.7 s on a loaded 2-core machine, 17 s here), since it imports the solution
    after them. Compiling runs none of the solution's code."""
    try:
        compile(solution.read_bytes(), solution.name, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as err:  # ValueError: a null byte in the source
        return CheckResult(
            name="load",
            status="error",
            reason=f"importing the solution raised {type(err).__name__}: {err}",
            details="".join(traceback.format_exception_only(type(err), err)),
        )
    return None


def _static(task: TaskRef, solution: Path) -> list[StaticFinding]:
    return [StaticFinding(**f.__dict__) for f in static_checks.scan(solution, task.forbidden_imports)]


def evaluate(
    task: TaskRef, solution: Optional[Path], options: EvalOptions, progress: Optional[Callable[[dict], None]] = None
) -> EvalResult:
    """Evaluate ``solution`` (None in A/A mode) on ``task``; never raises for a bad solution.
    ``progress`` gets the harness's events (phase, check, timing, ...) as they arrive. Under a
    device lease, an evaluation whose referee ran out of device memory runs once more, holding
    the device alone (``ran_alone_after`` says so)."""
    started = time.monotonic()
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    if options.mode != "aa":
        if solution is None:
            raise KagentError("a solution file is needed (or ask for an A/A run)")
        solution = solution.resolve()
        if not solution.is_file():
            raise KagentError(f"no solution file at {solution}")
    header = dict(
        task=task.name,
        task_kind=task.kind,
        mode=options.mode,
        scale=options.scale,
        device=options.device,
        started_at=started_at,
        solution=str(solution) if solution else None,
        solution_sha256=hashlib.sha256(solution.read_bytes()).hexdigest() if solution else None,
    )
    if solution is not None:
        unparsed = _syntax_error(solution)
        if unparsed is not None:
            return EvalResult(
                **header,
                verdict=Verdict.ERROR,
                checks=[unparsed],
                reason=f"{unparsed.name}: {unparsed.reason}",
                wall_seconds=round(time.monotonic() - started, 3),
            )
        findings = _static(task, solution)
        if findings:
            first = findings[0]
            return EvalResult(
                **header,
                verdict=Verdict.FORBIDDEN,
                static_findings=findings,
                reason=f"{first.rule} at {first.file}:{first.line}: {first.evidence}",
                wall_seconds=round(time.monotonic() - started, 3),
            )
    ran_out: Optional[str] = None
    begun, this_run = started, options
    for alone in (False, True):
        with tempfile.TemporaryDirectory(prefix="kagent-eval-") as tmp:
            bundle = Bundle(Path(tmp), task, solution)
            setup = time.monotonic() - begun
            try:
                child = run_child(bundle, _job(task, bundle, options), this_run, progress, alone=alone)
                child_done = time.monotonic()
                tampered = bundle.tampering()
                if options.cache_dir is not None:
                    promote_cache(bundle.cache_staging, options.cache_dir, child.events)
            finally:
                for folder in bundle.read_only:
                    _make_writable(folder)  # so the temporary folder can be removed
            # Once, where the device's memory ran out while other evaluations shared it: again,
            # with the device alone (see device_memory_ran_out), within what is left of the limit.
            left_s = options.timeout_s - (time.monotonic() - started)
            if not alone and lease_folder() is not None and not tampered and left_s >= 1:
                ran_out = device_memory_ran_out(child, aa=options.mode == "aa")
                if ran_out is not None:
                    if progress is not None:
                        progress({"event": "device_memory_ran_out", "reason": ran_out})
                    begun, this_run = time.monotonic(), options.model_copy(update={"timeout_s": left_s})
                    continue
            result = assemble(header, child, tampered, bundle.digest(), this_run)
            break
    result.ran_alone_after = ran_out
    result.wall_seconds = round(time.monotonic() - started, 3)
    result.overhead_seconds = {
        "setup": round(setup, 3),
        **child.overhead,
        "teardown": round(time.monotonic() - child_done, 3),
    }
    return result


def assemble(
    header: dict, child: ChildRun, tampered: list[str], bundle_digest: dict, options: EvalOptions
) -> EvalResult:
    """Turn the child's events into a validated EvalResult with one verdict."""
    checks, timings, launches, leases = [], [], [], []
    fields: dict = {}
    task_error = internal_error = None
    for event in child.events:
        kind = event.get("event")
        body = {k: v for k, v in event.items() if k != "event"}
        try:
            if kind == "check":
                core = {k: body.pop(k) for k in ("name", "status", "reason") if k in body}
                checks.append(CheckResult(**core, details=str(body.pop("details", ""))[:OUTPUT_TAIL_CHARS], data=body))
            elif kind == "timing":
                timings.append(ShapeTiming(**body))
            elif kind == "launches":
                launches.append(LaunchReport(**body))
            elif kind == "gpu_lease":
                leases.append(LeaseRecord(**body))
            elif kind == "environment":
                fields["environment"] = Environment(**body)
            elif kind == "bandwidth":
                fields["bandwidth"] = Bandwidth(**body)
            elif kind == "determinism":
                fields["determinism"] = Determinism(**body)
            elif kind == "score":
                fields["score"] = body["geomean_speedup"]
                fields["clocks_during_timing"] = {
                    "before": body.get("clocks_before", {}),
                    "after": body.get("clocks_after", {}),
                }
            elif kind == "done":
                fields.update(
                    phases=body.get("phases", {}),
                    start_up=body.get("start_up", {}),
                    hidden_seeds=body.get("hidden_seeds", []),
                    cache=body.get("cache", {}),
                )
            elif kind == "task_error":
                task_error = body["reason"]
            elif kind == "internal_error":
                internal_error = f"{body['reason']}\n{body.get('details', '')}"
        except (ValidationError, KeyError) as err:
            internal_error = f"malformed {kind} event from the harness: {err}"
    if task_error:
        raise KagentError(f"the task cannot be evaluated: {task_error}")
    done = any(e.get("event") == "done" for e in child.events)
    verdict, reason = _verdict(checks, done, child, tampered, internal_error, options)
    if verdict is not Verdict.PASS:
        fields.pop("score", None)
    return EvalResult(
        **header,
        **fields,
        verdict=verdict,
        reason=reason,
        checks=checks,
        timings=timings,
        launches=launches,
        gpu_leases=leases,
        wall_seconds=0.0,
        bundle_sha256=bundle_digest,
        exit_code=child.exit_code,
        stdout_tail=child.stdout_tail,
        stderr_tail=child.stderr_tail,
        limits_hit=child.resources.problems(),
        peak_host_memory_bytes=child.resources.peak_memory_bytes,
    )


def _verdict(
    checks: list[CheckResult],
    done: bool,
    child: ChildRun,
    tampered: list[str],
    internal_error: Optional[str],
    options: EvalOptions,
) -> tuple[Verdict, str]:
    if tampered:
        return Verdict.TAMPERED, f"the pristine task/harness copy changed during the run: {', '.join(tampered[:5])}"
    if child.forged:
        return Verdict.TAMPERED, (
            f"the result channel carried {len(child.forged)} line(s) the harness did not sign, "
            f"the first: {child.forged[0][:120]!r}: the solution wrote to it"
        )
    if child.timed_out:
        compiling = next((e for e in reversed(child.events) if e.get("event") == "watchdog"), None)
        still = (
            f" (the watchdog saw a step still compiling {compiling.get('seconds', 0):.0f} s in: "
            f"{', '.join(compiling.get('compilers') or ['Triton writing its cache'])})"
            if compiling
            else ""
        )
        return Verdict.TIMEOUT, (
            f"no verdict within the {options.timeout_s:g} s limit{still}; the process group was killed"
        )
    if internal_error:
        return Verdict.INTERNAL_ERROR, internal_error
    if not done:
        last = checks[-1].name if checks else "start-up"
        how = (
            f"killed by signal {-child.exit_code}"
            if child.exit_code and child.exit_code < 0
            else f"exit code {child.exit_code}"
        )
        limits = child.resources.problems()
        if limits:  # the likeliest cause, said first: a crash message after an OOM kill misleads
            return Verdict.CRASH, f"the process died after {last} ({how}): {'; '.join(limits)}"
        stderr = child.stderr_tail.strip().splitlines()
        return Verdict.CRASH, f"the process died after {last} ({how})" + (f": {stderr[-1][:300]}" if stderr else "")
    for check in checks:
        if check.status != "pass":
            limits = child.resources.problems() if check.status == "crash" else []
            # The limit that killed the solution's process is its likeliest cause: said with it.
            return check_verdict(check), f"{check.name}: {check.reason}" + "".join(f": {why}" for why in limits)
    if not checks:
        return Verdict.INTERNAL_ERROR, "the harness finished without running any check"
    if options.mode == "check":
        return Verdict.PASS, f"all {len(checks)} checks passed (not timed)"
    return Verdict.PASS, f"all {len(checks)} checks passed"
