"""The temporary folder of one evaluation (the bundle): what goes into it, and what of it may
come out.

In: a pristine, read-only copy of the GPU-side harness (kagent.sandbox.harness) and of the
task, both written from what this process first read of them, and a copy of the solution's
folder beside them. Out, after the run: a check by hash that the pristine copy is intact, and
into the cache only the staged entries the harness's signed events name, unchanged. These are
the evaluation's files, whoever runs on them: the harness child that runs there is
harness_child.py's, the verdict evaluate.py's.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from pathlib import Path
from typing import Optional

from kagent.core.errors import KagentError
from kagent.sandbox import containment
from kagent.sandbox.harness.regular_files import read_regular
from kagent.tasks import TaskRef

HARNESS_SOURCE = Path(__file__).resolve().parent / "harness"
HARNESS_PACKAGE = "kagent_harness"
# A solution folder is copied whole (its kernels, headers, helpers); past this it is refused.
MAX_SOLUTION_BYTES = 64 << 20
# Never copied: history, caches, build outputs and the model's scratch area (scratch scripts,
# dumps), none of which a solution runs from.
SKIPPED_NAMES = {"__pycache__", ".git", "build", "scratch", ".ipynb_checkpoints"}
# A single file larger than this is not copied either: a debug dump, not a kernel's source (an
# 84 MB dump at the top of a workspace blocked every evaluation of one run).
MAX_COPIED_FILE_BYTES = 16 << 20


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _tree_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def hash_tree(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root``, by relative path."""
    return {str(path.relative_to(root)): _sha256(path.read_bytes()) for path in _tree_files(root)}


class Pristine:
    """Source files as this process first read them. Every evaluation copies from here, so
    code that patched kagent's harness or a task on disk changes no later evaluation of this
    process; where no jail keeps code from those files, an evaluation also compares them with
    the snapshot afterwards and puts them back (see ``Bundle.tampering``)."""

    def __init__(self, root: Path, files: list[Path]):
        self.root = root
        self.content = {str(f.relative_to(root)): f.read_bytes() for f in files}

    def hashes(self) -> dict[str, str]:
        return {name: _sha256(data) for name, data in self.content.items()}

    def write(self, dest: Path) -> None:
        for name, data in self.content.items():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            (dest / name).write_bytes(data)

    def restore_changed(self) -> list[str]:
        """The source files that differ from the snapshot, each written back."""
        changed = []
        for name, data in self.content.items():
            path = self.root / name
            try:
                same = path.read_bytes() == data
            except OSError:
                same = False
            if not same:
                changed.append(name)
                path.write_bytes(data)
        return changed


HARNESS = Pristine(HARNESS_SOURCE, _tree_files(HARNESS_SOURCE))
_TASKS: dict[Path, Pristine] = {}


def pristine_task(task: TaskRef) -> Pristine:
    """The task's files as this process first read them."""
    if task.path not in _TASKS:
        _TASKS[task.path] = Pristine(task.root, task.files())
    return _TASKS[task.path]


def _copy_solution(solution: Path, dest: Path) -> None:
    total = 0
    sizes: dict[Path, int] = {}

    def ignore(folder: str, names: list[str]) -> list[str]:
        nonlocal total
        skipped = []
        for name in names:
            path = Path(folder) / name
            if name in SKIPPED_NAMES or name.startswith(".") or path.is_symlink():
                skipped.append(name)
            elif path.is_file():
                size = path.stat().st_size
                if size > MAX_COPIED_FILE_BYTES:
                    skipped.append(name)
                else:
                    total += size
                    sizes[path] = size
        if total > MAX_SOLUTION_BYTES:
            largest = sorted(sizes, key=lambda p: -sizes[p])[:5]
            raise KagentError(
                f"the solution's folder {solution.parent} holds more than {MAX_SOLUTION_BYTES >> 20} MiB of files "
                f"an evaluation copies; the largest: "
                + ", ".join(f"{p.relative_to(solution.parent)} ({sizes[p] / 2**20:.1f} MiB)" for p in largest),
                hint="move data files under scratch/ or build/ (an evaluation copies neither, nor any file over "
                f"{MAX_COPIED_FILE_BYTES >> 20} MiB), or delete them",
            )
        return skipped

    shutil.copytree(solution.parent, dest, ignore=ignore)


def _make_read_only(root: Path) -> None:
    for path in [root, *root.rglob("*")]:
        mode = path.stat().st_mode
        path.chmod(mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def make_writable(root: Path) -> None:
    for path in [root, *root.rglob("*")]:
        try:
            path.chmod(path.stat().st_mode | stat.S_IWUSR)
        except OSError:
            pass


class Bundle:
    """The temporary folder of one evaluation."""

    def __init__(self, tmp: Path, task: TaskRef, solution: Optional[Path]):
        self.root = tmp
        self.harness = tmp / "lib" / HARNESS_PACKAGE
        self.task_dir = tmp / "task"
        self.work = tmp / "solution"
        self.cache_staging = tmp / "cache-new"
        self.sources = {"harness": HARNESS, "task": pristine_task(task)}
        HARNESS.write(self.harness)
        self.task_dir.mkdir()
        self.sources["task"].write(self.task_dir)
        # Where the task lies in the copy: its folder, or its file in it.
        self.task_path = self.task_dir / task.path.relative_to(task.root)
        if solution is not None:
            _copy_solution(solution, self.work)
            self.solution: Optional[Path] = self.work / solution.name
        else:
            self.work.mkdir()
            self.solution = None
        # The pristine copy: what the source said, checked again after the run.
        self.expected = {name: source.hashes() for name, source in self.sources.items()}
        self.read_only = [self.harness.parent, self.task_dir]
        for folder in self.read_only:
            _make_read_only(folder)

    def tampering(self) -> list[str]:
        """Files of the pristine copy that were changed, added or removed; and, where the
        jail cannot keep the code away from them, source files (kagent's installed harness,
        the task's folder) that changed on disk during the run: those are put back.

        Inside the jail those sources are read-only to the code, so a change there came from
        outside (someone editing kagent while it runs) and is neither blamed nor undone;
        evaluations in this process go on copying from the snapshot either way."""
        changed = []
        for name, folder in (("harness", self.harness), ("task", self.task_dir)):
            now = hash_tree(folder)
            want = self.expected[name]
            changed += [f"{name}/{f}" for f in sorted(set(now) | set(want)) if now.get(f) != want.get(f)]
        if not containment.probe().files:
            for name, source in self.sources.items():
                changed += [f"installed {name} {source.root / f} (restored)" for f in source.restore_changed()]
        return changed

    def digest(self) -> dict[str, str]:
        return {
            name: hashlib.sha256(json.dumps(h, sort_keys=True).encode()).hexdigest()
            for name, h in self.expected.items()
        }


def promote_cache(staging: Path, cache_dir: Path, events: list[dict]) -> list[str]:
    """Move into the cache what the harness staged before any candidate code ran.

    The harness lists each staged file and its hash in a signed ``cache_sealed`` event just
    before it loads the solution, and after that stages only what it writes once the
    solution's process is gone (``cache_staged``: the baseline's launch count). Only those
    files, unchanged, are kept: whatever the solution wrote into the staging folder (a
    poisoned weight file, a bandwidth that would switch the physics check off) never reaches a
    later evaluation. Each is read as bytes, from a regular file reached through no link (a
    link, or a folder replaced by one, would lead to a file the solution can rewrite later),
    hashed as read, and those very bytes written into a new file of the cache: nothing of the
    staging folder, no inode and no link, becomes part of the cache.
    """
    sealed: dict = next((e.get("files", {}) for e in events if e.get("event") == "cache_sealed"), {})
    # Entries staged after the seal, once no solution code could run any more (the baseline's
    # launch count), each with the hash of the bytes the referee wrote.
    for event in events:
        if event.get("event") == "cache_staged":
            sealed = {**sealed, **event.get("files", {})}
    promoted = []
    for name, digest in sealed.items():
        data = read_regular(staging, name)  # None for a link, a non-regular file, or none at all
        if data is None or _sha256(data) != digest:
            continue
        target = cache_dir / name
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        with open(partial, "wb") as f:
            f.write(data)
        os.replace(partial, target)  # one atomic rename: a reader sees the old entry or the new
        promoted.append(name)
    return promoted
