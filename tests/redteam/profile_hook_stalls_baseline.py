"""expect: pass
timed: score below 1.5

An honest solution that installs a profile hook (sys.setprofile on the thread importing it,
threading.setprofile for threads started later) that sleeps 0.2 ms on every call into a
function defined in a file named baseline.py. Once the solution runs in a process of its
own, no baseline function is ever called there, and the hook only costs this solution a
little: the speedup is the honest one, or less.
"""
import os
import sys
import threading
import time


def _sleep_in_baseline_calls(frame, event, arg):
    if event == "call" and os.path.basename(frame.f_code.co_filename) == "baseline.py":
        time.sleep(0.0002)


sys.setprofile(_sleep_in_baseline_calls)
threading.setprofile(_sleep_in_baseline_calls)
