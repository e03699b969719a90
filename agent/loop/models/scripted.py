"""A model that replays a script: for tests, demos and reproducing a run without a provider.

Its spec is ``scripted:<file>``, or ``scripted:<file>?delay=<seconds>`` for a model that
thinks that long before each answer (a sweep's measurements stand in for a real model so).
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Union

import yaml

from kagent.core.errors import ModelError
from kagent.core.messages import Message, ModelResponse, TextBlock, ThinkingBlock, ToolCall, ToolSpec, Usage

_SHORT_KEYS = {"text", "thinking", "tool_calls", "usage", "stop_reason"}


def _short_turn(turn: dict[str, Any], index: int) -> ModelResponse:
    """A turn written in the short form; tool-call ids default to ``call_<turn>_<i>``."""
    unknown = set(turn) - _SHORT_KEYS
    if unknown:
        raise ModelError(f"script turn {index}: unknown keys {sorted(unknown)} "
                         f"(expected some of {sorted(_SHORT_KEYS)}, or a full response with 'message')")
    content: list[Any] = []
    if turn.get("thinking"):
        content.append(ThinkingBlock(thinking=turn["thinking"]))
    if turn.get("text"):
        content.append(TextBlock(text=turn["text"]))
    calls = [ToolCall(id=call.get("id") or f"call_{index}_{i}", name=call["name"],
                      arguments=call.get("arguments") or {})
             for i, call in enumerate(turn.get("tool_calls") or [])]
    content.extend(calls)
    return ModelResponse(message=Message(role="assistant", content=content),
                         stop_reason=turn.get("stop_reason") or ("tool_use" if calls else "end_turn"),
                         usage=Usage(**(turn.get("usage") or {})), model="scripted")


def parse_script(turns: Any) -> list[ModelResponse]:
    """Turns from already-decoded data: each a full ModelResponse dict or the short form."""
    if not isinstance(turns, list):
        raise ModelError("a script must be a list of turns")
    try:
        return [ModelResponse.model_validate(t) if isinstance(t, dict) and "message" in t
                else _short_turn(t, i) for i, t in enumerate(turns)]
    except (TypeError, KeyError, AttributeError, ValueError) as exc:  # ValueError covers pydantic's
        raise ModelError(f"the script is malformed: {exc}") from exc


def load_script(path: Union[str, Path]) -> list[ModelResponse]:
    """The turns of a YAML or JSON script file (JSON is YAML, but is read as JSON for clearer errors)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ModelError(f"cannot read the script {path}: {exc.strerror}") from exc
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        kind = "JSON" if path.suffix == ".json" else "YAML"
        raise ModelError(f"the script {path} is not valid {kind}: {exc}") from exc
    return parse_script(data)


def parse_spec(rest: str) -> tuple[str, float]:
    """The script's path and the delay per answer in ``<file>`` or ``<file>?delay=<seconds>``."""
    path, _, query = rest.partition("?")
    delay_s = 0.0
    for item in filter(None, query.split("&")):
        key, _, value = item.partition("=")
        try:
            delay_s = float(value)
        except ValueError:
            delay_s = -1.0
        if key != "delay" or not 0 <= delay_s < float("inf"):
            raise ModelError(f"scripted:{rest}: after '?' a scripted spec takes delay=<seconds> only, such as "
                             f"?delay=20; got {item!r}")
    return path, delay_s


class ScriptedModel:
    """Returns the scripted responses in order, ignoring its input but recording it in ``calls``."""

    def __init__(self, turns: list[ModelResponse], name: str = "scripted", start_at: int = 0, delay_s: float = 0.0):
        self.name = name
        self._turns = list(turns)
        self.calls: list[list[Message]] = []
        # Turns already played (a resumed run continues where its trace says it was).
        self.start_at = start_at
        self.delay_s = delay_s  # how long it "thinks" before each answer

    def complete(self, system: str, messages: list[Message], tools: list[ToolSpec],
                 max_tokens: int) -> ModelResponse:
        self.calls.append(list(messages))
        position = self.start_at + len(self.calls) - 1
        if position >= len(self._turns):
            raise ModelError("the script has no more turns")
        time.sleep(self.delay_s)
        return self._turns[position].model_copy(deep=True)
