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

from kagent.agent.loop.budget import Budget
from kagent.core.errors import KagentError
from kagent.agent.loop.agent import RunConfig
from kagent.core.messages import ModelResponse
from kagent.agent.loop.models.scripted import ScriptedModel
from kagent.agent.lifecycle.runs import RunOptions, find_run, start_run
from kagent.agent.storage.trace import AttemptRecorded, ModelResponded, RunStarted, read_trace

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


def _attempts(trace: Path) -> dict[int, AttemptRecorded]:
    return {e.attempt["number"]: e for e in read_trace(trace).events if isinstance(e, AttemptRecorded)}


def _compare(recorded: AttemptRecorded, measured: Optional[AttemptRecorded],
             tolerance: float) -> AttemptCheck:
    attempt = recorded.attempt
    check = AttemptCheck(number=attempt["number"], kind=attempt["kind"], recorded_verdict=attempt["verdict"],
                         recorded_score=attempt["score"], reproduces=False)
    if measured is None:
        check.why = "the re-executed session made no such attempt"
        return check
    check.measured_verdict, check.measured_score = measured.attempt["verdict"], measured.attempt["score"]
    if check.measured_verdict != check.recorded_verdict:
        check.why = f"verdict {check.recorded_verdict} recorded, {check.measured_verdict} now"
        return check
    now = {t["label"]: t for t in measured.evaluation.get("timings", [])}
    for t in recorded.evaluation.get("timings", []):
        other = now.get(t["label"])
        overlap = other is not None and (
            (other["ci_low"] <= t["ci_high"] and t["ci_low"] <= other["ci_high"])
            or abs(other["speedup"] - t["speedup"]) <= tolerance * t["speedup"])
        check.shapes.append(ShapeCheck(
            label=t["label"], recorded=t["speedup"], recorded_ci=(t["ci_low"], t["ci_high"]),
            measured=other["speedup"] if other else None,
            measured_ci=(other["ci_low"], other["ci_high"]) if other else None, reproduces=overlap))
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
    config = RunConfig.model_validate(started.config)
    responses = [ModelResponse(**e.response) for e in events if isinstance(e, ModelResponded)]
    model = ScriptedModel(responses, name=f"replay of {config.run_id}")
    options = RunOptions(task=config.task, model=model.name, budget=Budget(wall_s=config.budget.wall_s),
                         device=device or config.device, scale=scale or config.scale,
                         runs_root=run_dir / "replays", eval_timeout_s=config.eval_timeout_s,
                         auto_revert=config.auto_revert)
    replay_dir, _ = start_run(options, model=model)
    recorded, measured = _attempts(run_dir / "trace.jsonl"), _attempts(replay_dir / "trace.jsonl")
    checks = [_compare(event, measured.get(number), tolerance) for number, event in sorted(recorded.items())]
    return ReplayAudit(run_id=config.run_id, replay_dir=str(replay_dir), device=options.device, scale=options.scale,
                       attempts=checks, extra_attempts=len(set(measured) - set(recorded)))
