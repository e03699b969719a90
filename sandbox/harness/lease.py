"""The device lease: timed work runs with nothing else of a sweep on its device.

Several kagent runs (the members of a sweep) may share one GPU. Each evaluation holds the
device's lease *shared* while it loads, builds and checks (work other evaluations may do at
the same time), from its first work on the device (its interpreter's start and imports, host
work like the evaluation's other processes' start beside it, hold nothing), and *exclusive*
while it times, profiles or calibrates what timing subtracts,
and to confirm that a probe which found the device busy during the checks was not delayed by
another evaluation's work: then no other evaluation under the same lease runs anything on the
device. Compiles and the model's thinking take no lease.

The lease is two flock(2) locks, on files the agent side opens and hands over as descriptors
in the job (``gpu_lease``: gate, lock, log, holder, name; see kagent.sandbox.lease), so that
nothing of them is visible as a path inside the jail. Why two: flock lets new shared holders
in while an exclusive one waits, so with several members checking, timing could wait for
ever. Every holder passes the gate first; one that waits for the exclusive lock keeps the gate
closed until it has it, so the shared holders drain and no new one starts.

A shared holder drains at its next step, not at the end of its checks: before the solution
runs each step (remote.py), ``step_aside`` sees the gate closed and gives its hold back, then
shares again once the exclusive holder is done. Without it the one who times waited for the
whole check phase of every other evaluation: on an H100 with 4 members, a
calibration of 0.3 s waited 12-38 s and the members waited 287 s in a 426-s window.

The lease shares the device's time, not its memory: an evaluation whose referee (in an A/A
run, either contestant too) found the device's memory full while sharing it runs again
holding the lease exclusive from its first device work to its end (``alone`` in the job;
kagent.sandbox.evaluate decides, once).

Each hold is appended, when it ends, to the log as one JSON line (holder, kind, what, when it
was asked for, got and given back); an exclusive one is also sent on the result channel, so
that the result says its timing held the device alone and how long it waited. A process killed while it holds
drops its locks with it (the kernel releases a flock with the last descriptor); its hold is
then missing from the log, as its result is.

Standard library only: this runs in the referee (see the package's docstring).
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Optional

from .job import Job

RECORD_VERSION = 1
# The folder of a sweep's leases (kagent.sandbox.lease reads it; named here for messages).
LEASE_DIR_ENV = "KAGENT_GPU_LEASE"


class Lease:
    """One process's side of a device lease, over descriptors opened by the agent side."""

    def __init__(
        self, gate_fd: int, lock_fd: int, log_fd: int, holder: str, name: str, channel: Any = None, alone: bool = False
    ):
        self.gate_fd, self.lock_fd, self.log_fd = gate_fd, lock_fd, log_fd
        self.holder, self.name, self.channel = holder, name, channel
        # How the evaluation holds the device between its device-alone pieces: shared, or
        # (alone) exclusive from its first device work to its end, when it runs again after the
        # device's memory ran out while others shared it (kagent.sandbox.evaluate).
        self.base_kind = "exclusive" if alone else "shared"
        # Not passed on: a process this one starts (the solution's) could otherwise unlock it.
        for fd in (gate_fd, lock_fd, log_fd):
            os.set_inheritable(fd, False)
        self.hold: Optional[dict] = None

    def acquire(self, kind: str, what: str) -> None:
        """Wait for the lease, shared or exclusive; ``what`` is the work it is held for."""
        requested = time.time()
        fcntl.flock(self.gate_fd, fcntl.LOCK_EX)
        try:
            fcntl.flock(self.lock_fd, fcntl.LOCK_SH if kind == "shared" else fcntl.LOCK_EX)
        finally:
            fcntl.flock(self.gate_fd, fcntl.LOCK_UN)
        self.hold = {"kind": kind, "what": what, "requested_at": requested, "acquired_at": time.time()}

    def exclusive_waiting(self) -> bool:
        """Whether someone is at the gate: while this process holds the lock shared, that is one
        waiting for it alone (which keeps the gate until it has it), or, for a moment, another
        shared holder passing through (stepping aside for it costs two lock calls)."""
        try:
            fcntl.flock(self.gate_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(self.gate_fd, fcntl.LOCK_UN)
        return False

    def release(self) -> dict:
        """Give the lease back; the hold is logged and sent, and returned."""
        assert self.hold is not None, "released a lease that is not held"
        # The time before the unlock: the next holder's acquired_at is after it, never before.
        record = {
            "version": RECORD_VERSION,
            "lease": self.name,
            "holder": self.holder,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            **self.hold,
            "released_at": time.time(),
        }
        self.hold = None
        fcntl.flock(self.lock_fd, fcntl.LOCK_UN)
        # One write of one line on a descriptor opened with O_APPEND: holds of other processes
        # never interleave within it.
        os.write(self.log_fd, (json.dumps(record) + "\n").encode())
        if self.channel is not None and record["kind"] == "exclusive":  # the result says its timing held it
            self.channel.send("gpu_lease", **record)
        return record

    def close(self) -> None:
        if self.hold is not None:
            self.release()
        for fd in (self.gate_fd, self.lock_fd, self.log_fd):
            os.close(fd)


# The lease of this process's evaluation, while it holds one (see shared()).
_current: Optional[Lease] = None


@contextmanager
def shared(job: Job, channel: Any) -> Iterator[None]:
    """The whole evaluation, under the lease the job names (none: no lease, nothing waits);
    held shared from begin_device_work() on, given back at the end."""
    global _current
    spec = job.gpu_lease
    if not spec:
        yield
        return
    lease = Lease(
        spec["gate_fd"],
        spec["lock_fd"],
        spec["log_fd"],
        spec["holder"],
        spec["name"],
        channel,
        alone=bool(spec.get("alone")),
    )
    _current = lease
    try:
        yield
    finally:
        _current = None
        lease.close()


def begin_device_work(what: str) -> None:
    """Before the evaluation's first work on the device (its device context, its probe's first
    kernel): hold the lease shared from here on (exclusive for an evaluation run alone), waiting
    while another evaluation holds it alone. Until then the evaluation only started its
    interpreter and imported (2.9-5.6 s of every evaluation on the H100 hosts) and
    held nothing that others' timing waited for. Outside a lease, or once held, nothing happens."""
    lease = _current
    if lease is not None and lease.hold is None:
        lease.acquire(lease.base_kind, what)


def under_lease() -> bool:
    """Whether this evaluation takes a lease at all (a sweep's, or $KAGENT_GPU_LEASE's)."""
    return _current is not None


def held() -> Optional[str]:
    """How this evaluation holds its device's lease now: "shared" (other evaluations' work may
    be on the device), "exclusive", or None (no lease: nothing is known of other work)."""
    lease = _current
    return lease.hold["kind"] if lease is not None and lease.hold is not None else None


def step_aside() -> bool:
    """Between two pieces of shared work (called with no work of this evaluation on the device
    and the solution's process stopped): where another evaluation waits to hold the device
    alone, give the shared hold back and wait to share it again after that one's hold. Returns
    whether it stepped aside. Outside a shared hold, nothing happens."""
    lease = _current
    if lease is None or lease.hold is None or lease.hold["kind"] != "shared" or not lease.exclusive_waiting():
        return False
    lease.release()
    lease.acquire("shared", "evaluation (after stepping aside for another's device-alone work)")
    return True


@contextmanager
def exclusive(what: str, shared_after: bool = True) -> Iterator[None]:
    """Timed or profiled work: the device alone, then (``shared_after``) back to holding it as
    the evaluation does between such pieces (shared, or alone for an evaluation run alone).

    Outside an evaluation that holds a lease, nothing happens."""
    lease = _current
    if lease is None:
        yield
        return
    if lease.hold is not None:
        lease.release()
    lease.acquire("exclusive", what)
    try:
        yield
    finally:
        lease.release()
        if shared_after:
            lease.acquire(lease.base_kind, f"evaluation (after {what})")
