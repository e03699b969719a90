"""The ledger of attempts: what was tried, what it was predicted to do, what it did.

The model sees it on every turn, whatever else has been compacted away.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

from pydantic import BaseModel, Field

from kagent.sandbox.noise import geomean
from kagent.sandbox.results import EvalResult, Verdict

# A benchmark this much slower than the best counts as a regression (beyond timing noise).
REGRESSION_TOLERANCE = 0.02
# Under a single-launch goal, the speed a run is held to while much budget remains: this share of
# the bytes floor's (a single launch at 8% of the floor, 72 minutes into a public run, is not done).
GOAL_FLOOR_FRACTION = 0.5
# Two attempts that both run at their device time are compared by their own steady times per
# step, not by their speedups: the host-bound baseline's pace moves every speedup with the
# host's. On the H200 one megakernel scored 34.7, 27.0, 26.4 and 20.5 in four evaluations
# within three minutes while its own steady time stayed within 3.5% (the lab notebook,
# "Scores of one kernel drift with the baseline's host").


class Design(BaseModel):
    """A hypothesis recorded before a change, so that the outcome can be held against it."""

    hypothesis: str
    predicted: str = Field(description="The predicted effect, e.g. '2.0x at 2K; one pass instead of three'")
    draft: bool = Field(
        False, description="Attempts under it that fail or regress stay in place as drafts, until the next design"
    )


class Attempt(BaseModel):
    number: int
    kind: str = Field(description="The tool that measured it (check, benchmark)")
    hypothesis: Optional[str] = None
    predicted: Optional[str] = None
    verdict: str
    reason: str
    score: Optional[float] = Field(None, description="Geomean speedup (benchmarks that passed only)")
    interval: Optional[tuple[float, float]] = Field(
        None, description="The score's 95% interval (kagent.sandbox.noise.score_interval); None in older traces"
    )
    speedups: dict[str, float] = Field(default_factory=dict, description="Per shape label")
    files: list[str] = Field(default_factory=list, description="Files changed since the previous attempt")
    commit: str
    kept: bool = Field(description="False when the workspace was reverted after it")
    draft: bool = Field(False, description="It failed or regressed under a draft design and stayed in place")
    single_launch: Optional[bool] = Field(
        None,
        description="One launch per step, as the solution's process counted it; None where launches were not counted",
    )
    candidate_ms: dict[str, float] = Field(
        default_factory=dict, description="Steady ms per step per shape label (benchmarks that passed only)"
    )
    device_bound: Optional[bool] = Field(
        None,
        description="Its steady time per step was its device time (within "
        "10%): compared by its own time with another such attempt; None where "
        "not measured",
    )
    why: Optional[str] = Field(
        None, description="The model's one line on why it came out as it did, given with the next design"
    )
    floor_fraction: Optional[float] = Field(
        None,
        description="The bytes floor over its time, at its slowest shape (1.0: at the floor); benchmarks that "
        "passed on a device with a floor only; None in older traces",
    )
    note: str = ""
    elapsed_s: float = 0.0
    tokens: int = 0


class Judgement(NamedTuple):
    """What an attempt's measurement says against the best attempt."""

    note: str
    lost: bool  # it failed, or it is a regression: the workspace goes back to the best
    new_best: bool


class Ledger(BaseModel):
    attempts: list[Attempt] = Field(default_factory=list)
    best: Optional[int] = Field(None, description="Number of the best verified attempt")

    def best_attempt(self) -> Optional[Attempt]:
        return next((a for a in self.attempts if a.number == self.best), None)

    def next_number(self) -> int:
        return len(self.attempts) + 1

    def judge(self, result: EvalResult, score: Optional[float], single_launch_goal: bool = False) -> Judgement:
        """An attempt that measured ``result`` (``score`` where it was timed and passed)
        against the best one so far. Under a single-launch goal (a megakernel task) an attempt
        that runs as one launch ranks above every one that does not, whatever their scores:
        the run delivers the best megakernel, and the fastest of the others is not it."""
        if result.verdict is not Verdict.PASS:
            return Judgement(f"{result.verdict.value}: {result.reason}", lost=True, new_best=False)
        if score is None:
            return Judgement("passed", lost=False, new_best=False)
        best = self.best_attempt()
        if best is None or best.score is None:
            return Judgement(f"new best: {score:.3f}x", lost=False, new_best=True)
        single = single_launch(result)
        if single_launch_goal and single and not best.single_launch:
            return Judgement(
                f"new best: {score:.3f}x, the first single launch (the best was {best.score:.3f}x, "
                f"attempt {best.number}, in more launches)",
                lost=False,
                new_best=True,
            )
        if single_launch_goal and best.single_launch and not single:
            return Judgement(
                f"{score:.3f}x, but not a single launch: the best stays attempt {best.number}, "
                f"{best.score:.3f}x in one launch, which is the task's goal",
                lost=True,
                new_best=False,
            )
        own = own_times(best, result)
        if own is not None:
            return _by_own_times(best, score, *own)
        if score < best.score * (1 - REGRESSION_TOLERANCE):
            return Judgement(
                f"regression: {score:.3f}x against the best {best.score:.3f}x (attempt {best.number})",
                lost=True,
                new_best=False,
            )
        if score > best.score:
            return Judgement(f"new best: {score:.3f}x (was {best.score:.3f}x)", lost=False, new_best=True)
        return Judgement(
            f"{score:.3f}x: within {REGRESSION_TOLERANCE:.0%} of the best {best.score:.3f}x (attempt {best.number})",
            lost=False,
            new_best=False,
        )

    def render(self, last: int = 25) -> str:
        """A compact table for the model."""
        if not self.attempts:
            return "Ledger: no attempts yet."
        rows = ["Ledger (attempt | verdict | score | design (predicted) | outcome | why, as you said):"]
        shown = self.attempts[-last:]
        if len(self.attempts) > last:
            rows.append(f"  … {len(self.attempts) - last} earlier attempts not shown")
        for a in shown:
            score = f"{a.score:.3f}x" if a.score is not None else "–"
            idea = (a.hypothesis or "no design recorded")[:80]
            predicted = f" (predicted: {a.predicted[:60]})" if a.predicted else ""
            marker = " ★" if a.number == self.best else ""
            kind = f"{a.kind}, draft" if a.draft else a.kind
            launch = ", one launch" if a.single_launch else ""
            why = f" | why: {a.why[:100]}" if a.why else ""
            rows.append(
                f"  #{a.number}{marker} {kind}{launch} | {a.verdict} | {score} | {idea}{predicted} | "
                f"{a.note or a.reason[:80]}{why}"
            )
        return "\n".join(rows)


def own_times(best: Attempt, result: EvalResult) -> Optional[tuple[float, float]]:
    """(the best's, this result's) steady ms per step, geometric means over the shapes both
    timed, where both ran at their device time; else None (compare their speedups). Whether
    a step ran at its device time comes from the profiler in the solution's own process, which
    the solution could bend; it only chooses which of two figures of the referee's clock ranks
    the attempts, and both are true."""
    if not (best.device_bound and result.device_bound):
        return None
    now = {t.label: t.candidate.median_ms for t in result.timings}
    labels = [label for label in best.candidate_ms if label in now]
    best_ms, ms = geomean([best.candidate_ms[label] for label in labels]), geomean([now[label] for label in labels])
    return (best_ms, ms) if best_ms is not None and ms is not None else None


def _by_own_times(best: Attempt, score: float, best_ms: float, ms: float) -> Judgement:
    """The judgement of a device-bound attempt against a device-bound best, by their steady
    times per step (geometric means over the shapes both timed)."""
    both = (
        f"by their own steady times, both at their device time (speedups {score:.3f}x and "
        f"{best.score:.3f}x carry the baseline's host pace)"
    )
    if ms > best_ms * (1 + REGRESSION_TOLERANCE):
        return Judgement(
            f"regression: {ms:.4g} ms a step against the best's {best_ms:.4g} (attempt {best.number}), {both}",
            lost=True,
            new_best=False,
        )
    if ms < best_ms:
        return Judgement(f"new best: {ms:.4g} ms a step (was {best_ms:.4g}), {both}", lost=False, new_best=True)
    return Judgement(
        f"{ms:.4g} ms a step: within {REGRESSION_TOLERANCE:.0%} of the best's {best_ms:.4g} "
        f"(attempt {best.number}), {both}",
        lost=False,
        new_best=False,
    )


def floor_fraction(result: EvalResult) -> Optional[float]:
    """The bytes floor over the solution's time at its slowest shape, where the harness knew the floor."""
    fractions = [t.roofline.candidate_fraction for t in result.timings if t.roofline is not None]
    return min(fractions) if fractions else None


def single_launch(result: EvalResult) -> Optional[bool]:
    """Whether the solution ran as one launch per step, where that was counted outside its own
    process (results.LaunchReport.counted_outside); None where launches were not counted so
    (on a CPU, or by the solution's own process, which can rewrite its count to one). This is
    what ranks a single-launch attempt first and passes the megakernel goal, so a count the
    solution could forge must not reach it: the model still reads that count in its result."""
    report = result.launches_of("candidate")
    return report.single_launch if report is not None and report.counted_outside else None
