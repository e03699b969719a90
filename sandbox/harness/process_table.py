"""The evaluation's processes as /proc shows them thread by thread: which are alive, which are
stopped, and how each is scheduled.

A process's own line in /proc (its leader thread's) does not tell all. A helper whose leader
thread exited while its other threads run on reads as a zombie there, although it still
runs: a red-team helper did that, went unseen by the scan for stray processes, and stopped the
baseline inside its timed blocks (5.35x on honest math). So a process is alive while any of
its threads is, stopped only when every thread is, and its scheduling is every thread's.
Standard library only.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Optional

DEAD = ("Z", "X")  # a zombie, or dying
STOPPED = ("T", "t")  # stopped by a signal, or by a tracer


def _stat_fields(path: str) -> Optional[list[str]]:
    """The fields of a stat file after the process's name (which may hold spaces)."""
    try:
        return Path(path).read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def thread_states(pid: int) -> dict[int, str]:
    """Thread id -> state of every thread of ``pid``; empty when the process is gone."""
    states = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return {}
    for tid in tids:
        fields = _stat_fields(f"/proc/{pid}/task/{tid}/stat")
        if fields:
            states[int(tid)] = fields[0]
    return states


def alive(pid: int) -> bool:
    """Whether any thread of ``pid`` lives (its leader may be a zombie)."""
    return any(state not in DEAD for state in thread_states(pid).values())


def all_stopped(pid: int) -> bool:
    """Whether no thread of ``pid`` can run: each is stopped or dead (or the process is gone)."""
    return all(state in STOPPED or state in DEAD for state in thread_states(pid).values())


@dataclasses.dataclass(frozen=True)
class ThreadScheduling:
    """What decides when and where a thread runs."""

    nice: int
    policy: int
    rt_priority: int
    cpus: frozenset[int]

    def priority(self) -> tuple[int, int, int]:
        return self.nice, self.policy, self.rt_priority

    def priority_words(self) -> str:
        return f"nice {self.nice}, policy {self.policy}, rt priority {self.rt_priority}"


def scheduling(pid: int) -> dict[int, ThreadScheduling]:
    """Thread id -> scheduling of every live thread of ``pid``."""
    found = {}
    for tid, state in thread_states(pid).items():
        if state in DEAD:
            continue
        fields = _stat_fields(f"/proc/{pid}/task/{tid}/stat")
        try:
            cpus = frozenset(os.sched_getaffinity(tid))
        except OSError:
            continue  # gone meanwhile
        if fields and len(fields) > 38:
            # stat's fields 19 (nice), 40 (rt_priority) and 41 (policy), counted from 1 with
            # the pid and the name as the first two.
            found[tid] = ThreadScheduling(int(fields[16]), int(fields[38]), int(fields[37]), cpus)
    return found


def _own_priority() -> tuple[int, int, int]:
    """This thread's (nice, policy, rt priority)."""
    fields = _stat_fields("/proc/thread-self/stat") or _stat_fields("/proc/self/stat") or []
    return int(fields[16]), int(fields[38]), int(fields[37])


# The referee's priority as it started, read when it imports this module: before any solution
# code runs anywhere, so nothing of the solution's can have changed it. Every trusted process
# (started by the referee, or the referee itself) runs at it.
ORIGIN_PRIORITY = _own_priority()


class SchedulingGuard:
    """A check that trusted processes are scheduled as they should be: each thread at the
    priority the referee started with (``ORIGIN_PRIORITY``: the solution may have reniced a
    process before this guard was made), and on the CPUs it had when the guard was made
    (timing pins them just before). ``stopped``: processes that must be wholly stopped whenever
    checked (the baseline's between its requests); every other one must have no stopped thread
    (the referee's). A thread started since takes its process's first thread's CPUs, as a new
    thread inherits its creator's."""

    def __init__(
        self,
        processes: dict[str, int],
        stopped: frozenset[str] = frozenset(),
        priority: tuple[int, int, int] = ORIGIN_PRIORITY,
    ):
        self.processes, self.stopped, self.priority = processes, stopped, priority
        self.before = {name: scheduling(pid) for name, pid in processes.items()}

    def changed(self) -> Optional[str]:
        """What changed, in a sentence; None when nothing did."""
        for name, pid in self.processes.items():
            states = thread_states(pid)
            if name in self.stopped:
                running = sorted(tid for tid, state in states.items() if state not in ("T",) + DEAD)
                if running:
                    tid = running[0]
                    return f"{name}'s thread {tid} was {_state_words(states[tid])}, not stopped by the referee"
            else:
                held = sorted(tid for tid, state in states.items() if state in STOPPED)
                if held:
                    return f"{name}'s thread {held[0]} was {_state_words(states[held[0]])}"
            before = self.before[name]
            default = next(iter(before.values()), None)
            for tid, now in scheduling(pid).items():
                if now.priority() != self.priority:
                    nice, policy, rt_priority = self.priority
                    return (
                        f"{name}'s thread {tid} runs at {now.priority_words()}, not at nice {nice}, "
                        f"policy {policy}, rt priority {rt_priority} as the referee started"
                    )
                was = before.get(tid, default)
                if was is not None and now.cpus != was.cpus:
                    return (
                        f"{name}'s thread {tid} runs on CPUs {sorted(now.cpus)}, not {sorted(was.cpus)} as timing set"
                    )
        return None


def _state_words(state: str) -> str:
    return {"T": "stopped by a signal", "t": "stopped by a tracer", "R": "running", "S": "sleeping"}.get(
        state, f"in state {state}"
    )
