"""What a contained command sees of the files: the plan (``FilePlan``) that kagent's jail
(jail.py) carries out in the command's mount namespace, and the plans kagent makes.

Every contained command gets a mount namespace in which home folders, the user's project,
kagent's cache and other runs are hidden, /tmp and /dev are private, and everything is
read-only except the workspace and a build home, with the task's files read-only inside the
workspace (``file_plan``). An evaluated solution gets a stricter plan of its own, its box,
which the referee makes for it inside the evaluation's jail (``solution_box_plan``). Whether
this machine can carry a plan out at all is containment's probe (containment.py).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Optional

from pydantic import BaseModel, Field

from kagent.core.paths import kagent_home, runs_dir

# Folders never covered: the system the code needs. Covering one of them, or a folder above
# one, would leave nothing to run.
SYSTEM_DIRS = (
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    "/opt",
    "/var",
    "/proc",
    "/sys",
    "/dev",
    "/run",
    "/boot",
    "/srv",
    "/snap",
    "/nix",
)
# Each command gets an empty /tmp, /var/tmp and /dev/shm of its own, and a /dev with only these.
PRIVATE_DIRS = ("/tmp", "/var/tmp", "/dev", "/dev/shm")
DEVICES = ("null", "zero", "full", "random", "urandom", "tty", "nvidia*", "nvidia-caps", "dri")
KAGENT_PACKAGES = ("kagent.core", "kagent.agent", "kagent.tools", "kagent.sandbox", "kagent.tasks", "kagent.prompts")
DEV_LINKS = {
    "/dev/fd": "/proc/self/fd",
    "/dev/stdin": "/proc/self/fd/0",
    "/dev/stdout": "/proc/self/fd/1",
    "/dev/stderr": "/proc/self/fd/2",
}


class FilePlan(BaseModel):
    """What a contained command sees of the files, carried out by the jail (see jail.py).
    Paths are absolute."""

    hide: list[str] = Field(default_factory=list, description="covered by an empty read-only folder")
    private: list[str] = Field(default_factory=list, description="covered by an empty writable tmpfs")
    show: list[str] = Field(default_factory=list, description="inside a covered folder: brought back read-only")
    writable: list[str] = Field(
        default_factory=list, description="read-write (brought back where covered); everything else is read-only"
    )
    read_only: list[str] = Field(default_factory=list, description="inside writable paths: read-only")
    links: dict[str, str] = Field(default_factory=dict, description="symbolic links made after the covers")


def _coverable(path: Path) -> bool:
    text = str(path)
    return text != "/" and not any(
        system == text or system.startswith(text.rstrip("/") + "/") for system in SYSTEM_DIRS
    )


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _existing(paths: Sequence[Path]) -> list[str]:
    seen: list[str] = []
    for path in paths:
        text = str(Path(path).absolute())
        if os.path.lexists(text) and text not in seen:
            seen.append(text)
    return seen


def _kagent_packages() -> list[Path]:
    folders = []
    for name in KAGENT_PACKAGES:
        spec = importlib.util.find_spec(name)
        folders += [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
    return folders


def file_plan(
    writable: Sequence[Path],
    show: Sequence[Path] = (),
    read_only: Sequence[Path] = (),
    hide: Sequence[Path] = (),
    python: Optional[str] = None,
) -> FilePlan:
    """The arrangement every contained command gets, around what it may write.

    Hidden: the home folders, kagent's cache, the runs folder and the folder kagent was started
    in (the user's project), plus ``hide``. Brought back read-only: the interpreter that runs
    the command (``python``, default this one) and every folder on this process's import path,
    plus ``show``. Private: /tmp, /var/tmp, /dev/shm, and a /dev with only the usual devices
    and the GPU's. Everything else is read-only, except ``writable``; ``read_only`` are parts
    of writable folders that stay read-only.
    """
    covered = [Path.home(), Path("/root"), Path("/home"), kagent_home(), runs_dir(), Path.cwd(), *hide]
    interpreter = Path(python or sys.executable)
    prefixes = {
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        str(interpreter.parent.parent),
        str(interpreter.resolve().parent.parent),
    }
    imports = [Path(entry) for entry in sys.path if entry and Path(entry).is_dir()]
    # kagent's own packages, wherever they are installed (an editable install maps them to
    # the checkout, which is covered): the profiler's child imports the harness from there.
    imports += _kagent_packages()
    devices = [device for pattern in DEVICES for device in Path("/dev").glob(pattern)]
    granted = _existing([*writable, *show])
    # What the caller grants wins over a cover (the cache is inside kagent's home, the
    # workspace may be inside the project); a cover above it still hides the rest.
    hidden = [
        h
        for h in _existing([p.resolve() for p in covered if _coverable(p.resolve())])
        if h not in PRIVATE_DIRS and not any(_within(h, g) for g in granted)
    ]
    return FilePlan(
        hide=hidden,
        private=list(PRIVATE_DIRS),
        # A folder on the import path that is itself covered (the project, when kagent runs
        # from its checkout) stays covered: only what lies inside covers comes back.
        show=[p for p in _existing([*map(Path, sorted(prefixes)), *imports, *show]) if p not in hidden],
        writable=_existing([*writable, *devices]),
        read_only=_existing(read_only),
        links=DEV_LINKS,
    )


# What the solution's box makes private: an empty /tmp and /var/tmp of its own, and a /dev/shm
# with nothing but the exchange folder the referee brings back (not the baseline's arena).
BOX_PRIVATE_DIRS = ("/tmp", "/var/tmp", "/dev/shm")


def solution_box_plan(
    writable: Sequence[Path], show: Sequence[Path] = (), hide: Sequence[Path] = (), python: Optional[str] = None
) -> FilePlan:
    """What the solution's own process sees inside an evaluation's jail: its box, which the
    referee makes for it (jail.enter_box, spawn.start_solution).

    Every top-level folder but the system's is covered, and so are kagent's home, the runs
    folder, the user's project and ``hide`` (the cache, wherever it is): so no other run, no
    cache, and none of the evaluation's own files (its job, the cache being staged, the
    referee's output) but those brought back. Brought back read-only: the interpreter, its
    import path and ``show`` (the harness, the task); writable: ``writable`` (the solution's
    folder, its build HOME) and the devices. The referee adds the box's working and exchange
    folders."""
    tops = [p for p in Path("/").iterdir() if p.is_dir() and not p.is_symlink() and str(p) not in SYSTEM_DIRS]
    plan = file_plan(writable=writable, show=show, hide=[*tops, *hide], python=python)
    return plan.model_copy(update={"private": list(BOX_PRIVATE_DIRS), "links": {}})


# Where build tools keep their caches, when the user's shell points them somewhere. Inside the
# jail such a folder may be read-only, hidden or private (/tmp is empty there), and Triton then
# fails its first compile with EROFS (seen with TRITON_CACHE_DIR under /opt).
BUILD_CACHE_VARIABLES = ("TRITON_CACHE_DIR", "TRITON_HOME", "TORCH_EXTENSIONS_DIR")


def with_writable_build_caches(env: dict[str, str], plan: FilePlan) -> dict[str, str]:
    """``env`` less each build-cache variable whose folder ``plan`` does not let the command
    write and keep: those caches fall back to HOME, which every contained command may write
    and which outlives it (a cache folder it cannot write is worth a compile, not a crash)."""

    def kept(value: str) -> bool:
        path = str(Path(value).absolute())
        return any(_within(path, folder) for folder in plan.writable) and not any(
            _within(path, folder) for folder in plan.read_only
        )

    return {name: value for name, value in env.items() if name not in BUILD_CACHE_VARIABLES or (value and kept(value))}
