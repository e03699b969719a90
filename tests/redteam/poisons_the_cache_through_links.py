"""expect: pass
cache: own, no links

As it is imported (the cache is sealed by then, each staged file's hash listed), it copies
every file staged for the cache into its build HOME and puts a link to the copy in its
place. Promotion used to hash through the link and then move the link itself into the
cache, so the copies, which the solution can rewrite whenever it runs again, became the
cache of every later evaluation (a model without its MoEs, a referee killed by SIGBUS).
Now nothing reached through a link is promoted: those entries are simply built again.
(Where the jail keeps the staging folder read-only, the attack fails to start: a pass too.)
"""

import os as _os
import pathlib as _pathlib
import shutil as _shutil

_staging = _pathlib.Path(__file__).resolve().parent.parent / "cache-new"
_copies = _pathlib.Path(_os.environ.get("HOME") or _pathlib.Path(__file__).resolve().parent) / "cache-copies"
if _staging.is_dir():
    for _path in sorted(_staging.rglob("*")):
        if _path.is_file() and not _path.is_symlink():
            _copy = _copies / _path.relative_to(_staging)
            try:
                _copy.parent.mkdir(parents=True, exist_ok=True)
                _shutil.copyfile(_path, _copy)
                _path.unlink()
                _path.symlink_to(_copy)
            except OSError:  # a jail that keeps the staging folder read-only refuses it outright
                break
