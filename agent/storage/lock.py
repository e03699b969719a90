"""One process drives a run at a time: a lock file in the run folder, with the holder's pid.

A lock whose process is gone (killed, machine rebooted) is stale and may be taken over.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Optional

from kagent.core.errors import KagentError

LOCK_NAME = "lock"


def process_alive(pid: int) -> bool:
    """Whether the process runs. A zombie does not: killed, it keeps its pid until its parent
    reaps it, and a parent that was killed with it leaves that to an init that may take its time
    (a sweep member killed with its Ray worker was still a zombie when the retry resumed it)."""
    if pid <= 0:  # os.kill would signal a process group, or every process
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        pass
    except (OverflowError, ValueError):  # a pid no process can have
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return not Path("/proc/self").exists()  # gone meanwhile, or no /proc to ask (not Linux)
    except (OSError, IndexError):
        return True
    return state not in ("Z", "X")


def lock_holder(run_dir: Path) -> Optional[dict]:
    """The live process holding the run's lock ({pid, host, since}), or None (free or stale)."""
    path = Path(run_dir) / LOCK_NAME
    try:
        holder = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if holder.get("host") != socket.gethostname():
        return holder  # another machine's process: it cannot be checked from here, so respect it
    return holder if process_alive(int(holder.get("pid", -1))) else None


class RunLock:
    """``with RunLock(run_dir):`` — raises KagentError if a live process already drives the run."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / LOCK_NAME
        self.took_over: Optional[dict] = None

    def __enter__(self) -> RunLock:
        record = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()})
        for _ in range(2):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                holder = lock_holder(self.path.parent)
                if holder is not None:
                    raise KagentError(
                        f"run {self.path.parent.name} is being driven by process {holder.get('pid')} "
                        f"on {holder.get('host')}",
                        hint="wait for it to end, or stop it first",
                    ) from None
                try:
                    self.took_over = json.loads(self.path.read_text())
                except (OSError, ValueError):
                    self.took_over = {}
                self.path.unlink(missing_ok=True)  # stale: its process is gone
                continue
            with os.fdopen(fd, "w") as f:
                f.write(record)
            return self
        raise KagentError(f"could not take the lock of run {self.path.parent.name}")

    def __exit__(self, *exc_info: object) -> None:
        self.path.unlink(missing_ok=True)
