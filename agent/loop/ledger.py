"""The ledger of attempts: what was tried, what it was predicted to do, what it did.

The model sees it on every turn, whatever else has been compacted away.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

from pydantic import BaseModel, Field

from kagent.sandbox.results import EvalResult, Verdict

# A benchmark this much slower than the best counts as a regression (beyond timing noise).
REGRESSION_TOLERANCE = 0.02


class Design(BaseModel):
    """A hypothesis recorded before a change, so that the outcome can be held against it."""

    hypothesis: str
    predicted: str = Field(description="The predicted effect, e.g. '2.0x at 2K; one pass instead of three'")
    draft: bool = Field(False, description="Attempts under it that fail or regress stay in place as drafts, until "
                                           "the next design")


class Attempt(BaseModel):
    number: int
    kind: str = Field(description="The tool that measured it (check, benchmark)")
    hypothesis: Optional[str] = None
    predicted: Optional[str] = None
    verdict: str
    reason: str
    score: Optional[float] = Field(None, description="Geomean speedup (benchmarks that passed only)")
    speedups: dict[str, float] = Field(default_factory=dict, description="Per shape label")
    files: list[str] = Field(default_factory=list, description="Files changed since the previous attempt")
    commit: str
    kept: bool = Field(description="False when the workspace was reverted after it")
    draft: bool = Field(False, description="It failed or regressed under a draft design and stayed in place")
    single_launch: Optional[bool] = Field(None, description="One launch per step, as the solution's process "
                                                            "counted it; None where launches were not counted")
    why: Optional[str] = Field(None, description="The model's one line on why it came out as it did, given with "
                                                 "the next design")
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
            return Judgement(f"new best: {score:.3f}x, the first single launch (the best was {best.score:.3f}x, "
                             f"attempt {best.number}, in more launches)", lost=False, new_best=True)
        if single_launch_goal and best.single_launch and not single:
            return Judgement(f"{score:.3f}x, but not a single launch: the best stays attempt {best.number}, "
                             f"{best.score:.3f}x in one launch, which is the task's goal", lost=True, new_best=False)
        if score < best.score * (1 - REGRESSION_TOLERANCE):
            return Judgement(f"regression: {score:.3f}x against the best {best.score:.3f}x (attempt {best.number})",
                             lost=True, new_best=False)
        if score > best.score:
            return Judgement(f"new best: {score:.3f}x (was {best.score:.3f}x)", lost=False, new_best=True)
        return Judgement(f"{score:.3f}x: within {REGRESSION_TOLERANCE:.0%} of the best {best.score:.3f}x "
                         f"(attempt {best.number})", lost=False, new_best=False)

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
            rows.append(f"  #{a.number}{marker} {kind}{launch} | {a.verdict} | {score} | {idea}{predicted} | "
                        f"{a.note or a.reason[:80]}{why}")
        return "\n".join(rows)


def single_launch(result: EvalResult) -> Optional[bool]:
    """Whether the solution ran as one launch per step, as its own process counted it (None
    where launches were not counted, as on a CPU)."""
    report = result.launches_of("candidate")
    return report.single_launch if report is not None else None
