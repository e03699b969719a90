"""expect: incorrect hidden_work process(es) running

Computes honestly, but starts a process of its own at import that keeps running between its
steps (it could hold the CPU or the device while the baseline is timed). The referee finds
every process of the evaluation after each answer, so the evaluation fails.
"""
import subprocess as _subprocess
import sys as _sys

_helper = _subprocess.Popen([_sys.executable, "-c", "import time\nwhile True: time.sleep(1)"])
