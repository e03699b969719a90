"""OpenAI chat.completions, streamed: for servers that speak it (vLLM, SGLang, llama.cpp,
Ollama), and for OpenAI's models where the user asks for it (``openai-chat:<model>``; plain
``openai:`` goes through the Responses API, kagent.agent.loop.models.responses)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, Optional
from urllib.parse import urlsplit

import httpx2  # the SDK's HTTP client: a dropped stream may surface as its TransportError
import openai

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

_KEY_ENV = PROVIDERS["openai-chat"].key_variable or ""
_STOP_REASONS: dict[str, StopReason] = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}


def to_openai_messages(system: str, messages: Iterable[Message]) -> list[dict[str, Any]]:
    """kagent messages as chat.completions messages.

    Tool results become ``tool`` messages placed before any user text of the same turn,
    because they must directly follow the assistant message that called the tools.
    Thinking blocks are dropped: chat.completions has no way to send them back.
    """
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for message in messages:
        text = "".join(b.text for b in message.content if isinstance(b, TextBlock))
        text = text if text.strip() else ""
        if message.role == "assistant":
            calls = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
                for c in message.content
                if isinstance(c, ToolCall)
            ]
            if not text and not calls:
                # An answer of thinking alone (cut by the output cap): an assistant message
                # without content or tool calls is refused, and it tells the model nothing.
                continue
            entry: dict[str, Any] = {"role": "assistant", "content": text or None}
            if calls:
                entry["tool_calls"] = calls
            out.append(entry)
            continue
        for result in (b for b in message.content if isinstance(b, ToolResult)):
            content = f"Error: {result.content}" if result.is_error else result.content
            out.append({"role": "tool", "tool_call_id": result.tool_call_id, "content": content})
        if text:
            out.append({"role": "user", "content": text})
    return out


def to_openai_tools(tools: Iterable[ToolSpec]) -> list[dict[str, Any]]:
    return [
        {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}
        for t in tools
    ]


def parse_arguments(text: str, cut: bool = False) -> dict[str, Any]:
    """Tool-call arguments; invalid JSON is kept raw so the loop can tell the model. A call the
    output cap cut (``cut``) before any of its JSON came is raw too, not a call without
    arguments."""
    if cut and not text.strip():
        return {"_raw": text}
    try:
        value = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError:
        return {"_raw": text}
    return value if isinstance(value, dict) else {"_raw": text}


def status_error_of(exc: openai.APIStatusError, service: str, model: str, key_env: str) -> Exception:
    """The kagent error for an error status of the OpenAI SDK (both of its APIs)."""
    # The error object's own message, without the SDK's "Error code: ..." prefix.
    detail = exc.body.get("message") if isinstance(exc.body, dict) else None
    return status_error(
        service,
        exc.status_code,
        detail or exc.message,
        model=model,
        key_env=key_env,
        retry_after=parse_retry_after(exc.response.headers.get("retry-after")),
    )


def _usage(usage: Optional[dict[str, Any]]) -> Usage:
    """Normalized usage; compatible servers may send none at all (all zeros then)."""
    usage = usage or {}
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    reasoning = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0
    return Usage(
        input_tokens=(usage.get("prompt_tokens") or 0) - cached,
        cache_read_tokens=cached,
        output_tokens=usage.get("completion_tokens") or 0,
        reasoning_tokens=reasoning,
    )


class _Assembler:
    """Builds the final chat.completion (a plain dict) from streamed chunks."""

    def __init__(self) -> None:
        self.id: Optional[str] = None
        self.model: Optional[str] = None
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: Optional[str] = None
        self.usage: Optional[dict[str, Any]] = None

    def feed(self, chunk: dict[str, Any]) -> None:
        self.id = self.id or chunk.get("id")
        self.model = self.model or chunk.get("model")
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            self.content.append(delta.get("content") or "")
            # Reasoning text from servers that expose it (vLLM, SGLang, DeepSeek-style APIs).
            self.reasoning.append(delta.get("reasoning_content") or "")
            for part in delta.get("tool_calls") or []:
                call = self.calls.setdefault(part.get("index", 0), {"id": None, "name": "", "arguments": ""})
                function = part.get("function") or {}
                call["id"] = call["id"] or part.get("id")
                call["name"] += function.get("name") or ""
                call["arguments"] += function.get("arguments") or ""
            self.finish_reason = choice.get("finish_reason") or self.finish_reason

    def final(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.content) or None}
        if any(self.reasoning):
            message["reasoning_content"] = "".join(self.reasoning)
        if self.calls:
            message["tool_calls"] = [
                {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                for _, c in sorted(self.calls.items())
            ]
        return {
            "id": self.id,
            "object": "chat.completion",
            "model": self.model,
            "usage": self.usage,
            "choices": [{"index": 0, "message": message, "finish_reason": self.finish_reason}],
        }


class OpenAIModel:
    """A ChatModel on chat.completions, for the OpenAI API or an OpenAI-compatible server.

    ``compatible`` selects the dialect: the OpenAI API wants ``max_completion_tokens`` (its
    reasoning models refuse ``max_tokens``), while local servers reliably know ``max_tokens``.
    ``reasoning_effort`` is sent as is to a reasoning model (its reasoning tokens count in the
    turn's output cap).
    """

    def __init__(
        self,
        model: str,
        *,
        api_key: str,
        name: Optional[str] = None,
        base_url: Optional[str] = None,
        timeout_s: float = REQUEST_TIMEOUT_S,
        compatible: bool = False,
        reasoning_effort: Optional[str] = None,
    ):
        self.model = model
        self.name = name or f"openai:{model}"
        self.compatible = compatible
        self.reasoning_effort = reasoning_effort
        self._service = f"the OpenAI-compatible server at {base_url}" if compatible else "the OpenAI API"
        self._key_env = "" if compatible else _KEY_ENV
        # max_retries=0: RetryingModel owns retries, so that waits are traced and budgeted.
        self._client = openai.OpenAI(api_key=api_key, base_url=base_url, timeout=timeout_s, max_retries=0)

    def request_params(
        self, system: str, messages: list[Message], tools: list[ToolSpec], max_tokens: int
    ) -> dict[str, Any]:
        """The body of a chat.completions request for one turn (without ``stream``)."""
        params: dict[str, Any] = {
            "model": self.model,
            "messages": to_openai_messages(system, messages),
            "stream_options": {"include_usage": True},
        }
        params["max_tokens" if self.compatible else "max_completion_tokens"] = max_tokens
        if tools:
            params["tools"] = to_openai_tools(tools)
        if self.reasoning_effort:
            params["reasoning_effort"] = self.reasoning_effort
        return params

    def complete(self, system: str, messages: list[Message], tools: list[ToolSpec], max_tokens: int) -> ModelResponse:
        params = self.request_params(system, messages, tools, max_tokens)
        assembler = _Assembler()
        request_id = None
        try:
            with self._client.chat.completions.create(**params, stream=True) as stream:
                request_id = stream.response.headers.get("x-request-id")
                for chunk in stream:
                    assembler.feed(chunk.model_dump(mode="json"))
        except openai.APIStatusError as exc:
            raise status_error_of(exc, self._service, self.model, self._key_env) from exc
        except (openai.APIConnectionError, httpx2.TransportError) as exc:
            raise TransientModelError(f"{self._service}: connection failed or timed out ({exc})") from exc
        except openai.APIError as exc:
            # An error object in the middle of the stream: the request itself was accepted.
            raise TransientModelError(f"{self._service} reported an error mid-stream: {exc.message}") from exc
        if assembler.finish_reason is None:
            raise TransientModelError(f"{self._service}: the stream ended before a finish_reason")
        if assembler.usage is None and not self.compatible:
            # The OpenAI API always ends an include_usage stream with the usage chunk: without
            # it the stream was cut, and the turn's tokens would go uncounted.
            raise TransientModelError(f"{self._service}: the stream ended before its usage")
        return self._response(assembler.final(), request_id)

    def _response(self, raw: dict[str, Any], request_id: Optional[str]) -> ModelResponse:
        choice = raw["choices"][0]
        message = choice["message"]
        content: list[Any] = []
        if message.get("reasoning_content"):
            content.append(ThinkingBlock(thinking=message["reasoning_content"]))
        if message.get("content"):
            content.append(TextBlock(text=message["content"]))
        raw_calls = message.get("tool_calls") or []
        cut = choice["finish_reason"] == "length"
        calls = [
            ToolCall(
                id=c["id"] or f"call_{i}",
                name=c["function"]["name"],
                arguments=parse_arguments(c["function"]["arguments"], cut and i == len(raw_calls) - 1),
            )
            for i, c in enumerate(raw_calls)
        ]
        content.extend(calls)
        stop_reason = _STOP_REASONS.get(choice["finish_reason"], "other")
        if calls and stop_reason == "end_turn":
            stop_reason = "tool_use"  # some compatible servers finish tool calls with "stop"
        return ModelResponse(
            message=Message(role="assistant", content=content),
            stop_reason=stop_reason,
            usage=_usage(raw["usage"]),
            model=raw["model"] or self.model,
            request_id=request_id or raw["id"],
            raw=raw,
        )


def chat_from_choice(choice: ModelChoice) -> OpenAIModel:
    """The factory of the ``openai-chat`` provider: an OpenAI model through chat.completions."""
    return OpenAIModel(
        choice.rest,
        api_key=choice.api_key(),
        name=choice.spec,
        timeout_s=choice.timeout_s,
        base_url=choice.url(),
        reasoning_effort=choice.reasoning_effort,
    )


def compatible_from_choice(choice: ModelChoice) -> OpenAIModel:
    """The factory of the ``openai-compatible`` provider: a local server, ``<url>#<model>``."""
    url, sep, model = choice.rest.rpartition("#")
    if not sep or not url or not model:
        raise choice.bad("an openai-compatible spec needs <url>#<model>")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise choice.bad(f"{url!r} is not an http(s) URL, such as http://localhost:8000/v1")
    return OpenAIModel(
        model,
        api_key=choice.api_key(),  # local servers usually ignore it, but the SDK insists on one
        name=choice.spec,
        base_url=choice.base_url or url,
        timeout_s=choice.timeout_s,
        compatible=True,
        reasoning_effort=choice.reasoning_effort,
    )
