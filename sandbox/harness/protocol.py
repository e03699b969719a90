"""The channel from the evaluation child to the agent side.

The child writes one JSON object per line to a file descriptor that the parent opened for
it (a pipe), never to stdout: what the candidate prints cannot pass for a harness message.
Each object has an ``event`` key; the last one of a complete run is ``done``.

The solution runs in a process of its own that never holds that descriptor, but every line
is also signed, so that nothing else can pass for the referee: ``seq`` counts the lines and
``mac`` is an HMAC-SHA256 of the rest, keyed by a secret the parent sends through a second
pipe that the harness reads and closes first of all. A line anyone else writes fails the
check.
"""

from __future__ import annotations

import ctypes
import hashlib
import hmac
import json
import math
import os
from typing import Any

KEY_BYTES = 32

# Version of the job file and of the event stream. The agent side refuses other versions.
# 2: the job states its kind whole (kinds.Kind), not by a name the harness looked up.
PROTOCOL_VERSION = 2

# Exit codes of the child (documented for people reading logs; the verdict comes from the
# events, never from the exit code alone).
EXIT_OK = 0  # the run completed; the verdict is in the events
EXIT_BAD_JOB = 3  # the job file could not be read: a kagent bug


def _clean(value: Any) -> Any:
    """JSON has no NaN or infinity: send them as strings so the line stays valid JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def signature(key: bytes, record: dict) -> str:
    """The MAC of one event: over its canonical JSON, ``seq`` included, ``mac`` left out."""
    body = json.dumps({k: v for k, v in record.items() if k != "mac"}, sort_keys=True)
    return hmac.new(key, body.encode(), hashlib.sha256).hexdigest()


def read_key(fd: int) -> bytes:
    """The signing key from ``fd``, which is closed afterwards."""
    key = b""
    try:
        while len(key) < KEY_BYTES:
            chunk = os.read(fd, KEY_BYTES - len(key))
            if not chunk:
                break
            key += chunk
    finally:
        os.close(fd)
    if len(key) != KEY_BYTES:
        raise ValueError(f"the key pipe gave {len(key)} bytes, not {KEY_BYTES}")
    return key


class Channel:
    """Writes events to the result file descriptor, one flushed, signed line each."""

    def __init__(self, fd: int | None, key: bytes | None = None):
        # fd None (used by tests and by `python -m kagent_harness` by hand) writes to a list.
        self._fd = fd
        self._key = key
        self._seq = 0
        self.sent: list[dict] = []

    def send(self, event: str, **fields: Any) -> None:
        record = _clean({"event": event, **fields})
        self.sent.append(record)
        if self._fd is None:
            return
        if self._key is not None:
            record = {**record, "seq": self._seq}
            record["mac"] = signature(self._key, record)
            self._seq += 1
        data = (json.dumps(record) + "\n").encode()
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]


PR_SET_DUMPABLE = 4


def make_non_dumpable() -> None:
    """No process without CAP_SYS_PTRACE may read this one's memory or attach to it (the
    referee, the baseline's process and the reference workers make themselves so before any
    solution code runs anywhere)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")
