"""Compaction: when the conversation nears the context window, older turns give way to a summary.

The summary holds the model's own summary (asked for once, as the context nears its limit), the
ledger in full, the model's notes and the solution as they are now, so that what a long run
learned outlives its conversation.
"""

from __future__ import annotations

from typing import Optional

from kagent.agent.loop import memory
from kagent.agent.loop.briefing import NOTES_FILE
from kagent.agent.loop.context import ContextMeter
from kagent.agent.loop.status import Shared, Status
from kagent.agent.storage.trace import Compacted
from kagent.core.messages import Message, TextBlock, ToolSpec
from kagent.tools.base import cap

# The notes are shown in full after every compaction, up to this many characters.
NOTES_SHOWN_CHARS = 16_000
# Past this share of the context limit the model is told, once, to bring its notes up to date
# before older turns are compacted away.
COMPACTION_WARNING_SHARE = 0.8

COMPACTED_MARK = "[compacted]"


def with_summary(first: Message, summary: str) -> Message:
    """The first message (the task) with the latest compaction's summary in place of any
    earlier one: each summary holds the whole of what the model needs, and summaries left to
    pile up would grow the context by a solution's copy at every compaction."""
    task = [b for b in first.content if not (isinstance(b, TextBlock) and b.text.startswith(COMPACTED_MARK))]
    return Message(role="user", content=[*task, TextBlock(text=summary)])


class Compaction:
    """Measures the conversation against the window, warns the model once before a compaction,
    keeps the summary it then writes, and compacts."""

    def __init__(
        self,
        shared: Shared,
        context: ContextMeter,
        prompt: tuple[str, list[ToolSpec]],
        status: Status,
    ):
        self.config, self.workspace, self.trace = shared.config, shared.workspace, shared.trace
        self.books, self.live, self.context, self.status = shared.books, shared.live, context, status
        self.system, self.specs = prompt
        self.warned = False  # asked for a summary before the coming compaction
        self.memory: Optional[str] = None  # the newest summary the model wrote for a compaction

    def prompt_tokens(self, messages: list[Message]) -> int:
        """The next request's prompt (kagent.agent.loop.context: the service's count where it gave one)."""
        return self.context.size(messages, self.system, self.specs)

    def warning(self, messages: list[Message]) -> str:
        """Once per compaction, as the context nears its limit: the model's cue to bring its
        notes up to date while it still sees what they should say."""
        near = self.prompt_tokens(messages) > COMPACTION_WARNING_SHARE * self.context.compact_above
        if self.warned or not near:
            return ""
        self.warned = True
        return memory.request(NOTES_FILE, self.config.solution_name)

    def heard(self, said: str) -> bool:
        """Whether the model's text holds the summary it was asked for (it is kept)."""
        written = memory.summary_in(said) if self.warned else None
        if written is not None:
            self.memory = written
        return written is not None

    def compacted(self, messages: list[Message]) -> list[Message]:
        """The conversation, compacted if it is over the limit."""
        if not self.context.over(self.prompt_tokens(messages)):
            return messages
        cut = len(messages) - self.config.keep_recent_messages
        while cut > 1 and messages[cut].role != "assistant":
            cut += 1  # the kept part starts with an assistant turn, so every call keeps its result
        if cut <= 1 or cut >= len(messages):
            return messages
        dropped = messages[1:cut]
        summary = self._summary(len(dropped))
        self.context.forget()
        self.trace.append(
            Compacted(turn=self.books.turn, dropped_messages=len(dropped), summary=summary, memory=self.memory)
        )
        self.live.show("compacted the conversation")
        return [with_summary(messages[0], summary), *messages[cut:]]

    def _summary(self, dropped: int) -> str:
        solution = self.workspace.root / self.config.solution_name
        current = solution.read_text(errors="replace") if solution.is_file() else None
        notes = self.workspace.root / NOTES_FILE
        notes_text = (
            f"Your notes ({NOTES_FILE}), as they are now:\n```\n"
            f"{cap(notes.read_text(errors='replace'), NOTES_SHOWN_CHARS)}\n```"
            if notes.is_file()
            else f"You keep no {NOTES_FILE} yet: write one, and it will be shown here."
        )
        ledger, self.warned = self.status.ledger_in_full(), False
        own = (
            f"Your own summary, as you wrote it before a compaction:\n{self.memory}"
            if self.memory
            else "You gave no summary before this compaction (asked for one under fixed headings)."
        )
        return (
            f"{COMPACTED_MARK} {dropped} earlier messages were dropped to save context.\n{own}\n\n"
            f"{ledger}\n{notes_text}\n"
            + memory.solution_text(self.config.solution_name, current, self.context.compact_above)
        )
