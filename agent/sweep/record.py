"""The sweep's record, ``sweep.jsonl``: typed, versioned entries, one a line, appended by the
driver alone and each synced to disk before the driver goes on.

A member's state is the fold of its entries: planned (in the start), launched, ended with an
outcome. A member launched and never ended was cut (the driver died, or was stopped): that is
what `kagent sweep --resume` goes on with. The members' own run folders stay the truth about
their runs; the record says what the sweep did with them.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Final, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from kagent.agent.sweep.figures import MemberFigures
from kagent.agent.sweep.member import Outcome, Segment
from kagent.agent.sweep.plan import Member, SweepSpec
from kagent.core.errors import KagentError

RECORD_NAME = "sweep.jsonl"
RECORD_VERSION: Final = 1


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    v: Literal[1] = RECORD_VERSION
    seq: int = Field(0, description="Position in the record, from 0; set by the writer")
    at: float = Field(0.0, description="Unix time it was written; set by the writer")
    elapsed_s: float = Field(0.0, description="The sweep's running time then, over all its segments")


class SweepStarted(_Entry):
    type: Literal["sweep_started"] = "sweep_started"
    spec: SweepSpec
    members: list[Member]
    host: str
    pid: int
    versions: dict[str, Optional[str]] = Field(default_factory=dict)


class SweepResumed(_Entry):
    type: Literal["sweep_resumed"] = "sweep_resumed"
    segment: int = Field(description="1 for the first resume, and so on")
    spec: SweepSpec = Field(description="The settings from now on (engine, caps may change on a resume)")
    cut: list[str] = Field(default_factory=list, description="Members the last driver left running")
    host: str
    pid: int


class MemberLaunched(_Entry):
    type: Literal["member_launched"] = "member_launched"
    run_id: str
    resume: bool = Field(description="Its run folder exists already: it goes on with `kagent resume`")
    budget_s: float
    max_cost_usd: Optional[float] = Field(None, description="Its share of the sweep's cost cap")
    engine: str


class MemberEnded(_Entry):
    type: Literal["member_ended"] = "member_ended"
    run_id: str
    outcome: Outcome
    run_state: Optional[str] = None
    exit_code: Optional[int] = None
    detail: str = ""
    segments: list[Segment] = Field(default_factory=list)
    figures: MemberFigures = Field(default_factory=MemberFigures, description="Its run's figures as it ended")


class SweepEnded(_Entry):
    type: Literal["sweep_ended"] = "sweep_ended"
    reason: str


Entry = Annotated[
    Union[SweepStarted, SweepResumed, MemberLaunched, MemberEnded, SweepEnded], Field(discriminator="type")
]
_ENTRY = TypeAdapter(Entry)


class RecordWriter:
    """Appends entries to the record; each is on disk before ``append`` returns."""

    def __init__(self, sweep_dir: Path, spent_before_s: float = 0.0, next_seq: int = 0):
        self.path = Path(sweep_dir) / RECORD_NAME
        self._started = time.monotonic()
        self._spent_before = spent_before_s
        self._seq = next_seq
        self._file = open(self.path, "ab")

    def elapsed(self) -> float:
        return self._spent_before + time.monotonic() - self._started

    def append(self, entry: _Entry) -> _Entry:
        entry.seq, entry.at, entry.elapsed_s = self._seq, time.time(), round(self.elapsed(), 3)
        self._file.write(entry.model_dump_json().encode() + b"\n")
        self._file.flush()
        os.fsync(self._file.fileno())
        self._seq += 1
        return entry

    def close(self) -> None:
        self._file.close()


def read_record(sweep_dir: Path) -> list[Entry]:
    """The entries of a sweep's record. A last line cut short (the driver killed mid-write) is
    dropped; any other bad line is corruption, and raises."""
    path = Path(sweep_dir) / RECORD_NAME
    try:
        lines = path.read_bytes().split(b"\n")
    except OSError as err:
        raise KagentError(f"no sweep record at {path}: {err.strerror}") from err
    entries: list[Any] = []
    for index, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            entries.append(_ENTRY.validate_python(json.loads(line)))
        except (ValueError, ValidationError) as err:
            if index == len(lines) - 1:  # no newline after it: torn
                continue
            raise KagentError(f"{path}:{index + 1} is not a valid sweep entry: the record is corrupted") from err
    if not entries or not isinstance(entries[0], SweepStarted):
        raise KagentError(f"{path} does not begin with the sweep's start")
    return entries


@dataclass
class MemberState:
    member: Member
    launches: int = 0
    resumed: bool = False
    max_cost_usd: Optional[float] = None
    ended: Optional[MemberEnded] = None

    @property
    def running(self) -> bool:
        return self.launches > 0 and self.ended is None


@dataclass
class SweepView:
    """The record folded: the settings in force and each member's state."""

    spec: SweepSpec
    members: dict[str, MemberState]
    started: SweepStarted
    segments: list[tuple[float, float]] = field(default_factory=list)  # each driver's (first, last) entry time
    ended: Optional[SweepEnded] = None
    resumes: int = 0
    elapsed_s: float = 0.0
    next_seq: int = 0


def fold(entries: list[Entry]) -> SweepView:
    start = entries[0]
    assert isinstance(start, SweepStarted)
    view = SweepView(spec=start.spec, members={m.run_id: MemberState(m) for m in start.members}, started=start)
    for entry in entries:
        if isinstance(entry, (SweepStarted, SweepResumed)):
            view.segments.append((entry.at, entry.at))
            if isinstance(entry, SweepResumed):
                view.spec, view.resumes, view.ended = entry.spec, entry.segment, None
        view.segments[-1] = (view.segments[-1][0], entry.at)
        view.elapsed_s, view.next_seq = entry.elapsed_s, entry.seq + 1
        if isinstance(entry, MemberLaunched):
            state = view.members[entry.run_id]
            state.launches += 1
            state.resumed, state.ended = entry.resume, None
            state.max_cost_usd = entry.max_cost_usd if state.max_cost_usd is None else state.max_cost_usd
        elif isinstance(entry, MemberEnded):
            view.members[entry.run_id].ended = entry
        elif isinstance(entry, SweepEnded):
            view.ended = entry
    return view


def this_host() -> tuple[str, int]:
    return socket.gethostname(), os.getpid()
