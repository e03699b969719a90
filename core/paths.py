"""Where kagent keeps things on disk."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional


def kagent_home() -> Path:
    """Per-user cache: reference weights and outputs, measured bandwidths (KAGENT_HOME overrides)."""
    return Path(os.environ.get("KAGENT_HOME") or Path.home() / ".cache" / "kagent")


def runs_dir() -> Path:
    """The default output folder, ./runs (KAGENT_RUNS overrides)."""
    return Path(os.environ.get("KAGENT_RUNS") or "runs")


def runs_folder(root: Optional[Path] = None) -> tuple[Path, str]:
    """The runs folder a command uses, absolute, and where that choice came from (--root, the
    KAGENT_RUNS variable, or the default ./runs), so that a message can say both."""
    if root is not None:
        return Path(root).absolute(), "--root"
    if os.environ.get("KAGENT_RUNS"):
        return runs_dir().absolute(), "KAGENT_RUNS"
    return runs_dir().absolute(), "./runs here, the default"


RUNS_ELSEWHERE = (
    "runs go to ./runs under the folder kagent was started in, or to $KAGENT_RUNS; --root FOLDER looks in another"
)
