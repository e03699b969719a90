"""Answers the output cap cut short (a ``max_tokens`` stop), and what the model is told.

A model writing a 60 KB kernel in one ``write_file`` can reach the cap mid-way; the call's
JSON then ends early and cannot be parsed. That is not the model sending bad JSON: it is told
plainly that the cap cut its answer and how to send large content in parts. A model whose
answers keep reaching the cap without calling any tool (all of it spent thinking, say) is
told the same; after ``limit`` such answers in a row the run ends rather than paying for
more of them.
"""

from __future__ import annotations

from typing import Optional

from kagent.core.messages import ModelResponse, ToolCall

# Code runs about 3 characters to a token; a part should take at most half of what an answer
# has room for, so that the rest of the answer (and a little thinking) still fits.
CHARS_PER_TOKEN = 3
CUT_ANSWERS_LIMIT = 3


def part_size_kb(room_tokens: int) -> int:
    """How large a part of a file to send in one call, in KB, for an answer of that room."""
    return max(1, room_tokens * CHARS_PER_TOKEN // 2 // 1000)


def _how_to_split(room_tokens: int) -> str:
    return (
        f"Send large content in parts of at most about {part_size_kb(room_tokens)} KB: write_file with the "
        f"first part, then write_file with append=true for each following part (each call its own answer "
        f"if need be); change an existing file with edit_file rather than writing it again."
    )


def cut_call_result(call: ToolCall, cap: Optional[int], room_tokens: int) -> str:
    """What the model is told about a tool call whose arguments could not be parsed; ``cap``
    is the output cap when its answer was cut by it (None: it sent bad JSON itself)."""
    raw = str(call.arguments.get("_raw", ""))
    if cap is None:
        return f"the arguments of {call.name} were not valid JSON: {raw[:300]}"
    return (
        f"Your answer reached the output cap ({cap:,} tokens per answer, thinking included) while it was "
        f"writing the arguments of {call.name}, so the call was cut off after {len(raw):,} characters and "
        f"nothing ran. {_how_to_split(room_tokens)}"
    )


class CutAnswers:
    """Answers the cap cut before any tool call, in a row."""

    def __init__(self, cap: int, room_tokens: int, limit: int = CUT_ANSWERS_LIMIT):
        self.cap, self.room_tokens, self.limit = cap, room_tokens, limit
        self.count = 0

    def watch(self, response: ModelResponse) -> Optional[str]:
        """For an answer without tool calls that the cap cut, what to tell the model; None
        for any other answer (which also starts the count over)."""
        if response.stop_reason != "max_tokens" or response.message.tool_calls():
            self.count = 0
            return None
        self.count += 1
        return (
            f"Your last answer reached the output cap ({self.cap:,} tokens per answer, thinking included) "
            f"before it called any tool, so nothing ran. Think in shorter steps and act with the tools. "
            f"{_how_to_split(self.room_tokens)} After {self.limit} such answers in a row the run ends."
        )

    @property
    def exhausted(self) -> bool:
        return self.count >= self.limit

    def reason(self) -> str:
        return (
            f"the model's last {self.count} answers all reached the output cap ({self.cap:,} tokens) "
            f"without calling a tool"
        )
