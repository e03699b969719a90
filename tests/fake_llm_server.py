"""A loopback LLM server speaking the Anthropic Messages and OpenAI chat.completions wire formats.

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
    ):
        self.turns = list(turns)
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
            check = anthropic_violations if path == "/v1/messages" else openai_violations
            self.violations += [f"request {index}: {p}" for p in check(body.get("messages", []))]
            return index, self.faults.get(index)

    def _next_turn(self, body: dict[str, Any]) -> Optional[tuple[int, dict[str, Any]]]:
        if self.turn_from_history:
            index = sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
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
                if not anthropic and self.path != "/v1/chat/completions":
                    return self._error(404, "not_found_error", f"no route {self.path}", anthropic)
                index, fault = server._admit(self.path, body, {k.lower(): v for k, v in self.headers.items()})
                bearer = self.headers.get("authorization", "").removeprefix("Bearer ")
                key = self.headers.get("x-api-key") or bearer
                try:
                    if key == BAD_KEY:
                        return self._error(401, "authentication_error", "invalid x-api-key", anthropic)
                    if body.get("model") == UNKNOWN_MODEL:
                        return self._error(404, "not_found_error", f"model: {UNKNOWN_MODEL}", anthropic)
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
                    self._answer(turn[1], body, turn[0], anthropic)
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
                    return [
                        f"event: {name}\ndata: {json.dumps(data)}\n\n"
                        for name, data in anthropic_events(turn, model, n)
                    ]
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
                error = (
                    {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
                    if anthropic
                    else {"error": {"message": "server overloaded", "type": "server_error"}}
                )
                prefix = "event: error\n" if anthropic else ""
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
                self, status: int, kind: str, message: str, anthropic: bool, headers: Optional[dict[str, str]] = None
            ) -> None:
                body = (
                    {"type": "error", "error": {"type": kind, "message": message}}
                    if anthropic
                    else {"error": {"message": message, "type": kind, "code": None}}
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
