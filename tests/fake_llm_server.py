"""A loopback LLM server speaking the Anthropic Messages, OpenAI chat.completions and OpenAI
Responses wire formats.

Tests point the real SDK clients at it (``base_url``). It serves a scripted conversation, one
turn per successful response, injects faults by request index (a fault does not consume a
turn), and checks every request it receives for tool-call protocol sanity, recording what is
wrong in ``violations`` rather than raising (an exception in a handler thread would be lost).

A turn: ``{text, thinking, signature, redacted, tool_calls: [{id, name, arguments}], usage:
{input, output, cache_read, cache_write, reasoning}, stop_reason}``, all optional.
``arguments`` is a dict, or a string sent verbatim (to test invalid JSON).
Faults: "429" (with ``retry-after: 0``), "529", "500", "cut" (half the events, then the
connection closes), "error_event" (an error event mid-stream), "slow" (answers after
``slow_s`` seconds, later than the client's timeout), "reset" (a chunked HTTP/1.1 stream
dropped in the middle of a chunk).

It is as strict as the real services (``strict_refusal``): a request they refuse is refused
here with their status, error shape and message, each rule citing where its message comes
from. With ``context_window`` set it also measures each prompt (``prompt_tokens``: denser than
kagent's own estimate, as code is), refuses one whose size plus ``max_tokens`` passes the
window, and reports the measured size as the turn's input usage when the turn gives none.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional

BAD_KEY = "bad-key"
UNKNOWN_MODEL = "no-such-model"


def _split(text: str) -> list[str]:
    """Two fragments, so that clients must join deltas."""
    middle = len(text) // 2
    return [part for part in (text[:middle], text[middle:]) if part]


def _arguments_text(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments or {})


# --- protocol sanity ------------------------------------------------------------------------


def anthropic_violations(messages: list[dict[str, Any]]) -> list[str]:
    """Each tool_use answered by exactly one tool_result in the very next message; no orphans."""
    problems = []
    for i, message in enumerate(messages):
        content = message["content"] if isinstance(message["content"], list) else []
        results = [b["tool_use_id"] for b in content if b.get("type") == "tool_result"]
        previous = messages[i - 1] if i else {"role": "user", "content": []}
        calls = [b["id"] for b in previous["content"] if isinstance(b, dict) and b.get("type") == "tool_use"]
        calls = calls if previous["role"] == "assistant" else []
        if sorted(results) != sorted(calls):
            problems.append(f"message {i}: tool results {results} do not answer tool uses {calls}")
        if results and any(b.get("type") != "tool_result" for b in content[: len(results)]):
            problems.append(f"message {i}: tool results are not first")
        if (
            i == len(messages) - 1
            and message["role"] == "assistant"
            and any(b.get("type") == "tool_use" for b in content)
        ):
            problems.append(f"message {i}: tool uses left unanswered")
    return problems


def openai_violations(messages: list[dict[str, Any]]) -> list[str]:
    """Each tool call answered by exactly one ``tool`` message right after it; no orphans."""
    problems = []
    expected: list[str] = []  # ids the following tool messages must answer
    answered: list[str] = []
    for i, message in enumerate(messages):
        if message["role"] == "tool":
            if message.get("tool_call_id") not in expected or message["tool_call_id"] in answered:
                problems.append(f"message {i}: orphaned tool result {message.get('tool_call_id')}")
            answered.append(message.get("tool_call_id"))
            continue
        if sorted(answered) != sorted(expected):
            problems.append(f"message {i}: tool calls {expected} answered by {answered}")
        calls = message.get("tool_calls") or [] if message["role"] == "assistant" else []
        expected = [c["id"] for c in calls]
        answered = []
    if expected and sorted(answered) != sorted(expected):
        problems.append(f"tool calls {expected} answered by {answered} at the end")
    return problems


# --- the two wire formats ---------------------------------------------------------------------


def anthropic_events(turn: dict[str, Any], model: str, n: int) -> list[tuple[str, dict[str, Any]]]:
    usage = turn.get("usage") or {}
    calls = turn.get("tool_calls") or []
    events: list[tuple[str, dict[str, Any]]] = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": f"msg_{n}",
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {
                        "input_tokens": usage.get("input", 0),
                        "output_tokens": 1,
                        "cache_read_input_tokens": usage.get("cache_read", 0),
                        "cache_creation_input_tokens": usage.get("cache_write", 0),
                    },
                },
            },
        )
    ]

    def block(start: dict[str, Any], deltas: list[dict[str, Any]]) -> None:
        index = sum(1 for name, _ in events if name == "content_block_start")
        events.append(("content_block_start", {"type": "content_block_start", "index": index, "content_block": start}))
        events.extend(
            ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d}) for d in deltas
        )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))

    if turn.get("thinking") is not None:
        block(
            {"type": "thinking", "thinking": "", "signature": ""},
            [{"type": "thinking_delta", "thinking": t} for t in _split(turn["thinking"])]
            + [{"type": "signature_delta", "signature": turn.get("signature", f"sig-{n}")}],
        )
    if turn.get("redacted") is not None:
        block({"type": "redacted_thinking", "data": turn["redacted"]}, [])
    if turn.get("text"):
        block({"type": "text", "text": ""}, [{"type": "text_delta", "text": t} for t in _split(turn["text"])])
    for call in calls:
        block(
            {"type": "tool_use", "id": call["id"], "name": call["name"], "input": {}},
            [{"type": "input_json_delta", "partial_json": p} for p in _split(_arguments_text(call.get("arguments")))],
        )
    stop = turn.get("stop_reason") or ("tool_use" if calls else "end_turn")
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": usage.get("output", 0)},
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def anthropic_message(turn: dict[str, Any], model: str, n: int) -> dict[str, Any]:
    """The non-streamed form of the same turn: the events, assembled."""
    events = anthropic_events(turn, model, n)
    message = events[0][1]["message"]
    for _, event in events:
        if event["type"] == "content_block_start":
            message["content"].append(dict(event["content_block"]))
        elif event["type"] == "content_block_delta":
            block, delta = message["content"][event["index"]], event["delta"]
            for key, field in (
                ("text", "text"),
                ("thinking", "thinking"),
                ("signature", "signature"),
                ("partial_json", "partial"),
            ):
                if key in delta:
                    block[field] = block.get(field, "") + delta[key]
        elif event["type"] == "message_delta":
            message.update(event["delta"])
            message["usage"].update(event["usage"])
    for block in message["content"]:
        if block["type"] == "tool_use":
            block["input"] = json.loads(block.pop("partial", "{}"))
    return message


def openai_chunks(turn: dict[str, Any], model: str, n: int, with_usage: bool) -> list[dict[str, Any]]:
    usage = turn.get("usage") or {}
    calls = turn.get("tool_calls") or []

    def chunk(delta: dict[str, Any], finish: Optional[str] = None) -> dict[str, Any]:
        return {
            "id": f"chatcmpl-{n}",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    chunks = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk({"reasoning_content": t}) for t in _split(turn.get("thinking") or "")]
    chunks += [chunk({"content": t}) for t in _split(turn.get("text") or "")]
    for i, call in enumerate(calls):
        chunks.append(
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": i,
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": call["name"], "arguments": ""},
                        }
                    ]
                }
            )
        )
        chunks += [
            chunk({"tool_calls": [{"index": i, "function": {"arguments": p}}]})
            for p in _split(_arguments_text(call.get("arguments")))
        ]
    chunks.append(chunk({}, turn.get("stop_reason") or ("tool_calls" if calls else "stop")))
    if with_usage:
        cached = usage.get("cache_read", 0)
        chunks.append(
            {
                "id": f"chatcmpl-{n}",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": model,
                "choices": [],
                "usage": {
                    "prompt_tokens": usage.get("input", 0) + cached,
                    "completion_tokens": usage.get("output", 0),
                    "total_tokens": usage.get("input", 0) + cached + usage.get("output", 0),
                    "prompt_tokens_details": {"cached_tokens": cached},
                    "completion_tokens_details": {"reasoning_tokens": usage.get("reasoning", 0)},
                },
            }
        )
    return chunks


def responses_violations(items: list[dict[str, Any]]) -> list[str]:
    """Each function_call answered by one function_call_output before the next user message."""
    problems = []
    open_calls: list[str] = []
    for i, item in enumerate(items):
        if item.get("type") == "function_call":
            open_calls.append(item["call_id"])
        elif item.get("type") == "function_call_output":
            if item["call_id"] not in open_calls:
                problems.append(f"item {i}: orphaned function_call_output {item['call_id']}")
            else:
                open_calls.remove(item["call_id"])
        elif item.get("role") == "user" and open_calls:
            problems.append(f"item {i}: function calls {open_calls} unanswered")
            open_calls = []
    if open_calls:
        problems.append(f"function calls {open_calls} unanswered at the end")
    return problems


# --- what the real services refuse ----------------------------------------------------------

# OpenAI's reasoning models on chat.completions (openai/openai-openapi#541, pipecat-ai/pipecat#4043,
# charmbracelet/crush#2913): gpt-5.4 and gpt-5.5 refuse function tools with a reasoning effort;
# gpt-5.6 and gpt-6 apply a default effort, so they refuse tools unless the effort is "none"
# (GEMISIS/leviath#333, BerriAI/litellm#34569), with a longer message.
EFFORT_TOOLS_ASKED = ("gpt-5.4", "gpt-5.5")
EFFORT_TOOLS_DEFAULT = ("gpt-5.6", "gpt-6")


def prompt_tokens(body: dict[str, Any]) -> int:
    """The fake's tokenizer: 3 bytes a token of the whole prompt, tools included (kagent's own
    estimate, 4 characters a token of the messages, must not be what it trusts)."""
    parts = [body.get(k) for k in ("system", "instructions", "messages", "input", "tools")]
    return len(json.dumps(parts)) // 3


Refusal = tuple[int, str, str, Optional[str]]  # status, error type, message, param


def _anthropic_refusal(body: dict[str, Any], window: Optional[int], signed: dict[str, str]) -> Optional[Refusal]:
    messages = body.get("messages") or []
    for i, message in enumerate(messages):
        content = message.get("content")
        if not content and not (i == len(messages) - 1 and message.get("role") == "assistant"):
            # The Messages API's validation (the message is the service's own).
            return (
                400,
                "invalid_request_error",
                f"messages.{i}: all messages must have non-empty content"
                " except for the optional final assistant message",
                None,
            )
        for block in content if isinstance(content, list) else []:
            if block.get("type") != "text":
                continue
            # anthropics/claude-code#49171 and #23369, home-assistant/core#175637.
            if block.get("text") == "":
                return 400, "invalid_request_error", "messages: text content blocks must be non-empty", None
            if not block["text"].strip():
                return (
                    400,
                    "invalid_request_error",
                    "messages: text content blocks must contain non-whitespace text",
                    None,
                )
        for j, block in enumerate(content if isinstance(content, list) else []):
            # Thinking must come back as it was sent (extended thinking guide: "the signature
            # field is used to verify that thinking blocks were generated by Claude").
            if block.get("type") == "thinking" and signed.get(block.get("signature") or "") != block.get("thinking"):
                return (
                    400,
                    "invalid_request_error",
                    f"messages.{i}.content.{j}: Invalid `signature` in `thinking` block",
                    None,
                )
    if window is not None:
        prompt, cap = prompt_tokens(body), body.get("max_tokens", 0)
        if prompt + cap > window:
            # The models overview: "the API returns a validation error" when prompt plus
            # max_tokens passes the context window.
            return (
                400,
                "invalid_request_error",
                f"input length and `max_tokens` exceed context limit: {prompt} + {cap} > {window},"
                " decrease input length or `max_tokens` and try again",
                None,
            )
    return None


def _chat_refusal(body: dict[str, Any], window: Optional[int]) -> Optional[Refusal]:
    model, effort = body.get("model", ""), body.get("reasoning_effort")
    if body.get("tools"):
        if model.startswith(EFFORT_TOOLS_ASKED) and effort not in (None, "none"):
            return (
                400,
                "invalid_request_error",
                f"Function tools with reasoning_effort are not supported for {model} in /v1/chat/completions."
                " Please use /v1/responses instead.",
                "reasoning_effort",
            )
        if model.startswith(EFFORT_TOOLS_DEFAULT) and effort != "none":
            return (
                400,
                "invalid_request_error",
                f"Function tools with reasoning_effort are not supported for {model} in /v1/chat/completions."
                " To use function tools, use /v1/responses or set reasoning_effort to 'none'.",
                "reasoning_effort",
            )
    for i, message in enumerate(body.get("messages") or []):
        if message.get("role") == "assistant" and message.get("content") is None and not message.get("tool_calls"):
            return (
                400,
                "invalid_request_error",
                "Invalid value for 'content': expected a string, got null.",
                f"messages.[{i}].content",
            )
    if window is not None and prompt_tokens(body) + (body.get("max_completion_tokens") or 0) > window:
        return (
            400,
            "invalid_request_error",
            "Your input exceeds the context window of this model. Please adjust your input and try again.",
            "messages",
        )
    return None


def _responses_refusal(body: dict[str, Any], window: Optional[int], issued: dict[str, str]) -> Optional[Refusal]:
    calls: set[str] = set()
    for item in body.get("input") or []:
        kind = item.get("type")
        if kind == "reasoning":
            encrypted = item.get("encrypted_content")
            if encrypted is None and body.get("store") is False:
                # A 404, as can1357/oh-my-pi#41 and vercel/ai#7543 show it.
                return (
                    404,
                    "invalid_request_error",
                    f"Item with id '{item.get('id')}' not found. Items are not persisted when `store` is set to false."
                    " Try again with `store` set to true, or remove this item from your input.",
                    "input",
                )
            if encrypted is not None and issued.get(item.get("id") or "") != encrypted:
                return (
                    400,
                    "invalid_request_error",
                    f"The encrypted content for item {item.get('id')} could not be verified.",
                    None,
                )
        elif kind == "function_call":
            calls.add(item["call_id"])
        elif kind == "function_call_output" and item.get("call_id") not in calls:
            return (
                400,
                "invalid_request_error",
                f"No tool call found for function call output with call_id {item.get('call_id')}.",
                "input",
            )
        elif kind == "message" and item.get("role") == "assistant" and not item.get("content"):
            return 400, "invalid_request_error", "Invalid 'input': an assistant message must have content.", "input"
    if window is not None and prompt_tokens(body) + (body.get("max_output_tokens") or 0) > window:
        return (
            400,
            "invalid_request_error",
            "Your input exceeds the context window of this model. Please adjust your input and try again.",
            "input",
        )
    return None


def responses_events(turn: dict[str, Any], model: str, n: int) -> list[dict[str, Any]]:
    """A turn as Responses stream events: reasoning (when the turn thinks), text, calls, the end.
    A turn that stops for its cap ends ``response.incomplete``, its last call left undone."""
    usage = turn.get("usage") or {}
    calls = turn.get("tool_calls") or []
    cut = turn.get("stop_reason") in ("length", "max_tokens")
    events: list[dict[str, Any]] = []
    output: list[dict[str, Any]] = []
    shell = {"id": f"resp_{n}", "object": "response", "created_at": 0, "model": model, "output": []}
    events.append({"type": "response.created", "response": {**shell, "status": "in_progress"}})

    def item(done: dict[str, Any], deltas: list[dict[str, Any]], finished: bool = True) -> None:
        index = len(output)
        started = {**done, "status": "in_progress"}
        if done["type"] == "message":
            started["content"] = []
        elif done["type"] == "function_call":
            started["arguments"] = ""
        elif done["type"] == "reasoning":
            started["summary"] = []
        events.append({"type": "response.output_item.added", "output_index": index, "item": started})
        events.extend({**d, "output_index": index, "item_id": done["id"]} for d in deltas)
        if finished:
            events.append({"type": "response.output_item.done", "output_index": index, "item": done})
        output.append(done)

    if turn.get("thinking") is not None:
        summary = turn["thinking"]
        done = {
            "type": "reasoning",
            "id": f"rs_{n}",
            "summary": [{"type": "summary_text", "text": summary}] if summary else [],
            "encrypted_content": turn.get("signature", f"enc-{n}"),
            "status": "completed",
        }
        deltas = [
            {"type": "response.reasoning_summary_text.delta", "summary_index": 0, "delta": t} for t in _split(summary)
        ]
        item(done, deltas)
    if turn.get("text"):
        done = {
            "type": "message",
            "id": f"msg_{n}",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": turn["text"], "annotations": []}],
        }
        deltas = [
            {"type": "response.output_text.delta", "content_index": 0, "delta": t, "logprobs": []}
            for t in _split(turn["text"])
        ]
        item(done, deltas)
    for i, call in enumerate(calls):
        arguments = _arguments_text(call.get("arguments"))
        done = {
            "type": "function_call",
            "id": f"fc_{n}_{i}",
            "call_id": call["id"],
            "name": call["name"],
            "arguments": arguments,
            "status": "completed",
        }
        deltas = [{"type": "response.function_call_arguments.delta", "delta": p} for p in _split(arguments)]
        item(done, deltas, finished=not (cut and i == len(calls) - 1))
    cached = usage.get("cache_read", 0)
    final = {
        **shell,
        "status": "incomplete" if cut else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
        "output": output,
        "usage": {
            "input_tokens": usage.get("input", 0) + cached,
            "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": usage.get("output", 0),
            "output_tokens_details": {"reasoning_tokens": usage.get("reasoning", 0)},
            "total_tokens": usage.get("input", 0) + cached + usage.get("output", 0),
        },
    }
    events.append({"type": "response.incomplete" if cut else "response.completed", "response": final})
    return [{**e, "sequence_number": k} for k, e in enumerate(events)]


# --- the server -----------------------------------------------------------------------------


class FakeLLMServer:
    """``with FakeLLMServer(turns, faults={0: "429"}) as server: ... server.url ...``

    ``url`` is the Anthropic base URL; ``openai_url`` (``url + "/v1"``) the OpenAI one.
    ``send_usage=False`` imitates a compatible server that never sends a usage chunk.
    """

    def __init__(
        self,
        turns: list[dict[str, Any]],
        faults: Optional[dict[int, str]] = None,
        *,
        slow_s: float = 1.5,
        send_usage: bool = True,
        turn_from_history: bool = False,
        delay_s: float = 0.0,
        context_window: Optional[int] = None,
    ):
        self.turns = list(turns)
        self.context_window = context_window
        self.refused: list[str] = []  # the messages of the requests refused as the real service would
        self.signed: dict[str, str] = {}  # Anthropic: signature -> the thinking it signs
        self.issued: dict[str, str] = {}  # Responses: reasoning item id -> its encrypted content
        self.faults = dict(faults or {})
        self.slow_s = slow_s
        # A client that may die and come back (kagent resume) re-sends a request whose answer
        # it never recorded: the turn is then told by the conversation (its assistant
        # messages so far), not by how many answers were served.
        self.turn_from_history = turn_from_history
        self.delay_s = delay_s  # every answer waits this long (so a test can kill the client mid-request)
        self.send_usage = send_usage
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.violations: list[str] = []
        self.served = 0  # turns consumed
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def openai_url(self) -> str:
        return self.url + "/v1"

    def __enter__(self) -> FakeLLMServer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def _admit(self, path: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, Optional[str]]:
        """Records a request; returns its index and its fault (None: serve the next turn)."""
        with self._lock:
            index = len(self.requests)
            self.requests.append(body)
            self.headers.append(headers)
            if path == "/v1/responses":
                problems = responses_violations(body.get("input") or [])
            else:
                check = anthropic_violations if path == "/v1/messages" else openai_violations
                problems = check(body.get("messages", []))
            self.violations += [f"request {index}: {p}" for p in problems]
            return index, self.faults.get(index)

    def strict_refusal(self, path: str, body: dict[str, Any]) -> Optional[Refusal]:
        """What the real service would refuse this request for, or None."""
        with self._lock:
            if path == "/v1/messages":
                return _anthropic_refusal(body, self.context_window, self.signed)
            if path == "/v1/responses":
                return _responses_refusal(body, self.context_window, self.issued)
            return _chat_refusal(body, self.context_window)

    def measured(self, turn: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
        """The turn with the prompt's measured size as its input usage, where it gives none."""
        if self.context_window is None or "input" in (turn.get("usage") or {}):
            return turn
        return {**turn, "usage": {**(turn.get("usage") or {}), "input": prompt_tokens(body)}}

    def _assistant_turns(self, body: dict[str, Any]) -> int:
        if "input" not in body:
            return sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
        # Responses: each run of output items (reasoning, messages, calls) is one answer.
        answers, inside = 0, False
        for item in body["input"]:
            output = item.get("type") in ("reasoning", "function_call") or item.get("role") == "assistant"
            answers += output and not inside
            inside = output
        return answers

    def _next_turn(self, body: dict[str, Any]) -> Optional[tuple[int, dict[str, Any]]]:
        if self.turn_from_history:
            index = self._assistant_turns(body)
            with self._lock:
                self.served += 1
            return (index, self.turns[index]) if index < len(self.turns) else None
        with self._lock:
            if self.served >= len(self.turns):
                self.violations.append("a request came after the script ended")
                return None
            self.served += 1
            return self.served - 1, self.turns[self.served - 1]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            # HTTP/1.0: the body of a stream ends when the connection closes, so "cut" is
            # simply closing early.
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                anthropic = self.path == "/v1/messages"
                if self.path not in ("/v1/messages", "/v1/chat/completions", "/v1/responses"):
                    return self._error(404, "not_found_error", f"no route {self.path}", anthropic)
                index, fault = server._admit(self.path, body, {k.lower(): v for k, v in self.headers.items()})
                bearer = self.headers.get("authorization", "").removeprefix("Bearer ")
                key = self.headers.get("x-api-key") or bearer
                try:
                    if key == BAD_KEY:
                        return self._error(401, "authentication_error", "invalid x-api-key", anthropic)
                    if body.get("model") == UNKNOWN_MODEL:
                        return self._error(404, "not_found_error", f"model: {UNKNOWN_MODEL}", anthropic)
                    refusal = server.strict_refusal(self.path, body)
                    if refusal is not None:
                        status, kind, message, param = refusal
                        with server._lock:
                            server.refused.append(message)
                        return self._error(status, kind, message, anthropic, param=param)
                    if fault == "429":
                        return self._error(429, "rate_limit_error", "slow down", anthropic, {"retry-after": "0"})
                    if fault == "529":
                        return self._error(529, "overloaded_error", "Overloaded", anthropic)
                    if fault == "500":
                        return self._error(500, "api_error", "Internal server error", anthropic)
                    if fault == "slow":
                        time.sleep(server.slow_s)
                        return self._error(500, "api_error", "too late", anthropic)
                    if fault == "reset":
                        return self._reset(body, index, anthropic)
                    if fault in ("cut", "error_event"):
                        return self._faulty_stream(fault, body, index, anthropic)
                    if server.delay_s:
                        time.sleep(server.delay_s)
                    turn = server._next_turn(body)
                    if turn is None:
                        return self._error(400, "invalid_request_error", "the script has ended", anthropic)
                    self._answer(server.measured(turn[1], body), body, turn[0], anthropic)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout): nothing to answer

            def _answer(self, turn: dict[str, Any], body: dict[str, Any], n: int, anthropic: bool) -> None:
                model = body.get("model", "")
                if anthropic and not body.get("stream"):
                    return self._json(200, anthropic_message(turn, model, n))
                self._sse(self._events(turn, body, n, anthropic))

            def _events(self, turn: dict[str, Any], body: dict[str, Any], n: int, anthropic: bool) -> list[str]:
                model = body.get("model", "")
                if anthropic:
                    events = anthropic_events(turn, model, n)
                    with server._lock:  # what a request may send back
                        server.signed.update(
                            (
                                d["delta"]["signature"],
                                "".join(
                                    t["delta"]["thinking"]
                                    for _, t in events
                                    if t.get("index") == d["index"]
                                    and t.get("delta", {}).get("type") == "thinking_delta"
                                ),
                            )
                            for _, d in events
                            if d.get("delta", {}).get("type") == "signature_delta"
                        )
                    return [f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events]
                if self.path == "/v1/responses":
                    events = responses_events(turn, model, n)
                    with server._lock:
                        server.issued.update(
                            (e["item"]["id"], e["item"]["encrypted_content"])
                            for e in events
                            if e["type"] == "response.output_item.done" and e["item"]["type"] == "reasoning"
                        )
                    return [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events]
                asked = (body.get("stream_options") or {}).get("include_usage", False)
                with_usage = server.send_usage and asked
                return [f"data: {json.dumps(c)}\n\n" for c in openai_chunks(turn, model, n, with_usage)] + [
                    "data: [DONE]\n\n"
                ]

            def _faulty_stream(self, fault: str, body: dict[str, Any], index: int, anthropic: bool) -> None:
                # The events of the turn that would be served, without consuming it.
                with server._lock:
                    turn = server.turns[min(server.served, len(server.turns) - 1)] if server.turns else {}
                events = self._events(turn, body, index, anthropic)
                if fault == "cut":
                    return self._sse(events[: len(events) // 2])
                if anthropic:
                    error: dict[str, Any] = {
                        "type": "error",
                        "error": {"type": "overloaded_error", "message": "Overloaded"},
                    }
                elif self.path == "/v1/responses":
                    error = {
                        "type": "error",
                        "code": "server_error",
                        "message": "server overloaded",
                        "param": None,
                        "sequence_number": 2,
                    }
                else:
                    error = {"error": {"message": "server overloaded", "type": "server_error"}}
                prefix = "event: error\n" if anthropic or self.path == "/v1/responses" else ""
                self._sse(events[:2] + [f"{prefix}data: {json.dumps(error)}\n\n"])

            def _reset(self, body: dict[str, Any], index: int, anthropic: bool) -> None:
                # HTTP/1.1 chunked, as real servers stream, dropped in the middle of a chunk.
                self.protocol_version = "HTTP/1.1"
                self.close_connection = True
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                turn = server.turns[0] if server.turns else {}
                event = self._events(turn, body, index, anthropic)[0].encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                self.wfile.write(b"%x\r\n%s" % (len(event), event[:5]))
                self.wfile.flush()

            def _sse(self, events: list[str]) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("request-id", "req_fake")
                self.send_header("x-request-id", "req_fake")
                self.end_headers()
                for event in events:
                    self.wfile.write(event.encode())
                    self.wfile.flush()

            def _error(
                self,
                status: int,
                kind: str,
                message: str,
                anthropic: bool,
                headers: Optional[dict[str, str]] = None,
                param: Optional[str] = None,
            ) -> None:
                body = (
                    {"type": "error", "error": {"type": kind, "message": message}}
                    if anthropic
                    else {"error": {"message": message, "type": kind, "param": param, "code": None}}
                )
                self._json(status, body, headers)

            def _json(self, status: int, body: dict[str, Any], headers: Optional[dict[str, str]] = None) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

        return Handler
