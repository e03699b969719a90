"""What a run shows of itself as it goes: its books (turns, tokens, cost, the ledger), the
status line the model reads after every turn, and the live view the user watches.

The books, the live view and the run's setting are one object (``Shared``) that the loop and its
parts (attempts, tool calls, compaction, finalize) share, so that each reads the same figures
without holding the others.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Optional

from pydantic import BaseModel, Field

from kagent.agent.loop.budget import BudgetTracker
from kagent.agent.loop.ledger import Attempt, Ledger
from kagent.agent.loop.state import Rebuilt
from kagent.agent.settings import RunConfig
from kagent.agent.storage.trace import TraceWriter
from kagent.agent.storage.workspace import Workspace
from kagent.core.messages import Usage
from kagent.sandbox import progress
from kagent.sandbox.evaluate import EvalOptions
from kagent.tasks import TaskRef


@dataclass
class Books:
    """The run's figures so far. A resumed run starts from the trace's (kagent.agent.loop.state.Rebuilt)."""

    turn: int = 0
    usage: Usage = field(default_factory=Usage)
    cost: float = 0.0
    ledger: Ledger = field(default_factory=Ledger)

    def go_on_from(self, state: Rebuilt) -> None:
        self.turn, self.usage, self.cost, self.ledger = state.turn, state.usage, state.cost, state.ledger

    def charge(self, usage: Usage, cost: float) -> None:
        self.usage = self.usage + usage
        self.cost += cost


class Status:
    """The budget line and the ledger that close every turn. The ledger is shown in full only
    when it changed since the model last saw it in full: on a long run it would otherwise fill
    the context with copies of itself. A compaction's summary holds it in full, and a resumed
    loop shows it in full again."""

    def __init__(self, tracker: BudgetTracker, books: Books):
        self.tracker, self.books = tracker, books
        self.ledger_shown: Optional[str] = None  # the ledger as last shown in full

    def text(self) -> str:
        s = self.tracker.summary()
        best = self.books.ledger.best_attempt()
        best_text = f"{best.score:.3f}x (attempt {best.number})" if best else "none yet"
        return (
            f"[budget] phase {s['phase']}; elapsed {s['elapsed'] / 60:.1f} min, remaining "
            f"{s['remaining'] / 60:.1f} min (the final slice starts "
            f"{max(0.0, self.tracker.final_slice_starts() - self.tracker.clock.now()) / 60:.1f} min from now); "
            f"tokens {self.books.usage.total_tokens:,}; cost ${self.books.cost:.2f}; best verified speedup "
            f"{best_text}\n" + self._ledger_text()
        )

    def ledger_in_full(self) -> str:
        """The ledger rendered in full, counted as shown (a compaction's summary holds it)."""
        self.ledger_shown = self.books.ledger.render()
        return self.ledger_shown

    def _ledger_text(self) -> str:
        ledger = self.books.ledger
        render = ledger.render()
        if render == self.ledger_shown and ledger.attempts:
            return f"Ledger: unchanged since it was last shown ({len(ledger.attempts)} attempts)."
        self.ledger_shown = render
        return render


class ViewUpdate(BaseModel):
    """What a live view shows after each event of interest."""

    phase: str
    turn: int
    elapsed_s: float
    remaining_s: float
    tokens: int
    cost_usd: float
    best_score: Optional[float]
    best_attempt: Optional[int]
    final_score: Optional[float] = Field(None, description="The best attempt's re-verified score, once it passed")
    attempts: list[Attempt] = Field(default_factory=list)
    last_event: str = Field("", description="The last thing that happened")
    activity: str = Field("", description="What is going on now (a tool, the model, the re-verification)")
    activity_since_s: float = Field(0.0, description="elapsed_s when that began")
    detail: str = Field("", description="The latest progress of the activity (an evaluation's phase)")
    ended: bool = False


@dataclass
class Activity:
    """What the loop is doing now, for the live view."""

    what: str
    since_s: float  # the run's elapsed time when it began
    detail: str = ""


class Live:
    """Feeds the live view: the books, what is going on now, and the last thing that happened."""

    def __init__(self, view: Callable[[ViewUpdate], None], tracker: BudgetTracker, books: Books):
        self.view, self.tracker, self.books = view, tracker, books
        self.activity: Optional[Activity] = None
        self.last_event = ""
        self.final_score: Optional[float] = None  # set once the final re-verification passed

    @contextmanager
    def busy(self, what: str) -> Iterator[None]:
        """Shown as what is going on now, with the time since it began, until the block ends."""
        self.activity = Activity(what, self.tracker.elapsed())
        self.show()
        try:
            yield
        finally:
            self.activity = None

    def on_progress(self, event: dict) -> None:
        """An evaluation's harness event, as it arrives: the view shows how far it has got."""
        text = progress.describe(event)
        if text and self.activity is not None:
            self.activity.detail = text
            self.show()

    def show(self, event: Optional[str] = None, ended: bool = False) -> None:
        if event is not None:
            self.last_event = event
        best = self.books.ledger.best_attempt()
        s = self.tracker.summary()
        activity = self.activity or Activity("", 0.0)
        self.view(
            ViewUpdate(
                phase=s["phase"],
                turn=self.books.turn,
                elapsed_s=s["elapsed"],
                remaining_s=s["remaining"],
                tokens=self.books.usage.total_tokens,
                cost_usd=self.books.cost,
                best_score=best.score if best else None,
                best_attempt=best.number if best else None,
                final_score=self.final_score,
                attempts=self.books.ledger.attempts[-6:],
                last_event=self.last_event,
                activity=activity.what,
                activity_since_s=activity.since_s,
                detail=activity.detail,
                ended=ended,
            )
        )


@dataclass(frozen=True)
class Shared:
    """What the loop and its parts (kagent.agent.loop.attempts, calls, compaction, finalize)
    share: the run's setting, its books and its live view."""

    config: RunConfig
    task: TaskRef
    workspace: Workspace
    trace: TraceWriter
    tracker: BudgetTracker
    eval_options: EvalOptions
    books: Books
    live: Live
