"""The contestants' processes as the referee sees them: started, asked, stopped, watched.

The referee (this process) holds the reference, the expected values, the key and the clock.
Each contestant runs in a process of its own, served by the same code (solution_server.py):
the solution's, started from a fresh interpreter and told to import the solution only after
everything trusted is built and the cache is sealed; and, for a timed run, the baseline's,
which loads the task's baseline (and in an A/A run the solution's stands in for it with the
same baseline). Reference workers (workers.py) are processes of the referee's own code that
compute expected outputs beside it; they never run a contestant and are gone before any
timing starts.

The referee and a process exchange JSON lines over two pipes and tensors through a shared
arena (exchange.py); the referee copies every returned tensor out of the arena before it
looks at it, so nothing the solution returns is ever called.

Between requests a contestant's process is stopped (SIGSTOP): it runs only while the referee
waits for its answer, and every request, to either contestant, is timed and watched alike.
After every answer the referee checks, outside any timed interval, that no other process of
the evaluation is left running, and on CUDA that the device is idle (a probe kernel of the
referee's own must not wait behind work of another context). So the baseline's blocks run
only while the solution's process is stopped (its state read back as stopped from /proc
before the baseline is asked anything), has no other process, and has left nothing on the
device (the probe after its last answer took no longer than when idle).

The referee, the baseline's process and the workers are non-dumpable before any solution
code runs: a process without capabilities (the jail drops them all) can then neither read
their memory through /proc nor attach a debugger to them.
"""
# Longer than 600 lines: the referee's whole view of a contestant's process is one protocol
# (a process runs only while it is asked, and every answer is watched): Peer, Watch and
# ContestantProcess keep its invariants together, where one reading can check them.

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Optional, TypeVar

import torch

from . import lease, process_table, spawn
from .exchange import Arena, Layout, SlotAllocator, copy_tree, decode, encode
from .loading import CandidateError
from .protocol import make_non_dumpable

__all__ = ["make_non_dumpable"]

# A reply longer than this is a protocol violation (a real one is a few hundred bytes).
MAX_REPLY_BYTES = 1 << 20
# How often a wait for a reply checks that the process still lives.
POLL_S = 0.5
# Empty requests timed per contestant before the solution is imported, while every process
# runs only our code.
CALIBRATION_REQUESTS = 10
# The device counts as idle after an answer when the probe takes no longer than this factor
# of its slowest calibration reading plus this slack. Work left behind by another context
# delays it: the device runs two contexts' work time-sliced, never together.
IDLE_FACTOR = 2.0
IDLE_SLACK_MS = 0.1
# A probe over its limit while other evaluations share the device is read again this many
# times, this far apart, before the device is asked for alone (Watch.check).
SHARED_REPROBES = 10
SHARED_REPROBE_GAP_S = 0.005
# With the device not shared, a probe over its limit but within this factor of it is read
# again, up to REREADS_ALONE times, REREAD_GAP_S apart (Watch._settle_alone); one further
# over fails at once.
REREAD_WITHIN_LIMITS = 2.0
REREADS_ALONE = 2
REREAD_GAP_S = 0.002

_perf_counter_ns = time.perf_counter_ns


class SolutionFailed(CandidateError):
    """The solution's process raised, broke the protocol, or died; ``crashed`` for the last."""

    def __init__(self, message: str, details: str = "", crashed: bool = False):
        super().__init__(message, details)
        self.crashed = crashed


class LeftRunning(CandidateError):
    """The solution left a process or device work running after an answer (hidden work)."""


class TrustedFailed(Exception):
    """A process of the referee's own (the baseline's, a reference worker) raised or died.

    Not the solution's error, unless the solution signalled it (it runs as the same user, so
    it can): the verdict is a crash either way, never a pass."""

    def __init__(self, message: str, details: str = ""):
        super().__init__(message)
        self.message, self.details = message, details


class DeviceIdleProbe:
    """A one-element kernel of the referee's own, timed from launch to synchronized end.

    After a contestant's process ran anything on the device, the probe pays a switch of the
    device from that process's context back to the referee's (about a quarter of a
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


class Peer:
    """A child process of the referee's that answers one JSON line per request."""

    # Who it is, in messages: "the solution's process", "reference worker 2", ...
    label = "the process"
    # A contestant's process answers one request at a time, and anything more it writes is a
    # protocol violation; a worker may be sent a second request before its first answer.
    pipelined = False
    # watchdog.StepWatchdog for the solution's process, set by its owner: ends a request that hangs.
    watchdog: Any = None

    def __init__(self, argv: list[str], scratch: Path, env: dict[str, str]):
        self.argv, self.scratch, self.env = argv, scratch, env
        self.proc: Optional[subprocess.Popen] = None
        self.started: Optional[spawn.Started] = None
        self._buffer = b""

    @property
    def process(self) -> subprocess.Popen:
        """The process, once launched."""
        if self.proc is None:
            raise RuntimeError(f"{self.label} was used before it was launched")
        return self.proc

    @property
    def pid(self) -> int:
        """The server's own process (in a box, not ``process``: see spawn.Started)."""
        return self.started.server_pid() if self.started is not None else self.process.pid

    def launch(self, started: Optional[spawn.Started] = None) -> None:
        """Start the process, or adopt ``started``, the same server started earlier
        (spawn.start_early): it imports torch and waits for its first request, so its start
        overlaps with the referee's own preparations."""
        if started is None:
            started = spawn.start(self.argv, self.scratch, self.env)
        self.proc, self._requests, self._replies = started.proc, started.requests_fd, started.replies_fd
        self.started = started

    @property
    def replies_fd(self) -> int:
        return self._replies

    def send(self, message: dict) -> None:
        data = (json.dumps(message) + "\n").encode()
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self._requests, view) :]
        except BrokenPipeError:
            raise self._died("receiving a request") from None

    def receive(self, what: str) -> dict:
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
                    raise self._failure(f"{self.label} sent more than {MAX_REPLY_BYTES} bytes of reply while {what}")
        finally:
            selector.close()
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            reply = json.loads(line)
        except ValueError:
            reply = None
        if not isinstance(reply, dict) or (self._buffer and not self.pipelined):
            raise self._failure(
                f"{self.label} wrote something other than its reply to the referee while {what}: {line[:120]!r}"
            )
        return reply

    def checked(self, reply: dict, what: str) -> dict:
        """``reply`` if it says ok; else the failure it reports, raised."""
        if "raised" in reply:
            raise self._failure(str(reply["raised"])[:1000], str(reply.get("details", ""))[-4000:])
        if "protocol" in reply:
            raise self._failure(
                f"{self.label} broke the exchange protocol while {what}: {str(reply['protocol'])[:300]}",
                str(reply.get("details", ""))[-4000:],
            )
        if reply.get("ok") is not True:
            raise self._failure(f"{self.label} answered {str(reply)[:200]} while {what}")
        return reply

    def _failure(self, message: str, details: str = "", crashed: bool = False) -> Exception:
        return TrustedFailed(message, details)

    def _died(self, what: str) -> Exception:
        try:
            code = self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        how = (
            "still running, but it closed its reply pipe"
            if code is None
            else f"killed by signal {-code}"
            if code < 0
            else f"exit code {code}"
        )
        return self._failure(f"{self.label} died while {what} ({how})", crashed=True)

    def signal(self, sig: int) -> None:
        try:
            os.kill(self.pid, sig)
        except ProcessLookupError:
            pass  # dead: the next read says so

    def close(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.signal(signal.SIGKILL)
            self.proc.wait()
        for fd in (self._requests, self._replies):
            try:
                os.close(fd)
            except OSError:
                pass


class Watch:
    """What the referee checks after every answer of a contestant: no stray process of the
    evaluation, and (on CUDA) an idle device.

    ``known`` are the evaluation's own processes (the jail's init, the referee, each
    contestant's and worker's process); ``suspect`` the solution's process."""

    def __init__(self, device: torch.device, pid_namespace: bool):
        self.pid_namespace = pid_namespace
        self.known: set[int] = {1, os.getpid()} if pid_namespace else {os.getpid()}
        self.suspect: Optional[ContestantProcess] = None
        self.probe = DeviceIdleProbe(device) if device.type == "cuda" else None
        # Probes that read busy while the device was shared, and what reading them again found
        # (Watch.check; each check of the evaluation lists those made during it).
        self.confirmed: list[dict] = []
        # What of the referee's own work is in flight beside the contestants (the reference
        # workers' requests), as words; empty when none. The probe after an answer reads any
        # other context's work as work the solution left running: a probed answer with trusted
        # work in flight is a bug of the harness (on an H200 every evaluation failed hidden_work
        # that way), checked on every device so that CPU tests catch it.
        self.trusted_in_flight: Callable[[], str] = lambda: ""

    def strays(self) -> list[str]:
        """Live processes of the evaluation other than its own: in a pid namespace of its
        own every other process there; without one, what descends from the solution's
        process or shares its session."""
        suspect = self.suspect.pid if self.suspect is not None and self.suspect.proc is not None else None
        if suspect is None and not self.pid_namespace:
            return []
        session = _session(suspect) if suspect is not None else None
        table = _processes()
        found = []
        for pid, (state, _, sid, name) in table.items():
            if pid in self.known or (state in ("Z", "X") and not process_table.alive(pid)):
                continue
            if self.pid_namespace or sid == session or (suspect is not None and _descends(table, pid, suspect)):
                found.append(f"{pid} ({name})")
        return found

    def check(self, what: str, probe: bool = True) -> float:
        """Fail the evaluation for anything the solution left running after ``what``: a stray
        process, and unless ``probe`` is False, work on the device. Returns the device probe's
        time that stands: the first reading, where it was within the limit or the device is
        not shared (``_settle_alone``); under a shared lease the reading taken again that
        cleared it (``_settle_shared``); 0.0 where none was read."""
        strays = self.strays()
        if strays:
            raise LeftRunning(
                f"the solution left {len(strays)} process(es) running after {what}: " + ", ".join(strays[:5])
            )
        if not probe:
            return 0.0
        beside = self.trusted_in_flight()
        if beside:
            raise AssertionError(
                f"the device probe after {what} would read the referee's own work as the solution's: {beside}"
            )
        if self.probe is None:
            return 0.0
        first_ms = self.probe.milliseconds()
        if first_ms <= self.probe.limit_ms:
            return first_ms
        if lease.held() == "shared":
            return self._settle_shared(what, first_ms)
        return self._settle_alone(what, first_ms)

    def _settle_shared(self, what: str, first_ms: float) -> float:
        """Under a sweep's lease other evaluations check beside this one, and their work delays
        the probe just as work left behind would (on an H200, 6 at once failed 7 honest
        evaluations of 10 that way). The solution's process is stopped, so it queues nothing
        more: once one reading is within the limit, nothing it left was still pending then.
        Other evaluations' steps come and go within milliseconds, so a few readings while
        sharing usually settle it; if none does, ask with the device alone, which waits for
        every other evaluation's checks. Work that ended meanwhile cannot reach a timed block:
        timing holds the device alone, and its probes are never asked again."""
        assert self.probe is not None
        alone = False
        for _ in range(SHARED_REPROBES):
            time.sleep(SHARED_REPROBE_GAP_S)
            probe_ms = self.probe.milliseconds()
            if probe_ms <= self.probe.limit_ms:
                break
        else:
            alone = True
            with lease.exclusive(f"confirming an idle device after {what}"):
                probe_ms = self.probe.milliseconds()
        self.confirmed.append(
            {"what": what, "first_ms": round(first_ms, 4), "again_ms": round(probe_ms, 4), "alone": alone}
        )
        if probe_ms <= self.probe.limit_ms:
            return probe_ms
        raise self._busy(what, f"{first_ms:.3f} ms, then {probe_ms:.3f} ms with the device alone")

    def _settle_alone(self, what: str, first_ms: float) -> float:
        """Nothing else of kagent's on the device: a reading just over the limit (within
        REREAD_WITHIN_LIMITS of it) is read again, up to REREADS_ALONE times, and fails only
        if every reading is over it. Work still running delays every reading (work left behind
        holds the device for a time slice, about 2 ms on an H200, before the probe's context
        gets it: 1.98 ms against 0.54 allowed, which fails at once), while the host's and the
        device's own hiccups come and go: an honest baseline failed once at 0.515 ms against
        0.510 allowed (H200), and a fast kernel on an H100 read 0.726 ms then 0.685
        against 0.511 allowed, once in 9 first readings over the limit, the other 8 settled by
        the second. The first reading is what stands: whatever delayed it, work that
        ended meanwhile included, is charged to the block it follows. A reading further over
        fails at once."""
        assert self.probe is not None
        holding = lease.held()
        readings = [first_ms]
        while readings[-1] <= self.probe.limit_ms * REREAD_WITHIN_LIMITS and len(readings) <= REREADS_ALONE:
            if len(readings) > 1:
                time.sleep(REREAD_GAP_S)
            readings.append(self.probe.milliseconds())
            if readings[-1] <= self.probe.limit_ms:
                break
        if len(readings) > 1:
            self.confirmed.append(
                {
                    "what": what,
                    "first_ms": round(first_ms, 4),
                    "again_ms": round(readings[-1], 4),
                    "alone": holding == "exclusive",
                }
            )
            if readings[-1] <= self.probe.limit_ms:
                return first_ms
        shown = f"{first_ms:.3f} ms"
        if len(readings) > 1:
            shown += ", then " + ", ".join(f"{ms:.3f}" for ms in readings[1:]) + " ms"
        if holding == "exclusive":
            shown += " with the device alone"
        elif not lease.under_lease():
            shown += (
                "; work of another process on this GPU delays it the same way: evaluations that share a GPU "
                f"must share its lease (${lease.LEASE_DIR_ENV})"
            )
        raise self._busy(what, shown)

    def _busy(self, what: str, shown: str) -> LeftRunning:
        assert self.probe is not None
        return LeftRunning(
            f"the device was still busy after {what}: a probe kernel took {shown} (idle: "
            f"{self.probe.idle_ms:.3f} ms, allowed {self.probe.limit_ms:.3f} ms); the solution left "
            f"work running on the GPU past its answer"
        )


class ContestantProcess(Peer):
    """A contestant's server. Start with ``launch`` and ``connect``; every ``request`` resumes
    the process, waits for its reply and stops it again (``begin`` and ``finish`` do the two
    halves, for a request the referee overlaps with work of its own); ``close`` ends it."""

    def __init__(self, who: str, device: torch.device, scratch: Path, env: dict[str, str], watch: Watch):
        trusted = who == "baseline"
        super().__init__(spawn.contestant_argv(who, str(device)), scratch, env)
        self.who, self.device, self.watch = who, device, watch
        self.label = f"the {who}'s process"
        self.trusted = trusted
        self.request_floor_ms = 0.0
        self._started_ns = 0

    def launch(self, started: Optional[spawn.Started] = None) -> None:
        super().launch(started)
        self.watch.known.add(self.pid)
        self.watch.known.update(self.started.box_pids() if self.started is not None else [])
        if not self.trusted:
            self.watch.suspect = self

    def connect(self, arena: Arena) -> None:
        """Share ``arena`` with the process."""
        self.arena = arena
        self.slots = SlotAllocator(arena)
        self.request({"op": "attach", "arena": arena.description}, "attaching the exchange arena")

    def _failure(self, message: str, details: str = "", crashed: bool = False) -> Exception:
        if self.trusted:
            return TrustedFailed(message, details)
        return SolutionFailed(message, details, crashed)

    # -- one request ---------------------------------------------------------------------------
    def request(self, message: dict, what: str, probe: bool = True) -> dict:
        """Send ``message``, wait for the reply, stop the process, check what it left running.

        The reply carries ``block_ms``, the request's time for a timed block: from the send
        to the reply, less what an empty request costs (``request_floor_ms``), plus whatever
        the device probe after the process was stopped took beyond its idle time. So device
        work left behind is counted as far as it delays the probe, and fails the evaluation
        past the probe's limit.

        ``probe=False`` (staging a timed block's inputs): no device probe after it, for the
        block that follows at once is the process's own: work the staging left running
        delays that block, which counts against the solution, and what is still running
        after the block delays the block's probe. (A probe there read a context switch after
        the staging's copies, which calibration never sees: on an H200 it failed an honest
        kernel once in five evaluations, 0.527 ms against 0.496 allowed.)"""
        self.begin(message)
        return self.finish(what, probe)

    def begin(self, message: dict) -> None:
        # What the referee copied into the arena is there before the process reads it: its
        # copies ran on the referee's stream, and nothing orders them before the process's own.
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        # Where nothing of this evaluation is on the device (the referee synchronized, no reference
        # worker busy, the solution stopped) and another evaluation waits to time, it goes first
        # (lease.py).
        if not self.watch.trusted_in_flight():
            lease.step_aside()
        if self.watchdog is not None:
            self.watchdog.begin(message)
        self.signal(signal.SIGCONT)
        self._started_ns = _perf_counter_ns()
        self.send(message)

    def finish(self, what: str, probe: bool = True) -> dict:
        reply = self.receive(what)
        answered_ms = (_perf_counter_ns() - self._started_ns) / 1e6
        self.signal(signal.SIGSTOP)
        self._wait_stopped(what)
        probe_ms = self.watch.check(what, probe)
        self.checked(reply, what)
        idle_ms = self.watch.probe.idle_ms if self.watch.probe is not None and probe else 0.0
        reply.update(
            answered_ms=answered_ms,
            probe_ms=probe_ms,
            block_ms=answered_ms - self.request_floor_ms + max(0.0, probe_ms - idle_ms),
        )
        return reply

    def _wait_stopped(self, what: str) -> None:
        deadline = time.monotonic() + 5
        while not process_table.all_stopped(self.pid):
            if time.monotonic() > deadline:
                raise self._failure(f"{self.label} could not be stopped after {what}")
            time.sleep(0.0002)

    # -- the arena -----------------------------------------------------------------------------
    def put(self, value: Any) -> dict:
        """Tensors of ``value`` copied into fresh slots; returns the tagged tree."""

        def put_tensor(tensor: Any) -> dict:
            slot = self.slots.slot(tuple(tensor.shape), tensor.dtype)
            self.arena.view(slot).copy_(tensor)
            return slot

        return encode(value, put_tensor)

    def put_into(self, node: dict, value: Any) -> None:
        """Copy the tensors of ``value`` into the slots ``node`` names (made by ``put`` from a
        value of the same structure): the arena's inputs as they were, whatever the process
        did to them since."""
        copy_tree(decode(node, self.arena.view), value)

    def expect(self, layout: Any) -> dict:
        """Fresh output slots for ``layout`` (Layouts in place of tensors)."""
        return encode(layout, lambda want: self.slots.slot(tuple(want.shape), want.dtype))

    def take(self, node: dict) -> Any:
        """The tensors of ``node``, copied out of the arena into the referee's own memory."""
        return decode(node, lambda slot: self.arena.view(slot).clone())


def calibrate(
    contestants: list[ContestantProcess],
    interlude: Callable[[], None],
    requests_for: Callable[[ContestantProcess], tuple[dict, dict]],
    requests: int = CALIBRATION_REQUESTS,
) -> None:
    """What a timed request costs when it runs no step: the pipes, waking the process,
    staging inputs and recording nothing, and on CUDA the device's switch into its context
    and back. Measured before the solution is imported, so the solution cannot inflate it,
    and taken off every timed block, which leaves the block's own work (see
    ``ContestantProcess.request``).

    ``requests_for(contestant)`` gives the two requests that mirror a timed block: the
    untimed one that stages its inputs, and the block itself with no step (the same kind of
    request, with the same slots, as timing.Contestant.next_block sends). The contestants
    take turns in ABBA order, each pair after ``interlude``, work of the referee's own, the
    device synchronized. One figure for every contestant, the median of all: the same for
    both sides of an A/A run, so the run stays exact by symmetry. The median, not the
    least: a request's overhead varies by a tenth of a millisecond from one to the next, and
    the least would leave that much, on average, in every block. The probe's idle time comes
    from the same requests."""
    pairs = {id(c): requests_for(c) for c in contestants}
    answered, probes = [], []
    for i in range(requests):
        interlude()
        for contestant in contestants if i % 2 == 0 else contestants[::-1]:
            staging, empty = pairs[id(contestant)]
            contestant.request(staging, "staging an empty request's inputs", probe=False)  # as timing stages
            reply = contestant.request(empty, "timing an empty request")
            answered.append(reply["answered_ms"])
            probes.append(reply["probe_ms"])
    floor = float(sorted(answered)[len(answered) // 2])
    for contestant in contestants:
        contestant.request_floor_ms = floor
    probe = contestants[0].watch.probe
    if probe is not None:
        probe.calibrate(probes)


AnyPeer = TypeVar("AnyPeer", bound=Peer)  # wait_any gives back the peers it was given


def wait_any(peers: Iterable[AnyPeer], timeout: Optional[float] = None) -> list[AnyPeer]:
    """The peers among ``peers`` with a reply (or an end) waiting to be read."""
    peers = list(peers)
    ready = [p for p in peers if b"\n" in p._buffer]
    if ready:
        return ready
    selector = selectors.DefaultSelector()
    for peer in peers:
        selector.register(peer.replies_fd, selectors.EVENT_READ, peer)
    try:
        return [key.data for key, _ in selector.select(timeout=timeout)]
    finally:
        selector.close()


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
        name = text[text.find("(") + 1 : text.rfind(")")]
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
