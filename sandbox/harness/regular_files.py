"""Files of a cache folder read as the bytes their writer put there: no link followed, no fifo or
device taken for a file. Torch-free, so that the agent side (kagent.sandbox.bundle, which
promotes what the harness staged) reads them without loading torch."""

from __future__ import annotations

import os
import stat
from pathlib import Path


def regular_file(root: Path, name: str) -> Path | None:
    """``root / name`` where it is a regular file reached through no symbolic link below
    ``root`` (``name`` relative, without ``..``), else None.

    What a cache folder holds is trusted only as bytes its own writer put there: a link, or
    a folder replaced by one, leads to a file someone else can rewrite later (the staging
    folder is writable from the jail), and a fifo or a device is no file to hash."""
    parts = Path(name).parts
    if not parts or Path(name).is_absolute() or ".." in parts:
        return None
    path = root
    for i, part in enumerate(parts):
        path = path / part
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            return None
        last = i == len(parts) - 1
        if not (stat.S_ISREG(mode) if last else stat.S_ISDIR(mode)):
            return None  # a link (lstat does not follow it), or not the kind of entry it must be
    return path


def read_regular(root: Path, name: str) -> bytes | None:
    """The bytes of ``regular_file(root, name)``, read through a descriptor opened without
    following a link and checked to be that same regular file; None where it is not one."""
    path = regular_file(root, name)
    if path is None:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return None
        return f.read()
