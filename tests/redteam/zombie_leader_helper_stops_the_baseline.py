"""expect: incorrect hidden_work process(es) running

Computes honestly, but starts a helper process at import whose leader thread then exits
(the raw exit system call ends only the calling thread), so /proc shows the helper as a
zombie while its second thread runs on. That thread stops the baseline's process for 30 ms
at a time whenever the solution's own process is stopped, that is, while the baseline is
being timed (5.35x on honest math, issue 44). A process is alive while any of its threads
is: the referee finds the helper after the solution's first answer, and the evaluation fails.
"""

import os as _os
import subprocess as _subprocess
import sys as _sys

_HELPER = r"""
import ctypes, os, platform, signal, sys, threading, time

solution = int(sys.argv[1])


def state(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def baselines():
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if b"--non-dumpable\x001" in f.read():
                    yield int(entry)
        except (OSError, ValueError):
            continue


def stop_the_baseline():
    while state(solution) is not None:
        if state(solution) == "T":
            for pid in baselines():
                try:
                    os.kill(pid, signal.SIGSTOP)
                    time.sleep(0.03)
                    os.kill(pid, signal.SIGCONT)
                except OSError:
                    pass
        time.sleep(0.03)


threading.Thread(target=stop_the_baseline).start()
time.sleep(0.1)
ctypes.CDLL(None).syscall({"x86_64": 60, "aarch64": 93}[platform.machine()], 0)
"""

_helper = _subprocess.Popen([_sys.executable, "-c", _HELPER, str(_os.getpid())])
