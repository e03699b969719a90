"""Anthropic Messages API, streamed, with prompt caching and optional extended thinking."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, Optional

import anthropic
import httpx2  # the SDK's HTTP client: a dropped stream surfaces as its TransportError

from kagent.agent.loop.models.limits import MIN_ANSWER_TOKENS, MIN_THINKING_BUDGET
from kagent.agent.loop.models.retry import parse_retry_after, status_error
from kagent.agent.loop.models.spec import ModelChoice
from kagent.agent.settings import REQUEST_TIMEOUT_S
from kagent.core.errors import TransientModelError
from kagent.core.messages import (
    Message,
    ModelResponse,
    StopReason,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResult,
    ToolSpec,
    Usage,
)
from kagent.core.providers import PROVIDERS

_SERVICE = "the Anthropic API"
_KEY_ENV = PROVIDERS["anthropic"].key_variable or ""
_CACHE = {"type": "ephemeral"}
# Budget-thinking models think between tool calls only with this beta (adaptive thinking, from
# the 4.6 models on, interleaves by itself): without it a model thinks at its first turn and
# hardly again ("Interleaved thinking", Anthropic's extended thinking guide).
INTERLEAVED_THINKING = {"anthropic-beta": "interleaved-thinking-2025-05-14"}
_STOP_REASONS: dict[str, StopReason] = {
    "end_turn": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "refusal": "refusal",
}


def _block_param(block) -> Optional[dict[str, Any]]:
    """One kagent block as an Anthropic content block, or None when it cannot be sent."""
    if isinstance(block, TextBlock):
        # The API refuses a text block that is empty or only whitespace ("text content blocks
        # must contain non-whitespace text").
        return {"type": "text", "text": block.text} if block.text.strip() else None
    if isinstance(block, ThinkingBlock):
        if block.redacted_data is not None:
            return {"type": "redacted_thinking", "data": block.redacted_data}
        # Thinking without a signature did not come from Anthropic; the API would refuse it.
        if block.signature is None:
            return None
        return {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
    if isinstance(block, ToolCall):
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.arguments}
    if isinstance(block, ToolResult):
        return {
            "type": "tool_result",
            "tool_use_id": block.tool_call_id,
            "content": block.content,
            "is_error": block.is_error,
        }
    raise TypeError(f"unknown block type {type(block).__name__}")


def to_anthropic_messages(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """kagent messages as Anthropic message params.

    Consecutive messages of one role become one message (the API wants turns to alternate),
    and in a user message the tool results come first, as the API requires them to answer
    the previous assistant turn before anything else. The last block of the latest user
    message carries a cache breakpoint, so each request caches the conversation so far.
    """
    merged: list[dict[str, Any]] = []
    for message in messages:
        blocks = [p for p in map(_block_param, message.content) if p is not None]
        if not blocks:
            # Nothing sendable (an answer the cap cut inside its thinking, before the block's
            # signature came): the API refuses an empty message ("all messages must have
            # non-empty content"), and the turns around it merge instead.
            continue
        if merged and merged[-1]["role"] == message.role:
            merged[-1]["content"].extend(blocks)
        else:
            merged.append({"role": message.role, "content": blocks})
    for param in merged:
        if param["role"] == "user":
            param["content"].sort(key=lambda b: b["type"] != "tool_result")  # stable sort
    for message in reversed(merged):
        if message["role"] == "user" and message["content"]:
            message["content"][-1] = {**message["content"][-1], "cache_control": _CACHE}
            break
    return merged


def to_anthropic_tools(tools: Iterable[ToolSpec]) -> list[dict[str, Any]]:
    """Tool specs, the last one marked as a cache breakpoint (tools never change in a run)."""
    params = [{"name": t.name, "description": t.description, "input_schema": t.parameters} for t in tools]
    if params:
        params[-1]["cache_control"] = _CACHE
    return params


class _Assembler:
    """Builds the final message (a plain dict in the API's shape) from stream events."""

    def __init__(self) -> None:
        self.message: dict[str, Any] = {}
        self.blocks: dict[int, dict[str, Any]] = {}
        self.json_parts: dict[int, list[str]] = {}
        self.stopped = False

    def feed(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "message_start":
            self.message = dict(event["message"])
            self.message["usage"] = dict(self.message.get("usage") or {})
        elif kind == "content_block_start":
            self.blocks[event["index"]] = dict(event["content_block"])
        elif kind == "content_block_delta":
            self._delta(self.blocks[event["index"]], event["index"], event["delta"])
        elif kind == "message_delta":
            self.message.update({k: v for k, v in (event.get("delta") or {}).items() if v is not None})
            # The delta's usage is cumulative; fields it leaves out keep message_start's value.
            usage = event.get("usage") or {}
            self.message["usage"].update({k: v for k, v in usage.items() if v is not None})
        elif kind == "message_stop":
            self.stopped = True

    def _delta(self, block: dict[str, Any], index: int, delta: dict[str, Any]) -> None:
        kind = delta.get("type")
        if kind == "text_delta":
            block["text"] = block.get("text", "") + delta["text"]
        elif kind == "thinking_delta":
            block["thinking"] = block.get("thinking", "") + delta["thinking"]
        elif kind == "signature_delta":
            block["signature"] = block.get("signature", "") + delta["signature"]
        elif kind == "input_json_delta":
            self.json_parts.setdefault(index, []).append(delta["partial_json"])

    def final(self) -> dict[str, Any]:
        content = []
        # The output cap may cut the last tool call before any of its JSON came: that is a
        # cut call (arguments "_raw"), not a call without arguments.
        cut = self.message.get("stop_reason") == "max_tokens"
        last_call = max((i for i, b in self.blocks.items() if b.get("type") == "tool_use"), default=None)
        for index in sorted(self.blocks):
            block = self.blocks[index]
            if block.get("type") == "tool_use" and (index in self.json_parts or (cut and index == last_call)):
                text = "".join(self.json_parts.get(index, []))
                try:
                    block["input"] = json.loads(text) if text.strip() or not cut else {"_raw": text}
                except json.JSONDecodeError:
                    block["input"] = {"_raw": text}
            content.append(block)
        return {**self.message, "content": content}


def _to_kagent_block(block: dict[str, Any]):
    kind = block.get("type")
    if kind == "text":
        return TextBlock(text=block.get("text", ""))
    if kind == "thinking":
        return ThinkingBlock(thinking=block.get("thinking", ""), signature=block.get("signature"))
    if kind == "redacted_thinking":
        return ThinkingBlock(redacted_data=block.get("data", ""))
    if kind == "tool_use":
        arguments = block.get("input")
        if not isinstance(arguments, dict):
            arguments = {"_raw": json.dumps(arguments)}
        return ToolCall(id=block["id"], name=block["name"], arguments=arguments)
    return None  # server-side tool blocks and future types: nothing the loop can act on


def _usage(usage: dict[str, Any]) -> Usage:
    return Usage(
        input_tokens=usage.get("input_tokens") or 0,
        output_tokens=usage.get("output_tokens") or 0,
        cache_read_tokens=usage.get("cache_read_input_tokens") or 0,
        cache_write_tokens=usage.get("cache_creation_input_tokens") or 0,
    )


class AnthropicModel:
    """A ChatModel on the Anthropic Messages API.

    A turn's ``max_tokens`` is its whole output, thinking included. ``thinking_budget``
    enables extended thinking with that many of them (kept below ``max_tokens`` so that some
    room is left for the answer); ``reasoning_effort`` enables adaptive thinking at that
    effort instead (kagent.agent.loop.models.limits says which a model takes).
    """

    def __init__(
        self,
        model: str,
        *,
        api_key: str,
        name: Optional[str] = None,
        base_url: Optional[str] = None,
        timeout_s: float = REQUEST_TIMEOUT_S,
        thinking_budget: Optional[int] = None,
        reasoning_effort: Optional[str] = None,
    ):
        self.model = model
        self.name = name or f"anthropic:{model}"
        self.thinking_budget = thinking_budget
        self.reasoning_effort = reasoning_effort
        # max_retries=0: RetryingModel owns retries, so that waits are traced and budgeted.
        self._client = anthropic.Anthropic(api_key=api_key, base_url=base_url, timeout=timeout_s, max_retries=0)

    def request_params(
        self, system: str, messages: list[Message], tools: list[ToolSpec], max_tokens: int
    ) -> dict[str, Any]:
        """The body of a Messages request for one turn (without ``stream``)."""
        params: dict[str, Any] = {
            "model": self.model,
            "max_tokens": max_tokens,
            "messages": to_anthropic_messages(messages),
        }
        if system:
            params["system"] = [{"type": "text", "text": system, "cache_control": _CACHE}]
        if tools:
            params["tools"] = to_anthropic_tools(tools)
        if self.reasoning_effort:
            params["thinking"] = {"type": "adaptive"}
            params["output_config"] = {"effort": self.reasoning_effort}
        elif self.thinking_budget:
            budget = min(self.thinking_budget, max_tokens - MIN_ANSWER_TOKENS)
            if budget >= MIN_THINKING_BUDGET:  # a turn too small to think in goes without
                params["thinking"] = {"type": "enabled", "budget_tokens": budget}
        return params

    def complete(self, system: str, messages: list[Message], tools: list[ToolSpec], max_tokens: int) -> ModelResponse:
        params = self.request_params(system, messages, tools, max_tokens)
        headers = INTERLEAVED_THINKING if params.get("thinking", {}).get("type") == "enabled" else {}
        assembler = _Assembler()
        request_id = None
        try:
            with self._client.messages.create(**params, stream=True, extra_headers=headers) as stream:
                request_id = stream.response.headers.get("request-id")
                for event in stream:
                    assembler.feed(event.model_dump(mode="json"))
        except anthropic.APIStatusError as exc:
            raise self._status_error(exc) from exc
        except (anthropic.APIConnectionError, httpx2.TransportError) as exc:
            raise TransientModelError(f"{_SERVICE}: connection failed or timed out ({exc})") from exc
        if not assembler.stopped:
            raise TransientModelError(f"{_SERVICE}: the stream ended before message_stop")
        raw = assembler.final()
        content = [b for b in map(_to_kagent_block, raw["content"]) if b is not None]
        return ModelResponse(
            message=Message(role="assistant", content=content),
            stop_reason=_STOP_REASONS.get(raw.get("stop_reason") or "", "other"),
            usage=_usage(raw.get("usage") or {}),
            model=raw.get("model") or self.model,
            request_id=request_id or raw.get("id"),
            raw=raw,
        )

    def _status_error(self, exc: anthropic.APIStatusError) -> Exception:
        detail = exc.api_message or exc.message
        if exc.status_code < 400:
            # An `error` event in the middle of a 200 stream: overloaded or an internal error.
            # The 200 is the stream's, not the error's: leave the status unknown.
            return TransientModelError(f"{_SERVICE} reported an error mid-stream: {detail}")
        return status_error(
            _SERVICE,
            exc.status_code,
            detail,
            model=self.model,
            key_env=_KEY_ENV,
            retry_after=parse_retry_after(exc.response.headers.get("retry-after")),
        )


def from_choice(choice: ModelChoice) -> AnthropicModel:
    """The factory of the ``anthropic`` provider (kagent.core.providers)."""
    return AnthropicModel(
        choice.rest,
        api_key=choice.api_key(),
        name=choice.spec,
        timeout_s=choice.timeout_s,
        base_url=choice.url(),
        thinking_budget=choice.thinking_budget,
        reasoning_effort=choice.reasoning_effort,
    )
