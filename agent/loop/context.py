"""How full the model's context is, when to compact it, and how long the next answer may be.

A service refuses a request whose prompt plus ``max_tokens`` passes the model's context window
(Anthropic: "input length and `max_tokens` exceed context limit"), and that refusal is final.
So the size of the prompt is taken from the service's own count where there is one: the last
answer's usage (input + cache reads + cache writes: the whole prompt that answer was given),
plus an estimate of what was added since (the answer itself, the tool results). Only without a
count (the first turn, after a compaction, a server that reports no usage) is the whole prompt
estimated, tool schemas and system prompt included. The estimate takes 3 characters a token:
CUDA and Python tokenize denser than prose's 4.

The conversation is compacted before prompt + the output cap would pass the window less a
margin (for the estimate's error); a model with a 1M window so compacts late, one with 200K
early enough. Should a prompt still be too large for the full cap (a huge tool result right
after a compaction), the answer's cap is clamped so that both fit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

from kagent.agent.settings import RunConfig
from kagent.core.messages import Message, ToolSpec, Usage

CHARS_PER_TOKEN = 3
# Kept free of the window besides the answer: the estimate of what was added since the last
# count may be short by this much.
MARGIN_SHARE = 0.05
MIN_MARGIN = 4_000
# An answer is never clamped below this: a smaller one could not even call a tool.
MIN_ANSWER_TOKENS = 1_024


def estimate_tokens(messages: Sequence[Message], system: str = "", tools: Sequence[ToolSpec] = ()) -> int:
    chars = sum(len(m.model_dump_json()) for m in messages) + len(system)
    chars += sum(len(t.model_dump_json()) for t in tools)
    return chars // CHARS_PER_TOKEN


def prompt_of(usage: Usage) -> int:
    """The whole prompt of the answer ``usage`` counts (Usage keeps cached tokens apart)."""
    return usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens


@dataclass
class ContextMeter:
    """The context of one conversation against its model's window.

    ``limit`` is the user's own compaction point (RunConfig.context_limit_tokens), which wins
    where it is lower than the window's.
    """

    window: int
    max_output_tokens: int
    limit: Optional[int] = None
    _counted: Optional[tuple[int, int]] = None  # (message count of the request, prompt tokens)

    @property
    def margin(self) -> int:
        return max(MIN_MARGIN, int(self.window * MARGIN_SHARE))

    @property
    def compact_above(self) -> int:
        """The prompt size past which the conversation is compacted."""
        room = self.window - self.margin - self.max_output_tokens
        return min(room, self.limit) if self.limit is not None else room

    def counted(self, usage: Usage, message_count: int) -> None:
        """The service's count of a request of ``message_count`` messages; ignored when it
        counted nothing (a server without usage)."""
        prompt = prompt_of(usage)
        self._counted = (message_count, prompt) if prompt > 0 else None

    def forget(self) -> None:
        """The conversation was rewritten (compacted): the last count no longer applies."""
        self._counted = None

    def size(self, messages: Sequence[Message], system: str, tools: Sequence[ToolSpec]) -> int:
        """The next request's prompt, in tokens: counted plus estimated, or estimated whole."""
        if self._counted is not None and self._counted[0] <= len(messages):
            count, prompt = self._counted
            return prompt + estimate_tokens(messages[count:])
        return estimate_tokens(messages, system, tools)

    def over(self, size: int) -> bool:
        return size > self.compact_above

    def answer_cap(self, size: int) -> int:
        """The next answer's max_tokens: the model's cap, or what the window leaves of it."""
        room = self.window - self.margin - size
        return max(MIN_ANSWER_TOKENS, min(self.max_output_tokens, room))


def user_limit(config: RunConfig) -> Optional[int]:
    """The user's compaction point, or None where none was set: then the model's window decides."""
    return config.context_limit_tokens
