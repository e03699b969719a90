"""Nsight Compute with a whole section set on a standalone kernel file: the `ncu_kernel` tool.

The profile tool measures the solution as the harness builds it, a few metrics per kernel. A
megakernel is better read on its own: a small script (or a .cu program) that builds it and
launches it on realistic data, profiled with every section of a set (``full`` by default:
speed of light, memory workload, compute workload, launch statistics, occupancy, scheduler
and warp state statistics, source counters), clocks left as they are. The whole report is
saved as CSV in the workspace; the model reads the key sections' metrics, then Nsight
Compute's own advice (its rules).
"""
from __future__ import annotations

import csv
import io
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Optional

from pydantic import Field

from kagent.tools.base import (
    Args,
    BaseTool,
    ToolContext,
    ToolError,
    ToolFacts,
    ToolOutcome,
    relative_name,
    resolve_in_workspace,
    run_command,
)

NCU_TIMEOUT_S = 900.0
NVCC_TIMEOUT_S = 300.0
SECTION_SETS = ("full", "detailed", "basic", "roofline")
# Shown in full unless the model picks sections itself, in this order (what limits the kernel
# first: the tool's output is capped, so what comes last may be cut); the others by name and
# metric count.
KEY_SECTIONS = ("GPU Speed Of Light Throughput", "Warp State Statistics", "Scheduler Statistics",
                "Memory Workload Analysis", "Occupancy", "Launch Statistics")
MAX_RULE_CHARS = 400
# A metric's value longer than this is a chart's series (Nsight Compute prints some occupancy
# and instruction metrics as a total and then every point in parentheses, up to 2 KB each).
MAX_VALUE_CHARS = 120


def parse_ncu_details(output: str) -> list[dict[str, Any]]:
    """``ncu --csv --page details`` output as launches in order: each with its kernel name,
    grid and block, its sections (name -> [(metric, value, unit)]) and its rules (type,
    name, description), whichever of those columns the version of ncu prints. Read as one
    CSV from its header on (a field may hold a line break); the tool's own ``==PROF==`` lines
    before and after are no rows."""
    start = output.find('"ID",')
    if start < 0:
        return []
    launches: dict[str, dict[str, Any]] = {}
    for row in csv.DictReader(io.StringIO(output[start:])):
        launch_id = row.get("ID")
        if launch_id is None or not row.get("Kernel Name"):
            continue
        launch = launches.setdefault(launch_id, {"id": launch_id, "kernel": row["Kernel Name"],
                                                 "grid": row.get("Grid Size", ""), "block": row.get("Block Size", ""),
                                                 "sections": {}, "rules": []})
        section = row.get("Section Name") or "(no section)"
        rule = (row.get("Rule Name") or "").strip()
        if rule:
            description = " ".join((row.get("Rule Description") or "").split())
            entry = {"type": (row.get("Rule Type") or "").strip(), "name": rule, "section": section,
                     "description": description, "speedup": (row.get("Estimated Speedup") or "").strip()}
            if entry not in launch["rules"]:
                launch["rules"].append(entry)
        metric = (row.get("Metric Name") or "").strip()
        if metric:
            launch["sections"].setdefault(section, []).append(
                (metric, (row.get("Metric Value") or "").strip(), (row.get("Metric Unit") or "").strip()))
    return list(launches.values())


def shown_value(value: str) -> str:
    """A metric's value as the model reads it: a chart's series cut to its total."""
    if len(value) <= MAX_VALUE_CHARS:
        return value
    total, opened, series = value.partition(" (")
    if opened and series.endswith(")"):
        return f"{total} (a series of {series.count(';') + 1} values: in the CSV)"
    return value[:MAX_VALUE_CHARS] + "…"


def _is_zero(value: str) -> bool:
    try:
        return float(value.replace(",", "")) == 0.0
    except ValueError:
        return False


def details_text(launches: list[dict[str, Any]], sections: Optional[str], saved_as: str) -> str:
    """What the model reads: per launch its sections' metrics (all of those ``sections``
    matches, a regex; by default the key ones, in KEY_SECTIONS' order, less the metrics that
    read zero, and the others by name), then Nsight Compute's advice (its rules). Metrics come
    first because they are the facts and they are short: a tool's output is capped in its
    middle, and a megakernel's report runs to 12 KB. Charts' series are cut to their totals."""
    pick = re.compile(sections, re.IGNORECASE) if sections else None
    lines = [f"Nsight Compute, {len(launches)} launch(es); the whole report is in {saved_as}"]
    for launch in launches:
        lines.append(f"\n== {launch['kernel'][:160]} (ID {launch['id']}) grid {launch['grid']} block {launch['block']}")
        found = launch["sections"]
        order = [name for name in KEY_SECTIONS if name in found] + [n for n in found if n not in KEY_SECTIONS]
        others = []
        for name in order:
            metrics = found[name]
            if not (pick.search(name) if pick else name in KEY_SECTIONS):
                others.append(f"{name} ({len(metrics)})")
                continue
            # The model named these sections: every metric; else the zeros (a breakdown's idle
            # pipes and units) are counted, not listed.
            listed = metrics if pick else [m for m in metrics if not _is_zero(m[1])]
            lines.append(f"-- {name}" + (f" ({len(metrics) - len(listed)} metrics at zero not shown)"
                                         if len(listed) < len(metrics) else ""))
            lines += [f"   {metric}: {shown_value(value)} {unit}".rstrip() for metric, value, unit in listed]
        if others:
            lines.append("other sections (metrics; ask for them with sections=...): " + ", ".join(others))
        for rule in launch["rules"]:
            if rule["type"] in ("OPT", "WRN", "ERROR") or not rule["type"]:
                speedup = f" (estimated speedup {rule['speedup']}%)" if rule["speedup"] else ""
                lines.append(f"[{rule['type'] or 'rule'}] {rule['name']}{speedup}: "
                             f"{rule['description'][:MAX_RULE_CHARS]}")
    return "\n".join(lines)


class NcuKernelArgs(Args):
    path: str = Field(description="A standalone .py script (run with the evaluating python) or .cu program (built "
                                  "with nvcc first) that launches the kernel to profile")
    arguments: list[str] = Field(default_factory=list, description="Command-line arguments for it")
    kernel: Optional[str] = Field(None, description="Profile only kernels whose name matches this regex")
    launch_skip: int = Field(0, ge=0, description="Matching launches to skip first (e.g. warm-ups)")
    launch_count: int = Field(1, ge=1, le=10, description="Matching launches to profile")
    section_set: str = Field("full", description="Nsight Compute section set: " + ", ".join(SECTION_SETS))
    sections: Optional[str] = Field(None, description="Show these sections' metrics in full (a regex on their "
                                                      "names); by default the key ones")
    arch: str = Field("sm_90a", pattern=r"^(sm|compute)_\d+[a-z]?$", description="nvcc architecture for a .cu")


class NcuKernel(BaseTool):
    name = "ncu_kernel"
    description = ("Profile a standalone kernel file under Nsight Compute with a whole section set (full by "
                   "default): a .py script or a .cu program that launches the kernel. Returns Nsight Compute's "
                   "advice and the key sections' metrics (throughput, memory, occupancy, warp stalls); saves the "
                   "whole report as CSV in build/. CUDA with ncu installed only.")
    Arguments = NcuKernelArgs
    # It runs the kernel's file, in the workspace, and saves the report in build/.
    facts = ToolFacts(changes_files=True)

    def execute(self, args: NcuKernelArgs, ctx: ToolContext) -> ToolOutcome:
        if args.section_set not in SECTION_SETS:
            raise ToolError(f"section_set must be one of {', '.join(SECTION_SETS)}, not {args.section_set!r}")
        path = resolve_in_workspace(ctx, args.path)
        shown = relative_name(ctx, path)
        if not path.is_file() or path.suffix not in (".py", ".cu"):
            raise ToolError(f"{shown} is not a .py or .cu file of the workspace" if path.exists()
                            else f"no file {shown}")
        tool_path = ctx.command_env().get("PATH")
        ncu = shutil.which("ncu", path=tool_path)
        if ncu is None:
            raise ToolError("Nsight Compute is not installed here (ncu not on PATH): no hardware counters")
        if not ctx.eval_options.device.startswith("cuda"):
            raise ToolError(f"Nsight Compute needs a CUDA device; this run evaluates on {ctx.eval_options.device}")
        with tempfile.TemporaryDirectory(prefix="kagent-ncu-") as tmp:
            target = self._target(ctx, path, args, Path(tmp), tool_path)
            # The report goes to a file: on stdout it would be capped like any command's output,
            # and a full set runs to hundreds of rows a launch.
            report = Path(tmp) / "report.csv"
            argv = [ncu, "--set", args.section_set, "--csv", "--page", "details", "--print-details", "all",
                    "--clock-control", "none", "--launch-skip", str(args.launch_skip), "--launch-count",
                    str(args.launch_count), "--log-file", str(report)]
            if args.kernel:
                argv += ["--kernel-name", f"regex:{args.kernel}"]
            done = run_command([*argv, *target, *args.arguments], ctx, NCU_TIMEOUT_S, cwd=path.parent,
                               writable=[Path(tmp)])
            text = report.read_text(errors="replace") if report.exists() else ""
        launches = parse_ncu_details(text)
        if not launches:
            why = "timed out" if done.timed_out else f"exit code {done.exit_code}"
            raise ToolError(f"Nsight Compute profiled no kernel ({why}; check kernel, launch_skip and that the "
                            f"file launches something):\n{done.output[-3000:]}\n{text[-2000:]}".rstrip())
        saved = resolve_in_workspace(ctx, f"build/ncu_{path.stem}.csv", for_writing=True)
        saved.parent.mkdir(parents=True, exist_ok=True)
        saved.write_text(text[text.find('"ID",'):])
        saved_as = relative_name(ctx, saved)
        return ToolOutcome(content=details_text(launches, args.sections, saved_as),
                           data={"saved_as": saved_as, "launches": [{k: launch[k] for k in ("id", "kernel", "grid",
                                                                                             "block", "rules")}
                                                                    for launch in launches]})

    @staticmethod
    def _target(ctx: ToolContext, path: Path, args: NcuKernelArgs, tmp: Path, tool_path: Optional[str]) -> list[str]:
        """The command ncu runs: the script under the evaluating python, or the .cu built first."""
        if path.suffix == ".py":
            return [ctx.eval_options.python, str(path)]
        nvcc = shutil.which("nvcc", path=tool_path)
        if nvcc is None:
            raise ToolError("nvcc is not installed (not on PATH): a .cu file cannot be built here")
        binary = tmp / path.stem
        built = run_command([nvcc, "-O3", f"-arch={args.arch}", "-lineinfo", "-o", str(binary), str(path)], ctx,
                            NVCC_TIMEOUT_S, cwd=path.parent, writable=[tmp])
        if built.exit_code != 0:
            raise ToolError(f"nvcc could not build {relative_name(ctx, path)} (exit code {built.exit_code}):\n"
                            f"{built.output[-3000:]}")
        return [str(binary)]
