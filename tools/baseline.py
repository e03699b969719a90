"""The baseline tool: what the task's own baseline costs, and the floor that the bytes set."""
from __future__ import annotations

from kagent.core.errors import KagentError
from kagent.sandbox.evaluate import evaluate
from kagent.tools.base import Args, BaseTool, ToolContext, ToolError, ToolOutcome
from kagent.tools.evaluation import summarize


class BaselineArgs(Args):
    """No arguments."""


class Baseline(BaseTool):
    name = "baseline"
    description = ("Measure the task's baseline (its optimized PyTorch version, timed against itself) per "
                   "context: ms per token, launches per step, and the bytes floor (the least time the memory "
                   "traffic of one step allows). Call it first.")
    Arguments = BaselineArgs

    def execute(self, args: BaselineArgs, ctx: ToolContext) -> ToolOutcome:
        options = ctx.eval_options.model_copy(update={"mode": "aa",
                                                      "timeout_s": ctx.timeout(ctx.eval_options.timeout_s)})
        try:
            result = evaluate(ctx.task, None, options, progress=ctx.progress)
        except KagentError as err:
            raise ToolError(err.message) from err
        if result.verdict.value != "pass":
            # The whole evaluation stays in the trace: a crash's stderr is the only account of
            # why (a sweep member's baseline died loading on a shared GPU, 2026-12-07, and the
            # trace said no more than its exit code).
            return ToolOutcome(content=f"the baseline could not be measured.\n{summarize(result)}", is_error=True,
                               data={"evaluation": result.model_dump(mode="json")})
        lines = [f"Baseline of {ctx.task.name} on {options.device} ({options.scale} scale):"]
        for t in result.timings:
            floor = (f"; bytes floor {t.roofline.floor_ms * 1e3:.1f} us ({t.roofline.bytes_per_step / 1e6:.1f} MB "
                     f"per step), the baseline reaches {t.roofline.baseline_fraction:.2%} of it") if t.roofline else ""
            lines.append(f"- {t.label}: {t.baseline.median_ms:.3f} ms per token "
                         f"(p10–p90 {t.baseline.p10_ms:.3f}–{t.baseline.p90_ms:.3f}){floor}")
        launches = result.launches_of("baseline")
        if launches and launches.launches is not None:
            lines.append(f"- launches per step: {launches.launches}")
        if result.bandwidth:
            lines.append(f"- device copy bandwidth: {result.bandwidth.bytes_per_s / 1e12:.3f} TB/s")
        return ToolOutcome(content="\n".join(lines), data={"timings": [t.model_dump() for t in result.timings]})
