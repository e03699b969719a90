"""The evaluation's job: what the agent side (kagent.sandbox.evaluate) asks of the harness,
one JSON file in the referee's private folder. Written by ``Job.write`` and read by
``Job.read`` alone, which refuses a job of another protocol version (protocol.py). A field
that is None takes the harness's own default, stated where it is used (timing.Settings for the
timing's knobs, kernelbench.py for KernelBench's conventions, spawn.py for the workers). The
job states its task's kind whole (kinds.py's ``Kind``): the harness keeps no list of kinds."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Optional

from .kinds import Kind
from .protocol import PROTOCOL_VERSION


@dataclasses.dataclass(frozen=True)
class Job:
    kind: Kind  # the task's kind: its evaluation, its solutions' class (kinds.py)
    mode: str  # eval: check and time; check: correctness only; aa: the baseline timed against itself
    task: str  # the task in the pristine copy: its folder, or its file
    solution: Optional[str]  # the solution file in its folder's copy; None in A/A mode
    scale: str
    device: str
    timeout_s: float  # the agent side's limit for the whole evaluation
    hang_after_s: float  # a request to the solution this long with no compiler running has hung
    hidden_seeds: int  # seeds drawn at run time
    cache_dir: Optional[str]  # the cache, read-only to the harness
    cache_staging: Optional[str]  # where new cache entries are staged
    cache_identity: Optional[str]  # entries built from other task or harness files are rebuilt
    # The timing's knobs (timing.Settings; None: its defaults).
    contexts: Optional[list[int]] = None
    rounds: Optional[int] = None
    warmup: Optional[int] = None
    block_steps: Optional[int] = None
    min_request_ms: Optional[float] = None
    judged_chains: Optional[int] = None
    reference_workers: Optional[int] = None  # None: spawn.DEFAULT_REFERENCE_WORKERS
    # KernelBench files (kernelbench.py; None: KernelBench's own).
    atol: Optional[float] = None
    rtol: Optional[float] = None
    eval_mode: bool = False
    correct_trials: Optional[int] = None
    # How the referee runs: set by evaluate.run_evaluation_child.
    solution_home: Optional[str] = None  # the solution's HOME, where its builds are cached
    pid_namespace: bool = False
    import_paths: list[str] = dataclasses.field(default_factory=list)
    gpu_lease: Optional[dict[str, Any]] = None  # a sweep's device lease (lease.py)
    solution_box: Optional[dict[str, Any]] = None  # the solution's own box (spawn.start)
    protocol: int = PROTOCOL_VERSION

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(dataclasses.asdict(self)))

    @classmethod
    def read(cls, path: str | Path) -> Job:
        """The job in ``path``; a ValueError where it is of another protocol version or not a job."""
        fields = json.loads(Path(path).read_text())
        if not isinstance(fields, dict) or fields.get("protocol") != PROTOCOL_VERSION:
            version = fields.get("protocol") if isinstance(fields, dict) else None
            raise ValueError(f"job protocol {version} != {PROTOCOL_VERSION}")
        try:
            return cls(**{**fields, "kind": Kind.read(fields.get("kind"))})
        except TypeError as err:
            raise ValueError(f"not a job: {err}") from err
