"""The evaluation's processes read thread by thread: a process whose leader thread exited is
alive while another thread runs, stopped only when every thread is, and a change to a trusted
process's scheduling is seen."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from kagent.sandbox.harness import process_table

# A process whose leader thread exits (the raw exit system call ends only the calling thread)
# while a second thread sleeps on: /proc shows the process itself as a zombie.
ZOMBIE_LEADER = """
import ctypes, platform, threading, time
threading.Thread(target=lambda: time.sleep(60)).start()
time.sleep(0.2)
ctypes.CDLL(None).syscall({"x86_64": 60, "aarch64": 93}[platform.machine()], 0)
"""


def _wait_for(condition, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@pytest.fixture
def zombie_leader():
    proc = subprocess.Popen([sys.executable, "-c", ZOMBIE_LEADER])
    try:
        assert _wait_for(lambda: process_table.thread_states(proc.pid).get(proc.pid) == "Z")
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_a_process_whose_leader_exited_is_alive_until_its_last_thread_is_stopped(zombie_leader):
    pid = zombie_leader.pid
    states = process_table.thread_states(pid)
    assert states[pid] == "Z" and any(state not in process_table.DEAD for state in states.values())
    assert process_table.alive(pid) and not process_table.all_stopped(pid)
    os.kill(pid, signal.SIGSTOP)  # the signal reaches the thread group through its zombie leader
    assert _wait_for(lambda: process_table.all_stopped(pid))
    assert process_table.alive(pid)


def test_a_gone_process_is_neither_alive_nor_running():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert process_table.thread_states(proc.pid) == {}
    assert not process_table.alive(proc.pid) and process_table.all_stopped(proc.pid)


@pytest.fixture
def sleeper():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_the_guard_sees_a_trusted_process_reniced_re_pinned_or_left_running(sleeper):
    os.kill(sleeper.pid, signal.SIGSTOP)
    assert _wait_for(lambda: process_table.all_stopped(sleeper.pid))
    guard = process_table.SchedulingGuard({"the baseline": sleeper.pid, "the referee": os.getpid()}, {"the baseline"})
    assert guard.changed() is None
    os.setpriority(os.PRIO_PROCESS, sleeper.pid, os.getpriority(os.PRIO_PROCESS, sleeper.pid) + 5)
    assert "nice" in (guard.changed() or "") and "the baseline's thread" in (guard.changed() or "")
    os.setpriority(os.PRIO_PROCESS, sleeper.pid, guard.priority[0])
    assert guard.changed() is None
    cpus = sorted(os.sched_getaffinity(sleeper.pid))
    if len(cpus) > 1:
        os.sched_setaffinity(sleeper.pid, cpus[:1])
        assert f"runs on CPUs {cpus[:1]}, not {cpus}" in (guard.changed() or "")
        os.sched_setaffinity(sleeper.pid, cpus)
        assert guard.changed() is None
    os.kill(sleeper.pid, signal.SIGCONT)
    assert _wait_for(lambda: "not stopped by the referee" in (guard.changed() or ""))


def test_the_guard_holds_trusted_processes_to_the_priority_the_referee_started_with(sleeper):
    # Reniced before the guard was made (say, during the checks): seen all the same.
    os.setpriority(os.PRIO_PROCESS, sleeper.pid, process_table.ORIGIN_PRIORITY[0] + 3)
    guard = process_table.SchedulingGuard({"the baseline": sleeper.pid})
    assert f"runs at nice {process_table.ORIGIN_PRIORITY[0] + 3}," in (guard.changed() or "")


def test_the_guard_sees_a_stopped_thread_of_a_process_that_must_run(sleeper):
    guard = process_table.SchedulingGuard({"the referee": sleeper.pid})
    assert guard.changed() is None
    os.kill(sleeper.pid, signal.SIGSTOP)
    assert _wait_for(lambda: "was stopped by a signal" in (guard.changed() or ""))
