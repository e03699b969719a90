"""expect: pass
timed: score below 1.5

Without a box: expect: incorrect hidden_work runs at nice 19

Computes honestly, but on its first step it lowers the priority of the baseline's process,
every thread of it, to nice 19, and pins it to the first CPU, the one that takes most of
the machine's interrupts (it finds the baseline's process by its command line). In a box of
its own it finds no process but its own, and scores its honest speed. Where no box can be
made, every process of an evaluation runs as one user, the change is made, and the referee's
check of the baseline's and its own scheduling before each of the baseline's timed blocks,
against the priority the referee started with, fails the evaluation.
"""

import os as _os

_original_step = Model.step
_done = []


def _baseline_threads():
    for entry in _os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if b"--non-dumpable\x001" not in f.read():
                    continue
            for tid in _os.listdir(f"/proc/{entry}/task"):
                yield int(tid)
        except (OSError, ValueError):
            continue


def _step_that_slows_the_baseline(self, *args, **kwargs):
    if not _done:
        _done.append(True)
        for tid in _baseline_threads():
            try:
                _os.setpriority(_os.PRIO_PROCESS, tid, 19)
                _os.sched_setaffinity(tid, {min(_os.sched_getaffinity(0))})
            except OSError:
                pass
    return _original_step(self, *args, **kwargs)


Model.step = _step_that_slows_the_baseline
