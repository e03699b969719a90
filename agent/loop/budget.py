"""Keeping a run to its budget (kagent.agent.settings.Budget: wall time, money and tokens), and
which phase of the run we are in.

A run explores (the model tries ideas) until the final slice of its wall time, which is
kept back for re-verifying the best attempt; after the deadline it is over. Time is read
from an injectable clock so tests never sleep, and a resumed run carries the time its
earlier segments spent, so pauses between segments never count against the budget.
"""

from __future__ import annotations

import time
from typing import Literal, Optional, Protocol, TypedDict

from kagent.agent.settings import Budget, format_duration

Phase = Literal["explore", "final", "over"]


class BudgetSummary(TypedDict):
    """What the run has spent and may still spend, at one moment: the budget line the model
    reads each turn, the live view, and the trace's user notices (a plain mapping there)."""

    elapsed: float  # seconds, the earlier segments' included
    remaining: float  # seconds of wall time left
    wall: float  # the wall budget, in seconds
    tokens: int
    max_tokens: Optional[int]
    cost: float  # USD
    max_cost: Optional[float]
    phase: Phase


class Clock(Protocol):
    def now(self) -> float:
        """Monotonic seconds; only differences between readings mean anything."""
        ...


class SystemClock:
    """The real clock: monotonic, so a wall-clock change (NTP, DST) cannot eat the budget."""

    def now(self) -> float:
        return time.monotonic()


class FakeClock:
    """A clock that moves only when told to, so budget tests are exact and instant."""

    def __init__(self, start: float = 0.0):
        self._now = start

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a monotonic clock cannot go back")
        self._now += seconds


class BudgetTracker:
    """Counts what a run has spent against its Budget.

    Elapsed time is the time of this segment (since the tracker was made) plus
    ``spent_before_s``, the running time of the earlier segments of a resumed run; the same
    holds for tokens and cost through ``tokens_before`` and ``cost_before_usd``.
    """

    def __init__(
        self,
        budget: Budget,
        clock: Clock,
        spent_before_s: float = 0.0,
        *,
        tokens_before: int = 0,
        cost_before_usd: float = 0.0,
    ):
        if spent_before_s < 0 or tokens_before < 0 or cost_before_usd < 0:
            raise ValueError("what earlier segments spent cannot be negative")
        self.budget = budget
        self._clock = clock
        self._started = clock.now()
        self._spent_before_s = spent_before_s
        self._tokens = tokens_before
        self._cost_usd = cost_before_usd

    @property
    def clock(self) -> Clock:
        """The clock this tracker reads (the loop times its own waits with it)."""
        return self._clock

    @property
    def tokens(self) -> int:
        return self._tokens

    @property
    def cost_usd(self) -> float:
        return self._cost_usd

    def elapsed(self) -> float:
        return self._spent_before_s + (self._clock.now() - self._started)

    def remaining(self) -> float:
        return max(0.0, self.budget.wall_s - self.elapsed())

    def deadline(self) -> float:
        """Clock time at which the wall budget ends (earlier segments already subtracted)."""
        return self._started + self.budget.wall_s - self._spent_before_s

    def final_slice_starts(self) -> float:
        """Clock time at which exploring ends and re-verifying the best attempt begins."""
        return self.deadline() - self.budget.final_slice_s

    def charge(self, tokens: int, cost: float) -> None:
        """Adds one model call's usage."""
        if tokens < 0 or cost < 0:
            raise ValueError(f"usage cannot be negative: tokens={tokens}, cost={cost}")
        self._tokens += tokens
        self._cost_usd += cost

    def _spend_reason(self) -> str | None:
        """Why the model may not be called any more (cost or tokens), or None."""
        budget = self.budget
        if budget.max_cost_usd is not None and self._cost_usd >= budget.max_cost_usd:
            return f"cost budget of ${budget.max_cost_usd:.2f} reached (${self._cost_usd:.2f} spent)"
        if budget.max_tokens is not None and self._tokens >= budget.max_tokens:
            return f"token budget of {budget.max_tokens:,} reached ({self._tokens:,} used)"
        return None

    def exhausted(self) -> str | None:
        """Why the run must stop spending (wall time, cost or tokens), or None while it may go on."""
        if self.remaining() <= 0:
            return f"wall-time budget of {format_duration(self.budget.wall_s)} used up"
        return self._spend_reason()

    def phase(self) -> Phase:
        """ "explore" until the final slice, "final" in it, "over" once the wall time is gone.

        Running out of money or tokens also ends exploring ("final"), not the run: re-verifying
        the best attempt calls no model, so it still deserves the wall time that is left.
        """
        now = self._clock.now()
        if now >= self.deadline():
            return "over"
        if now >= self.final_slice_starts() or self._spend_reason() is not None:
            return "final"
        return "explore"

    def summary(self) -> BudgetSummary:
        """The numbers behind the per-turn budget line shown to the model."""
        return {
            "elapsed": self.elapsed(),
            "remaining": self.remaining(),
            "wall": self.budget.wall_s,
            "tokens": self._tokens,
            "max_tokens": self.budget.max_tokens,
            "cost": self._cost_usd,
            "max_cost": self.budget.max_cost_usd,
            "phase": self.phase(),
        }
