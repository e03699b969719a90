"""The job an instrument's child reads: written by the tool (kagent.tools.children), read by
the child (``ChildJob.read``), one JSON file in the child's own folder. Versioned as the
evaluation's job is: a child refuses a job of another version. Like the evaluation's job, it
states its task's kind whole (the harness's ``Kind``), which the agent side writes from the
kind's own object (kagent.tasks.kind.TaskKind.harness)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Optional

from kagent.sandbox.harness.kinds import Kind

if TYPE_CHECKING:  # the harness's loading imports torch, which the tools writing a job never need
    from kagent.sandbox.harness.loading import DiskCache

# 2: the job states its kind whole (Kind), not by its name.
CHILD_JOB_VERSION = 2


@dataclasses.dataclass(frozen=True)
class ChildJob:
    """What to build, where, and the instrument's own knobs (each instrument reads its own)."""

    kind: Kind  # the task's kind: its solutions' class, how its steps are built
    task: str  # the task's folder or file
    solution: Optional[str]  # the solution file; None for an instrument of the reference alone
    scale: str
    device: str
    cache_dir: Optional[str]  # the evaluations' cache, read-only here (weights built anew are staged)
    result: str  # the file the child writes its result to; its folder is the child's own
    context_len: Optional[int] = None  # None: the scale's first
    steps: int = 1  # steps measured (profile, stages)
    rounds: int = 1  # sweeps over the stages (stages)
    profiler: Literal["torch", "ncu"] = "torch"  # profile: torch.profiler, or inside cudaProfilerStart/Stop
    seed: int = 0  # the inputs' seed (reference_dump)
    salient: bool = False  # from the task's salient state (reference_dump)
    save_as: Optional[str] = None  # where the values are saved (reference_dump)
    compare: Optional[str] = None  # a file of values to compare with (reference_dump)
    version: int = CHILD_JOB_VERSION

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(dataclasses.asdict(self)))

    @classmethod
    def read(cls, path: str | Path) -> ChildJob:
        fields = json.loads(Path(path).read_text())
        if fields.get("version") != CHILD_JOB_VERSION:
            raise ValueError(f"instrument job version {fields.get('version')} != {CHILD_JOB_VERSION}")
        return cls(**{**fields, "kind": Kind.read(fields.get("kind"))})

    @property
    def staging(self) -> Path:
        """Where weights built anew go: beside the result, in the child's own folder."""
        return Path(self.result).parent / "staged"

    def cache(self) -> DiskCache:
        """The harness's cache, read-only here: weights built anew are staged in the job's own
        folder and go with it (only evaluations fill the cache)."""
        from kagent.sandbox.harness.loading import DiskCache

        return DiskCache(Path(self.cache_dir) if self.cache_dir else None, self.staging)
