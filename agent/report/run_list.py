"""`kagent runs`: the runs under a folder, with the state each one is truly in.

status.json is written by the process driving the run, so it cannot say "interrupted" when
that process is killed (SIGKILL, a reboot, an out-of-memory kill): it stays at "running"
forever. The lock file tells the truth there: a "running" run whose lock has no live holder
is shown as interrupted.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal, Optional

from pydantic import BaseModel, Field, TypeAdapter, ValidationError
from rich import box
from rich.console import Console, Group, RenderableType
from rich.measure import Measurement
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from kagent.agent.outcome import ENDINGS, RunState
from kagent.agent.report.trace_reading import minutes
from kagent.agent.storage.folders import RUN_FILES
from kagent.agent.storage.lock import LOCK_NAME, lock_holder, process_alive
from kagent.sandbox.noise import score_text

STATUS_NAME = RUN_FILES["status"]
UNBOUNDED_WIDTH = 1 << 20
CONFIG_NAME = RUN_FILES["config"]

State = Literal[RunState, "unknown"]

STATE_STYLE: dict[str, str] = {
    "running": "bold cyan",
    "unknown": "magenta",
    **{state: ending.style for state, ending in ENDINGS.items()},
}


class RunSummary(BaseModel):
    """One line of `kagent runs`: status.json with its state corrected, and where the run lives."""

    run_id: str
    state: State
    task: str = ""
    model: str = ""
    best_attempt: Optional[int] = None
    best_score: Optional[float] = Field(None, description="Geomean speedup of the best attempt while exploring")
    result_score: Optional[float] = Field(
        None,
        description="The run's verified result: the re-verified score once "
        "the run has ended, the best attempt's before",
    )
    result_interval: Optional[tuple[float, float]] = Field(
        None, description="The 95% interval of result_score's measurement; None in older runs"
    )
    elapsed_s: float = 0.0
    tokens: int = 0
    cost_usd: float = 0.0
    updated_at: str = Field("", description="ISO time of the last status update (UTC)")
    reason: str = Field("", description="Why the run ended, or why its state is what it is")
    path: Path


_SUMMARIES = TypeAdapter(list[RunSummary])


def _driver_alive(run_dir: Path, pid: Optional[int]) -> bool:
    """Whether a process still drives the run. The lock decides when there is one; a run
    written before runs took a lock has none, and then its recorded pid is the best evidence
    left (a recycled pid can make a dead run look alive; nothing better is on disk)."""
    if (run_dir / LOCK_NAME).exists():
        return lock_holder(run_dir) is not None
    return pid is not None and process_alive(pid)


def _mtime_iso(path: Path) -> str:
    try:
        return datetime.fromtimestamp(path.stat().st_mtime, timezone.utc).isoformat(timespec="seconds")
    except OSError:
        return ""


def _config_fields(run_dir: Path) -> dict[str, str]:
    """Task and model from config.json, so that a run with a broken status.json still says what it was."""
    try:
        config = json.loads((run_dir / CONFIG_NAME).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(config, dict):
        return {}
    return {key: str(config[key]) for key in ("task", "model") if isinstance(config.get(key), str)}


def read_summary(run_dir: Path) -> Optional[RunSummary]:
    """The summary of one run folder; None if it has no status.json (it is not a run)."""
    status_path = run_dir / STATUS_NAME
    if not status_path.is_file():
        return None
    try:
        status = json.loads(status_path.read_text())
        if not isinstance(status, dict):
            raise ValueError("status.json does not hold an object")
        # A status written before runs recorded a result: its best attempt was the result.
        fields = {"result_score": status.get("best_score"), **status, "run_id": status.get("run_id") or run_dir.name}
        summary = RunSummary(path=run_dir, **{k: v for k, v in fields.items() if k in RunSummary.model_fields})
    except (OSError, ValueError, TypeError, ValidationError) as err:  # ValidationError is a ValueError too
        return RunSummary(
            run_id=run_dir.name,
            state="unknown",
            path=run_dir,
            updated_at=_mtime_iso(status_path),
            reason=f"status.json is unreadable: {str(err).splitlines()[0][:160]}",
            **_config_fields(run_dir),
        )
    if summary.state == "running":
        pid = status.get("pid")
        if not _driver_alive(run_dir, pid if isinstance(pid, int) else None):
            summary.state = "interrupted"
            summary.reason = f"its process (pid {pid}) is gone: killed or crashed before it could record an end"
    return summary


def _sort_key(summary: RunSummary) -> tuple[float, str]:
    try:
        moment = datetime.fromisoformat(summary.updated_at)
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=timezone.utc)
        stamp = moment.timestamp()
    except ValueError:
        stamp = 0.0
    return stamp, summary.run_id


def list_runs(root: Path) -> list[RunSummary]:
    """The runs under ``root``, most recently updated first; a missing folder has none."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = [s for s in (read_summary(child) for child in root.iterdir() if child.is_dir()) if s is not None]
    return sorted(found, key=_sort_key, reverse=True)


def summaries_json(summaries: list[RunSummary]) -> str:
    return _SUMMARIES.dump_json(summaries, indent=1).decode()


def _tokens(count: int) -> str:
    """Short forms (12.3k, 4.56M): the table has to fit a terminal; the JSON has the exact count."""
    return f"{count / 1e6:.2f}M" if count >= 1_000_000 else f"{count / 1e3:.1f}k" if count >= 10_000 else f"{count:,}"


def _figures(s: RunSummary) -> dict[str, str]:
    """The right-hand columns of one run, as both layouts show them."""
    return {
        "result": f"{score_text(s.result_score, s.result_interval)} #{s.best_attempt}"
        if s.result_score is not None
        else "–",
        "elapsed": minutes(s.elapsed_s),
        "tokens": _tokens(s.tokens),
        "cost": f"${s.cost_usd:.2f}",
    }


def _state(s: RunSummary) -> Text:
    return Text(s.state, style=STATE_STYLE[s.state])


def runs_table(summaries: list[RunSummary], title: str) -> Table:
    """One row per run; wrapped at nothing, so that a run id can be copied whole."""
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("run id", style="bold", no_wrap=True)
    for name in ("state", "task", "model"):
        table.add_column(name, no_wrap=True)
    for name in ("result", "elapsed", "tokens", "cost"):
        table.add_column(name, justify="right", no_wrap=True)
    for s in summaries:
        table.add_row(s.run_id, _state(s), s.task or "?", s.model or "?", *_figures(s).values())
    return table


def runs_list(summaries: list[RunSummary], title: str) -> Group:
    """Two lines per run, for a terminal too narrow for the table: the run id whole (the task
    begins it) with its state, then the rest."""
    # The title names the runs folder, a path a user copies: never wrapped either.
    lines: list[RenderableType] = [Text(title, style="italic", no_wrap=True, overflow="ignore"), Text("")]
    for s in summaries:
        lines.append(Text.assemble((s.run_id, "bold"), "  ", _state(s), no_wrap=True, overflow="ignore"))
        figures = _figures(s)
        details = (
            f"{s.model or '?'} · result {figures['result']} · {figures['elapsed']} · {figures['tokens']} "
            f"tokens · {figures['cost']}"
        )
        lines.append(Padding(Text(details, style="dim"), (0, 0, 0, 4)))
    return Group(*lines)


def runs_view(summaries: list[RunSummary], title: str, console: Console) -> RenderableType:
    """The table where it fits the console unwrapped, else the list: a run id is never wrapped
    (it was, over six lines at 80 columns), since it is copied into `kagent resume` and replay."""
    table = runs_table(summaries, title)
    # Measured without the console's width as a bound, which would cap the measure at it.
    if Measurement.get(console, console.options.update_width(UNBOUNDED_WIDTH), table).maximum <= console.width:
        return table
    return runs_list(summaries, title)
