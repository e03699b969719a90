"""The baseline tool: what the task's own baseline costs, and the floor that the bytes set.

Runs that share a lease folder (a sweep's members, or runs started by hand with
$KAGENT_GPU_LEASE) measure each task's baseline once per device: the first to ask measures it
while the others wait, and they read that measurement. Four members of a sweep on one H200
otherwise measured it four times over, each A/A timing holding the GPU alone, and
spent 46-98 s where one alone spent 24 s. The figures are for the model's orientation only:
every score comes from an evaluation's own paired timing of baseline and candidate.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, ValidationError

from kagent.core.errors import KagentError
from kagent.sandbox.evaluate import EvalOptions, evaluate
from kagent.sandbox.lease import HOLDER_ENV, lease_folder, lease_name
from kagent.sandbox.results import EvalResult
from kagent.tasks import TaskRef
from kagent.tools.base import Args, BaseTool, ToolContext, ToolError, ToolOutcome
from kagent.tools.evaluation import summarize

# What changes a baseline's measurement; the rest (limits, caches, the interpreter) does not.
_MEASURED_BY = {
    "mode",
    "scale",
    "contexts",
    "rounds",
    "warmup",
    "block_steps",
    "min_request_ms",
    "hidden_seeds",
    "atol",
    "rtol",
    "eval_mode",
    "correct_trials",
}


class SharedBaseline(BaseModel):
    """A baseline measured once for every run on the same lease folder, device and task."""

    model_config = ConfigDict(extra="forbid")
    version: Literal[1] = 1
    lease: str
    holder: str
    measured_at: float
    evaluation: EvalResult


class BaselineArgs(Args):
    """No arguments."""


class Baseline(BaseTool):
    name = "baseline"
    description = (
        "Measure the task's baseline (its optimized PyTorch version, timed against itself) per "
        "context: ms per token, launches per step, and the bytes floor (the least time the memory "
        "traffic of one step allows). Call it first."
    )
    Arguments = BaselineArgs

    def execute(self, args: BaselineArgs, ctx: ToolContext) -> ToolOutcome:
        options = ctx.eval_options.model_copy(update={"mode": "aa"})
        shared = shared_baseline_file(ctx.task, options)
        if shared is None:
            return self._measure(ctx, options, None)
        with _held(shared.with_name(shared.name + ".lock"), ctx):
            kept = _read(shared)
            if kept is not None:
                return _report(ctx, options, kept.evaluation, kept)
            return self._measure(ctx, options, shared)

    def _measure(self, ctx: ToolContext, options: EvalOptions, shared: Optional[Path]) -> ToolOutcome:
        options = options.model_copy(update={"timeout_s": ctx.timeout(options.timeout_s)})
        try:
            result = evaluate(ctx.task, None, options, progress=ctx.progress)
        except KagentError as err:
            raise ToolError(err.message) from err
        if result.verdict.value != "pass":
            # The whole evaluation stays in the trace: a crash's stderr is the only account of
            # why (a sweep member's baseline died loading on a shared GPU, and the
            # trace said no more than its exit code). Nothing is shared: the next run measures.
            return ToolOutcome(
                content=f"the baseline could not be measured.\n{summarize(result)}",
                is_error=True,
                data={"evaluation": result.model_dump(mode="json")},
            )
        if shared is not None:
            record = SharedBaseline(
                lease=lease_name(options.device),
                holder=os.environ.get(HOLDER_ENV) or f"pid {os.getpid()}",
                measured_at=time.time(),
                evaluation=result,
            )
            partial = shared.with_name(shared.name + ".partial")
            partial.write_text(record.model_dump_json())
            partial.replace(shared)  # whole or absent for a reader
        return _report(ctx, options, result, None)


def shared_baseline_file(task: TaskRef, options: EvalOptions) -> Optional[Path]:
    """Where runs sharing a lease folder keep ``task``'s baseline on this device; None without one."""
    folder = lease_folder()
    if folder is None:
        return None
    measured_by = {"task": task.sha256(), "options": options.model_dump(mode="json", include=_MEASURED_BY)}
    key = hashlib.sha256(json.dumps(measured_by, sort_keys=True).encode()).hexdigest()[:16]
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{lease_name(options.device)}.baseline-{key}.json"


@contextmanager
def _held(lock_path: Path, ctx: ToolContext) -> Iterator[None]:
    """The lock of a shared baseline, waited for no later than the run's deadline."""
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if ctx.deadline is not None and time.monotonic() >= ctx.deadline - 1.0:
                    raise ToolError(
                        "the run's time budget ran out while another run on this device measured the baseline"
                    ) from None
                time.sleep(0.25)
        yield
    finally:
        os.close(fd)  # (closing gives the lock back)


def _read(path: Path) -> Optional[SharedBaseline]:
    try:
        return SharedBaseline.model_validate_json(path.read_text())
    except (OSError, ValidationError):
        return None


def _report(
    ctx: ToolContext, options: EvalOptions, result: EvalResult, shared: Optional[SharedBaseline]
) -> ToolOutcome:
    lines = [f"Baseline of {ctx.task.name} on {options.device} ({options.scale} scale):"]
    for t in result.timings:
        floor = (
            (
                f"; bytes floor {t.roofline.floor_ms * 1e3:.1f} us ({t.roofline.bytes_per_step / 1e6:.1f} MB "
                f"per step), the baseline reaches {t.roofline.baseline_fraction:.2%} of it"
            )
            if t.roofline
            else ""
        )
        lines.append(
            f"- {t.label}: {t.baseline.median_ms:.3f} ms per token "
            f"(p10–p90 {t.baseline.p10_ms:.3f}–{t.baseline.p90_ms:.3f}){floor}"
        )
    launches = result.launches_of("baseline")
    if launches and launches.launches is not None:
        lines.append(f"- launches per step: {launches.launches}")
    if result.bandwidth:
        lines.append(f"- device copy bandwidth: {result.bandwidth.bytes_per_s / 1e12:.3f} TB/s")
    data: dict = {"timings": [t.model_dump() for t in result.timings]}
    if shared is not None:
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(shared.measured_at))
        lines.append(
            f"(measured once for every run on this device by {shared.holder} at {when}; "
            "scores always come from each evaluation's own timing of the baseline beside the candidate)"
        )
        data["shared_from"] = {"holder": shared.holder, "measured_at": shared.measured_at, "lease": shared.lease}
    return ToolOutcome(content="\n".join(lines), data=data)
