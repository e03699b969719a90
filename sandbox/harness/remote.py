"""The solution's process as the referee sees it: started, asked, stopped, watched.

The referee (this process) holds the reference, the baseline, the expected values, the key
and the clock. The solution runs in a child process of its own (solution_server.py) that it
starts from a fresh interpreter after everything trusted is built and the cache is sealed.
The two exchange JSON lines over two pipes and tensors through a shared arena
(exchange.py); the referee copies every returned tensor out of the arena before it looks
at it, so nothing the solution returns is ever called.

Between requests the solution's process is stopped (SIGSTOP): it runs only while the
referee waits for its answer. After every answer the referee checks, outside any timed
interval, that no other process of the evaluation is left running, and on CUDA that the
device is idle (a probe kernel of the referee's own must not wait behind work of another
context). So the baseline, timed in the referee, runs only while the solution's process is
stopped, has no other process, and has left nothing on the device.

The referee itself is made non-dumpable before the solution's process starts: a process
without capabilities (the jail drops them all) can then neither read its memory through
/proc nor attach a debugger to it.
"""
from __future__ import annotations

import ctypes
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

import torch

from .exchange import Arena, Layout, SlotAllocator, decode, encode
from .loading import CandidateError

SERVER = Path(__file__).resolve().parent / "solution_server.py"
# A reply longer than this is a protocol violation (a real one is a few hundred bytes).
MAX_REPLY_BYTES = 1 << 20
# How often a wait for a reply checks that the solution's process still lives.
POLL_S = 0.5
PR_SET_DUMPABLE = 4
# Requests timed before the solution is imported, while the process runs only our code.
CALIBRATION_REQUESTS = 15
# The device counts as idle after an answer when the probe takes no longer than this factor
# of its slowest calibration reading plus this slack. Work left behind by another context
# delays it: the device runs two contexts' work time-sliced, never together.
IDLE_FACTOR = 2.0
IDLE_SLACK_MS = 0.1

_perf_counter_ns = time.perf_counter_ns


def make_non_dumpable() -> None:
    """No process without CAP_SYS_PTRACE may read this one's memory or attach to it."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


class SolutionFailed(CandidateError):
    """The solution's process raised, broke the protocol, or died; ``crashed`` for the last."""

    def __init__(self, message: str, details: str = "", crashed: bool = False):
        super().__init__(message, details)
        self.crashed = crashed


class LeftRunning(CandidateError):
    """The solution left a process or device work running after its answer (hidden work)."""


class DeviceIdleProbe:
    """A one-element kernel of the referee's own, timed from launch to synchronized end.

    After the solution's process ran anything on the device, the probe pays a switch of
    the device from that process's context back to the referee's (about a quarter of a
    millisecond on an H200): its idle time is calibrated in exactly that situation."""

    def __init__(self, device: torch.device):
        self.device = device
        self.cell = torch.zeros(1, device=device)
        self.idle_ms = 0.0
        self.limit_ms = float("inf")

    def calibrate(self, readings: list[float]) -> None:
        ordered = sorted(readings)
        self.idle_ms = ordered[len(ordered) // 2]
        self.limit_ms = ordered[min(len(ordered) - 1, len(ordered) * 9 // 10)] * IDLE_FACTOR + IDLE_SLACK_MS

    def milliseconds(self) -> float:
        torch.cuda.synchronize(self.device)  # the referee's own work first: it is not the question
        start = _perf_counter_ns()
        self.cell.add_(1.0)
        torch.cuda.synchronize(self.device)
        return (_perf_counter_ns() - start) / 1e6


class SolutionProcess:
    """Start with ``launch`` and ``connect``; every ``request`` resumes the process, waits for
    its reply and stops it again; ``close`` ends it."""

    def __init__(self, device: torch.device, scratch: Path, env: dict[str, str], pid_namespace: bool):
        self.device = device
        self.scratch = scratch
        self.env = env
        self.pid_namespace = pid_namespace
        self.proc: Optional[subprocess.Popen] = None
        self.request_floor_ms = 0.0
        self.watchdog: Any = None  # watchdog.StepWatchdog, set by its owner: ends a request that hangs

    @property
    def process(self) -> subprocess.Popen:
        """The solution's process, once launched."""
        if self.proc is None:
            raise RuntimeError("the solution's process was used before it was launched")
        return self.proc

    def launch(self) -> None:
        """Start the process: it imports torch and waits for its first request, so its start
        overlaps with the referee's own preparations."""
        requests_read, self._requests = os.pipe()
        self._replies, replies_write = os.pipe()
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-B", "-u", str(SERVER), "--requests-fd", str(requests_read),
             "--replies-fd", str(replies_write), "--device", str(self.device)],
            cwd=self.scratch, env=self.env, stdin=subprocess.DEVNULL, pass_fds=(requests_read, replies_write),
            start_new_session=True)
        os.close(requests_read)
        os.close(replies_write)
        self._buffer = b""

    def connect(self, arena: Arena, interlude: Callable[[], None]) -> None:
        """Share the arena with the process and calibrate what an empty request costs, each
        after ``interlude`` (see ``_calibrate``)."""
        self.arena = arena
        self.interlude = interlude  # also before each isolated step (timing.isolated_step_ms)
        self.slots = SlotAllocator(arena)
        self.probe = DeviceIdleProbe(self.device) if self.device.type == "cuda" else None
        self.request({"op": "attach", "arena": arena.description}, "attaching the exchange arena")
        self._calibrate(interlude)

    def _calibrate(self, interlude: Callable[[], None]) -> None:
        """What a request costs when it does nothing: the pipes, waking the process, and on
        CUDA the device's switch into its context and back. Measured before the solution is
        imported, so the solution cannot inflate it, and taken off every timed block, which
        leaves the block's own work (see ``request``).

        Each empty request follows ``interlude``, work of the referee's own like the
        baseline's that comes before a timed block: a request right after another costs a
        third less than one after the process slept while the referee worked, and the
        difference would stay in every block. The median, not the least: a request's
        overhead varies by a tenth of a millisecond from one to the next, and the least would
        leave that much, on average, in every block."""
        answered, probes = [], []
        for _ in range(CALIBRATION_REQUESTS):
            interlude()
            reply = self.request({"op": "noop"}, "timing an empty request")
            answered.append(reply["answered_ms"])
            probes.append(reply["probe_ms"])
        self.request_floor_ms = float(sorted(answered)[len(answered) // 2])
        if self.probe is not None:
            self.probe.calibrate(probes)

    # -- one request ---------------------------------------------------------------------------
    def request(self, message: dict, what: str) -> dict:
        """Send ``message``, wait for the reply, stop the process, check what it left running.

        The reply carries ``block_ms``, the request's time for a timed block: from the send
        to the reply, less what an empty request costs, plus whatever the device probe after
        the process was stopped took beyond its idle time. So device work left behind is
        counted as far as it delays the probe, and fails the evaluation past the probe's limit.
        """
        if self.watchdog is not None:
            self.watchdog.begin(message)
        self._signal(signal.SIGCONT)
        start = _perf_counter_ns()
        self._send(message)
        reply = self._receive(what)
        answered_ms = (_perf_counter_ns() - start) / 1e6
        self._signal(signal.SIGSTOP)
        self._wait_stopped(what)
        probe_ms = self.probe.milliseconds() if self.probe is not None else 0.0
        self._check_nothing_left(what, probe_ms)
        if "raised" in reply:
            raise SolutionFailed(str(reply["raised"])[:1000], str(reply.get("details", ""))[-4000:])
        if "protocol" in reply:
            raise SolutionFailed(f"the solution's process broke the exchange protocol while {what}: "
                                 f"{str(reply['protocol'])[:300]}", str(reply.get("details", ""))[-4000:])
        if reply.get("ok") is not True:
            raise SolutionFailed(f"the solution's process answered {str(reply)[:200]} while {what}")
        idle_ms = self.probe.idle_ms if self.probe is not None else 0.0
        reply.update(answered_ms=answered_ms, probe_ms=probe_ms,
                     block_ms=answered_ms - self.request_floor_ms + max(0.0, probe_ms - idle_ms))
        return reply

    def _send(self, message: dict) -> None:
        data = (json.dumps(message) + "\n").encode()
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self._requests, view):]
        except BrokenPipeError:
            raise self._died("receiving a request") from None

    def _receive(self, what: str) -> dict:
        selector = selectors.DefaultSelector()
        selector.register(self._replies, selectors.EVENT_READ)
        try:
            while b"\n" not in self._buffer:
                if not selector.select(timeout=POLL_S):
                    if self.process.poll() is not None:
                        raise self._died(what)
                    if self.watchdog is not None:
                        self.watchdog.check(what)
                    continue
                chunk = os.read(self._replies, 1 << 16)
                if not chunk:
                    raise self._died(what)
                self._buffer += chunk
                if len(self._buffer) > MAX_REPLY_BYTES:
                    raise SolutionFailed(f"the solution's process sent more than {MAX_REPLY_BYTES} bytes "
                                         f"of reply while {what}")
        finally:
            selector.close()
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            reply = json.loads(line)
        except ValueError:
            reply = None
        if not isinstance(reply, dict) or self._buffer:
            raise SolutionFailed(f"the solution's process wrote something other than its reply to the "
                                 f"referee while {what}: {line[:120]!r}")
        return reply

    def _died(self, what: str) -> SolutionFailed:
        try:
            code = self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        how = ("still running, but it closed its reply pipe" if code is None
               else f"killed by signal {-code}" if code < 0 else f"exit code {code}")
        return SolutionFailed(f"the solution's process died while {what} ({how})", crashed=True)

    def _signal(self, sig: int) -> None:
        try:
            os.kill(self.process.pid, sig)
        except ProcessLookupError:
            pass  # dead: the next read says so

    def _wait_stopped(self, what: str) -> None:
        deadline = time.monotonic() + 5
        while _state(self.process.pid) not in ("T", "t", "Z", None):
            if time.monotonic() > deadline:
                raise SolutionFailed(f"the solution's process could not be stopped after {what}")
            time.sleep(0.0002)

    def _check_nothing_left(self, what: str, probe_ms: float) -> None:
        strays = self.stray_processes()
        if strays:
            raise LeftRunning(f"the solution left {len(strays)} process(es) running after {what}: "
                              + ", ".join(strays[:5]))
        if self.probe is not None and probe_ms > self.probe.limit_ms:
            raise LeftRunning(f"the device was still busy after {what}: a probe kernel took {probe_ms:.3f} ms "
                              f"(idle: {self.probe.idle_ms:.3f} ms, allowed {self.probe.limit_ms:.3f} ms); the "
                              f"solution left work running on the GPU past its answer")

    def stray_processes(self) -> list[str]:
        """Live processes of the evaluation other than the jail, the referee and the solution's
        process: in a pid namespace of its own every process there; without one, what
        descends from the solution's process or shares its session."""
        known = {1, os.getpid(), self.process.pid} if self.pid_namespace else {os.getpid(), self.process.pid}
        session = _session(self.process.pid)
        table = _processes()
        found = []
        for pid, (state, _, sid, name) in table.items():
            if pid in known or state in ("Z", "X"):
                continue
            if self.pid_namespace or sid == session or _descends(table, pid, self.process.pid):
                found.append(f"{pid} ({name})")
        return found

    # -- the arena -----------------------------------------------------------------------------
    def put(self, value: Any) -> dict:
        """Tensors of ``value`` copied into fresh slots; returns the tagged tree."""
        def put_tensor(tensor: Any) -> dict:
            slot = self.slots.slot(tuple(tensor.shape), tensor.dtype)
            self.arena.view(slot).copy_(tensor)
            return slot
        return encode(value, put_tensor)

    def expect(self, layout: Any) -> dict:
        """Fresh output slots for ``layout`` (Layouts in place of tensors)."""
        return encode(layout, lambda want: self.slots.slot(tuple(want.shape), want.dtype))

    def take(self, node: dict) -> Any:
        """The tensors of ``node``, copied out of the arena into the referee's own memory."""
        return decode(node, lambda slot: self.arena.view(slot).clone())

    def close(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self._signal(signal.SIGKILL)
            self.proc.wait()
        for fd in (self._requests, self._replies):
            try:
                os.close(fd)
            except OSError:
                pass


def _state(pid: int) -> Optional[str]:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _session(pid: int) -> Optional[int]:
    try:
        return os.getsid(pid)
    except OSError:
        return None


def _processes() -> dict[int, tuple[str, int, int, str]]:
    """pid -> (state, parent pid, session id, name) of every process this /proc shows."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue  # gone meanwhile
        name = text[text.find("(") + 1:text.rfind(")")]
        fields = text.rsplit(")", 1)[1].split()
        found[int(entry)] = (fields[0], int(fields[1]), int(fields[3]), name)
    return found


def _descends(table: dict[int, tuple[str, int, int, str]], pid: int, ancestor: int) -> bool:
    """Whether ``ancestor`` is on ``pid``'s chain of parents in ``table``."""
    seen = set()
    while pid in table and pid not in seen:
        seen.add(pid)
        pid = table[pid][1]
        if pid == ancestor:
            return True
    return False


def layout_of(tree: Any) -> Any:
    """The same tree with every tensor replaced by its Layout."""
    if isinstance(tree, torch.Tensor):
        return Layout.of(tree)
    if isinstance(tree, dict):
        return {k: layout_of(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [layout_of(v) for v in tree]
    if isinstance(tree, tuple):
        return tuple(layout_of(v) for v in tree)
    return tree
