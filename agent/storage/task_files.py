"""The task's files inside a workspace (task/): copied in when the workspace is made, their
hashes recorded where the model's commands cannot write (the workspace's .kagent/), made
read-only, and compared with that record after every call that may change files.

The mode is only a hint: root ignores it, and where the jail cannot mount task/ read-only a
command can write there. What holds is the comparison, after which the workspace puts back
what changed (Workspace.put_back_task_files).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path

from kagent.core.errors import KagentError

TASK_DIR = "task"


def check_task_sources(sources: Sequence[Path]) -> None:
    """KagentError unless every one of ``sources`` exists and no two share a name (each
    lands in task/ under its own name)."""
    names = [path.name for path in sources]
    for path in sources:
        if not path.exists():
            raise KagentError(f"task file {path} does not exist")
    if len(set(names)) != len(names):
        raise KagentError(f"task files must have distinct names, got {sorted(names)}")


def copy_task_in(root: Path, sources: Sequence[Path]) -> None:
    """``sources`` (files or folders) copied into ``root``'s task/, which must not exist yet."""
    task_dir = root / TASK_DIR
    task_dir.mkdir()
    for path in sources:
        target = task_dir / path.name
        if path.is_dir():
            shutil.copytree(path, target)
        else:
            shutil.copy2(path, target)


def _task_files(root: Path) -> Iterator[Path]:
    task_dir = root / TASK_DIR
    return (p for p in sorted(task_dir.rglob("*")) if p.is_file() and not p.is_symlink())


def _hashes(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in _task_files(root)}


def record_task_hashes(root: Path, record: Path) -> None:
    """The hash of each file under ``root``'s task/ written to ``record``, to compare with later."""
    record.write_text(json.dumps(_hashes(root), indent=1, sort_keys=True))


def protect_task_files(root: Path) -> None:
    # A hint to tools and to non-root users; root ignores it, hence changed_task_files(), which
    # the loop checks after every call that may change files (put_back_task_files).
    for path in _task_files(root):
        path.chmod(stat.S_IMODE(path.stat().st_mode) & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def changed_task_files(root: Path, record: Path) -> list[str]:
    """Task files edited, removed or added since ``record`` was written (paths relative to root)."""
    try:
        recorded: dict[str, str] = json.loads(record.read_text())
    except (OSError, ValueError) as error:
        raise KagentError(
            f"the task's recorded hashes in {record} are missing or damaged",
            hint="the workspace's task can no longer be trusted; start a new run",
        ) from error
    current = _hashes(root)
    return sorted(path for path in recorded.keys() | current.keys() if recorded.get(path) != current.get(path))
