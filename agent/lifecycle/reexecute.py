"""Auditing a run: re-execute its recorded session and see whether its numbers hold.

The recorded model responses drive the tools again, on a fresh workspace, on this machine;
no model is called. Each attempt's verdict must come out the same, and its speedups must
agree: within the measured noise (the two runs' 95% intervals overlap) or within 10%. The
intervals alone are too strict across runs: they hold one run's step-to-step noise, while
two runs on one machine drift by a few percent (A/A on an H200: 0.988–1.006 between runs).
A claimed speedup that is not real is off by far more than that. An attempt that ran at its
device time both then and now is held to its own steady time per step instead, the same way:
its speedup carries the host-bound baseline's pace, which moved one megakernel's from 34.7x
to 20.5x within minutes on an H200 (its own time within 3.5%; the lab notebook).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Optional

from pydantic import BaseModel, Field

from kagent.agent.lifecycle.runs import start_run
from kagent.agent.loop.models.scripted import ScriptedModel
from kagent.agent.settings import Budget
from kagent.agent.storage.folders import find_run
from kagent.agent.storage.trace import AttemptRecorded, ModelResponded, RunStarted, read_trace
from kagent.core.errors import KagentError
from kagent.core.messages import ModelResponse

# Relative difference between two runs' speedups that still counts as reproducing.
REPRODUCE_TOLERANCE = 0.10


class ShapeCheck(BaseModel):
    label: str
    by: Literal["speedup", "ms"] = Field(
        "speedup",
        description="What was compared: the speedup, or (an attempt at "
        "its device time both times) its steady ms per step",
    )
    recorded: float
    recorded_ci: tuple[float, float]
    measured: Optional[float]
    measured_ci: Optional[tuple[float, float]]
    reproduces: bool


class AttemptCheck(BaseModel):
    number: int
    kind: str
    recorded_verdict: str
    measured_verdict: Optional[str] = Field(None, description="None: the re-executed session made no such attempt")
    recorded_score: Optional[float] = None
    measured_score: Optional[float] = None
    shapes: list[ShapeCheck] = Field(default_factory=list)
    reproduces: bool
    why: str = ""


class ReplayAudit(BaseModel):
    run_id: str
    replay_dir: str
    device: str
    scale: str
    attempts: list[AttemptCheck]
    extra_attempts: int = Field(0, description="Attempts the re-execution made that the record does not have")

    @property
    def reproduces(self) -> bool:
        return self.extra_attempts == 0 and all(a.reproduces for a in self.attempts)


class _Steady(BaseModel):
    """What the audit reads of the solution's steady time (kagent.sandbox.results.Stats)."""

    median_ms: float
    median_ci_low_ms: Optional[float] = None
    median_ci_high_ms: Optional[float] = None


class _Timing(BaseModel):
    """What the audit reads of a shape's timing (kagent.sandbox.results.ShapeTiming)."""

    label: str
    speedup: float
    ci_low: float
    ci_high: float
    candidate: Optional[_Steady] = None

    def figure(self, by: str) -> tuple[float, tuple[float, float]]:
        """The speedup or the steady ms per step, and its 95% interval (the value itself where
        none was recorded)."""
        if by == "speedup":
            return self.speedup, (self.ci_low, self.ci_high)
        assert self.candidate is not None
        ms = self.candidate.median_ms
        return ms, (self.candidate.median_ci_low_ms or ms, self.candidate.median_ci_high_ms or ms)


class _Measured(BaseModel):
    """What the audit reads of a recorded attempt: the ledger entry's verdict and score
    (kagent.agent.loop.ledger.Attempt) and the evaluation's timings."""

    number: int
    kind: str
    verdict: str
    score: Optional[float] = None
    device_bound: Optional[bool] = None
    timings: list[_Timing] = Field(default_factory=list)

    @classmethod
    def of(cls, event: AttemptRecorded) -> _Measured:
        return cls.model_validate({**event.attempt, "timings": event.evaluation.get("timings", [])})


def _attempts(trace: Path) -> dict[int, AttemptRecorded]:
    return {_Measured.of(e).number: e for e in read_trace(trace).events if isinstance(e, AttemptRecorded)}


def _compare(
    recorded_event: AttemptRecorded, measured_event: Optional[AttemptRecorded], tolerance: float
) -> AttemptCheck:
    recorded = _Measured.of(recorded_event)
    check = AttemptCheck(
        number=recorded.number,
        kind=recorded.kind,
        recorded_verdict=recorded.verdict,
        recorded_score=recorded.score,
        reproduces=False,
    )
    if measured_event is None:
        check.why = "the re-executed session made no such attempt"
        return check
    measured = _Measured.of(measured_event)
    check.measured_verdict, check.measured_score = measured.verdict, measured.score
    if check.measured_verdict != check.recorded_verdict:
        check.why = f"verdict {check.recorded_verdict} recorded, {check.measured_verdict} now"
        return check
    now = {t.label: t for t in measured.timings}
    own_time = bool(
        recorded.device_bound
        and measured.device_bound
        and all(t.candidate is not None for t in [*recorded.timings, *measured.timings])
    )
    by = "ms" if own_time else "speedup"
    for t in recorded.timings:
        value, interval = t.figure(by)
        other = now.get(t.label)
        if other is None:
            check.shapes.append(
                ShapeCheck(
                    label=t.label,
                    by=by,
                    recorded=value,
                    recorded_ci=interval,
                    measured=None,
                    measured_ci=None,
                    reproduces=False,
                )
            )
            continue
        measured_value, measured_interval = other.figure(by)
        overlap = (measured_interval[0] <= interval[1] and interval[0] <= measured_interval[1]) or abs(
            measured_value - value
        ) <= tolerance * value
        check.shapes.append(
            ShapeCheck(
                label=t.label,
                by=by,
                recorded=value,
                recorded_ci=interval,
                measured=measured_value,
                measured_ci=measured_interval,
                reproduces=overlap,
            )
        )
    diverging = [s.label for s in check.shapes if not s.reproduces]
    check.reproduces = not diverging
    what = "steady ms per step (at its device time both times)" if own_time else "speedup"
    check.why = (
        f"{what} outside the measured noise and off by more than {tolerance:.0%} at {', '.join(diverging)}"
        if diverging
        else "reproduces, by its steady ms per step (at its device time both times)"
        if own_time
        else "reproduces"
    )
    return check


def execute_replay(
    run: str,
    root: Optional[Path] = None,
    device: Optional[str] = None,
    scale: Optional[str] = None,
    tolerance: float = REPRODUCE_TOLERANCE,
) -> ReplayAudit:
    run_dir = find_run(run, root)
    events = read_trace(run_dir / "trace.jsonl").events
    started = next((e for e in events if isinstance(e, RunStarted)), None)
    if started is None:
        raise KagentError(f"run {run_dir.name} has no recorded start: nothing to re-execute")
    config = started.config
    responses = [ModelResponse.model_validate(e.response) for e in events if isinstance(e, ModelResponded)]
    model = ScriptedModel(responses, name=f"replay of {config.run_id}")
    # The run's own settings, on this machine's device if asked; the money and token limits go:
    # no model is called, the recorded answers are.
    settings = config.settings().model_copy(
        update={
            "model": model.name,
            "budget": Budget(wall_s=config.budget.wall_s),
            "device": device or config.device,
            "scale": scale or config.scale,
            "runs_root": run_dir / "replays",
        }
    )
    replay_dir, _ = start_run(settings, model=model)
    recorded, measured = _attempts(run_dir / "trace.jsonl"), _attempts(replay_dir / "trace.jsonl")
    checks = [_compare(event, measured.get(number), tolerance) for number, event in sorted(recorded.items())]
    return ReplayAudit(
        run_id=config.run_id,
        replay_dir=str(replay_dir),
        device=settings.device,
        scale=str(settings.scale),
        attempts=checks,
        extra_attempts=len(set(measured) - set(recorded)),
    )
