"""Starting the evaluation's other processes first of all, before the referee imports torch.

Every process of an evaluation (the solution's, the baseline's, each reference worker's)
spends seconds on its own start: an interpreter, torch, the device's context. On an H200
machine they were ready only 3.3-5.3 s after the referee began, started after the referee's
own start (2.8-4.0 s: its interpreter and torch), and nothing could load before then although
the weights file was known good 0.4 s in (the lab notebook). So the referee starts
them before it imports anything heavy (``start_early``), and the evaluation adopts them
(``remote.Peer.launch``). Until a process is asked to load something it runs only the
harness's own server code. This module imports no torch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

from .job import Job
from .protocol import make_non_dumpable

SERVER = Path(__file__).resolve().parent / "solution_server.py"
WORKER = Path(__file__).resolve().parent / "reference_worker.py"

# Reference workers a decode task's evaluation starts by default, on CUDA (on the CPU, where
# every process computes on one thread of a few cores, none: the referee draws the cases).
DEFAULT_REFERENCE_WORKERS = {"cuda": 4, "cpu": 0}


@dataclasses.dataclass
class Started:
    """A started server: its process, the referee's ends of its two pipes, its working folder.
    A server in a box (``start`` with a box) runs two processes below ``proc``: the box's pid 1
    and then the server; ``exchange`` is the folder for its arena, the one of /dev/shm that the
    box shows it."""

    proc: subprocess.Popen
    requests_fd: int
    replies_fd: int
    scratch: Path
    exchange: Optional[Path] = None
    boxed: bool = False
    _chain: list[int] = dataclasses.field(default_factory=list)

    def server_pid(self) -> int:
        """The server's pid (as this process sees it): ``proc``'s, or in a box the third of
        the chain that starts at ``proc``, once the box has started it."""
        return self._box_chain()[-1]

    def box_pids(self) -> list[int]:
        """The processes of the box that are the harness's, not the server: ``proc`` (which
        waits outside the box) and the box's pid 1; none without a box."""
        return self._box_chain()[:-1]

    def _box_chain(self) -> list[int]:
        if not self.boxed:
            return [self.proc.pid]
        deadline = time.monotonic() + BOX_START_S
        self._chain = self._chain or [self.proc.pid]
        while len(self._chain) < 3:
            child = _first_child(self._chain[-1])
            if child is not None:
                self._chain.append(child)
            elif self.proc.poll() is not None or time.monotonic() > deadline:
                # Dead or stuck before the server ran: what the referee then asks of "the
                # server" reaches the box's last process, and finds it gone or not answering.
                return self._chain
            else:
                time.sleep(0.001)
        return self._chain


# How long a box may take to start its server (a few tens of milliseconds here).
BOX_START_S = 30.0


def _first_child(pid: int) -> Optional[int]:
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return None
    return int(children[0]) if children else None


# A fresh, trusted interpreter: no PYTHON* variable, user site or script folder is heeded.
TRUSTED_PYTHON = [sys.executable, "-I", "-B", "-u"]

# The hash seed of both contestants' interpreters (see ``alike_python``).
CONTESTANT_HASH_SEED = "0"
ADDR_NO_RANDOMIZE = 0x0040000
# Turns off address-space randomization for what it then executes (a personality is kept
# across exec). Where the system refuses (a seccomp filter), the command runs all the same,
# with its addresses drawn at random as before.
_EXEC_WITHOUT_ASLR = (
    "import ctypes, os, sys; libc = ctypes.CDLL(None); "
    f"libc.personality(libc.personality(0xffffffff) | {ADDR_NO_RANDOMIZE}); "
    "os.execv(sys.argv[1], sys.argv[1:])"
)


def alike_python() -> list[str]:
    """The interpreter both contestants run in, laid out alike in memory.

    A host-bound step's speed depends on where its process's objects and code lie: pairs of
    fresh processes, each building the flagship's baseline and timed against each other in
    ABBA order on one CPU, read one 0.96-1.05 times as fast as the other (9 of 37 pairs more
    than 2% apart, with each pair's own interval about ±0.5%), with the same device time per
    step within 0.4% (the 16 pairs that measured it); started with one hash seed and no address
    randomization, 0.99-1.01 (8 pairs; H200, the lab notebook, lab/scripts/pair_bias.py).
    Such a bias, held by a process for its whole life, is the likeliest cause of the A/A
    evaluations that read 3-5% off at every context. So both contestants start from one
    layout: a fixed hash seed (``-I`` would ignore ``PYTHONHASHSEED``, so the environment is
    scrubbed of every ``PYTHON*`` variable instead, by ``contestant_env``, and ``-P -s`` keep
    the rest of what ``-I`` does) and no address randomization (``_EXEC_WITHOUT_ASLR``).
    Neither weakens the solution's isolation: the solution runs code of its choosing in its
    own process already, and reaches no other process's memory, whatever the addresses."""
    return [sys.executable, "-I", "-c", _EXEC_WITHOUT_ASLR, sys.executable, "-P", "-s", "-B", "-u"]


def start(argv: list[str], scratch: Path, env: dict[str, str], box: Optional[dict] = None) -> Started:
    """Start ``ARGV`` (an interpreter's command line: ``TRUSTED_PYTHON`` or ``alike_python()``
    and a server) in ``scratch``: a server of one JSON request per line on a pipe of its own.
    ``box`` (the job's ``solution_box``: the jail's path and the box's file plan): in a box of
    its own (``boxed``)."""
    requests_read, requests_write = os.pipe()
    replies_read, replies_write = os.pipe()
    command = [*argv, "--requests-fd", str(requests_read), "--replies-fd", str(replies_write)]
    exchange = None
    if box is not None:
        exchange = Path(tempfile.mkdtemp(prefix="kagent-box-exchange-", dir=shared_memory_dir()))
        command = boxed(command, box, [scratch, exchange])
    proc = subprocess.Popen(
        command,
        cwd=scratch,
        env=env,
        stdin=subprocess.DEVNULL,
        pass_fds=(requests_read, replies_write),
        start_new_session=True,
    )
    os.close(requests_read)
    os.close(replies_write)
    return Started(proc, requests_write, replies_read, scratch, exchange, boxed=box is not None)


def boxed(command: list[str], box: dict, folders: list[Path]) -> list[str]:
    """``command`` run by the jail in a box of its own (jail.enter_box), seeing the files of
    the box's plan, and ``folders`` (its working and exchange folders) writable. The box's
    covers are folders of a fresh one of this process's (see jail.arrange)."""
    plan = dict(box["plan"])
    plan["writable"] = [*plan.get("writable", []), *map(str, folders)]
    plan.update(
        box=True,
        arrange_files=True,
        drop_capabilities=True,
        cover_with=tempfile.mkdtemp(prefix="kagent-box-covers-"),
    )
    # -E -S: the jail heeds no PYTHON* variable and skips site (as containment runs it).
    return [sys.executable, "-E", "-S", box["jail"], json.dumps(plan), "--", *command]


def shared_memory_dir() -> Optional[str]:
    """/dev/shm where it can be written (the jail gives each evaluation its own), else the
    system's temporary folder."""
    return "/dev/shm" if os.access("/dev/shm", os.W_OK) else None


def device_name(device: str) -> str:
    """The device as every process of the evaluation names it: "cuda" is the first visible one,
    as torch's current device is in a fresh process."""
    return "cuda:0" if device == "cuda" else device


def contestant_argv(who: str, device: str) -> list[str]:
    """A contestant's server; the baseline's makes itself non-dumpable first of all. Both
    command lines have the same length, so that their stacks start alike."""
    return [*alike_python(), str(SERVER), "--device", device, "--non-dumpable", "1" if who == "baseline" else "0"]


def worker_argv(device: str) -> list[str]:
    return [*TRUSTED_PYTHON, str(WORKER), "--device", device]


def scratch(who: str) -> Path:
    """An empty working folder of its own for a process."""
    return Path(tempfile.mkdtemp(prefix=f"kagent-{who}-"))


# Pads a contestant's environment to the size of the other's (see ``contestant_env``).
LAYOUT_PAD = "KAGENT_LAYOUT_PAD"


def contestant_env(who: str, job: Job) -> dict[str, str]:
    """A contestant's environment: this process's, less every ``PYTHON*`` variable, with the
    contestants' hash seed; the solution's own build HOME. Each is padded to the size of the
    larger of the two, so that both processes' stacks start at the same address (the
    environment's strings sit above them)."""

    def plain(whose: str) -> dict[str, str]:
        env = {
            name: value for name, value in os.environ.items() if not name.startswith("PYTHON") and name != LAYOUT_PAD
        }
        env["PYTHONHASHSEED"] = CONTESTANT_HASH_SEED
        if whose == "solution" and job.solution_home:
            env["HOME"] = job.solution_home  # its builds' cache; the referee's HOME is not its to write
        return env

    def size(env: dict[str, str]) -> int:
        return sum(len(os.fsencode(name)) + len(os.fsencode(value)) + 2 for name, value in env.items())

    env = plain(who)
    env[LAYOUT_PAD] = "x" * (max(size(plain(whose)) for whose in ("solution", "baseline")) - size(env))
    return env


def reference_workers(job: Job) -> int:
    """How many reference workers the job's evaluation runs."""
    if not job.kind.has_reference_workers:
        return 0
    count = job.reference_workers
    return count if count is not None else DEFAULT_REFERENCE_WORKERS[job.device.split(":")[0]]


def start_early(job: Job) -> dict[str, Started]:
    """Every process the job's evaluation will adopt, by name ("solution", "baseline" in the
    modes that time, "worker 1"...), started now. This process is made non-dumpable before
    any of them exists."""
    make_non_dumpable()
    device = device_name(job.device)
    early: dict[str, Started] = {}
    try:
        for who in ["solution", *(["baseline"] if job.mode != "check" else [])]:
            box = job.solution_box if who == "solution" else None
            early[who] = start(contestant_argv(who, device), scratch(who), contestant_env(who, job), box)
        count = reference_workers(job)
        if count:
            folder, env = scratch("worker"), dict(os.environ)
            for i in range(count):
                early[f"worker {i + 1}"] = start(worker_argv(device), folder, env)
    except BaseException:
        close_unadopted(early)  # none half-started is left behind
        raise
    return early


def close_unadopted(early: dict[str, Started]) -> None:
    """End what was started but never adopted (the evaluation stopped before it took them)."""
    for started in early.values():
        for fd in (started.requests_fd, started.replies_fd):
            with contextlib.suppress(OSError):  # closed already
                os.close(fd)
        if started.proc.poll() is None:
            started.proc.kill()
            started.proc.wait()
