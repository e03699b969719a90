"""The transcript of a run's page: the trace's events as HTML, in order. A long output is
folded, and cut at a cap with a link to its blob (or the trace event that holds it whole).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kagent.agent.report.html import capped, diff_html, esc, fold, pre, relative_href, state_span, verdict_span
from kagent.agent.report.story import TOKEN_KINDS, RunStory
from kagent.agent.report.trace_reading import (
    TraceFiles,
    budget_line,
    interrupted_line,
    line_count,
    minutes,
    notice_line,
    resumed_line,
    shorten,
    thinking_line,
)
from kagent.agent.storage.trace import (
    AttemptRecorded,
    Compacted,
    ErrorRecorded,
    Finalized,
    Interrupted,
    ModelResponded,
    ModelRetried,
    RunEnded,
    RunResumed,
    RunStarted,
    ToolFinished,
    ToolStarted,
    UserNotice,
)
from kagent.sandbox.noise import score_interval, score_text

# Caps on what one item shows; the trace (or its blob) holds the whole.
MAX_TEXT_CHARS = 6_000  # a model's text, a thinking block, a prompt, a summary
MAX_RESULT_CHARS = 3_000  # a tool's output
MAX_ARGUMENT_CHARS = 1_500  # one argument of a tool call
MAX_CALL_DIFF_LINES = 300  # a write_file or edit_file shown as a diff
OPEN_RESULT_LINES = 6  # an output this short shows open; a longer one is folded


def tokens_text(counts: dict[str, Any]) -> str:
    shown = [f"{int(counts.get(kind) or 0):,} {name}" for kind, name in TOKEN_KINDS.items() if counts.get(kind)]
    return " · ".join(shown) or "no tokens counted"


class Transcript:
    """The trace's events as HTML, in order; like `kagent replay`, it rebuilds the files as it
    reads (TraceFiles), so that a write_file shows as a diff."""

    def __init__(self, story: RunStory, page: Path):
        self.story = story
        self.page = page
        self.files = TraceFiles()

    def render(self) -> str:
        parts = []
        for event in self.story.events:
            handler: Callable[[Any], str] = getattr(self, f"_on_{event.type}", lambda _e: "")
            html = handler(event)
            if html:
                parts.append(html)
        for call in self.files.calls.values():  # started, never answered: running now, or cut short
            parts.append(f'<p class="dim">{esc(call.name)} (event {call.seq}) has no result in the trace yet</p>')
        if self.story.torn_tail:
            parts.append('<p class="dim">(the trace\'s last line is incomplete: not shown)</p>')
        if not self.story.events:
            parts.append('<p class="dim">The trace has no events yet.</p>')
        return "\n".join(parts)

    def _in_trace(self, event: Any) -> str:
        return f"the whole is in trace.jsonl, event {event.seq}"

    def _text(self, event: Any, text: str, limit: int = MAX_TEXT_CHARS) -> str:
        """``text`` of ``event``, escaped and capped (the trace holds the whole)."""
        return capped(text, limit, self._in_trace(event))

    def _event(self, event: Any, body: str, css: str = "event") -> str:
        return f'<div class="{css}" id="event-{event.seq}">{body}</div>'

    def _on_run_started(self, event: RunStarted) -> str:
        config = event.config.model_dump(mode="json")
        first = "\n\n".join(
            str(block.get("text") or "")
            for block in event.first_message.get("content") or []
            if isinstance(block, dict)
        )
        head = esc(
            f"run {event.run_id} started: {config.get('task', '?')} · {config.get('model', '?')} · "
            f"{config.get('device', '?')}, {config.get('scale', '?')} scale"
        )
        return self._event(
            event,
            f"<b>{head}</b>"
            + fold("the system prompt", f"<pre>{self._text(event, event.system)}</pre>")
            + fold("the first message", f"<pre>{self._text(event, first)}</pre>"),
        )

    def _on_run_resumed(self, event: RunResumed) -> str:
        self.files.follow(event)
        return self._event(event, f"<b>resumed</b> {esc(resumed_line(event))}", "event notice")

    def _on_model_responded(self, event: ModelResponded) -> str:
        head = (
            f"turn {event.turn} · {minutes(event.elapsed_s)} · {tokens_text(event.response.get('usage') or {})}"
            f" · ${event.cost_usd:.2f}"
        )
        parts = [f'<div class="turn" id="event-{event.seq}">{esc(head)}</div>']
        for block in (event.response.get("message") or {}).get("content") or []:
            kind = block.get("type")
            if kind == "text" and str(block.get("text", "")).strip():
                parts.append(f'<div class="say">{self._text(event, block["text"].strip())}</div>')
            elif kind == "thinking":
                thought = str(block.get("thinking") or "")
                body = f"<pre>{self._text(event, thought)}</pre>" if thought else ""
                parts.append(fold(esc(thinking_line(block)), body, css="thinking"))
        return "\n".join(parts)

    def _on_tool_started(self, event: ToolStarted) -> str:
        change = self.files.change(event)
        self.files.follow(event)
        args = event.arguments
        head = f"<b>▶ {esc(event.name)}</b>"
        if "_raw" in args:  # the provider sent arguments that were not JSON
            return self._event(
                event,
                f'{head} <span class="error">(unparsed arguments)</span>'
                f"{pre(shorten(str(args['_raw']), MAX_ARGUMENT_CHARS))}",
                "call",
            )
        if change is not None and event.name == "write_file":
            content = str(args["content"])
            head += f" {esc(change.path)} ({line_count(content):,} lines)"
            if change.against == "nothing":
                body = f"<pre>{self._text(event, content, MAX_RESULT_CHARS)}</pre>"
                return self._event(event, fold(head + " — the whole file", body), "call")
            if not change.diff:
                return self._event(event, head + ' <span class="dim">— unchanged</span>', "call")
            return self._event(
                event,
                fold(
                    head + " — diff against the previous version",
                    diff_html(change.diff, MAX_CALL_DIFF_LINES),
                    open_=True,
                ),
                "call",
            )
        if change is not None:  # an edit_file
            return self._event(
                event, head + f" {esc(change.path)}" + diff_html(change.diff, MAX_CALL_DIFF_LINES), "call"
            )
        if event.name == "shell" and isinstance(args.get("command"), str):
            return self._event(event, head + pre(shorten(args["command"], MAX_ARGUMENT_CHARS)), "call")
        shown = ", ".join(
            f"{key}={shorten(json.dumps(value, ensure_ascii=False), MAX_ARGUMENT_CHARS)}" for key, value in args.items()
        )
        return self._event(event, head + (f"<code>({esc(shown)})</code>" if shown else ""), "call")

    def _on_tool_finished(self, event: ToolFinished) -> str:
        self.files.follow(event)
        text = event.content.rstrip() or "(no output)"
        lines = text.splitlines()
        where = (
            f'the whole output is in <a href="{relative_href(self.story.run_dir / event.blob, self.page)}">'
            f"{esc(event.blob)}</a> beside the trace"
            if event.blob
            else self._in_trace(event)
        )
        body = f"<pre{' class=error' if event.is_error else ''}>{capped(text, MAX_RESULT_CHARS, where)}</pre>"
        notes = [f"{len(lines):,} lines"] + ([f"{event.seconds:.1f} s"] if event.seconds >= 1 else [])
        if event.blob:
            notes.append(f"full output in {event.blob}")
        label = '<span class="error">error</span>: ' if event.is_error else ""
        if len(lines) <= OPEN_RESULT_LINES and len(text) <= MAX_RESULT_CHARS:
            return self._event(event, body, "result")
        return self._event(
            event,
            fold(f'{label}{esc(shorten(lines[0], 160))} <span class="dim">({esc(", ".join(notes))})</span>', body),
            "result",
        )

    def _on_attempt_recorded(self, event: AttemptRecorded) -> str:
        self.files.follow(event)
        row = next((a for a in self.story.attempts if a.seq == event.seq), None)
        if row is None:
            return ""
        state = "kept" if row.kept else "reverted"
        head = (
            f'<b>■ <a href="#attempt-{row.number}">attempt {row.number}</a></b> {esc(row.kind)} '
            f"{verdict_span(row.verdict)} score {esc(score_text(row.score, row.interval))} · {state}"
        )
        return self._event(event, f'{head}<div class="dim">{esc(shorten(row.note, 600))}</div>', "event")

    def _on_user_notice(self, event: UserNotice) -> str:
        parts = []
        if event.budget:
            parts.append(f'<div class="dim">budget: {esc(budget_line(event.budget))}</div>')
        notice = notice_line(event)
        if notice is not None:
            parts.append(f'<div class="notice">kagent: {self._text(event, event.text.strip())}</div>')
        return self._event(event, "".join(parts)) if parts else ""

    def _on_compacted(self, event: Compacted) -> str:
        head = (
            f"⋯ compacted: {event.dropped_messages} earlier messages replaced by a {len(event.summary):,}-char summary"
        )
        return self._event(event, fold(esc(head), f"<pre>{self._text(event, event.summary)}</pre>"), "event notice")

    def _on_model_retried(self, event: ModelRetried) -> str:
        return self._event(
            event,
            esc(
                f"model retry {event.attempt} (turn {event.turn}) after {event.wait_s:.0f} s: "
                f"{shorten(event.error, 600)}"
            ),
            "event notice",
        )

    def _on_error(self, event: ErrorRecorded) -> str:
        return self._event(
            event, f"<b>✖ error{' (fatal)' if event.fatal else ''}:</b> {esc(event.message)}", "event error"
        )

    def _on_finalized(self, event: Finalized) -> str:
        result = self.story.final_result if event is self.story.final else None
        text = (
            f"<b>final:</b> {esc(event.note)}"
            if event.best_attempt is None
            else f"<b>final:</b> attempt {event.best_attempt}, {esc(event.note)}"
        )
        if result is not None:
            text += f" — {verdict_span(result.verdict.value)} {esc(score_text(result.score, score_interval(result)))}"
        return self._event(event, text)

    def _on_interrupted(self, event: Interrupted) -> str:
        return self._event(event, f"<b>interrupted</b> {esc(interrupted_line(event))}", "event notice")

    def _on_run_ended(self, event: RunEnded) -> str:
        best = (
            f"best attempt {event.best_attempt} ({event.best_speedup:.3f}x)"
            if event.best_attempt is not None and event.best_speedup is not None
            else "no best attempt"
        )
        tail = (
            f"— {event.reason} · {best} · {event.tokens:,} tokens · ${event.cost_usd:.2f} · {minutes(event.elapsed_s)}"
        )
        return self._event(event, f"<b>run ended:</b> {state_span(event.status)} {esc(tail)}")
