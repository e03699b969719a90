"""Measuring the workspace's solution: check (correctness only), benchmark (correctness and
timing against the baseline) and profile (torch.profiler per op/kernel, ncu when present).

A failing verdict is a measurement, not a tool error: the model reads it and fixes its code.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any, Optional

from pydantic import Field

from kagent.core.errors import KagentError
from kagent.sandbox.evaluate import evaluate
from kagent.sandbox.instruments.job import ChildJob
from kagent.sandbox.lease import exclusive_here
from kagent.sandbox.noise import score_lines
from kagent.sandbox.results import EvalResult, LaunchReport, Verdict
from kagent.tools.base import Args, BaseTool, ToolContext, ToolError, ToolFacts, ToolOutcome, run_command
from kagent.tools.children import child_command, child_files, child_job

PROFILE_TIMEOUT_S = 300.0
NCU_TIMEOUT_S = 300.0
TOP_OPS = 15
TOP_NCU_KERNELS = 10
NCU_MAX_LAUNCHES = 300
NCU_METRICS = {
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "sm_pct",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram_pct",
    "gpu__time_duration.sum": "duration_us",
}
DETAILS_CHARS = 2000


def _solution(ctx: ToolContext) -> Path:
    path = ctx.solution_path
    if not path.is_file():
        raise ToolError(f"there is no {ctx.solution_name} in the workspace yet: write it first")
    return path


# -- check and benchmark ------------------------------------------------------------------
def _evaluate(ctx: ToolContext, mode: str, contexts: Optional[list[int]]) -> ToolOutcome:
    solution = _solution(ctx)
    options = ctx.eval_options.model_copy(
        update={
            "mode": mode,
            "timeout_s": ctx.timeout(ctx.eval_options.timeout_s),
            "contexts": contexts or ctx.eval_options.contexts,
        }
    )
    try:
        result = evaluate(ctx.task, solution, options, progress=ctx.progress)
    except KagentError as err:
        return ToolOutcome(
            content=f"{mode} could not run: {err.message}" + (f" ({err.hint})" if err.hint else ""),
            is_error=True,
            data={"mode": mode},
        )
    data = {"mode": mode, "verdict": result.verdict.value, "score": result.score}
    return ToolOutcome(content=summarize(result), data=data, evaluation=result)


def summarize(result: EvalResult) -> str:
    """The result in the few lines a model needs to decide its next move."""
    lines = [f"verdict: {result.verdict.value.upper()} — {result.reason}"]
    lines.append("checks: " + (", ".join(f"{c.name} {c.status}" for c in result.checks) or "none ran"))
    if result.verdict is not Verdict.PASS:
        failed = next((c for c in result.checks if c.status != "pass"), None)
        if failed is not None and failed.details:
            lines.append(f"details of {failed.name}:\n{_tail(failed.details, DETAILS_CHARS)}")
        if result.verdict in (Verdict.CRASH, Verdict.TIMEOUT, Verdict.INTERNAL_ERROR) and result.stderr_tail.strip():
            lines.append(f"stderr (tail):\n{_tail(result.stderr_tail.strip(), DETAILS_CHARS)}")
    for t in result.timings:
        fraction = f" · {t.roofline.candidate_fraction:.1%} of the bytes floor" if t.roofline else ""
        noise = ", within noise" if t.within_noise else ""
        precision = t.candidate.median_half_width
        measured = f" (±{precision:.1%})" if precision is not None else ""
        per = f"ms/{result.step_name}"
        lines.append(
            f"{t.label}: baseline {t.baseline.median_ms:.4g} {per}, solution {t.candidate.median_ms:.4g} "
            f"{per}{measured} → speedup {t.speedup:.3f}x (95% CI {t.ci_low:.3f}–{t.ci_high:.3f}{noise}) · "
            f"{t.tokens_per_s:.0f} {result.rate_unit}{fraction}"
        )
        if t.candidate_host_overhead_ms is not None:
            lines.append(
                f"{t.label}: one step on its own (synchronized around) takes "
                f"{t.candidate_isolated_ms:.4g} ms: {t.host_overhead_text()}"
            )
    reports = [r for r in (result.launches_of("baseline"), result.launches_of("candidate")) if r is not None]
    if reports and all(r.launches is None for r in reports):
        lines.append(f"launches per step: not counted ({reports[0].note or 'no count'})")
    elif reports:
        lines.append("launches per step: " + "; ".join(_launch_line(r) for r in reports))
    device_time = result.device_time_check()
    if device_time:
        lines.append(f"device time: {device_time}")
    lines += score_lines(result, advice="benchmark again before acting on it")
    return "\n".join(lines)


def _launch_line(report: LaunchReport) -> str:
    label = "solution" if report.who == "candidate" else report.who
    if report.launches is None:
        return f"{label}: not counted"
    single = "single launch" if report.single_launch else "not a single launch"
    extra = "".join(
        [", CUDA graph replay" if report.cuda_graph_replay else "", ", torch.compile" if report.torch_compile else ""]
    )
    return f"{label}: {report.launches} ({single}{extra})"


def _tail(text: str, limit: int) -> str:
    return text if len(text) <= limit else "…" + text[-limit:]


class CheckArgs(Args):
    """No arguments."""


class Check(BaseTool):
    name = "check"
    description = (
        "Check the workspace's solution for correctness against the reference (no timing): fixed "
        "and secret seeds, in-place overwrite, a chain of steps. Returns the verdict and why."
    )
    Arguments = CheckArgs
    # Its attempt is a commit of the workspace.
    facts = ToolFacts(changes_files=True, records_attempt=True)

    def execute(self, args: CheckArgs, ctx: ToolContext) -> ToolOutcome:
        return _evaluate(ctx, "check", None)


class BenchmarkArgs(Args):
    contexts: Optional[list[int]] = Field(
        None, min_length=1, description="Context lengths to time (default: all of the scale)"
    )


class Benchmark(BaseTool):
    name = "benchmark"
    description = (
        "Check, then time the workspace's solution against the baseline: per context ms/token, "
        "speedup with a 95% interval, tokens/s, fraction of the memory-bandwidth floor, launches "
        "per step, and the score (geomean speedup)."
    )
    Arguments = BenchmarkArgs
    facts = ToolFacts(changes_files=True, records_attempt=True, scores_attempt=True)

    def execute(self, args: BenchmarkArgs, ctx: ToolContext) -> ToolOutcome:
        return _evaluate(ctx, "eval", args.contexts)


# -- profile: the parent side ---------------------------------------------------------------
# The child half, run in a fresh python (kagent.sandbox.instruments.profile).
PROFILE_CHILD = "kagent.sandbox.instruments.profile.profile_child"


class ProfileArgs(Args):
    steps: int = Field(3, ge=1, le=20, description="Steps (calls) to profile after one warm-up step")
    context_len: Optional[int] = Field(None, ge=1, description="Context length (default: the scale's first)")
    ncu: bool = Field(True, description="Also collect Nsight Compute metrics for the top kernels (CUDA only)")


class Profile(BaseTool):
    name = "profile"
    description = (
        "Run the workspace's solution for a few steps under torch.profiler and return the top ops and "
        "kernels by self device time (CPU time on the CPU); on CUDA with Nsight Compute installed, "
        "also SM and DRAM throughput and duration of the top kernels. Does not check correctness."
    )
    Arguments = ProfileArgs
    # It runs the solution's code, in the workspace.
    facts = ToolFacts(changes_files=True)

    def execute(self, args: ProfileArgs, ctx: ToolContext) -> ToolOutcome:
        solution = _solution(ctx)
        options = ctx.eval_options
        cuda = options.device.startswith("cuda")
        with tempfile.TemporaryDirectory(prefix="kagent-profile-") as folder:
            tmp = Path(folder)
            job = child_job(ctx, solution, tmp / "ops.json", steps=args.steps, context_len=args.context_len)
            result = self._child(ctx, job, tmp)
            parts = [_ops_table(result, cuda)]
            data: dict[str, Any] = {
                "ops": result["ops"],
                "device": options.device,
                "steps": args.steps,
                "context_len": result["context_len"],
            }
            ncu = shutil.which("ncu", path=ctx.command_env().get("PATH"))
            if not args.ncu:
                parts.append("Nsight Compute: not asked for")
            elif ncu is None:
                parts.append("Nsight Compute not installed (ncu not on PATH): no hardware counters")
            elif not cuda:
                parts.append("Nsight Compute: needs a CUDA device; this run profiles on the CPU")
            else:
                ncu_job = dataclasses.replace(job, profiler="ncu", steps=1, result=str(tmp / "ncu.json"))
                kernels, note = self._ncu(ctx, ncu, ncu_job, tmp)
                data["ncu"] = kernels
                parts.append(note or _ncu_table(kernels))
        return ToolOutcome(content="\n\n".join(parts), data=data)

    def _child(self, ctx: ToolContext, job: ChildJob, tmp: Path) -> dict:
        writable, show = child_files(ctx, tmp)
        with exclusive_here(ctx.eval_options.device, "profile"):  # the device alone (a sweep's lease)
            done = run_command(
                child_command(ctx, PROFILE_CHILD, job, tmp / "torch_job.json"),
                ctx,
                PROFILE_TIMEOUT_S,
                writable=writable,
                show=show,
            )
        result_file = Path(job.result)
        if done.timed_out:
            raise ToolError(f"profiling timed out after {done.seconds:.0f} s (process group killed)\n{done.output}")
        if done.exit_code != 0 or not result_file.exists():
            raise ToolError(f"profiling failed (exit code {done.exit_code}):\n{done.output}")
        return json.loads(result_file.read_text())

    def _ncu(self, ctx: ToolContext, ncu: str, job: ChildJob, tmp: Path) -> tuple[list[dict], str]:
        """Kernels of one step under ncu, or a note saying why there are none."""
        # The report goes to a file: on stdout it is capped like any command's output, and 300
        # launches of 3 metrics each would lose their middle.
        report = tmp / "ncu.csv"
        argv = [
            ncu,
            "--profile-from-start",
            "off",
            "--csv",
            "--launch-count",
            str(NCU_MAX_LAUNCHES),
            "--metrics",
            ",".join(NCU_METRICS),
            "--log-file",
            str(report),
            *child_command(ctx, PROFILE_CHILD, job, tmp / "ncu_job.json"),
        ]
        writable, show = child_files(ctx, tmp)
        with exclusive_here(ctx.eval_options.device, "profile (ncu)"):  # the device alone (a sweep's lease)
            done = run_command(argv, ctx, NCU_TIMEOUT_S, writable=writable, show=show)
        kernels = parse_ncu_csv(report.read_text(errors="replace") if report.exists() else done.output)
        if kernels:
            return kernels[:TOP_NCU_KERNELS], ""
        why = "timed out" if done.timed_out else f"exit code {done.exit_code}"
        return [], f"Nsight Compute gave no metrics ({why}):\n{_tail(done.output, DETAILS_CHARS)}"


def _ops_table(result: dict, cuda: bool) -> str:
    key = "self_device_us" if cuda else "self_cpu_us"
    ops = sorted(result["ops"], key=lambda op: op[key], reverse=True)[:TOP_OPS]
    steps = result["steps"]
    total = sum(op[key] for op in result["ops"])
    head = (
        f"profile of the solution on {result['device']}, {result['scale']} scale, context {result['context_len']}, "
        f"{steps} steps after 1 warm-up; top {len(ops)} by self {'device' if cuda else 'CPU'} time"
    )
    # On the CPU there is no device time: its column would be all zeros.
    rows = ["self CPU ms | self device ms | calls | % | op" if cuda else "self CPU ms | calls | % | op"]
    for op in ops:
        share = op[key] / total if total else 0.0
        device_ms = f"{op['self_device_us'] / 1e3:.3f} | " if cuda else ""
        rows.append(f"{op['self_cpu_us'] / 1e3:.3f} | {device_ms}{op['calls']} | {share:.1%} | {op['name'][:120]}")
    per_step = total / 1e3 / steps
    foot = f"total self {'device' if cuda else 'CPU'} time: {total / 1e3:.3f} ms ({per_step:.3f} ms per step)"
    return "\n".join([head, *rows, foot])


def _ncu_table(kernels: list[dict]) -> str:
    rows = ["Nsight Compute, one step: kernel | launches | total µs | SM % | DRAM %"]
    for k in kernels:
        rows.append(
            f"{k['name'][:120]} | {k['launches']} | {k['duration_us']:.1f} | {k['sm_pct']:.1f} | {k['dram_pct']:.1f}"
        )
    return "\n".join(rows)


_TO_US = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6, "s": 1e6}


def parse_ncu_csv(output: str) -> list[dict]:
    """ncu --csv rows (one per kernel launch and metric) folded per kernel name: launches,
    summed duration (µs) and mean SM/DRAM throughput (% of peak), longest first."""
    quoted = [line for line in output.splitlines() if line.startswith('"')]
    per_kernel: dict[str, dict[str, Any]] = {}
    for row in csv.DictReader(quoted):
        field = NCU_METRICS.get(row.get("Metric Name", ""))
        name = row.get("Kernel Name")
        if field is None or not name:
            continue
        try:
            value = float(row.get("Metric Value", "").replace(",", ""))
        except ValueError:
            continue
        if field == "duration_us":
            value *= _TO_US.get(row.get("Metric Unit", "").strip(), 1.0)
        k = per_kernel.setdefault(name, {"name": name, "ids": set(), "duration_us": 0.0, "sm": [], "dram": []})
        k["ids"].add(row.get("ID"))
        if field == "duration_us":
            k["duration_us"] += value
        else:
            k["sm" if field == "sm_pct" else "dram"].append(value)
    kernels = [
        {
            "name": k["name"],
            "launches": len(k["ids"]),
            "duration_us": k["duration_us"],
            "sm_pct": sum(k["sm"]) / len(k["sm"]) if k["sm"] else 0.0,
            "dram_pct": sum(k["dram"]) / len(k["dram"]) if k["dram"] else 0.0,
        }
        for k in per_kernel.values()
    ]
    return sorted(kernels, key=lambda k: k["duration_us"], reverse=True)
