"""Rebuilding a run from its trace alone, so that it can go on where it stopped.

The conversation is replayed from the events; a turn that was cut short is settled: a tool
call that never got its result is re-run when that is safe (it only reads or records), and
otherwise answered as interrupted, so the provider never sees a call without its result.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from kagent.agent.ledger import Attempt, Design, Ledger
from kagent.agent.messages import Message, TextBlock, ToolCall, ToolResult, Usage
from kagent.agent.trace import (
    AttemptRecorded, Compacted, ModelResponded, RunEnded, RunResumed, RunStarted, ToolFinished, ToolStarted,
    UserNotice,
)

# Tools that only read, measure the baseline or record a note: running one again after an
# interruption changes nothing. Everything else (shell, edits, checks that commit an attempt
# on a workspace that was just put back) is answered as interrupted instead.
# A resumed run puts the workspace back as it was after the last tool call that finished, so
# every tool that only touches the workspace can simply run again. A shell command may have
# done anything anywhere, and so may a background job (which died with kagent): both are
# answered as interrupted instead.
UNSAFE_TO_RERUN = frozenset({"shell", "jobs"})
# Tools after which the workspace is not snapshot: they change nothing in it.
READ_ONLY_TOOLS = frozenset({"read_file", "list_files", "design", "baseline"})

INTERRUPTED = ("interrupted: kagent stopped while this shell command was running, and it was not run again "
               "because it may have had side effects. The workspace is back as it was before the command; "
               "check what you need before you go on.")


@dataclass
class Rebuilt:
    """Everything the agent needs to go on, derived from the trace."""

    started: Optional[RunStarted]
    messages: list[Message]
    pending_calls: list[ToolCall] = field(default_factory=list)  # the last turn's calls, not all answered
    results: dict[str, ToolResult] = field(default_factory=dict)  # answers already traced for those calls
    attempt_messages: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)
    ledger: Ledger = field(default_factory=Ledger)
    pending_design: Optional[Design] = None
    usage: Usage = field(default_factory=Usage)
    cost: float = 0.0
    turn: int = 0
    responses: int = 0
    elapsed_s: float = 0.0
    ended: Optional[RunEnded] = None
    segments: int = 0
    finished_summary: Optional[str] = None  # the model called finish; the run had not ended yet
    snapshot: Optional[str] = None  # the workspace after the last tool call that finished
    head: Optional[str] = None  # where main pointed then


def _tool_result(event: ToolFinished, run_dir: Path) -> ToolResult:
    content = (run_dir / event.blob).read_text() if event.blob and (run_dir / event.blob).exists() else event.content
    return ToolResult(tool_call_id=event.call_id, content=content, is_error=event.is_error)


def _close_turn(state: Rebuilt, text: str) -> None:
    results = [state.results[c.id] for c in state.pending_calls if c.id in state.results]
    state.messages.append(Message(role="user", content=[*results, TextBlock(text=text)]))
    state.pending_calls, state.results = [], {}


def rebuild(events: list[Any], run_dir: Path) -> Rebuilt:
    """The conversation and the books of a run, from its events in order."""
    started = next((e for e in events if isinstance(e, RunStarted)), None)
    state = Rebuilt(started=started, messages=[Message(**started.first_message)] if started else [])
    for event in events:
        state.elapsed_s = max(state.elapsed_s, event.elapsed_s)
        if isinstance(event, ModelResponded):
            message = Message(**event.response["message"])
            state.messages.append(message)
            state.pending_calls, state.results = message.tool_calls(), {}
            state.usage = state.usage + Usage(**event.response["usage"])
            state.cost += event.cost_usd
            state.turn, state.responses = event.turn, state.responses + 1
        elif isinstance(event, ToolStarted) and event.name == "design":
            state.pending_design = Design(**{k: str(v) for k, v in event.arguments.items()
                                             if k in ("hypothesis", "predicted")}) \
                if {"hypothesis", "predicted"} <= set(event.arguments) else state.pending_design
        elif isinstance(event, ToolFinished):
            state.results[event.call_id] = _tool_result(event, run_dir)
            if "snapshot" in event.data:
                state.snapshot, state.head = event.data["snapshot"], event.data["head"]
            if event.name == "finish" and not event.is_error:
                call = next((c for c in state.pending_calls if c.id == event.call_id), None)
                state.finished_summary = str(call.arguments.get("summary", "")) if call else ""
        elif isinstance(event, AttemptRecorded):
            attempt = Attempt(**event.attempt)
            state.ledger.attempts.append(attempt)
            if attempt.note.startswith("new best"):
                state.ledger.best = attempt.number
            state.attempt_messages[event.call_id] = (event.message, event.evaluation)
            state.pending_design = None
        elif isinstance(event, UserNotice):
            if state.pending_calls:
                _close_turn(state, event.text)
            elif state.messages and state.messages[-1].role == "user":
                state.messages[-1] = Message(role="user", content=[*state.messages[-1].content,
                                                                   TextBlock(text=event.text)])
            else:
                state.messages.append(Message(role="user", content=[TextBlock(text=event.text)]))
        elif isinstance(event, Compacted):
            first = state.messages[0]
            state.messages = [Message(role="user", content=[*first.content, TextBlock(text=event.summary)]),
                              *state.messages[1 + event.dropped_messages:]]
        elif isinstance(event, RunResumed):
            state.segments = event.segment
            state.ended = None
            if event.workspace_head:
                state.snapshot, state.head = event.workspace_snapshot, event.workspace_head
        elif isinstance(event, RunEnded):
            state.ended = event
            state.finished_summary = None  # that finish was honoured; an extended run goes on
    return state
