"""Contain the code kagent runs for the model: the solution under evaluation and every shell,
compile and profile command.

kagent usually runs as root on a throwaway GPU machine, so ordinary user limits mean little
(root ignores RLIMIT_NPROC, and a process that calls setsid leaves the process group kagent
kills). What this module adds, each mechanism only where a trivial run proves it works here:

* a network namespace (``unshare -n``): the code sees only its own, down, loopback, so it can
  reach neither the internet nor services listening on this machine;
* a pid namespace (``unshare -p -f --kill-child --mount-proc``) whose pid 1 is a small init
  that runs the code; when the init dies the kernel kills every process in the namespace,
  setsid or not, and ``--kill-child`` makes that happen when kagent kills ``unshare``;
* a pids cgroup (cgroup v1, ``pids.max``): a cap on processes and threads that holds for root,
  so a fork bomb stops growing;
* rlimits, set in the child before it execs: no core dumps, a cap on the size of one file and
  on open files, and RLIMIT_NPROC for the non-root case.

Files are not isolated: the code can read and write whatever the user running kagent can.
"""
from __future__ import annotations

import atexit
import functools
import logging
import os
import resource
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from pydantic import BaseModel, Field

log = logging.getLogger(__name__)

PIDS_CGROUP_ROOT = Path("/sys/fs/cgroup/pids")
_CGROUP_PREFIX = "kagent-"
# How long a probe's trivial command may take before the mechanism counts as missing.
PROBE_TIMEOUT_S = 10.0
# Flags that put the command in a new pid namespace; ``--kill-child`` makes the namespace's
# pid 1 die with unshare itself, even if pid 1 moved to a process group of its own.
_PID_FLAGS = ("-p", "-f", "--kill-child", "--mount-proc")
# The namespace's pid 1. The command must not be pid 1 itself: the kernel ignores every
# signal pid 1 has no handler for, so its own abort() or kill(self) would not end it, and
# orphans would pile up as zombies. This init starts the command, reaps orphans until the
# command ends, then exits with its status (a death by signal N as 128+N, since pid 1 cannot
# die by its own signal); when it exits the kernel kills all that is left in the namespace.
_INIT = """
import os, sys
child = os.fork()
if child == 0:
    try:
        os.execvp(sys.argv[1], sys.argv[1:])
    except OSError as exc:
        os.write(2, f"kagent init: cannot run {sys.argv[1]}: {exc}\\n".encode())
        os._exit(127)
while True:
    pid, status = os.wait()
    if pid == child:
        code = os.waitstatus_to_exitcode(status)
        os._exit(code if code >= 0 else 128 - code)
"""


class Limits(BaseModel):
    """What a contained command may use. The defaults suit kernel work on a GPU machine."""

    network: bool = Field(False, description="True lets the command use the network; False (the default) "
                                             "runs it in a network namespace of its own, with no network")
    max_file_bytes: int = Field(8 << 30, gt=0, description="largest file the command may write (RLIMIT_FSIZE); "
                                                          "past it the write fails and the process gets SIGXFSZ")
    max_processes: int = Field(4096, gt=0, description="processes and threads the command may have at once: "
                                                       "the pids cgroup's pids.max where one can be made, and "
                                                       "RLIMIT_NPROC (which root ignores)")
    max_open_files: int = Field(4096, gt=0, description="file descriptors per process (RLIMIT_NOFILE)")


@dataclass(frozen=True)
class Capabilities:
    """Which containment mechanisms were proven to work on this machine."""

    unshare: Optional[str]  # path of the unshare binary, None when it is not installed
    network_namespace: bool
    pid_namespace: bool
    pids_cgroup: Optional[Path]  # this kagent process's cgroup, None when none could be made
    rlimits: bool

    @property
    def complete(self) -> bool:
        return self.network_namespace and self.pid_namespace and self.pids_cgroup is not None and self.rlimits


def _runs(argv: list[str], preexec_fn: Optional[Callable[[], None]] = None) -> bool:
    """True when ``argv`` exits 0 within the probe timeout."""
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=PROBE_TIMEOUT_S, preexec_fn=preexec_fn)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def _remove_stale_cgroups() -> None:
    """Remove cgroups left by kagent processes that are gone (a crash skips atexit)."""
    for folder in PIDS_CGROUP_ROOT.glob(f"{_CGROUP_PREFIX}*"):
        owner = folder.name[len(_CGROUP_PREFIX):]
        if owner.isdigit() and not Path(f"/proc/{owner}").exists():
            try:
                folder.rmdir()  # fails harmlessly while a process is still in it
            except OSError:
                pass


def _make_pids_cgroup() -> Optional[Path]:
    """This process's pids cgroup, made once and removed at exit; None where it cannot be made."""
    if not (PIDS_CGROUP_ROOT / "cgroup.procs").exists():
        return None
    _remove_stale_cgroups()
    folder = PIDS_CGROUP_ROOT / f"{_CGROUP_PREFIX}{os.getpid()}"
    try:
        folder.mkdir(exist_ok=True)
        (folder / "pids.max").write_text("64")
    except OSError:
        return None
    atexit.register(_remove_cgroup, folder)
    return folder


def _remove_cgroup(folder: Path) -> None:
    try:
        folder.rmdir()
    except OSError:
        pass  # still busy or already gone; the next kagent's probe removes it


def _join_cgroup(folder: Path) -> Callable[[], None]:
    # Runs in the forked child before exec: only raw system calls, no Python-level file objects.
    procs = str(folder / "cgroup.procs")

    def join() -> None:
        fd = os.open(procs, os.O_WRONLY)
        try:
            os.write(fd, str(os.getpid()).encode())
        finally:
            os.close(fd)
    return join


@functools.lru_cache(maxsize=1)
def probe() -> Capabilities:
    """Find out, once per process, which mechanisms work here by running ``true`` under each."""
    unshare = shutil.which("unshare")
    network = unshare is not None and _runs([unshare, "-n", "true"])
    pid = unshare is not None and _runs([unshare, *_PID_FLAGS, "--", *_init_argv(["true"])])
    cgroup = _make_pids_cgroup()
    if cgroup is not None and not _runs(["true"], preexec_fn=_join_cgroup(cgroup)):
        _remove_cgroup(cgroup)
        cgroup = None
    rlimits = _runs(["true"], preexec_fn=_rlimit_setter(Limits()))
    caps = Capabilities(unshare=unshare, network_namespace=network, pid_namespace=pid,
                        pids_cgroup=cgroup, rlimits=rlimits)
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
    # space up front, so any useful cap on it would break every GPU run; memory is bounded by
    # the machine, not by us.
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


def contained(argv: list[str], limits: Limits) -> tuple[list[str], Optional[Callable[[], None]]]:
    """``argv`` wrapped in what works here, and a preexec_fn for ``subprocess.Popen``.

    The caller still starts the result in a new session and kills its process group at the
    limit: with a pid namespace that kill takes down the namespace's pid 1 and, with it, every
    process the code started. Inherited descriptors (``pass_fds``) survive, since unshare execs
    the command. A missing mechanism is skipped, never an error: the command still runs.
    """
    caps = probe()
    sentence = notice()
    if sentence:
        log.warning(sentence)
    flags: list[str] = []
    if caps.unshare and not limits.network and caps.network_namespace:
        flags.append("-n")
    if caps.unshare and caps.pid_namespace:
        flags.extend(_PID_FLAGS)
    command = _init_argv(argv) if caps.pid_namespace else list(argv)
    wrapped = [caps.unshare, *flags, "--", *command] if flags and caps.unshare else command
    steps: list[Callable[[], None]] = []
    if caps.pids_cgroup is not None:
        try:
            # One cgroup per kagent process: children that run at the same time share the cap.
            (caps.pids_cgroup / "pids.max").write_text(str(limits.max_processes))
            steps.append(_join_cgroup(caps.pids_cgroup))
        except OSError as exc:  # the cgroup vanished (someone removed it): run without it
            log.warning("pids cgroup unusable, process count not capped: %s", exc)
    if caps.rlimits:
        steps.append(_rlimit_setter(limits))
    if not steps:
        return wrapped, None

    def preexec() -> None:
        for step in steps:
            step()
    return wrapped, preexec


def _init_argv(argv: list[str]) -> list[str]:
    # -E -S: the init ignores the command's PYTHON* settings and skips site, to start fast.
    return [sys.executable, "-E", "-S", "-c", _INIT, *argv]


def exit_status(returncode: int) -> int:
    """A contained command's status as ``Popen.returncode`` would read without the wrapper:
    where the pid namespace's init reports a death by signal N as 128+N, this gives -N back.
    (A command that itself exits with 129..192 reads as killed by a signal: rare, and only
    the wording of a crash changes.)"""
    if probe().pid_namespace and 128 < returncode <= 128 + 64:
        return 128 - returncode
    return returncode


def describe() -> str:
    """One sentence: what isolation executed code gets on this machine, and what it does not."""
    caps = probe()
    parts = [
        "network: none (network namespace)" if caps.network_namespace
        else "network: NOT isolated (no network namespace here)",
        "process tree: killed as a whole at the limit (pid namespace)" if caps.pid_namespace
        else "process tree: killed by process group only, so a process that calls setsid can "
             "survive (no pid namespace here)",
        "process count: capped (pids cgroup)" if caps.pids_cgroup is not None
        else "process count: not capped for root (no pids cgroup here)",
        "core dumps off, file size and open files capped (rlimits)" if caps.rlimits
        else "resource limits: none (rlimits could not be set)",
        "files: not isolated, the code can read and write what the user running kagent can",
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
