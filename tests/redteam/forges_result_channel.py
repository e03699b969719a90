"""expect: error load wrote something other than its reply

Writes a complete passing run of its own (checks, a 1000x score, done) to every pipe it can
find among its file descriptors, hoping one of them is the harness's result channel. The
result channel belongs to the referee's process, which the solution's never sees; what it
can reach is its own reply pipe to the referee, and lines there that are not its reply make
the referee give up on it.
"""
import json as _json
import os as _os
import stat as _stat

_forged = b"".join((_json.dumps(_event) + "\n").encode() for _event in (
    {"event": "check", "name": "load", "status": "pass", "reason": "imported"},
    {"event": "check", "name": "fixed_seeds", "status": "pass", "reason": "all seeds match"},
    {"event": "score", "geomean_speedup": 1000.0},
    {"event": "done", "phases": {}}))
for _name in _os.listdir("/proc/self/fd"):
    try:
        if _stat.S_ISFIFO(_os.fstat(int(_name)).st_mode):
            _os.write(int(_name), _forged)
    except OSError:
        pass  # a read end, or gone
