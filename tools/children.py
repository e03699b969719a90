"""Running a measuring child process through the jail: a job file in, a result file out.

The instrument tools (stages, reference_dump, ncu_kernel) each build the solution or the
reference in a fresh interpreter, as the profile tool does: the child reads its job from a
folder of its own, may write only there and in the workspace, and sees the task and the
weights the evaluations cached, read-only.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Optional

from kagent.tools.base import Completed, ToolContext, ToolError, run_command


def child_job(ctx: ToolContext, solution: Optional[Path], **fields) -> dict:
    """The fields every child needs to build the task and the solution as the harness does."""
    options = ctx.eval_options
    return {
        "task_kind": ctx.task.kind,
        "task_path": str(ctx.task.path),
        "solution": str(solution) if solution else None,
        "scale": options.scale,
        "device": options.device,
        "cache_dir": str(options.cache_dir) if options.cache_dir else None,
        **fields,
    }


def run_child(
    ctx: ToolContext,
    entry: str,
    job: dict,
    tmp: Path,
    limit_s: float,
    prefix: Sequence[str] = (),
    what: str = "the measurement",
) -> tuple[dict, Completed]:
    """Run ``entry(job_file)`` of a kagent module in a fresh python inside the jail (after
    ``prefix``, e.g. a profiler), and return what it wrote to ``job["result"]`` and how it ran.
    A child that died or wrote nothing is the model's to fix: a ToolError with its output."""
    module, _, function = entry.rpartition(".")
    job = {**job, "result": str(tmp / "result.json")}
    job_file = tmp / "job.json"
    job_file.write_text(json.dumps(job))
    code = f"import sys; from {module} import {function}; {function}(sys.argv[1])"
    cache = [ctx.eval_options.cache_dir] if ctx.eval_options.cache_dir else []
    done = run_command(
        [*prefix, ctx.eval_options.python, "-c", code, str(job_file)],
        ctx,
        limit_s,
        writable=[tmp],
        show=[ctx.task.path, *cache],
    )
    result_file = Path(job["result"])
    if done.timed_out:
        raise ToolError(f"{what} timed out after {done.seconds:.0f} s (process group killed)\n{done.output}")
    if not result_file.exists():
        raise ToolError(f"{what} failed (exit code {done.exit_code}):\n{done.output}")
    return json.loads(result_file.read_text()), done
