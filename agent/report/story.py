"""A run rebuilt from its folder, as the report shows it: no charts and no HTML here.

The trace says nearly everything: the run's settings, every model call with its usage and
cost, every attempt with its whole measurement, the end. status.json adds the one thing a
killed process cannot write, that it died (kagent.agent.report.run_list reads it so); the workspace's
attempt refs give each attempt's files. A run in progress, an interrupted one and a trace whose
last line was torn read the same way: the page shows what the trace holds so far.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Optional

from pydantic import TypeAdapter, ValidationError

from kagent.agent.loop.pricing import Price, price_of
from kagent.agent.report.run_list import read_summary
from kagent.agent.report.trace_reading import trace_path
from kagent.agent.storage.trace import (
    AttemptRecorded,
    Finalized,
    ModelResponded,
    RunEnded,
    RunResumed,
    RunStarted,
    ToolFinished,
    ToolStarted,
    read_trace,
)
from kagent.agent.storage.workspace import Workspace
from kagent.core.errors import KagentError
from kagent.sandbox.noise import score_interval
from kagent.sandbox.results import Environment, EvalResult, ShapeTiming

# Usage kinds as the trace's ModelResponse.usage names them, and as the page says them.
TOKEN_KINDS = {
    "input_tokens": "input",
    "output_tokens": "output",
    "cache_read_tokens": "cache read",
    "cache_write_tokens": "cache write",
    "reasoning_tokens": "reasoning",
}
# What each priced kind costs per token (kagent.agent.loop.pricing.Price's fields); reasoning is
# part of output and priced with it.
PRICED_KINDS = {
    "input_tokens": "input",
    "output_tokens": "output",
    "cache_read_tokens": "cache_read",
    "cache_write_tokens": "cache_write",
}
WORKSPACE_NAME = "workspace"
_TIMINGS = TypeAdapter(list[ShapeTiming])


@dataclass(frozen=True)
class ShapeFigures:
    """One timed shape of an attempt: its speed, against the baseline and the bytes floor."""

    label: str
    speedup: float
    ci_low: float
    ci_high: float
    candidate_ms: float
    baseline_ms: float
    floor_ms: Optional[float]
    fraction_of_floor: Optional[float]  # the floor over the solution's time: 1.0 at the floor


@dataclass(frozen=True)
class AttemptRow:
    """One attempt, as the ledger, the charts and the transcript show it."""

    number: int
    kind: str
    verdict: str
    seq: int  # the position of its event in the trace
    elapsed_s: float
    score: Optional[float]
    interval: Optional[tuple[float, float]]  # the score's, kagent.sandbox.noise.score_interval
    hypothesis: Optional[str]
    predicted: Optional[str]
    note: str
    kept: bool
    commit: str
    files: list[str]
    shapes: list[ShapeFigures]
    launches: Optional[int]  # the solution's launches per step, where counted (CUDA)
    single_launch: Optional[bool]
    launch_note: str
    # How the charts mark it beyond its verdict: "reverted", or "draft" (failed, kept in place);
    # a flag is drawn once kagent.agent.report.charts.MARKS has a marker for it.
    flags: tuple[str, ...]
    why: Optional[str] = None  # the model's reason for the outcome, given with its next design


@dataclass(frozen=True)
class UsageStep:
    """The run's model usage after one response: running totals."""

    elapsed_s: float
    tokens: dict[str, int]  # by kind (TOKEN_KINDS), reasoning inside output
    cost_usd: float  # as recorded, response by response
    # The recorded cost split by kind in proportion to what each kind costs in kagent's price
    # table; None where the table has no price for the model (free, local or unknown).
    cost_by_kind: Optional[dict[str, float]]


@dataclass(frozen=True)
class AttemptSource:
    """What an attempt's commit holds, from the workspace: the diff from the attempt before and
    the solution file."""

    previous: Optional[int]
    diff: str
    solution: Optional[str]  # None when the commit has no solution file


@dataclass
class RunStory:
    run_dir: Path
    run_id: str
    config: dict[str, Any]
    versions: dict[str, Optional[str]]
    state: str
    reason: str
    events: list[Any]
    torn_tail: bool
    attempts: list[AttemptRow]
    usage: list[UsageStep]
    model_reverts: list[tuple[float, Optional[int]]]  # (elapsed, attempt asked for: None for the best)
    baseline: list[ShapeTiming]  # the latest baseline tool's timings
    ended: Optional[RunEnded]
    final: Optional[Finalized]
    final_result: Optional[EvalResult]
    environment: Optional[Environment]
    elapsed_s: float
    turns: int

    @property
    def task(self) -> str:
        return str(self.config.get("task") or "?")

    @property
    def model(self) -> str:
        return str(self.config.get("model") or "?")

    @property
    def tokens(self) -> dict[str, int]:
        return self.usage[-1].tokens if self.usage else {kind: 0 for kind in TOKEN_KINDS}

    @property
    def total_tokens(self) -> int:
        """As kagent counts them everywhere (Usage.total_tokens): reasoning is inside output."""
        return sum(count for kind, count in self.tokens.items() if kind != "reasoning_tokens")

    @property
    def cost_usd(self) -> float:
        return self.usage[-1].cost_usd if self.usage else 0.0

    @property
    def best(self) -> Optional[AttemptRow]:
        """The best attempt as the loop judges it: the highest score of a passing benchmark, the
        first to reach it."""
        best = None
        for row in self.attempts:
            if row.score is not None and (best is None or best.score is None or row.score > best.score):
                best = row
        return best

    def cost_at(self, elapsed_s: float) -> float:
        """What the model calls had cost by then."""
        spent = [step.cost_usd for step in self.usage if step.elapsed_s <= elapsed_s]
        return spent[-1] if spent else 0.0


def _evaluation(data: Optional[dict[str, Any]]) -> Optional[EvalResult]:
    """An evaluation as the trace recorded it; None where it does not validate (a newer schema)."""
    if not data:
        return None
    try:
        return EvalResult.model_validate(data)
    except ValidationError:
        return None


def _attempt_row(event: AttemptRecorded, result: Optional[EvalResult]) -> AttemptRow:
    """``result``: the event's evaluation, validated."""
    attempt = event.attempt
    score = attempt.get("score")
    shapes = [
        ShapeFigures(
            t.label,
            t.speedup,
            t.ci_low,
            t.ci_high,
            t.candidate.median_ms,
            t.baseline.median_ms,
            t.roofline.floor_ms if t.roofline else None,
            t.roofline.candidate_fraction if t.roofline else None,
        )
        for t in (result.timings if result else [])
    ]
    launches = result.launches_of("candidate") if result else None
    kept = bool(attempt.get("kept", True)) and not event.reverted_to
    return AttemptRow(
        number=int(attempt.get("number", 0)),
        kind=str(attempt.get("kind", "?")),
        verdict=str(attempt.get("verdict", "?")),
        seq=event.seq,
        elapsed_s=event.elapsed_s,
        score=float(score) if isinstance(score, (int, float)) else None,
        interval=score_interval(result) if result is not None and isinstance(score, (int, float)) else None,
        hypothesis=attempt.get("hypothesis"),
        predicted=attempt.get("predicted"),
        note=str(attempt.get("note") or attempt.get("reason") or ""),
        kept=kept,
        commit=event.commit,
        files=[str(f) for f in attempt.get("files") or []],
        shapes=shapes,
        launches=launches.launches if launches else None,
        single_launch=launches.single_launch if launches else None,
        launch_note=launches.note if launches else "",
        flags=("draft",) if attempt.get("draft") else () if kept else ("reverted",),
    )


def _cost_split(usage: dict[str, Any], cost: float, price: Optional[Price]) -> Optional[dict[str, float]]:
    if price is None:
        return None
    priced = {kind: int(usage.get(kind) or 0) * getattr(price, name) for kind, name in PRICED_KINDS.items()}
    whole = sum(priced.values())
    return {kind: cost * part / whole if whole else 0.0 for kind, part in priced.items()}


def read_story(run_dir: Path) -> RunStory:
    """The run in ``run_dir`` (a run folder, or a trace file) as far as its trace goes now."""
    path = trace_path(Path(run_dir))
    run_dir = path.parent
    read = read_trace(path)
    started: Optional[RunStarted] = next((e for e in read.events if isinstance(e, RunStarted)), None)
    # The settings as plain JSON: a trace whose start is missing has only its config.json, if that.
    config = started.config.model_dump(mode="json") if started else _config_file(run_dir)
    model = str(config.get("model") or "")
    price = price_of(model) if model else None  # once: a user's price file is read at each call
    ended: Optional[RunEnded] = None
    final: Optional[Finalized] = None
    attempts: list[AttemptRow] = []
    usage: list[UsageStep] = []
    reverts: list[tuple[float, Optional[int]]] = []
    baseline: list[ShapeTiming] = []
    calls: dict[str, ToolStarted] = {}
    environment: Optional[Environment] = None
    tokens = {kind: 0 for kind in TOKEN_KINDS}
    cost, cost_by_kind, turns = 0.0, {kind: 0.0 for kind in PRICED_KINDS}, 0
    for event in read.events:
        if isinstance(event, RunResumed):
            ended = None  # a resumed run goes on: its earlier end no longer stands
        elif isinstance(event, RunEnded):
            ended = event
        elif isinstance(event, Finalized):
            final = event
        elif isinstance(event, AttemptRecorded):
            result = _evaluation(event.evaluation)
            attempts.append(_attempt_row(event, result))
            environment = result.environment if result and result.environment else environment
        elif isinstance(event, ModelResponded):
            turns = max(turns, event.turn)
            counts = event.response.get("usage") or {}
            for kind in tokens:
                tokens[kind] += int(counts.get(kind) or 0)
            cost += event.cost_usd
            split = _cost_split(counts, event.cost_usd, price)
            if split is not None:
                cost_by_kind = {kind: cost_by_kind[kind] + split[kind] for kind in PRICED_KINDS}
            usage.append(UsageStep(event.elapsed_s, dict(tokens), cost, dict(cost_by_kind) if split else None))
        elif isinstance(event, ToolStarted):
            calls[event.call_id] = event
        elif isinstance(event, ToolFinished) and not event.is_error:
            call = calls.pop(event.call_id, None)
            why = event.data.get("why")
            if isinstance(why, dict):
                attempts = [
                    replace(a, why=str(why.get("text"))) if a.number == why.get("attempt") else a for a in attempts
                ]
            if event.name == "revert":
                target = (call.arguments if call else {}).get("attempt")
                reverts.append((event.elapsed_s, target if isinstance(target, int) else None))
            elif event.name == "baseline" and event.data.get("timings"):
                try:
                    baseline = _TIMINGS.validate_python(event.data["timings"])
                except ValidationError:
                    pass  # a newer schema: the attempts' own baselines still show
    final_result = _evaluation(final.evaluation) if final else None
    if final_result is not None and final_result.environment is not None:
        environment = final_result.environment
    summary = read_summary(run_dir)
    if summary is not None:
        state, reason = summary.state, summary.reason
    elif ended is not None:
        state, reason = ended.status, ended.reason
    else:
        state, reason = "unknown", "no status.json beside the trace, and the trace records no end"
    return RunStory(
        run_dir=run_dir,
        run_id=started.run_id if started else (summary.run_id if summary else run_dir.name),
        config=config,
        versions=dict(started.versions) if started else {},
        state=state,
        reason=reason,
        events=read.events,
        torn_tail=read.torn_tail,
        attempts=attempts,
        usage=usage,
        model_reverts=reverts,
        baseline=baseline,
        ended=ended,
        final=final,
        final_result=final_result,
        environment=environment,
        # As resume counts it (kagent.agent.lifecycle.runs.spent_s): a run killed mid-tool wrote
        # its time to status.json after the trace's last event.
        elapsed_s=max([e.elapsed_s for e in read.events] + [summary.elapsed_s if summary else 0.0]),
        turns=turns,
    )


def _config_file(run_dir: Path) -> dict[str, Any]:
    """config.json, for a trace whose run start is missing (a resume that began again)."""
    try:
        config = json.loads((run_dir / "config.json").read_text())
    except (OSError, ValueError):
        return {}
    return config if isinstance(config, dict) else {}


def _text(data: bytes) -> str:
    return "(a binary file)\n" if b"\0" in data else data.decode("utf-8", errors="replace")


def attempt_sources(story: RunStory) -> tuple[dict[int, AttemptSource], str]:
    """Each attempt's diff from the attempt before it and its solution file, from the workspace's
    attempt refs; and, where there is no workspace to read, why (else "")."""
    try:
        workspace = Workspace.open(story.run_dir / WORKSPACE_NAME)
        refs = workspace.attempts()
    except KagentError as err:
        return {}, err.message
    solution_name = str(story.config.get("solution_name") or "solution.py")
    numbers = sorted(refs)
    # An attempt set aside on resume (an orphan) has no ref: it shows without files.
    rows = [row for row in story.attempts if row.number in refs]
    previous = {row.number: max((n for n in numbers if n < row.number), default=None) for row in rows}
    diffs = workspace.diffs(
        [(refs[before], refs[row.number]) for row in rows if (before := previous[row.number]) is not None]
    )
    solutions = workspace.files([(refs[row.number], solution_name) for row in rows])
    return {
        row.number: AttemptSource(
            previous[row.number], diffs.get(refs[row.number], ""), _text(solution) if solution is not None else None
        )
        for row, solution in zip(rows, solutions, strict=True)
    }, ""
