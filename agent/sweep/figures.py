"""A member's figures, read from its run folder: what `kagent runs` says of it, and more.

status.json (through `kagent runs`' reading, which knows a dead run from a live one) gives the
state, the scores, time, tokens and cost; the trace gives the best attempt's time per token
and how many times the run was resumed. A run's own files stay the source of truth: the sweep
keeps copies of these figures only to show them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field

from kagent.agent.report.run_list import State, read_summary


class MemberFigures(BaseModel):
    model_config = ConfigDict(extra="forbid")
    state: Optional[State] = Field(None, description="The run's state (kagent runs); None before it exists")
    best_attempt: Optional[int] = None
    best_score: Optional[float] = Field(None, description="The best attempt's score while exploring")
    result_score: Optional[float] = Field(
        None, description="The best verified score: re-verified once the run ended, the best attempt's before"
    )
    ms_per_token: dict[str, float] = Field(
        default_factory=dict,
        description="The best attempt's median ms per step (a token of a decode task), per timed shape",
    )
    attempts: int = 0
    resumes: int = Field(0, description="Segments after the first: times the run was resumed")
    elapsed_s: float = 0.0
    tokens: int = 0
    cost_usd: float = 0.0
    reason: str = ""


def read_figures(run_dir: Path) -> MemberFigures:
    """The figures of the run in ``run_dir`` now (none of it there yet: empty figures)."""
    summary = read_summary(run_dir) if run_dir.is_dir() else None
    if summary is None:
        return MemberFigures()
    figures = MemberFigures(
        state=summary.state,
        best_attempt=summary.best_attempt,
        best_score=summary.best_score,
        result_score=summary.result_score,
        elapsed_s=summary.elapsed_s,
        tokens=summary.tokens,
        cost_usd=summary.cost_usd,
        reason=summary.reason,
    )
    attempts, resumes, timings = _from_trace(run_dir / "trace.jsonl", summary.best_attempt)
    return figures.model_copy(update={"attempts": attempts, "resumes": resumes, "ms_per_token": timings})


def _from_trace(trace: Path, best: Optional[int]) -> tuple[int, int, dict[str, float]]:
    """Attempts, resumes and the best attempt's ms per step, from the trace's lines as they are
    (the run may be writing it: a line cut short is not read)."""
    attempts, resumes, timings = 0, 0, dict[str, float]()
    try:
        lines = trace.read_bytes().splitlines()
    except OSError:
        return attempts, resumes, timings
    for line in lines:
        if b'"attempt_recorded"' not in line and b'"run_resumed"' not in line:
            continue  # most lines: skipped unparsed, the status table reads this often
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("type") == "run_resumed":
            resumes += 1
        elif event.get("type") == "attempt_recorded":
            attempts += 1
            if event["attempt"]["number"] == best:
                timings = {t["label"]: t["candidate"]["median_ms"] for t in event["evaluation"].get("timings", [])}
    return attempts, resumes, timings
