"""A model that replays a script: for tests, demos and reproducing a run without a provider.

Its spec is ``scripted:<file>``, ``scripted:<name>`` for a session kagent ships (``demo``,
``sweep``, ``megakernel``), or either with ``?delay=<seconds>`` for a model that thinks that
long before each answer (a sweep's measurements stand in for a real model so).

A script is a list of turns, or a mapping ``{needs: cuda, hint: ..., loop_from: K, turns:
[...]}``: ``needs`` for a session whose steps only a GPU can run (a run on a CPU refuses it at
the start, saying so, rather than failing at every step); ``loop_from`` for a session that
never runs out: after its last turn it plays turns K, K+1, ... again, lap after lap, until the
run's budget ends it (a sweep's busy-time measurement needs members that keep working for
their whole budget). In a YAML script, ``!file PATH`` stands for the text of a
file, PATH relative to the script's folder: a session that writes a large kernel keeps the
kernel in a file of its own, and the trace records the text itself.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

import yaml

from kagent.agent.loop.models.spec import ModelChoice
from kagent.core.errors import ModelError
from kagent.core.messages import Message, ModelResponse, TextBlock, ThinkingBlock, ToolCall, ToolSpec, Usage

_SHORT_KEYS = {"text", "thinking", "tool_calls", "usage", "stop_reason"}


def _short_turn(turn: dict[str, Any], index: int) -> ModelResponse:
    """A turn written in the short form; tool-call ids default to ``call_<turn>_<i>``."""
    unknown = set(turn) - _SHORT_KEYS
    if unknown:
        raise ModelError(
            f"script turn {index}: unknown keys {sorted(unknown)} "
            f"(expected some of {sorted(_SHORT_KEYS)}, or a full response with 'message')"
        )
    content: list[Any] = []
    if turn.get("thinking"):
        content.append(ThinkingBlock(thinking=turn["thinking"]))
    if turn.get("text"):
        content.append(TextBlock(text=turn["text"]))
    calls = [
        ToolCall(id=call.get("id") or f"call_{index}_{i}", name=call["name"], arguments=call.get("arguments") or {})
        for i, call in enumerate(turn.get("tool_calls") or [])
    ]
    content.extend(calls)
    return ModelResponse(
        message=Message(role="assistant", content=content),
        stop_reason=turn.get("stop_reason") or ("tool_use" if calls else "end_turn"),
        usage=Usage(**(turn.get("usage") or {})),
        model="scripted",
    )


def parse_script(turns: Any) -> list[ModelResponse]:
    """Turns from already-decoded data: each a full ModelResponse dict or the short form."""
    if not isinstance(turns, list):
        raise ModelError("a script must be a list of turns")
    try:
        return [
            ModelResponse.model_validate(t) if isinstance(t, dict) and "message" in t else _short_turn(t, i)
            for i, t in enumerate(turns)
        ]
    except (TypeError, KeyError, AttributeError, ValueError) as exc:  # ValueError covers pydantic's
        raise ModelError(f"the script is malformed: {exc}") from exc


DEVICES_A_SCRIPT_MAY_NEED = ("cuda",)


@dataclass(frozen=True)
class Script:
    turns: list[ModelResponse]
    needs: Optional[str] = None  # "cuda": the session's steps run on a GPU only
    hint: Optional[str] = None  # what to run instead where it cannot
    loop_from: Optional[int] = None  # after the last turn, play from this one again


def _file_loader(folder: Path) -> type[yaml.SafeLoader]:
    """A safe YAML loader that reads ``!file PATH`` as the text of folder/PATH."""

    def file_text(loader: yaml.SafeLoader, node: yaml.Node) -> str:
        relative = loader.construct_scalar(node)
        try:
            return (folder / str(relative)).read_text()
        except OSError as exc:
            raise ModelError(
                f"the script's !file {relative}: cannot read {folder / str(relative)}: {exc.strerror}"
            ) from exc

    class FileLoader(yaml.SafeLoader):
        pass

    FileLoader.add_constructor("!file", file_text)
    return FileLoader


def read_script(path: Union[str, Path]) -> Script:
    """A YAML or JSON script file (JSON is YAML, but is read as JSON for clearer errors)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ModelError(f"cannot read the script {path}: {exc.strerror}") from exc
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.load(text, Loader=_file_loader(path.parent))
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        kind = "JSON" if path.suffix == ".json" else "YAML"
        raise ModelError(f"the script {path} is not valid {kind}: {exc}") from exc
    if not isinstance(data, dict):
        return Script(parse_script(data))
    unknown = set(data) - {"needs", "hint", "turns", "loop_from"}
    if (
        unknown
        or "turns" not in data
        or data.get("needs") not in (None, *DEVICES_A_SCRIPT_MAY_NEED)
        or not isinstance(data.get("hint", ""), str)
    ):
        raise ModelError(
            f"the script {path} is a mapping, so it must hold turns (a list) and may hold needs "
            f"(one of {', '.join(DEVICES_A_SCRIPT_MAY_NEED)}), hint (a line of text) and loop_from "
            f"(a turn's index); got keys {sorted(data)} and needs {data.get('needs')!r}"
        )
    turns = parse_script(data["turns"])
    loop_from = data.get("loop_from")
    if loop_from is not None and (type(loop_from) is not int or not 0 <= loop_from < len(turns)):
        raise ModelError(
            f"the script {path}: loop_from must be the index of one of its {len(turns)} turns "
            f"(0 to {len(turns) - 1}); got {loop_from!r}"
        )
    return Script(turns, needs=data.get("needs"), hint=data.get("hint"), loop_from=loop_from)


def load_script(path: Union[str, Path]) -> list[ModelResponse]:
    """The turns of a script file."""
    return read_script(path).turns


# The sessions kagent ships, found by name (``scripted:demo`` plays examples/demo_session.yaml):
# examples/ beside agent/, in a checkout and in an installed kagent alike (kagent.examples), so
# that the demo runs wherever kagent is installed, from any folder.
SESSIONS_DIR = Path(__file__).resolve().parents[3] / "examples"
SESSION_SUFFIX = "_session.yaml"


def session_names() -> list[str]:
    return sorted(p.name[: -len(SESSION_SUFFIX)] for p in SESSIONS_DIR.glob(f"*{SESSION_SUFFIX}"))


def script_path(given: str) -> Path:
    """The script a spec names: a file's path, or the name of a session kagent ships (a word
    with no folder and no suffix, which is no file here)."""
    path = Path(given)
    if path.exists() or "/" in given or path.suffix:
        return path
    shipped = SESSIONS_DIR / f"{given}{SESSION_SUFFIX}"
    if shipped.is_file():
        return shipped
    raise ModelError(
        f"scripted:{given}: no such script file, nor a session kagent ships by that name "
        f"(those are: {', '.join(session_names()) or 'none in this installation'})"
    )


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
            raise ModelError(
                f"scripted:{rest}: after '?' a scripted spec takes delay=<seconds> only, such as "
                f"?delay=20; got {item!r}"
            )
    return path, delay_s


class ScriptedModel:
    """Returns the scripted responses in order, ignoring its input but recording it in ``calls``."""

    def __init__(
        self,
        turns: list[ModelResponse],
        name: str = "scripted",
        start_at: int = 0,
        delay_s: float = 0.0,
        needs: Optional[str] = None,
        hint: Optional[str] = None,
        loop_from: Optional[int] = None,
    ):
        self.name = name
        self.needs, self.hint = needs, hint  # the device its steps need, and what to run instead
        self._turns = list(turns)
        self.loop_from = loop_from  # (Script.loop_from)
        self.calls: list[list[Message]] = []
        # Turns already played (a resumed run continues where its trace says it was).
        self.start_at = start_at
        self.delay_s = delay_s  # how long it "thinks" before each answer

    def complete(self, system: str, messages: list[Message], tools: list[ToolSpec], max_tokens: int) -> ModelResponse:
        self.calls.append(list(messages))
        position = self.start_at + len(self.calls) - 1
        lap = 0
        if position >= len(self._turns):
            if self.loop_from is None:
                raise ModelError("the script has no more turns")
            lap, index = divmod(position - len(self._turns), len(self._turns) - self.loop_from)
            lap, position = lap + 1, self.loop_from + index
        time.sleep(self.delay_s)
        turn = self._turns[position].model_copy(deep=True)
        for block in turn.message.content if lap else ():
            if isinstance(block, ToolCall):  # each lap's calls named apart from the earlier laps'
                block.id = f"{block.id}_lap{lap}"
        return turn


def from_choice(choice: ModelChoice) -> ScriptedModel:
    """The factory of the ``scripted`` provider: ``<file>``, ``<name>``, with ``?delay=<seconds>``."""
    path, delay_s = parse_spec(choice.rest)
    script = read_script(script_path(path))
    return ScriptedModel(
        script.turns,
        name=choice.spec,
        delay_s=delay_s,
        needs=script.needs,
        hint=script.hint,
        loop_from=script.loop_from,
    )
