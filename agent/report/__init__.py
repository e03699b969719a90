"""A run told for a person, rebuilt from its folder: `kagent report`'s self-contained HTML page
and board across runs, the list of runs with their true states (run_list, `kagent runs`), and
what every view of a trace shares (trace_reading, which `kagent replay` reads too).

Everything on a page is rebuilt from the run's folder: its trace first (kagent.agent.storage.trace),
then status.json for the state a dead process could not record, and the workspace's attempt
refs for each attempt's diff and file. The charts are drawn by matplotlib as inline SVG, an
optional extra (``pip install 'kagent[report]'``): :func:`require_charts` says how to get it.
"""

from __future__ import annotations

from kagent.core.errors import KagentError

INSTALL_HINT = "pip install 'kagent[report]'"


def require_charts() -> None:
    """Fail in one line, before any work, where the charting library is not installed."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as err:
        raise KagentError(
            f"kagent report draws its charts with matplotlib, which is not installed: {INSTALL_HINT}"
        ) from err
