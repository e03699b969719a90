"""Where kagent keeps things on disk."""
from __future__ import annotations

import os
from pathlib import Path


def kagent_home() -> Path:
    """Per-user cache: reference weights and outputs, measured bandwidths (KAGENT_HOME overrides)."""
    return Path(os.environ.get("KAGENT_HOME") or Path.home() / ".cache" / "kagent")


def runs_dir() -> Path:
    """The default output folder, ./runs (KAGENT_RUNS overrides)."""
    return Path(os.environ.get("KAGENT_RUNS") or "runs")
