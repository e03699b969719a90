"""OpenAI's own models through the Responses API (``/v1/responses``), streamed.

OpenAI's reasoning models from gpt-5.4 on refuse function tools with a reasoning effort on
``/v1/chat/completions`` (400: "Function tools with reasoning_effort are not supported for
MODEL in /v1/chat/completions ..."; openai/openai-openapi#541, pipecat-ai/pipecat#4043), and
gpt-5.6 applies a default effort, so it refuses tools there even without the parameter. The
Responses API takes both, and it is the one that can carry a model's reasoning from one turn
to the next: each answer's reasoning items come back encrypted (``store: false`` with
``include: ["reasoning.encrypted_content"]``, so that nothing depends on state kept by the
server) and are passed back in every later request, as the trace keeps them (ThinkingBlock's
``item_id`` and ``encrypted_content``), through ``kagent resume`` too.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, Optional

import httpx2  # the SDK's HTTP client: a dropped stream may surface as its TransportError
import openai

from kagent.agent.loop.models.limits import known_limits
from kagent.agent.loop.models.openai import parse_arguments, status_error_of
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

_SERVICE = "the OpenAI API"
_KEY_ENV = PROVIDERS["openai"].key_variable or ""
# Why an answer stopped short (``incomplete_details.reason``), in kagent's terms.
_INCOMPLETE: dict[str, StopReason] = {"max_output_tokens": "max_tokens", "content_filter": "refusal"}


def _reasoning_item(block: ThinkingBlock) -> Optional[dict[str, Any]]:
    """A reasoning item to pass back, or None for thinking that did not come from the Responses
    API (another provider's, or an item without its encrypted content: with ``store: false``
    the server cannot find it by id, and refuses the request)."""
    if block.item_id is None or block.encrypted_content is None:
        return None
    summary = [{"type": "summary_text", "text": block.thinking}] if block.thinking else []
    return {"type": "reasoning", "id": block.item_id, "summary": summary, "encrypted_content": block.encrypted_content}


def _assistant_items(message: Message) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for block in message.content:
        if isinstance(block, ThinkingBlock):
            item = _reasoning_item(block)
            if item is not None:
                items.append(item)
        elif isinstance(block, TextBlock) and block.text.strip():
            items.append(
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": block.text}]}
            )
        elif isinstance(block, ToolCall):
            items.append(
                {
                    "type": "function_call",
                    "call_id": block.id,
                    "name": block.name,
                    "arguments": json.dumps(block.arguments),
                }
            )
    return items


def _user_items(message: Message) -> list[dict[str, Any]]:
    """Tool outputs first (they answer the calls just before them), then the user's text."""
    items: list[dict[str, Any]] = []
    for result in (b for b in message.content if isinstance(b, ToolResult)):
        output = f"Error: {result.content}" if result.is_error else result.content
        items.append({"type": "function_call_output", "call_id": result.tool_call_id, "output": output})
    texts = [b.text for b in message.content if isinstance(b, TextBlock) and b.text.strip()]
    if texts:
        items.append({"role": "user", "content": [{"type": "input_text", "text": t} for t in texts]})
    return items


def to_responses_input(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """kagent messages as Responses input items, in order; nothing empty is sent."""
    items: list[dict[str, Any]] = []
    for message in messages:
        items += _assistant_items(message) if message.role == "assistant" else _user_items(message)
    return items


def to_responses_tools(tools: Iterable[ToolSpec]) -> list[dict[str, Any]]:
    # strict: False, as on chat.completions: kagent's schemas have optional fields, which strict
    # mode does not allow.
    return [
        {"type": "function", "name": t.name, "description": t.description, "parameters": t.parameters, "strict": False}
        for t in tools
    ]


def _usage(usage: Optional[dict[str, Any]]) -> Usage:
    """``input_tokens`` includes the cached ones, which are counted apart (as on chat.completions)."""
    usage = usage or {}
    cached = (usage.get("input_tokens_details") or {}).get("cached_tokens") or 0
    return Usage(
        input_tokens=(usage.get("input_tokens") or 0) - cached,
        cache_read_tokens=cached,
        output_tokens=usage.get("output_tokens") or 0,
        reasoning_tokens=(usage.get("output_tokens_details") or {}).get("reasoning_tokens") or 0,
    )


class _Assembler:
    """The answer's output items from stream events.

    An item is whole once its ``response.output_item.done`` came; until then it is built from
    its deltas, so that an answer the output cap cut still yields what it had written.
    """

    def __init__(self) -> None:
        self.items: dict[int, dict[str, Any]] = {}
        self.text: dict[int, list[str]] = {}
        self.arguments: dict[int, list[str]] = {}
        self.summary: dict[int, list[str]] = {}
        self.done: set[int] = set()
        self.response: dict[str, Any] = {}
        self.ended = False  # response.completed or response.incomplete came

    def feed(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        index = event.get("output_index", 0)
        if kind in ("response.created", "response.in_progress"):
            self.response = dict(event.get("response") or {})
        elif kind == "response.output_item.added":
            self.items[index] = dict(event["item"])
        elif kind == "response.output_text.delta":
            self.text.setdefault(index, []).append(event.get("delta") or "")
        elif kind == "response.function_call_arguments.delta":
            self.arguments.setdefault(index, []).append(event.get("delta") or "")
        elif kind == "response.reasoning_summary_text.delta":
            self.summary.setdefault(index, []).append(event.get("delta") or "")
        elif kind == "response.output_item.done":
            self.items[index] = dict(event["item"])
            self.done.add(index)
        elif kind in ("response.completed", "response.incomplete"):
            self.response = dict(event.get("response") or {})
            self.ended = True
        elif kind == "response.failed":
            error = (event.get("response") or {}).get("error") or {}
            raise TransientModelError(f"{_SERVICE}: the response failed: {error.get('message') or error}")
        elif kind == "error":
            raise TransientModelError(f"{_SERVICE} reported an error mid-stream: {event.get('message')}")

    def output(self) -> list[dict[str, Any]]:
        out = []
        for index in sorted(self.items):
            item = self.items[index]
            if index not in self.done:  # cut: what its deltas said
                if item.get("type") == "message":
                    item["content"] = [{"type": "output_text", "text": "".join(self.text.get(index, []))}]
                elif item.get("type") == "function_call":
                    item["arguments"] = "".join(self.arguments.get(index, []))
                elif item.get("type") == "reasoning":
                    item["summary"] = [{"type": "summary_text", "text": "".join(self.summary.get(index, []))}]
            out.append(item)
        return out


def _message_text(item: dict[str, Any]) -> tuple[str, bool]:
    """An output message's text, and whether it was a refusal."""
    parts = item.get("content") or []
    text = "".join(p.get("text") or "" for p in parts if p.get("type") == "output_text")
    refusal = "".join(p.get("refusal") or "" for p in parts if p.get("type") == "refusal")
    return (text or refusal), bool(refusal) and not text


class ResponsesModel:
    """A ChatModel on the OpenAI Responses API.

    ``max_tokens`` is the turn's ``max_output_tokens``, reasoning included; ``reasoning_effort``
    is sent as ``reasoning: {effort}``. Reasoning items are asked for encrypted and passed back
    as received, except of a model known not to reason (``reasons``).
    """

    def __init__(
        self,
        model: str,
        *,
        api_key: str,
        name: Optional[str] = None,
        base_url: Optional[str] = None,
        timeout_s: float = REQUEST_TIMEOUT_S,
        reasoning_effort: Optional[str] = None,
        reasons: bool = True,
    ):
        self.model = model
        self.name = name or f"openai:{model}"
        self.reasoning_effort = reasoning_effort
        self.reasons = reasons  # False: a model without reasoning items, which is not asked for them
        # max_retries=0: RetryingModel owns retries, so that waits are traced and budgeted.
        self._client = openai.OpenAI(api_key=api_key, base_url=base_url, timeout=timeout_s, max_retries=0)

    def request_params(
        self, system: str, messages: list[Message], tools: list[ToolSpec], max_tokens: int
    ) -> dict[str, Any]:
        """The body of a Responses request for one turn (without ``stream``)."""
        params: dict[str, Any] = {
            "model": self.model,
            "input": to_responses_input(messages),
            "max_output_tokens": max_tokens,
            "store": False,
        }
        if self.reasons:
            params["include"] = ["reasoning.encrypted_content"]
        if system:
            params["instructions"] = system
        if tools:
            params["tools"] = to_responses_tools(tools)
        if self.reasoning_effort:
            params["reasoning"] = {"effort": self.reasoning_effort}
        return params

    def complete(self, system: str, messages: list[Message], tools: list[ToolSpec], max_tokens: int) -> ModelResponse:
        params = self.request_params(system, messages, tools, max_tokens)
        assembler = _Assembler()
        request_id = None
        try:
            with self._client.responses.create(**params, stream=True) as stream:
                request_id = stream.response.headers.get("x-request-id")
                for event in stream:
                    assembler.feed(event.model_dump(mode="json"))
        except openai.APIStatusError as exc:
            raise status_error_of(exc, _SERVICE, self.model, _KEY_ENV) from exc
        except (openai.APIConnectionError, httpx2.TransportError) as exc:
            raise TransientModelError(f"{_SERVICE}: connection failed or timed out ({exc})") from exc
        if not assembler.ended:
            raise TransientModelError(f"{_SERVICE}: the stream ended before response.completed")
        output = assembler.output()
        raw = {**assembler.response, "output": output}
        return self._response(raw, request_id)

    def _response(self, raw: dict[str, Any], request_id: Optional[str]) -> ModelResponse:
        reason = (raw.get("incomplete_details") or {}).get("reason") or ""
        cut = raw.get("status") == "incomplete"
        content: list[Any] = []
        refused = False
        calls = [item for item in raw["output"] if item.get("type") == "function_call"]
        for item in raw["output"]:
            kind = item.get("type")
            if kind == "reasoning":
                summary = "\n\n".join(s.get("text") or "" for s in item.get("summary") or [])
                content.append(
                    ThinkingBlock(
                        thinking=summary, item_id=item.get("id"), encrypted_content=item.get("encrypted_content")
                    )
                )
            elif kind == "message":
                text, refusal = _message_text(item)
                refused = refused or refusal
                if text:
                    content.append(TextBlock(text=text))
            elif kind == "function_call":
                last = item is calls[-1]
                content.append(
                    ToolCall(
                        id=item.get("call_id") or item.get("id") or f"call_{len(content)}",
                        name=item.get("name") or "",
                        arguments=parse_arguments(item.get("arguments") or "", cut and last),
                    )
                )
        stop: StopReason
        if cut:
            stop = _INCOMPLETE.get(reason, "other")
        elif refused:
            stop = "refusal"
        else:
            stop = "tool_use" if calls else "end_turn"
        return ModelResponse(
            message=Message(role="assistant", content=content),
            stop_reason=stop,
            usage=_usage(raw.get("usage")),
            model=raw.get("model") or self.model,
            request_id=request_id or raw.get("id"),
            raw=raw,
        )


def from_choice(choice: ModelChoice) -> ResponsesModel:
    """The factory of the ``openai`` provider (kagent.core.providers)."""
    # A model known not to reason (gpt-4.1, gpt-4o) is not asked for reasoning items.
    known = known_limits(choice.spec)
    return ResponsesModel(
        choice.rest,
        api_key=choice.api_key(),
        name=choice.spec,
        timeout_s=choice.timeout_s,
        base_url=choice.url(),
        reasoning_effort=choice.reasoning_effort,
        reasons=bool(choice.reasoning_effort) or known is None or known.thinking != "none",
    )
