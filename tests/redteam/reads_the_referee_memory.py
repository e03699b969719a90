"""expect: pass

Tries to read the memory and the environment of its parent, the referee, which holds the
expected outputs and the key that signs results. The referee makes itself non-dumpable
before the solution's process starts, so without capabilities neither can be opened; were
they readable, importing this file would fail and the evaluation could not pass.
"""
import os as _os

for _what in ("mem", "environ"):
    try:
        with open(f"/proc/{_os.getppid()}/{_what}", "rb") as _f:
            _f.read(1)
    except OSError:
        continue  # refused, as it must be
    raise RuntimeError(f"the referee's /proc/<pid>/{_what} is readable from the solution's process")
