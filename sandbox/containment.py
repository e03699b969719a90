"""Contain the code kagent runs for the model: the solution under evaluation and every shell,
compile and profile command.

kagent often runs as root on a throwaway GPU machine, so ordinary user limits mean little
(root ignores RLIMIT_NPROC and file modes, and a process that calls setsid leaves the process
group kagent kills). What this module adds, each mechanism only where a trivial run proves
it works here:

* a network namespace (``unshare -n``): the code sees only its own, down, loopback, so it can
  reach neither the internet nor services listening on this machine;
* an IPC namespace (``unshare -i``): System V shared memory, semaphores and message queues,
  and POSIX message queues, are the command's own and go with it, so they carry nothing
  from one evaluation to the next (POSIX shared memory is a file in /dev/shm, made private
  by the jail);
* a pid namespace (``unshare -p -f --kill-child --mount-proc``) whose pid 1 is kagent's jail
  (jail.py), which runs the code; when the jail dies the kernel kills every process in the
  namespace, setsid or not, and ``--kill-child`` makes that happen when kagent kills unshare;
* a mount namespace in which the jail arranges the files as a ``FilePlan`` says
  (file_plans.py): home folders, the user's project and other runs hidden, /tmp and /dev
  private, everything read-only except the workspace and a build home;
* no capabilities for the code (the jail drops them all before it execs), so a root command
  cannot undo that arrangement, nor leave its cgroup or raise its limits;
* a cgroup per command (cgroups.py): a cap on processes and threads that holds for root,
  and on memory;
* rlimits, set in the child before it execs: no core dumps, a cap on the size of one file and
  on open files, and RLIMIT_NPROC for the non-root case;
* death with kagent, however kagent dies (a SIGKILL runs no cleanup): the child is started
  with a parent-death signal (SIGKILL), which unshare keeps across its exec and passes on to
  the pid namespace's pid 1 (``--kill-child``), whose death ends the namespace. This one needs
  no probe and holds everywhere; without a pid namespace only the command's first process
  dies with kagent.

A user other than root gets the same namespaces and jail inside a user namespace of its own
(``unshare --map-root-user``) where the kernel allows it, but no cgroups: processes and
memory are then capped by rlimits alone, and the notice says so.
"""

from __future__ import annotations

import ctypes
import functools
import json
import logging
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from pydantic import BaseModel, Field

from kagent.sandbox.cgroups import CgroupSupport, CommandCgroup, ResourceReport, cgroup_support, remove_stale_cgroups
from kagent.sandbox.file_plans import FilePlan, file_plan, solution_box_plan

log = logging.getLogger(__name__)

JAIL = Path(__file__).resolve().parent / "jail.py"
# How long a probe's trivial command may take before the mechanism counts as missing.
PROBE_TIMEOUT_S = 10.0
# Flags that put the command in a new pid (and mount) namespace; ``--kill-child`` makes the
# namespace's pid 1 die with unshare itself, even if pid 1 moved to a process group of its own.
_PID_FLAGS = ("-p", "-f", "--kill-child", "--mount-proc")
PR_SET_PDEATHSIG = 1

_libc = ctypes.CDLL(None, use_errno=True)


def _machine_memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


class Limits(BaseModel):
    """What a contained command may use. The defaults suit kernel work on a GPU machine."""

    network: bool = Field(
        False,
        description="True lets the command use the network; False (the default) "
        "runs it in a network namespace of its own, with no network",
    )
    max_file_bytes: int = Field(
        8 << 30,
        gt=0,
        description="largest file the command may write (RLIMIT_FSIZE); "
        "past it the write fails and the process gets SIGXFSZ",
    )
    max_processes: int = Field(
        4096,
        gt=0,
        description="processes and threads the command may have at once: "
        "the cgroup's pids.max where one can be made, and "
        "RLIMIT_NPROC (which root ignores)",
    )
    max_open_files: int = Field(4096, gt=0, description="file descriptors per process (RLIMIT_NOFILE)")
    max_memory_bytes: int = Field(
        default_factory=lambda: _machine_memory() * 3 // 4,
        gt=0,
        description="host memory (resident, page cache, its private /tmp) the "
        "command may use before the kernel kills it; GPU memory is "
        "not counted. Default: three quarters of the machine's",
    )


# Set to 1, the box is made on CUDA too (see ``solution_box``).
BOX_ON_CUDA_VARIABLE = "KAGENT_SOLUTION_BOX_ON_CUDA"


def solution_box(
    device: str, writable: Sequence[Path], show: Sequence[Path], hide: Sequence[Path], python: Optional[str]
) -> Optional[dict]:
    """The job's ``solution_box`` for an evaluation on ``device`` (the jail's path and the
    box's plan, for spawn.start), or None where the box is not made: where this machine cannot
    make it (``probe().solution_box``), and on CUDA unless KAGENT_SOLUTION_BOX_ON_CUDA is 1
    (the exchange arena there is shared by CUDA IPC, not yet proven across pid namespaces)."""
    if not probe().solution_box or (device != "cpu" and os.environ.get(BOX_ON_CUDA_VARIABLE) != "1"):
        return None
    return {"jail": str(JAIL), "plan": solution_box_plan(writable, show, hide, python).model_dump()}


@dataclass(frozen=True)
class Capabilities:
    """Which containment mechanisms were proven to work on this machine."""

    unshare: Optional[str]  # path of the unshare binary, None when it is not installed
    network_namespace: bool
    ipc_namespace: bool
    pid_namespace: bool
    files: bool  # the jail's file arrangement and capability drop
    cgroups: Optional[CgroupSupport]
    rlimits: bool
    solution_box: bool = False  # the referee can box the solution's process (jail.enter_box)

    @property
    def process_cap(self) -> bool:
        return self.cgroups is not None and self.cgroups.pids_root is not None

    @property
    def memory_cap(self) -> bool:
        return self.cgroups is not None and self.cgroups.memory_root is not None

    @property
    def complete(self) -> bool:
        return (
            self.network_namespace
            and self.ipc_namespace
            and self.pid_namespace
            and self.files
            and self.process_cap
            and self.memory_cap
            and self.rlimits
            and self.solution_box
        )


def _runs(argv: list[str], preexec_fn: Optional[Callable[[], None]] = None, cwd: Optional[str] = None) -> bool:
    """True when ``argv`` exits 0 within the probe timeout."""
    try:
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=PROBE_TIMEOUT_S,
            preexec_fn=preexec_fn,
            cwd=cwd,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def _jail_argv(argv: list[str], plan: Optional[FilePlan], drop_capabilities: bool) -> list[str]:
    spec = plan.model_dump() if plan is not None else {}
    spec.update(arrange_files=plan is not None, drop_capabilities=drop_capabilities)
    # -E -S: the jail ignores the command's PYTHON* settings and skips site, to start fast.
    return [sys.executable, "-E", "-S", str(JAIL), json.dumps(spec), "--", *argv]


def _user_flags() -> list[str]:
    """What unshare needs beyond the namespaces themselves. A user other than root makes them
    inside a user namespace of its own, where it is root (the kernel must allow unprivileged
    user namespaces; where it does not, the probe finds the mechanisms missing)."""
    return [] if os.geteuid() == 0 else ["--map-root-user"]


def _probe_files(unshare: str) -> bool:
    """Whether the jail can hide, protect and grant files here, proven on a scratch folder:
    a hidden file must be gone, the writable folder writable, its read-only part and the
    rest of the machine not, and no capability left to undo it."""
    with tempfile.TemporaryDirectory(prefix="kagent-probe-") as scratch:
        root = Path(scratch)
        for folder in ("hidden", "work/task"):
            (root / folder).mkdir(parents=True)
        (root / "hidden" / "marker").write_text("secret")
        plan = file_plan(writable=[root / "work"], read_only=[root / "work" / "task"], hide=[root / "hidden"])
        test = (
            "test ! -e hidden/marker && touch work/ok && ! touch work/task/x 2>/dev/null "
            "&& ! touch /usr/kagent-probe 2>/dev/null && ! umount work/task 2>/dev/null"
        )
        argv = [
            unshare,
            *_user_flags(),
            *_PID_FLAGS,
            "--",
            *_jail_argv(["sh", "-c", test], plan, drop_capabilities=True),
        ]
        return _runs(argv, cwd=scratch) and (root / "work" / "ok").exists()


def _probe_box(unshare: str) -> bool:
    """Whether the referee, jailed and without capabilities, can box a process here, proven
    as the referee does it: inside a jailed command, the box must hide a file the jail shows,
    keep a folder brought back writable, and show no process of the jail's but its own."""
    with tempfile.TemporaryDirectory(prefix="kagent-probe-") as scratch:
        root = Path(scratch)
        for folder in ("hidden", "work", "skeleton"):
            (root / folder).mkdir()
        (root / "hidden" / "marker").write_text("secret")
        box = solution_box_plan(writable=[root / "work"], hide=[root / "hidden"]).model_dump()
        box.update(box=True, arrange_files=True, drop_capabilities=True, cover_with=str(root / "skeleton"))
        test = (
            f"test ! -e {root}/hidden/marker && test ! -e {root}/skeleton && test $$ = 2 "
            f"&& test ! -e /proc/3 && touch {root}/work/ok"
        )
        jailed = [sys.executable, "-E", "-S", str(JAIL), json.dumps(box), "--", "sh", "-c", test]
        argv = [unshare, *_user_flags(), *_PID_FLAGS, "--", *_jail_argv(jailed, file_plan(writable=[root]), True)]
        return _runs(argv, cwd=str(root / "work")) and (root / "work" / "ok").exists()


@functools.lru_cache(maxsize=1)
def probe() -> Capabilities:
    """Find out, once per process, which mechanisms work here by running ``true`` under each."""
    unshare = shutil.which("unshare")
    network = unshare is not None and _runs([unshare, *_user_flags(), "-n", "true"])
    ipc = unshare is not None and _runs([unshare, *_user_flags(), "-i", "true"])
    pid = unshare is not None and _runs(
        [unshare, *_user_flags(), *_PID_FLAGS, "--", *_jail_argv(["true"], None, False)]
    )
    files = pid and unshare is not None and _probe_files(unshare)
    cgroups = cgroup_support()
    if cgroups is not None:
        remove_stale_cgroups(cgroups)
        try:
            defaults = Limits()
            trial = CommandCgroup(cgroups, defaults.max_processes, defaults.max_memory_bytes)
        except OSError:
            cgroups = None
        else:
            if not _runs(["true"], preexec_fn=trial.join()):
                cgroups = None
            trial.remove()
    rlimits = _runs(["true"], preexec_fn=_rlimit_setter(Limits()))
    box = files and unshare is not None and _probe_box(unshare)
    caps = Capabilities(
        unshare=unshare,
        network_namespace=network,
        ipc_namespace=ipc,
        pid_namespace=pid,
        files=files,
        cgroups=cgroups,
        rlimits=rlimits,
        solution_box=box,
    )
    log.debug("containment probe: %s", caps)
    return caps


def _lowered(which: int, value: int) -> tuple[int, int]:
    """``value`` as soft and hard limit, but never above the hard limit we already have
    (raising it would fail for a non-root user)."""
    _, hard = resource.getrlimit(which)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    return value, value


def _rlimit_setter(limits: Limits) -> Callable[[], None]:
    # Computed in the parent, so the child only makes setrlimit calls between fork and exec.
    # RLIMIT_AS is deliberately not set: CUDA and PyTorch reserve terabytes of virtual address
    # space up front, so any useful cap on it would break every GPU run; memory is capped by
    # the cgroup, which counts what is resident.
    settings = [
        (resource.RLIMIT_CORE, (0, 0)),  # a crashing kernel must not drop gigabyte core files
        (resource.RLIMIT_FSIZE, _lowered(resource.RLIMIT_FSIZE, limits.max_file_bytes)),
        (resource.RLIMIT_NOFILE, _lowered(resource.RLIMIT_NOFILE, limits.max_open_files)),
        (resource.RLIMIT_NPROC, _lowered(resource.RLIMIT_NPROC, limits.max_processes)),
    ]

    def apply() -> None:
        for which, pair in settings:
            resource.setrlimit(which, pair)

    return apply


def dying_with_this_process() -> Callable[[], None]:
    """A step for the child between fork and exec: it gets SIGKILL when this process dies.

    The kernel sends it when the *thread* that forked the child ends, not the process. That is
    safe as long as the thread that starts a contained command outlives it: runner.run kills
    the group and waits in a ``finally``, and whoever holds a runner.Running stops it before
    its thread ends; kagent starts them all from its main thread anyway."""
    parent = os.getpid()  # here, before the fork
    sigkill = int(signal.SIGKILL)

    def die_with_parent() -> None:
        if _libc.prctl(PR_SET_PDEATHSIG, sigkill, 0, 0, 0) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"prctl(PR_SET_PDEATHSIG): {os.strerror(errno)}")
        # This process may have died between the fork and the prctl: then no signal will
        # ever come, and the child, now init's, must not start the command.
        if os.getppid() != parent:
            os._exit(1)

    return die_with_parent


class Contained:
    """One command made ready to run contained: start ``argv`` with ``preexec`` (in a new
    session), and after it ended read ``report()``; ``close()`` (or ``with``) removes its cgroup.

    The caller still kills the process group at its limit (sandbox/runner.py does all of
    this): with a pid namespace that kill takes down the jail and, with it, every process the
    code started. Inherited descriptors (``pass_fds``) survive, since unshare and the jail exec
    the command. The thread that starts the command must outlive it (see
    ``dying_with_this_process``).
    """

    def __init__(self, argv: list[str], preexec: Callable[[], None], cgroup: Optional[CommandCgroup]):
        self.argv, self.preexec, self.cgroup = argv, preexec, cgroup

    def report(self) -> ResourceReport:
        return self.cgroup.report() if self.cgroup is not None else ResourceReport()

    def close(self) -> None:
        if self.cgroup is not None:
            self.cgroup.remove()

    def __enter__(self) -> Contained:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def contained(argv: list[str], limits: Limits, files: Optional[FilePlan] = None) -> Contained:
    """``argv`` wrapped in what works here. ``files`` says what it may see and write (None:
    the files as they are). A missing mechanism is skipped, never an error: the command
    still runs, and the user hears once what is missing."""
    caps = probe()
    sentence = notice()
    if sentence:
        log.warning(sentence)
    flags: list[str] = []
    if caps.unshare and not limits.network and caps.network_namespace:
        flags.append("-n")
    if caps.unshare and caps.ipc_namespace:
        flags.append("-i")
    if caps.unshare and caps.pid_namespace:
        flags.extend(_PID_FLAGS)
        plan = files if caps.files else None
        # The capabilities go with the file arrangement: kept, they would let the code undo it.
        # (Nsight Compute reads GPU counters without them where the driver's
        # RmProfilingAdminOnly is 0, as on the H200 machines.)
        command = _jail_argv(argv, plan, drop_capabilities=caps.files)
    else:
        command = list(argv)
    wrapped = [caps.unshare, *_user_flags(), *flags, "--", *command] if flags and caps.unshare else command
    # Dying with kagent comes first: from then on, kagent's death cannot leave the child behind.
    steps: list[Callable[[], None]] = [dying_with_this_process()]
    cgroup = None
    if caps.cgroups is not None:
        try:
            cgroup = CommandCgroup(caps.cgroups, limits.max_processes, limits.max_memory_bytes)
            steps.append(cgroup.join())
        except OSError as exc:  # someone removed the hierarchy under us: run without it
            log.warning("cgroup unusable, processes and memory not capped: %s", exc)
    if caps.rlimits:
        steps.append(_rlimit_setter(limits))

    def preexec() -> None:
        for step in steps:
            step()

    return Contained(wrapped, preexec, cgroup)


def exit_status(returncode: int) -> int:
    """A contained command's status as ``Popen.returncode`` would read without the wrapper:
    where the pid namespace's jail reports a death by signal N as 128+N, this gives -N back.
    (A command that itself exits with 129..192 reads as killed by a signal: rare, and only
    the wording of a crash changes.)"""
    if probe().pid_namespace and 128 < returncode <= 128 + 64:
        return 128 - returncode
    return returncode


def describe() -> str:
    """One sentence: what isolation executed code gets on this machine, and what it does not."""
    caps = probe()
    parts = [
        "network: none (network namespace)"
        if caps.network_namespace
        else "network: NOT isolated (no network namespace here)",
        "shared memory, semaphores and message queues: its own (IPC namespace)"
        if caps.ipc_namespace
        else "shared memory, semaphores and message queues: NOT isolated, left to later commands "
        "(no IPC namespace here)",
        "process tree: killed as a whole at the limit and when kagent dies (pid namespace)"
        if caps.pid_namespace
        else "process tree: killed by process group only, so a process that calls setsid can survive, "
        "and when kagent dies only the command's first process dies with it (no pid namespace here)",
        "files: only the workspace and a build home are writable, home folders, the project and "
        "other runs hidden, no capabilities (mount namespace)"
        if caps.files
        else "files: NOT isolated, the code can read and write what the user running kagent can "
        "(no mount namespace here)",
        "process count: capped (pids cgroup)"
        if caps.process_cap
        else "process count: not capped for root (no pids cgroup here)",
        "memory: capped (memory cgroup)" if caps.memory_cap else "memory: NOT capped (no memory cgroup here)",
        "core dumps off, file size and open files capped (rlimits)"
        if caps.rlimits
        else "resource limits: none (rlimits could not be set)",
        "an evaluated solution: in a box of its own (user, pid, mount and IPC namespaces) on the CPU, "
        "where it reaches no other process and sees only its folder, its build home, the harness, the "
        "task and the interpreter"
        if caps.solution_box
        else "an evaluated solution: NOT boxed (no user namespace for the referee here): it sees the "
        "referee's files and processes; a stray scan of every thread and a check of the baseline's "
        "and referee's scheduling before each timed block stand in",
    ]
    return "Executed code: " + "; ".join(parts) + "."


_noticed = False


def notice() -> Optional[str]:
    """``describe()`` the first time it is asked in this process when some mechanism is
    missing, so the user hears it once; None afterwards and when nothing is missing."""
    global _noticed
    if _noticed or probe().complete:
        return None
    _noticed = True
    return describe()
