"""What the loop needs to go on with a run: its conversation and books as the trace left them
(kagent.agent.lifecycle.resume rebuilds it; Agent.resume goes on from it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from kagent.agent.loop.ledger import Design, Ledger
from kagent.agent.storage.trace import RunEnded, RunStarted
from kagent.core.messages import Message, ToolCall, ToolResult, Usage


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
    drafting: bool = False  # the last design was a draft
    undecided: bool = False  # the last design call was refused for its arguments
    memory: Optional[str] = None  # the newest summary the model wrote for a compaction
    finish_answered: bool = False  # an early finish was answered with what remains
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
