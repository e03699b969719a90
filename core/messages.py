"""The conversation, in kagent's own provider-neutral types.

Providers translate these to and from their wire formats; the trace stores them; the loop
only ever sees these. Content blocks carry a ``type`` literal so that a list of them
round-trips through JSON unchanged.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Protocol, Union

from pydantic import BaseModel, ConfigDict, Field


class _Block(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TextBlock(_Block):
    type: Literal["text"] = "text"
    text: str


class ThinkingBlock(_Block):
    """The model's thinking, sent back to its provider exactly as received.

    Anthropic's carries its ``signature`` (or, redacted, only ``redacted_data``); an OpenAI
    Responses reasoning item carries its ``item_id`` and ``encrypted_content`` (its text is the
    item's summary). A block from one provider is never sent to another: its opaque fields mean
    nothing there. Traces written before the OpenAI fields existed read with them unset.
    """

    type: Literal["thinking"] = "thinking"
    thinking: str = ""
    signature: Optional[str] = None
    redacted_data: Optional[str] = Field(None, description="Set for a redacted thinking block instead of text")
    item_id: Optional[str] = Field(None, description="The id of an OpenAI Responses reasoning item")
    encrypted_content: Optional[str] = Field(
        None, description="An OpenAI reasoning item's encrypted reasoning, passed back every turn (store: false)"
    )


class ToolCall(_Block):
    type: Literal["tool_call"] = "tool_call"
    id: str = Field(description="The provider's id for this call; the result must carry it back")
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class ToolResult(_Block):
    type: Literal["tool_result"] = "tool_result"
    tool_call_id: str
    content: str
    is_error: bool = False


Block = Annotated[Union[TextBlock, ThinkingBlock, ToolCall, ToolResult], Field(discriminator="type")]


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Literal["user", "assistant"]
    content: list[Block]

    def text(self) -> str:
        return "".join(b.text for b in self.content if isinstance(b, TextBlock))

    def tool_calls(self) -> list[ToolCall]:
        return [b for b in self.content if isinstance(b, ToolCall)]


class ToolSpec(BaseModel):
    """A tool as the model sees it: a name, what it does, and a JSON schema for its input."""

    name: str
    description: str
    parameters: dict[str, Any] = Field(description="JSON schema of the arguments object")


class Usage(BaseModel):
    """Tokens of one model call, normalized across providers.

    ``input_tokens`` counts only uncached prompt tokens: cached reads and cache writes are
    separate (Anthropic reports them apart already; OpenAI's ``prompt_tokens`` includes its
    cached tokens, which are subtracted). ``reasoning_tokens`` is the part of
    ``output_tokens`` spent thinking, when the provider says so.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens + self.cache_read_tokens + self.cache_write_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(**{k: getattr(self, k) + getattr(other, k) for k in Usage.model_fields})


StopReason = Literal["end_turn", "tool_use", "max_tokens", "refusal", "other"]


class ModelResponse(BaseModel):
    message: Message = Field(description="The assistant message, normalized")
    stop_reason: StopReason
    usage: Usage
    model: str = Field(description="The model name the provider reports")
    request_id: Optional[str] = None
    raw: dict[str, Any] = Field(
        default_factory=dict,
        description="The response as the provider sent it (for a stream: the final message it assembles)",
    )


class ChatModel(Protocol):
    """What the loop needs from a model: one complete turn at a time."""

    name: str  # "provider:model", as given on the command line

    def complete(self, system: str, messages: list[Message], tools: list[ToolSpec], max_tokens: int) -> ModelResponse:
        """One assistant turn. Raises TransientModelError (worth retrying) or ModelError."""
