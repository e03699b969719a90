"""`kagent replay`: a run's trace, told turn by turn for a person.

The trace is the whole story of a run; this turns its events into rich renderables: what the
model said and called, what the tools answered, the attempts and the budget as they went.
A call that rewrites a file shows as the diff against its previous version, rebuilt from the
trace as the events are read (kagent.agent.report.trace_reading), instead of the whole new file.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

from pydantic import TypeAdapter, ValidationError
from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.rule import Rule
from rich.text import Text

from kagent.agent.loop.ledger import Attempt
from kagent.agent.outcome import ENDINGS
from kagent.agent.report.trace_reading import (
    TraceFiles,
    budget_line,
    diff_line_kind,
    interrupted_line,
    minutes,
    notice_line,
    resumed_line,
    shorten,
    thinking_line,
    trace_path,
)
from kagent.agent.storage.trace import (
    AttemptRecorded,
    Compacted,
    ErrorRecorded,
    Event,
    Finalized,
    Interrupted,
    ModelRequested,
    ModelResponded,
    ModelRetried,
    RunEnded,
    RunResumed,
    RunStarted,
    ToolFinished,
    ToolStarted,
    UserNotice,
    read_trace,
)
from kagent.core.errors import KagentError
from kagent.core.messages import ModelResponse, TextBlock, ThinkingBlock

# Caps that keep one event to a screenful: the trace (and its blobs) hold the full text.
MAX_RESULT_LINES = 12
MAX_RESULT_CHARS = 1_500
MAX_DIFF_LINES = 60
MAX_TEXT_CHARS = 4_000
MAX_ARGUMENT_CHARS = 120

_EVENT = TypeAdapter(Event)

VERDICT_STYLE = {
    "pass": "bold green",
    "incorrect": "bold red",
    "error": "bold red",
    "forbidden": "bold red",
    "tampered": "bold magenta",
    "timeout": "bold yellow",
    "crash": "bold red",
    "internal_error": "bold magenta",
}


# A diff line's colour on the terminal, by its kind (trace_reading.diff_line_kind).
DIFF_STYLES = {"head": "dim", "add": "green", "del": "red", "hunk": "cyan", "": ""}


def _diff_text(lines: list[str], indent: int = 4) -> RenderableType:
    """Unified-diff lines, coloured, capped at MAX_DIFF_LINES."""
    shown = lines[:MAX_DIFF_LINES]
    text = Text()
    for line in shown:
        text.append(line + "\n", style=DIFF_STYLES[diff_line_kind(line)])
    if len(lines) > len(shown):
        text.append(f"… {len(lines) - len(shown)} more diff lines\n", style="dim")
    text.rstrip()
    return Padding(text, (0, 0, 0, indent), expand=False)


class TraceRenderer:
    """Turns events, in trace order, into renderables. It keeps state across calls (file
    contents, the calls awaiting their result), so ``follow`` feeds it events as they come.

    Filters: ``only_attempts`` keeps the attempts and the end; ``only_errors`` keeps tool
    errors, failed attempts, model retries, error events and the end; both together keep
    what either keeps.
    """

    def __init__(self, only_attempts: bool = False, only_errors: bool = False):
        self.only_attempts = only_attempts
        self.only_errors = only_errors
        self.files = TraceFiles()

    @property
    def filtered(self) -> bool:
        return self.only_attempts or self.only_errors

    def render(self, event: Any) -> list[RenderableType]:
        """What to print for one event (often nothing); always updates the rebuilt state."""
        # An event type this version does not know renders as nothing: a newer trace still replays.
        handler: Callable[[Any], list[RenderableType]] = getattr(self, f"_on_{event.type}", lambda _e: [])
        return handler(event)

    def render_all(self, events: list[Any]) -> list[RenderableType]:
        return [part for event in events for part in self.render(event)]

    # -- events ------------------------------------------------------------------------------
    def _on_run_started(self, event: RunStarted) -> list[RenderableType]:
        config, budget = event.config, event.config.budget
        limits = [
            f"wall {minutes(budget.wall_s)}",
            f"max ${budget.max_cost_usd:.2f}" if budget.max_cost_usd is not None else "",
            f"max {budget.max_tokens:,} tokens" if budget.max_tokens is not None else "",
        ]
        head = Text.assemble(
            ("run ", "bold"),
            (event.run_id, "bold"),
            f"  task {config.task} · model {config.model} · {config.device} {config.scale} · "
            f"budget {', '.join(p for p in limits if p)}",
        )
        return [head, *(Text(f"warning: {text}", style="yellow") for text in event.warnings)]

    def _on_run_resumed(self, event: RunResumed) -> list[RenderableType]:
        self.files.follow(event)
        text = Text.assemble(("resumed", "bold cyan"), " ", resumed_line(event))
        return [text]

    def _on_model_requested(self, event: ModelRequested) -> list[RenderableType]:
        return []  # the response says all there is; a request alone is noise

    def _on_model_responded(self, event: ModelResponded) -> list[RenderableType]:
        if self.filtered:
            return []
        response = ModelResponse.model_validate(event.response)
        parts: list[RenderableType] = [
            Rule(
                f"turn {event.turn} · {minutes(event.elapsed_s)} · "
                f"{response.usage.total_tokens:,} tokens · ${event.cost_usd:.2f}",
                align="left",
                style="dim",
            )
        ]
        for block in response.message.content:
            if isinstance(block, TextBlock) and block.text.strip():
                parts.append(Text(shorten(block.text.strip(), MAX_TEXT_CHARS)))
            elif isinstance(block, ThinkingBlock):
                parts.append(Text(thinking_line(block.model_dump()), style="dim italic"))
        return parts

    def _on_tool_started(self, event: ToolStarted) -> list[RenderableType]:
        self.files.follow(event)
        if self.filtered:
            return []
        return self._call_view(event)

    def _call_view(self, event: ToolStarted) -> list[RenderableType]:
        args = event.arguments
        head = Text.assemble(("  ▶ ", "bold blue"), (event.name, "bold blue"))
        if "_raw" in args:  # the provider sent arguments that were not JSON
            head.append(f"  (unparsed arguments) {shorten(str(args['_raw']), MAX_ARGUMENT_CHARS)}", style="red")
            return [head]
        change = self.files.change(event)
        if change is not None:
            head.append(f" {change.path}{change.note}")
            if change.against == "nothing":
                return [head]
            if change.whole:  # the call gave the whole new file: say what the diff is against
                head.append(" — diff against the previous version" if change.diff else " — unchanged", style="dim")
            return [head, _diff_text(change.diff)] if change.diff else [head]
        shown = ", ".join(
            f"{key}={shorten(json.dumps(value, ensure_ascii=False), MAX_ARGUMENT_CHARS)}" for key, value in args.items()
        )
        if shown:
            head.append(f"({shown})")
        return [head]

    def _on_tool_finished(self, event: ToolFinished) -> list[RenderableType]:
        started = self.files.follow(event)
        if self.filtered and not (self.only_errors and event.is_error):
            return []
        parts: list[RenderableType] = []
        if self.filtered:  # the call was not shown before its result: say what failed
            parts += self._call_view(started) if started else [Text(f"  ▶ {event.name}", style="bold blue")]
        parts.append(self._result_view(event))
        return parts

    @staticmethod
    def _result_view(event: ToolFinished) -> RenderableType:
        lines = event.content.rstrip().splitlines() or ["(no output)"]
        shown = shorten("\n".join(lines[:MAX_RESULT_LINES]), MAX_RESULT_CHARS)
        more = len(lines) - min(len(lines), MAX_RESULT_LINES)
        text = Text(shown, style="red" if event.is_error else "")
        notes = []
        if more:
            notes.append(f"{more} more line{'s' if more != 1 else ''}")
        if event.blob:
            notes.append(f"full output in {event.blob}")
        if event.seconds >= 1:
            notes.append(f"{event.seconds:.1f} s")
        if notes:
            text.append(f"\n… {', '.join(notes)}" if more else f"  ({', '.join(notes)})", style="dim")
        label = Text("error: ", style="bold red") if event.is_error else Text("")
        return Padding(Text.assemble(label, text), (0, 0, 0, 4), expand=False)

    def _on_attempt_recorded(self, event: AttemptRecorded) -> list[RenderableType]:
        attempt = Attempt.model_validate(event.attempt)
        note = attempt.note or attempt.reason
        self.files.follow(event)
        failed = attempt.verdict != "pass"  # a regression passed: it was slower, not an error
        if self.filtered and not (self.only_attempts or failed):
            return []
        reverted = bool(event.reverted_to) or not attempt.kept
        head = Text.assemble(
            ("■ attempt ", "bold"),
            (str(attempt.number), "bold"),
            f" {attempt.kind} ",
            (attempt.verdict.upper(), VERDICT_STYLE.get(attempt.verdict, "bold")),
            f"  score {attempt.score:.3f}x" if attempt.score is not None else "  score –",
            ("  reverted", "yellow")
            if reverted
            else ("  draft, kept in place", "magenta")
            if attempt.draft
            else ("  kept", "green"),
        )
        parts: list[RenderableType] = [Padding(head, (0, 0, 0, 2), expand=False)]
        if note:
            parts.append(Padding(Text(shorten(note, 300), style="dim"), (0, 0, 0, 4), expand=False))
        if attempt.hypothesis:
            predicted = f" (predicted: {attempt.predicted})" if attempt.predicted else ""
            parts.append(
                Padding(
                    Text(f"design: {shorten(attempt.hypothesis + predicted, 300)}", style="dim"),
                    (0, 0, 0, 4),
                    expand=False,
                )
            )
        return parts

    def _on_user_notice(self, event: UserNotice) -> list[RenderableType]:
        if self.filtered:
            return []
        parts: list[RenderableType] = []
        if event.budget:
            parts.append(Text("  budget: " + budget_line(event.budget), style="dim"))
        notice = notice_line(event)
        if notice is not None:  # a nudge or a notice, not the usual status line
            parts.append(Text(f"  kagent: {shorten(notice, 200)}", style="yellow"))
        return parts

    def _on_compacted(self, event: Compacted) -> list[RenderableType]:
        if self.filtered:
            return []
        return [
            Text(
                f"⋯ compacted: {event.dropped_messages} earlier messages replaced by a "
                f"{len(event.summary):,}-char summary",
                style="magenta",
            )
        ]

    def _on_model_retried(self, event: ModelRetried) -> list[RenderableType]:
        if self.filtered and not self.only_errors:
            return []
        return [
            Text(
                f"  model retry {event.attempt} (turn {event.turn}) in {event.wait_s:.0f} s: "
                f"{shorten(event.error, 300)}",
                style="yellow",
            )
        ]

    def _on_error(self, event: ErrorRecorded) -> list[RenderableType]:
        if self.filtered and not self.only_errors:
            return []
        return [Text(f"✖ error{' (fatal)' if event.fatal else ''}: {event.message}", style="bold red")]

    def _on_finalized(self, event: Finalized) -> list[RenderableType]:
        if self.only_errors and not self.only_attempts:
            return []
        verdict = (event.evaluation or {}).get("verdict")
        score = (event.evaluation or {}).get("score")
        text = Text("final: ", style="bold")
        if event.best_attempt is None:
            text.append(event.note)
            return [text]
        text.append(f"attempt {event.best_attempt}, {event.note}")
        if verdict:
            text.append(f" — {str(verdict).upper()}", style=VERDICT_STYLE.get(str(verdict), "bold"))
        if isinstance(score, (int, float)):
            text.append(f" {score:.3f}x")
        return [text]

    def _on_interrupted(self, event: Interrupted) -> list[RenderableType]:
        return [Text.assemble(("interrupted ", "bold yellow"), interrupted_line(event))]

    def _on_run_ended(self, event: RunEnded) -> list[RenderableType]:
        best = (
            f"best attempt {event.best_attempt} ({event.best_speedup:.3f}x)"
            if event.best_attempt is not None and event.best_speedup is not None
            else "no best attempt"
        )
        return [
            Text.assemble(
                ("run ended: ", "bold"),
                (event.status, f"bold {ENDINGS[event.status].style}"),
                f" — {event.reason} · {best} · {event.tokens:,} tokens · ${event.cost_usd:.2f} · "
                f"{minutes(event.elapsed_s)}",
            )
        ]


def render_trace(
    events: list[Any], only_attempts: bool = False, only_errors: bool = False, torn_tail: bool = False
) -> Group:
    """The whole trace as one renderable (for ``Console.print``)."""
    parts = TraceRenderer(only_attempts, only_errors).render_all(events)
    if torn_tail:
        parts.append(
            Text(
                "(the last line of the trace was cut short, the process was killed while writing it: not shown)",
                style="dim",
            )
        )
    if not events:
        parts.append(Text("the trace has no events yet", style="dim"))
    return Group(*parts)


def replay(path: Path, only_attempts: bool = False, only_errors: bool = False) -> Group:
    """Render the trace of a run folder (or a trace file) as it is now."""
    read = read_trace(trace_path(path))
    return render_trace(read.events, only_attempts, only_errors, read.torn_tail)


def follow(
    path: Path,
    console: Console,
    poll_s: float = 0.5,
    stop: Optional[Callable[[], bool]] = None,
    only_attempts: bool = False,
    only_errors: bool = False,
) -> Optional[RunEnded]:
    """Print the trace's events, then new ones as they are written, until a run_ended event
    (returned) or ``stop()`` says so (None). Only complete lines are read: a line still being
    written, or torn by a kill, waits until its newline comes. The trace may not exist yet
    (a run just starting): it is waited for."""
    path = trace_path(path)
    renderer = TraceRenderer(only_attempts, only_errors)
    offset = 0  # bytes consumed: always the end of a complete line
    line_number = 0
    while True:
        ended: Optional[RunEnded] = None
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                chunk = f.read()
        except FileNotFoundError:
            chunk = b""
        complete = chunk[: chunk.rfind(b"\n") + 1]  # up to the last newline; the rest waits
        for line in complete.split(b"\n")[:-1]:
            offset += len(line) + 1
            line_number += 1
            if not line.strip():
                continue
            try:
                event = _EVENT.validate_python(json.loads(line))
            except (ValueError, ValidationError) as err:
                raise KagentError(f"{path}:{line_number} is not a valid trace event: {str(err)[:200]}") from err
            for part in renderer.render(event):
                console.print(part)
            if isinstance(event, RunEnded):
                ended = event
        if ended is not None:
            return ended
        if stop is not None and stop():
            return None
        time.sleep(poll_s)
