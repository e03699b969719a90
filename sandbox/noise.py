"""Whether a measured speedup means anything: within noise (its interval holds 1), or too noisy
to go by at all. What a person reads (`kagent eval`) and what a model reads (the benchmark
tool) say it the same way, from here."""

from __future__ import annotations

import math
from typing import Optional

from kagent.sandbox.results import EvalResult, ShapeTiming

# A 95% interval reaching further than this from its speedup, on either side, says too little
# to act on: an A/A run, the baseline against itself, can then read 1.4x.
NOISY_HALF_WIDTH = 0.25


def geomean(values: list[float]) -> Optional[float]:
    """The geometric mean; None for no values or any not positive."""
    if not values or any(v <= 0 for v in values):
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def score_interval(result: EvalResult) -> Optional[tuple[float, float]]:
    """An interval for the score: the geomean of the shapes' 95% interval ends. It is wider than
    the score's own interval would be (it takes the shapes' noise to move together): a cautious
    reading, for saying whether the score is within noise."""
    low, high = geomean([t.ci_low for t in result.timings]), geomean([t.ci_high for t in result.timings])
    return (low, high) if low is not None and high is not None else None


def score_text(score: Optional[float], interval: Optional[tuple[float, float]] = None) -> str:
    """A score as every view of a run shows it: with its 95% interval, and "within noise" when
    the interval holds 1.0 (such a score says nothing of whether the solution is faster)."""
    if score is None:
        return "–"
    if interval is None:
        return f"{score:.3f}x"
    low, high = interval
    return f"{score:.3f}x [{low:.3f}–{high:.3f}]" + (", within noise" if low <= 1.0 <= high else "")


def _half_width(low: float, high: float, value: float) -> float:
    return (high - low) / 2 / value if value > 0 else math.inf


def score_within_noise(result: EvalResult) -> bool:
    """Every shape within noise, or the score's interval holds 1."""
    interval = score_interval(result)
    return bool(result.timings) and (
        all(t.within_noise for t in result.timings) or (interval is not None and interval[0] <= 1.0 <= interval[1])
    )


def noisy_timings(result: EvalResult) -> list[ShapeTiming]:
    """The shapes whose interval is too wide to go by."""
    return [t for t in result.timings if _half_width(t.ci_low, t.ci_high, t.speedup) > NOISY_HALF_WIDTH]


def score_lines(result: EvalResult, advice: str = "time more rounds (--rounds) or on a quieter machine") -> list[str]:
    """The score, marked ≈ with its interval when it is within noise, and a plain warning, with
    ``advice``, when the timings are too noisy to mean anything. Empty without a score."""
    if result.score is None:
        return []
    interval = score_interval(result)
    line = f"score (geomean speedup): {result.score:.3f}x"
    if score_within_noise(result):
        line += " ≈ (within noise" + (f": interval {interval[0]:.2f}–{interval[1]:.2f}" if interval else "") + ")"
    lines = [line]
    noisy = noisy_timings(result)
    score_noisy = interval is not None and _half_width(*interval, result.score) > NOISY_HALF_WIDTH
    if noisy or score_noisy:
        where = ", ".join(["the score"] * score_noisy + [t.label for t in noisy])
        lines.append(
            f"too noisy to mean anything ({where}): a 95% interval wider than ±{NOISY_HALF_WIDTH:.0%}; {advice}"
        )
    return lines
