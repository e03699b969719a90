"""expect: pass

Without a box: expect: error load read what the evaluation keeps from it

At import, looks for what the evaluation keeps from the solution: the job file beside its
folder (the hidden seeds, the cache's path), the referee's output, the cache being staged,
the cache's expected outputs, and the exchange folders in /dev/shm (the baseline's arena is
there while the baseline attaches it); it raises, naming what it found, when anything is
there. In its box none of it exists, and it computes honestly; where no box can be made, the
jail shows the solution all the referee sees, and the evaluation says what it read.
"""

import json as _json
from pathlib import Path as _Path

_root = _Path(__file__).resolve().parent.parent
_found = [str(p) for p in (_root / "private" / "job.json", _root / "stdout.txt") if p.exists()]
try:
    _cache = _json.loads((_root / "private" / "job.json").read_text()).get("cache_dir")
except (OSError, ValueError):
    _cache = None
for _folder in (_root / "cache-new", _Path(_cache or "/nonexistent")):
    if _folder.is_dir():  # the weights the solution is handed are its to read, nothing else
        _found += [str(p) for p in _folder.iterdir() if p.name != "weights"]
if _Path("/dev/shm").is_dir():
    _found += [str(p) for p in _Path("/dev/shm").iterdir() if p.name.startswith("kagent-exchange-")]
if _found:
    raise RuntimeError("read what the evaluation keeps from it: " + ", ".join(_found[:5]))
