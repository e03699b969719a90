"""The trace: an append-only JSONL of typed, versioned events, the single source of truth of a run.

Each event is written as one line, flushed and fsync'ed before the call returns, so a kill at
any instant loses at most the line being written (a torn last line, which the reader detects
and drops). Large contents go to content-addressed files beside the trace (``blobs/``).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Final, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from kagent.agent.outcome import EndState
from kagent.agent.settings import RunConfig
from kagent.core.errors import KagentError

# The format of the events written now. 2: a loop-control tool's result says in its data what
# it changed (design, finish); format 1 said it in the call's arguments only. 3: an interruption
# (Ctrl-C, SIGTERM, SIGHUP, the deadline during a model call) is an event of its own; a trace of
# format 2 or 1 simply holds none. 4: a model response's thinking block may carry an OpenAI
# Responses reasoning item (item_id, encrypted_content), passed back to the model on resume; an
# older trace's blocks hold none. Older events are read in today's terms (_upgrade), so a trace
# written before stays readable and resumable.
TRACE_VERSION: Final = 4
# Tool outputs longer than this go to a blob; the event keeps a capped copy and the blob's name.
INLINE_LIMIT = 16_000
# A segment's start says what the user was told there to beware of in the run's figures.
WARNINGS = "What the user was told to beware of, such as a model without a price"


class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid")
    v: Literal[1, 2, 3, 4] = TRACE_VERSION
    seq: int = Field(0, description="Position in the trace, from 0; set by the writer")
    at: float = Field(0.0, description="Unix time when the event was written; set by the writer")
    elapsed_s: float = Field(0.0, description="Budgeted run time when the event happened")


class RunStarted(_Event):
    type: Literal["run_started"] = "run_started"
    run_id: str
    config: RunConfig = Field(description="The run's settings (config.json holds the same)")
    versions: dict[str, Optional[str]]
    prompt_sha256: str = Field(description="Hash of the system prompt and the first user message")
    tools_sha256: str = Field(description="Hash of the tool schemas offered to the model")
    system: str
    first_message: dict[str, Any]
    tools: list[dict[str, Any]]
    warnings: list[str] = Field(default_factory=list, description=WARNINGS)


class ModelRequested(_Event):
    type: Literal["model_requested"] = "model_requested"
    turn: int
    message_count: int


class ModelRetried(_Event):
    type: Literal["model_retried"] = "model_retried"
    turn: int
    error: str
    wait_s: float
    attempt: int


class ModelResponded(_Event):
    type: Literal["model_responded"] = "model_responded"
    turn: int
    response: dict[str, Any] = Field(description="ModelResponse: normalized message, usage and the raw response")
    cost_usd: float


class ToolStarted(_Event):
    type: Literal["tool_started"] = "tool_started"
    turn: int
    call_id: str
    name: str
    arguments: dict[str, Any]


class ToolFinished(_Event):
    type: Literal["tool_finished"] = "tool_finished"
    turn: int
    call_id: str
    name: str
    content: str = Field(description="What the model was told (capped)")
    is_error: bool
    seconds: float
    data: dict[str, Any] = Field(default_factory=dict)
    blob: Optional[str] = Field(None, description="blobs/<sha256> holding the full content when it was long")


class AttemptRecorded(_Event):
    type: Literal["attempt_recorded"] = "attempt_recorded"
    attempt: dict[str, Any] = Field(description="The ledger entry (kagent.agent.loop.ledger.Attempt)")
    evaluation: dict[str, Any] = Field(description="The measurement: the whole EvalResult")
    commit: str
    reverted_to: Optional[str] = Field(None, description="Commit the workspace was reverted to, if it was")
    restored: Optional[list[str]] = Field(
        None,
        description="The files the revert put back as reverted_to has them (the solution's files); every "
        "other file stayed. None with reverted_to: an older trace, whose revert restored the whole tree",
    )
    call_id: str = Field(description="The check or benchmark call that measured it")
    message: str = Field(description="What the model was told about the attempt")


class UserNotice(_Event):
    """Text kagent added to the conversation on its own (budget line, a nudge, a revert notice)."""

    type: Literal["user_notice"] = "user_notice"
    turn: int
    text: str
    budget: dict[str, Any] = Field(default_factory=dict, description="The budget's numbers at that moment")


class RunResumed(_Event):
    """A new segment of the run, after an interruption or to extend a finished run."""

    type: Literal["run_resumed"] = "run_resumed"
    segment: int = Field(description="1 for the first resume, and so on")
    spent_before_s: float = Field(description="Budgeted time of the earlier segments")
    budget_wall_s: float = Field(description="The wall budget from now on (extended if asked)")
    torn_tail_dropped: bool
    settled_calls: list[dict[str, Any]] = Field(
        default_factory=list,
        description="Tool calls left without a result, and how each was settled (re-run or answered as interrupted)",
    )
    workspace_side_ref: Optional[str] = Field(None, description="Where uncommitted changes were kept, if any")
    workspace_head: Optional[str] = Field(None, description="Where main was put back to")
    workspace_snapshot: Optional[str] = Field(None, description="The tree the workspace was put back to")
    orphaned_attempts: dict[str, str] = Field(
        default_factory=dict,
        description="Attempt commits the trace never recorded (killed in between), moved to refs/kagent/orphans/",
    )
    stale_lock: Optional[dict[str, Any]] = Field(None, description="The dead process whose lock was taken over")
    previous_main_ref: Optional[str] = Field(
        None, description="Where main's tip was kept when putting main back left commits behind"
    )
    restarted: bool = Field(
        False,
        description="The trace held no run start, so the run began again from turn 1 "
        "(this event follows that new start)",
    )
    warnings: list[str] = Field(default_factory=list, description=WARNINGS)


class Compacted(_Event):
    type: Literal["compacted"] = "compacted"
    turn: int
    dropped_messages: int
    summary: str
    memory: Optional[str] = Field(
        None, description="The model's own summary the compaction carried (None: it gave none; older traces)"
    )


class Finalized(_Event):
    type: Literal["finalized"] = "finalized"
    best_attempt: Optional[int]
    commit: Optional[str]
    evaluation: Optional[dict[str, Any]] = Field(None, description="The re-verification EvalResult, if it ran")
    note: str


class ErrorRecorded(_Event):
    type: Literal["error"] = "error"
    message: str
    fatal: bool


# What stopped a run short of its end: a key, a signal, or the budget's deadline during a call.
InterruptionCause = Literal["Ctrl-C", "SIGTERM", "SIGHUP", "deadline"]


class Interrupted(_Event):
    """The run was stopped where it stood. After a signal or Ctrl-C the process ends (the run's
    state is interrupted, `kagent resume` goes on); after the deadline the run goes on to its
    final slice. Its ``elapsed_s`` is the moment it stopped, which every view of the run's time
    counts up to."""

    type: Literal["interrupted"] = "interrupted"
    cause: InterruptionCause
    during: str = Field("", description="What the run was doing then (a tool, the model), if anything")


class RunEnded(_Event):
    type: Literal["run_ended"] = "run_ended"
    status: EndState = Field(description="How it ended (kagent.agent.outcome.ENDINGS)")
    reason: str
    best_attempt: Optional[int]
    best_speedup: Optional[float]
    tokens: int
    cost_usd: float


Event = Annotated[
    Union[
        RunStarted,
        RunResumed,
        ModelRequested,
        ModelRetried,
        ModelResponded,
        ToolStarted,
        ToolFinished,
        AttemptRecorded,
        UserNotice,
        Compacted,
        Finalized,
        ErrorRecorded,
        Interrupted,
        RunEnded,
    ],
    Field(discriminator="type"),
]
_EVENT = TypeAdapter(Event)


class TraceWriter:
    """Appends events to ``trace.jsonl``; each append is durable before it returns."""

    def __init__(self, run_dir: Path, elapsed: Optional[Callable[[], float]] = None):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / "trace.jsonl"
        self.blobs = self.run_dir / "blobs"
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._elapsed = elapsed or (lambda: 0.0)
        # A torn last line (what read_trace reports and RunResumed records) is cut before appending.
        if self.path.exists():
            repair_tail(self.path)
        existing = read_trace(self.path).events if self.path.exists() else []
        self._seq = existing[-1].seq + 1 if existing else 0
        # The run's time as the last event recorded it: what a run that stops reports as its time.
        self.elapsed_s = max((e.elapsed_s for e in existing), default=0.0)
        self._file = open(self.path, "ab")

    def append(self, event: _Event) -> _Event:
        event.seq = self._seq
        event.at = time.time()
        event.elapsed_s = round(self._elapsed(), 3)
        self.elapsed_s = max(self.elapsed_s, event.elapsed_s)
        self._file.write(event.model_dump_json().encode() + b"\n")
        self._file.flush()
        os.fsync(self._file.fileno())
        self._seq += 1
        return event

    def blob(self, text: str) -> str:
        """Store ``text`` under its hash (once) and return its path relative to the run."""
        data = text.encode()
        name = hashlib.sha256(data).hexdigest()
        path = self.blobs / name
        if not path.exists():
            self.blobs.mkdir(exist_ok=True)
            tmp = path.with_suffix(".tmp")
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        return f"blobs/{name}"

    def close(self) -> None:
        self._file.close()


class TraceRead(BaseModel):
    events: list[Any]
    torn_tail: bool = Field(description="The last line was cut short (killed mid-write) and was dropped")


def read_trace(path: Path) -> TraceRead:
    """All events of a trace. A torn last line (no newline: killed while writing it) is
    dropped and reported; any other bad line is corruption, and raises."""
    path = Path(path)
    if not path.exists():
        raise KagentError(f"no trace at {path}")
    lines = path.read_bytes().split(b"\n")
    unterminated = len(lines) - 1 if lines[-1] else None  # the part after the last newline
    events, torn = [], False
    for index, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            events.append(_EVENT.validate_python(json.loads(line)))
        except (ValueError, ValidationError) as err:
            if index == unterminated:
                torn = True
                continue
            raise KagentError(
                f"{path}:{index + 1} is not a valid trace event ({_first_problem(err)}): the trace "
                "is corrupted before its last line"
            ) from err
    return TraceRead(events=_upgrade(events), torn_tail=torn)


def _upgrade(events: list[Any]) -> list[Any]:
    """Events of format 1 in today's terms. There, the design and finish calls said what they
    changed in their arguments alone; today their result's data says it (tools/control.py)."""
    started: dict[str, ToolStarted] = {}
    for event in events:
        if isinstance(event, ToolStarted):
            started[event.call_id] = event
        elif isinstance(event, ToolFinished) and event.v == 1 and not event.is_error and event.call_id in started:
            arguments = started[event.call_id].arguments
            if event.name == "design" and {"hypothesis", "predicted"} <= set(arguments):
                event.data = {
                    **event.data,
                    "design": {"hypothesis": str(arguments["hypothesis"]), "predicted": str(arguments["predicted"])},
                }
            elif event.name == "finish":
                event.data = {**event.data, "finished": str(arguments.get("summary", ""))}
    return events


def _first_problem(err: Exception) -> str:
    if isinstance(err, ValidationError):
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        return f"{first['msg']}" + (f" at {where}" if where else "")
    return str(err)[:120]


def repair_tail(path: Path) -> None:
    """Make the file end at a complete line: cut a torn tail, or end a complete but
    unterminated last line."""
    data = Path(path).read_bytes()
    if not data or data.endswith(b"\n"):
        return
    last_newline = data.rfind(b"\n")
    tail = data[last_newline + 1 :]
    try:
        _EVENT.validate_python(json.loads(tail))
    except (ValueError, ValidationError):
        with open(path, "r+b") as f:
            f.truncate(last_newline + 1)
        return
    with open(path, "ab") as f:
        f.write(b"\n")
