"""Auditing a run: re-execute its recorded session and see whether its numbers hold.

The recorded model responses drive the tools again, on a fresh workspace, on this machine;
no model is called. Each attempt's verdict must come out the same, and its speedups must
agree: within the measured noise (the two runs' 95% intervals overlap) or within 10%. The
intervals alone are too strict across runs: they hold one run's step-to-step noise, while
two runs on one machine drift by a few percent (A/A on an H200: 0.988–1.006 between runs).
A claimed speedup that is not real is off by far more than that.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

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


class _Timing(BaseModel):
    """What the audit reads of a shape's timing (kagent.sandbox.results.ShapeTiming)."""

    label: str
    speedup: float
    ci_low: float
    ci_high: float


class _Measured(BaseModel):
    """What the audit reads of a recorded attempt: the ledger entry's verdict and score
    (kagent.agent.loop.ledger.Attempt) and the evaluation's timings."""

    number: int
    kind: str
    verdict: str
    score: Optional[float] = None
    timings: list[_Timing] = Field(default_factory=list)

    @classmethod
    def of(cls, event: AttemptRecorded) -> _Measured:
        return cls.model_validate({**event.attempt, "timings": event.evaluation.get("timings", [])})


def _attempts(trace: Path) -> dict[int, AttemptRecorded]:
    return {_Measured.of(e).number: e for e in read_trace(trace).events if isinstance(e, AttemptRecorded)}


def _compare(recorded_event: AttemptRecorded, measured_event: Optional[AttemptRecorded],
             tolerance: float) -> AttemptCheck:
    recorded = _Measured.of(recorded_event)
    check = AttemptCheck(number=recorded.number, kind=recorded.kind, recorded_verdict=recorded.verdict,
                         recorded_score=recorded.score, reproduces=False)
    if measured_event is None:
        check.why = "the re-executed session made no such attempt"
        return check
    measured = _Measured.of(measured_event)
    check.measured_verdict, check.measured_score = measured.verdict, measured.score
    if check.measured_verdict != check.recorded_verdict:
        check.why = f"verdict {check.recorded_verdict} recorded, {check.measured_verdict} now"
        return check
    now = {t.label: t for t in measured.timings}
    for t in recorded.timings:
        other = now.get(t.label)
        overlap = other is not None and (
            (other.ci_low <= t.ci_high and t.ci_low <= other.ci_high)
            or abs(other.speedup - t.speedup) <= tolerance * t.speedup)
        check.shapes.append(ShapeCheck(
            label=t.label, recorded=t.speedup, recorded_ci=(t.ci_low, t.ci_high),
            measured=other.speedup if other else None,
            measured_ci=(other.ci_low, other.ci_high) if other else None, reproduces=overlap))
    diverging = [s.label for s in check.shapes if not s.reproduces]
    check.reproduces = not diverging
    check.why = (f"speedup outside the measured noise and off by more than {tolerance:.0%} at "
                 f"{', '.join(diverging)}" if diverging else "reproduces")
    return check


def execute_replay(run: str, root: Optional[Path] = None, device: Optional[str] = None,
                   scale: Optional[str] = None, tolerance: float = REPRODUCE_TOLERANCE) -> ReplayAudit:
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
    settings = config.settings().model_copy(update={
        "model": model.name, "budget": Budget(wall_s=config.budget.wall_s), "device": device or config.device,
        "scale": scale or config.scale, "runs_root": run_dir / "replays"})
    replay_dir, _ = start_run(settings, model=model)
    recorded, measured = _attempts(run_dir / "trace.jsonl"), _attempts(replay_dir / "trace.jsonl")
    checks = [_compare(event, measured.get(number), tolerance) for number, event in sorted(recorded.items())]
    return ReplayAudit(run_id=config.run_id, replay_dir=str(replay_dir), device=settings.device,
                       scale=str(settings.scale), attempts=checks, extra_attempts=len(set(measured) - set(recorded)))
