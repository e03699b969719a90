"""Rebuilding a run from its trace alone, so that it can go on where it stopped.

The conversation is replayed from the events; the loop then settles the turn that was cut
short (Agent.resume): the workspace goes back to where it was after the last tool call that
finished, so a call that never got its result runs again there, unless its tool says it may
not (ToolFacts.rerun_after_crash: a shell command may have acted outside the workspace), and
is then answered as interrupted; a check or benchmark whose attempt was recorded is answered
from that record. So the provider never sees a call without its result.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from kagent.agent.loop.compaction import with_summary
from kagent.agent.loop.ledger import Attempt, Design
from kagent.agent.loop.state import Rebuilt
from kagent.agent.storage.trace import (
    AttemptRecorded,
    Compacted,
    ModelResponded,
    RunEnded,
    RunResumed,
    RunStarted,
    ToolFinished,
    UserNotice,
)
from kagent.core.messages import Message, TextBlock, ToolResult, Usage


def rebuild(events: list[Any], run_dir: Path) -> Rebuilt:
    """The conversation and the books of a run, from its events in order."""
    started = next((e for e in events if isinstance(e, RunStarted)), None)
    state = Rebuilt(started=started, messages=[Message(**started.first_message)] if started else [])
    for event in events:
        state.elapsed_s = max(state.elapsed_s, event.elapsed_s)
        apply = _APPLY.get(type(event))
        if apply is not None:
            apply(state, event, run_dir)
    return state


def _model_responded(state: Rebuilt, event: ModelResponded, run_dir: Path) -> None:
    message = Message(**event.response["message"])
    state.messages.append(message)
    state.pending_calls, state.results = message.tool_calls(), {}
    state.usage = state.usage + Usage(**event.response["usage"])
    state.cost += event.cost_usd
    state.turn, state.responses = event.turn, state.responses + 1


def _tool_finished(state: Rebuilt, event: ToolFinished, run_dir: Path) -> None:
    content = (run_dir / event.blob).read_text() if event.blob and (run_dir / event.blob).exists() else event.content
    state.results[event.call_id] = ToolResult(tool_call_id=event.call_id, content=content, is_error=event.is_error)
    if "snapshot" in event.data:
        state.snapshot, state.head = event.data["snapshot"], event.data["head"]
    # What a loop-control tool changed in the loop's books, as its result says (tools/control.py).
    if "design" in event.data:
        state.pending_design = Design.model_validate(event.data["design"])
        state.drafting, state.undecided = state.pending_design.draft, False
    if "design_refused" in event.data:
        state.undecided = True
    if "why" in event.data:  # the model's reason for an attempt's outcome, given with the next design
        number, why = event.data["why"]["attempt"], str(event.data["why"]["text"])
        for attempt in state.ledger.attempts:
            if attempt.number == number:
                attempt.why = why
    if "finished" in event.data:
        state.finished_summary = str(event.data["finished"])
    if "finish_answered" in event.data:
        state.finish_answered = True


def _attempt_recorded(state: Rebuilt, event: AttemptRecorded, run_dir: Path) -> None:
    attempt = Attempt(**event.attempt)
    state.ledger.attempts.append(attempt)
    if attempt.note.startswith("new best"):
        state.ledger.best = attempt.number
    state.attempt_messages[event.call_id] = (event.message, event.evaluation)
    state.pending_design = None


def _user_notice(state: Rebuilt, event: UserNotice, run_dir: Path) -> None:
    """The text kagent added: it closes the turn of calls answered, or joins the last user message."""
    if state.pending_calls:
        results = [state.results[c.id] for c in state.pending_calls if c.id in state.results]
        state.messages.append(Message(role="user", content=[*results, TextBlock(text=event.text)]))
        state.pending_calls, state.results = [], {}
    elif state.messages and state.messages[-1].role == "user":
        state.messages[-1] = Message(role="user", content=[*state.messages[-1].content, TextBlock(text=event.text)])
    else:
        state.messages.append(Message(role="user", content=[TextBlock(text=event.text)]))


def _compacted(state: Rebuilt, event: Compacted, run_dir: Path) -> None:
    state.messages = [with_summary(state.messages[0], event.summary), *state.messages[1 + event.dropped_messages :]]
    state.memory = event.memory or state.memory


def _run_resumed(state: Rebuilt, event: RunResumed, run_dir: Path) -> None:
    state.segments = event.segment
    state.ended = None
    if event.workspace_head:
        state.snapshot, state.head = event.workspace_snapshot, event.workspace_head


def _run_ended(state: Rebuilt, event: RunEnded, run_dir: Path) -> None:
    state.ended = event
    state.finished_summary = None  # that finish was honoured; an extended run goes on


# What each kind of event does to the rebuilt state; the others (a request, a retry, the
# start, an error, the final re-verification) change nothing there.
_APPLY: dict[type, Callable[[Rebuilt, Any, Path], None]] = {
    ModelResponded: _model_responded,
    ToolFinished: _tool_finished,
    AttemptRecorded: _attempt_recorded,
    UserNotice: _user_notice,
    Compacted: _compacted,
    RunResumed: _run_resumed,
    RunEnded: _run_ended,
}
