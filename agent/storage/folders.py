"""A run's folder, ``runs/<run-id>/``: the names of the files it holds, and finding it again
from a run id or a path, and what a run id may be (what every command that reads a run needs)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

from kagent.core.errors import KagentError
from kagent.core.paths import RUNS_ELSEWHERE, runs_folder

RUN_FILES = {"config": "config.json", "status": "status.json", "report": "report.json"}

RUN_ID_FORM = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")


def check_run_id(run_id: str) -> None:
    """A run id given by the user (or a sweep) names a folder: letters, digits, '.', '_', '-'."""
    if not RUN_ID_FORM.fullmatch(run_id):
        raise KagentError(
            f"--run-id {run_id!r}: a run id is 1-200 letters, digits, '.', '_' or '-', starting "
            f"with a letter or a digit"
        )


def find_run(run: str, root: Optional[Path] = None) -> Path:
    """A run folder from a run id (under the runs folder) or a path."""
    path = Path(run)
    if (path / RUN_FILES["config"]).is_file():
        return path
    folder, origin = runs_folder(root)
    candidate = folder / run
    if (candidate / RUN_FILES["config"]).is_file():
        return candidate
    raise KagentError(
        f"no run {run!r} in {folder} ({origin}), nor a run folder at {path.absolute()}",
        hint=f"`kagent runs` lists the runs; {RUNS_ELSEWHERE}",
    )
