"""A run's folder, ``runs/<run-id>/``: the names of the files it holds, and finding it again
from a run id or a path (what every command that reads a run needs, and nothing more)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from kagent.core.errors import KagentError
from kagent.core.paths import RUNS_ELSEWHERE, runs_folder

RUN_FILES = {"config": "config.json", "status": "status.json", "report": "report.json"}


def find_run(run: str, root: Optional[Path] = None) -> Path:
    """A run folder from a run id (under the runs folder) or a path."""
    path = Path(run)
    if (path / RUN_FILES["config"]).is_file():
        return path
    folder, origin = runs_folder(root)
    candidate = folder / run
    if (candidate / RUN_FILES["config"]).is_file():
        return candidate
    raise KagentError(f"no run {run!r} in {folder} ({origin}), nor a run folder at {path.absolute()}",
                      hint=f"`kagent runs` lists the runs; {RUNS_ELSEWHERE}")
