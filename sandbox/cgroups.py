"""A cgroup per contained command (v2, or v1's pids and memory hierarchies): a cap on
processes and threads that holds for root, so a fork bomb stops growing, and on memory, so a
runaway allocation is killed and reported instead of taking the machine. Afterwards the
command's cgroup tells what it hit (``ResourceReport``).

Whether they work here, containment.py's probe finds out once per process (a user other than
root can seldom make them, and then gets none: the notice says so).
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from pydantic import BaseModel

CGROUP_ROOT = Path("/sys/fs/cgroup")
_CGROUP_PREFIX = "kagent-"


class ResourceReport(BaseModel):
    """What a command's cgroup saw: whether it hit its limits, and its peak memory."""

    out_of_memory: bool = False
    process_limit_hit: bool = False
    peak_memory_bytes: Optional[int] = None
    memory_limit_bytes: Optional[int] = None
    process_limit: Optional[int] = None

    def problems(self) -> list[str]:
        """Sentences for the model and the user, one per limit hit."""
        found = []
        if self.out_of_memory:
            found.append(f"killed: out of memory (the limit is {_gib(self.memory_limit_bytes)} of host memory)")
        if self.process_limit_hit:
            found.append(
                f"the process limit ({self.process_limit} processes and threads) was reached: "
                f"some forks or thread starts failed"
            )
        return found


def _gib(value: Optional[int]) -> str:
    return f"{(value or 0) / (1 << 30):.1f} GiB"


def _counter(path: Path, key: str) -> int:
    """The number after ``key`` in a flat-keyed cgroup file (memory.events, pids.events)."""
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


def _read_int(path: Path) -> Optional[int]:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


@dataclass(frozen=True)
class CgroupSupport:
    """Where kagent makes its cgroups: the cgroup v2 root, or v1's pids and memory roots."""

    version: int
    pids_root: Optional[Path]
    memory_root: Optional[Path]


def cgroup_support() -> Optional[CgroupSupport]:
    v2_root = CGROUP_ROOT if (CGROUP_ROOT / "cgroup.subtree_control").exists() else None
    if v2_root is not None:
        wanted = {"pids", "memory"}
        try:
            enabled = set((v2_root / "cgroup.subtree_control").read_text().split())
            if not wanted <= enabled:
                (v2_root / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in wanted - enabled))
            return CgroupSupport(2, v2_root, v2_root)
        except OSError:
            return None
    pids, memory = CGROUP_ROOT / "pids", CGROUP_ROOT / "memory"
    pids_root = pids if (pids / "cgroup.procs").exists() else None
    memory_root = memory if (memory / "cgroup.procs").exists() else None
    if pids_root is None and memory_root is None:
        return None
    return CgroupSupport(1, pids_root, memory_root)


def remove_stale_cgroups(support: CgroupSupport) -> None:
    """Remove cgroups left by kagent processes that are gone (a crash skips the cleanup)."""
    for root in {path for path in (support.pids_root, support.memory_root) if path is not None}:
        for folder in root.glob(f"{_CGROUP_PREFIX}*"):
            owner = folder.name[len(_CGROUP_PREFIX) :].split("-")[0]
            if owner.isdigit() and not Path(f"/proc/{owner}").exists():
                _remove_folder(folder)


def _remove_folder(folder: Path) -> bool:
    try:
        folder.rmdir()
        return True
    except FileNotFoundError:
        return True
    except OSError:
        return False  # still busy; the next kagent's probe removes it


_sequence = itertools.count()


class CommandCgroup:
    """The cgroup(s) of one contained command: its caps, and afterwards what it hit. The caps
    are a containment.Limits's ``max_processes`` and ``max_memory_bytes``."""

    def __init__(self, support: CgroupSupport, max_processes: int, max_memory_bytes: int):
        self.support = support
        self.max_processes, self.max_memory_bytes = max_processes, max_memory_bytes
        name = f"{_CGROUP_PREFIX}{os.getpid()}-{next(_sequence)}"
        roots = [r for r in dict.fromkeys([support.pids_root, support.memory_root]) if r is not None]
        self.folders = [root / name for root in roots]
        try:
            for folder in self.folders:
                folder.mkdir()
            self._write_limits()
        except OSError:
            self.remove()
            raise

    def _folder(self, root: Optional[Path]) -> Optional[Path]:
        return next((f for f in self.folders if root is not None and f.parent == root), None)

    def _write_limits(self) -> None:
        pids = self._folder(self.support.pids_root)
        memory = self._folder(self.support.memory_root)
        if pids is not None:
            (pids / "pids.max").write_text(str(self.max_processes))
        if memory is None:
            return
        cap = str(self.max_memory_bytes)
        if self.support.version == 2:
            (memory / "memory.max").write_text(cap)
            _write_if_present(memory / "memory.swap.max", "0")  # no escape into swap
            _write_if_present(memory / "memory.oom.group", "1")  # an OOM kill takes the whole command
        else:
            (memory / "memory.limit_in_bytes").write_text(cap)
            _write_if_present(memory / "memory.memsw.limit_in_bytes", cap)

    def join(self) -> Callable[[], None]:
        # Runs in the forked child before exec: only raw system calls, no Python file objects.
        procs = [str(folder / "cgroup.procs") for folder in self.folders]

        def join() -> None:
            pid = str(os.getpid()).encode()
            for path in procs:
                fd = os.open(path, os.O_WRONLY)
                try:
                    os.write(fd, pid)
                finally:
                    os.close(fd)

        return join

    def report(self) -> ResourceReport:
        pids = self._folder(self.support.pids_root)
        memory = self._folder(self.support.memory_root)
        found = ResourceReport()
        if pids is not None:
            found.process_limit = self.max_processes
            found.process_limit_hit = _counter(pids / "pids.events", "max") > 0
        if memory is not None:
            found.memory_limit_bytes = self.max_memory_bytes
            if self.support.version == 2:
                found.out_of_memory = _counter(memory / "memory.events", "oom_kill") > 0
                found.peak_memory_bytes = _read_int(memory / "memory.peak")
            else:
                found.out_of_memory = (
                    _counter(memory / "memory.oom_control", "oom_kill") > 0
                    or _counter(memory / "memory.oom_control", "under_oom") > 0
                )
                found.peak_memory_bytes = _read_int(memory / "memory.max_usage_in_bytes")
        return found

    def remove(self) -> None:
        for folder in self.folders:
            # The namespace's processes die with its pid 1, but the kernel may take a moment.
            for _ in range(50):
                if _remove_folder(folder):
                    break
                time.sleep(0.02)


def _write_if_present(path: Path, value: str) -> None:
    if path.exists():
        path.write_text(value)
