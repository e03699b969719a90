"""The channel from the evaluation child to the agent side.

The child writes one JSON object per line to a file descriptor that the parent opened for
it (a pipe), never to stdout: what the candidate prints cannot pass for a harness message.
Each object has an ``event`` key; the last one of a complete run is ``done``.
"""
from __future__ import annotations

import json
import math
import os
from typing import Any

# Version of the job file and of the event stream. The agent side refuses other versions.
PROTOCOL_VERSION = 1

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


class Channel:
    """Writes events to the result file descriptor, one flushed line each."""

    def __init__(self, fd: int | None):
        # fd None (used by tests and by `python -m kagent_harness` by hand) writes to a list.
        self._fd = fd
        self.sent: list[dict] = []

    def send(self, event: str, **fields: Any) -> None:
        record = _clean({"event": event, **fields})
        self.sent.append(record)
        if self._fd is None:
            return
        data = (json.dumps(record) + "\n").encode()
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
