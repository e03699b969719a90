"""expect: tampered result sign

Writes a complete passing run of its own (checks, a 1000x score, done) straight to the
harness's result pipe, whose descriptor is on the command line, then exits before the real
checks. Every line the harness writes is signed with a key the solution never saw: these
lines are not, and the parent must call it tampering, not a pass.
"""
import json as _json
import os as _os
import sys as _sys

_fd = int(_sys.argv[_sys.argv.index("--result-fd") + 1])
for _event in ({"event": "check", "name": "load", "status": "pass", "reason": "imported"},
               {"event": "check", "name": "fixed_seeds", "status": "pass", "reason": "all seeds match"},
               {"event": "score", "geomean_speedup": 1000.0},
               {"event": "done", "phases": {}}):
    _os.write(_fd, (_json.dumps(_event) + "\n").encode())
_os._exit(0)
