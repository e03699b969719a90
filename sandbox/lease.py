"""The device lease, agent side: which lease an evaluation takes, its files, and its records.

A sweep (kagent.agent.sweep) points its members at a folder of leases with
``KAGENT_GPU_LEASE`` and names each member with ``KAGENT_GPU_LEASE_HOLDER``; anyone running
several kagent runs on one GPU by hand may set them too. Without them no lease is taken.

The lease of a device is named after the host and the physical device (``host-gpu3``: the
index CUDA_VISIBLE_DEVICES maps ``cuda:N`` to; ``host-cpu`` for the CPU), so members that
see the same GPU under different indices still share one lease. Its files, in the folder:
``NAME.gate`` and ``NAME.lock`` (the two flock locks) and ``NAME.jsonl`` (one line per hold).
This side opens them and hands the descriptors to the referee in the job
(kagent.sandbox.harness.lease takes and gives back the lease there).
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kagent.sandbox.harness.lease import LEASE_DIR_ENV, Lease

HOLDER_ENV = "KAGENT_GPU_LEASE_HOLDER"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


class LeaseRecord(BaseModel):
    """One hold of a device lease, as its log and the evaluation's result keep it."""

    model_config = ConfigDict(extra="forbid")
    version: Literal[1] = 1
    lease: str = Field(description="The device: host-gpuN or host-cpu")
    holder: str = Field(description="Who held it: the run id a sweep gave the member")
    host: str
    pid: int = Field(description="The process that held it (an evaluation's referee)")
    kind: Literal["shared", "exclusive"] = Field(
        description="exclusive: the device alone (timing, profiling, calibration, a busy probe asked again)"
    )
    what: str = Field(description="The work it was held for")
    requested_at: float = Field(description="Unix time the lease was asked for")
    acquired_at: float
    released_at: float

    @property
    def waited_s(self) -> float:
        return self.acquired_at - self.requested_at

    @property
    def held_s(self) -> float:
        return self.released_at - self.acquired_at


def lease_name(device: str, host: Optional[str] = None, visible: Optional[str] = None) -> str:
    """The lease of ``device`` on this host: the physical GPU that ``cuda:N`` is here."""
    host = _UNSAFE.sub("_", host or socket.gethostname())
    if not device.startswith("cuda"):
        return f"{host}-cpu"
    index = int(device.partition(":")[2] or 0)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    shown = [part.strip() for part in visible.split(",")] if visible else []
    physical = shown[index] if index < len(shown) and shown[index] else str(index)
    return f"{host}-gpu{_UNSAFE.sub('_', physical)}"


@dataclass
class LeaseFiles:
    """The open files of one lease for one evaluation (none where no lease is asked for)."""

    name: Optional[str] = None
    holder: str = ""
    fds: tuple[int, ...] = field(default_factory=tuple)

    @property
    def job_field(self) -> Optional[dict]:
        """What the referee's job says of the lease: the descriptors it inherits, and names."""
        if self.name is None:
            return None
        gate, lock, log = self.fds
        return {"gate_fd": gate, "lock_fd": lock, "log_fd": log, "holder": self.holder, "name": self.name}

    def close(self) -> None:
        """This side's copies, closed once the referee has its own: a lock must not outlive it here."""
        for fd in self.fds:
            os.close(fd)
        self.fds = ()


def lease_folder() -> Optional[Path]:
    folder = os.environ.get(LEASE_DIR_ENV)
    return Path(folder) if folder else None


def open_lease(device: str) -> LeaseFiles:
    """The lease files of ``device`` under $KAGENT_GPU_LEASE, open; nothing when it is unset."""
    folder = lease_folder()
    if folder is None:
        return LeaseFiles()
    folder.mkdir(parents=True, exist_ok=True)
    name = lease_name(device)
    gate = os.open(folder / f"{name}.gate", os.O_RDWR | os.O_CREAT, 0o644)
    lock = os.open(folder / f"{name}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    log = os.open(folder / f"{name}.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    return LeaseFiles(name=name, holder=os.environ.get(HOLDER_ENV) or f"pid {os.getpid()}", fds=(gate, lock, log))


@contextmanager
def exclusive_here(device: str, what: str) -> Iterator[None]:
    """Work of this process that needs the device alone (the profile tool), under the lease."""
    files = open_lease(device)
    spec = files.job_field
    if spec is None or files.name is None:
        yield
        return
    lease = Lease(spec["gate_fd"], spec["lock_fd"], spec["log_fd"], files.holder, files.name)
    lease.acquire("exclusive", what)
    try:
        yield
    finally:
        lease.close()  # gives the lease back, logs the hold and closes the files


def read_records(path: Path) -> list[LeaseRecord]:
    """The holds in a lease log; a line cut short by a kill, or not a record, is skipped."""
    records = []
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        try:
            records.append(LeaseRecord.model_validate_json(line))
        except ValidationError:
            continue
    return records
