"""Running an instrument's child process through the jail: a job file in, a result file out.

The instrument tools (profile, stages, reference_dump, compile) each build the solution or the
reference in a fresh interpreter (their child halves: kagent.sandbox.instruments): the child
reads its job (a ``ChildJob``) from a folder of its own, may write only there and in the
workspace, and sees the task and the weights the evaluations cached, read-only.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from kagent.sandbox.harness.kinds import Kind
from kagent.sandbox.instruments.job import ChildJob
from kagent.tools.base import Completed, ToolContext, ToolError, run_command


def child_job(ctx: ToolContext, solution: Optional[Path], result: Path, **knobs: Any) -> ChildJob:
    """The job of a child that builds the task and the solution as the harness does, writing
    its result to ``result``; ``knobs``: the instrument's own fields of ChildJob."""
    options = ctx.eval_options
    return ChildJob(
        kind=Kind(**ctx.task.kind_of.harness()),
        task=str(ctx.task.path),
        solution=str(solution) if solution else None,
        scale=options.scale,
        device=options.device,
        cache_dir=str(options.cache_dir) if options.cache_dir else None,
        result=str(result),
        **knobs,
    )


def child_command(ctx: ToolContext, entry: str, job: ChildJob, job_file: Path) -> list[str]:
    """The command line that runs ``entry(job_file)`` (a function of a kagent module) in a fresh
    python, with ``job`` written to ``job_file``."""
    module, _, function = entry.rpartition(".")
    job.write(job_file)
    return [
        ctx.eval_options.python,
        "-c",
        f"import sys; from {module} import {function}; {function}(sys.argv[1])",
        str(job_file),
    ]


def child_files(ctx: ToolContext, tmp: Path) -> tuple[list[Path], list[Path]]:
    """What a child may touch beyond the workspace (run_command's ``writable`` and ``show``): it
    reads its job and writes its result in ``tmp``, and reads the task and the weights cached by
    evaluations."""
    cache = [ctx.eval_options.cache_dir] if ctx.eval_options.cache_dir else []
    return [tmp], [ctx.task.path, *cache]


def run_instrument(
    ctx: ToolContext,
    entry: str,
    job: ChildJob,
    tmp: Path,
    limit_s: float,
    prefix: Sequence[str] = (),
    what: str = "the measurement",
) -> tuple[dict, Completed]:
    """Run ``entry(job_file)`` in a fresh python inside the jail (after ``prefix``, e.g. a
    profiler), and return what it wrote to the job's result file and how it ran. A child that
    died or wrote nothing is the model's to fix: a ToolError with its output."""
    writable, show = child_files(ctx, tmp)
    done = run_command(
        [*prefix, *child_command(ctx, entry, job, tmp / "job.json")], ctx, limit_s, writable=writable, show=show
    )
    result_file = Path(job.result)
    if done.timed_out:
        raise ToolError(f"{what} timed out after {done.seconds:.0f} s (process group killed)\n{done.output}")
    if not result_file.exists():
        raise ToolError(f"{what} failed (exit code {done.exit_code}):\n{done.output}")
    return json.loads(result_file.read_text()), done
