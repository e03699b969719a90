"""Timing a single-launch kernel stage by stage: the `stages` tool.

A megakernel shows as one row in a profiler. Where its time goes is found from outside, by
stopping its work after each stage in turn while it still passes every grid barrier, and from
inside, by stamps each CTA writes when it reaches each barrier. A solution that follows this
convention (every attribute optional; the model is told of it in the playbook) gets both:

``kagent_stages``
    One entry per stage, in the order the kernel runs them: a name; or ``{"name": ...,
    "bytes": N}`` with the bytes the stage must move through device memory; or ``{"name": ...,
    "parts": [...]}`` naming parts of the task's bytes floor (for 02_kimi_linear_decode,
    ``roofline.bytes_by_part``: ``"L0.attn.q_proj"``, ``"L3.attn.*"``, ...). A method is
    called with the context length (None for a KernelBench task).
``kagent_stop_after``
    Set by the tool: ``None`` (do every stage) or ``n``, after which a step does the work of
    stages 0..n only and still passes every barrier; ``-1`` leaves only the launch and the
    barriers. A kernel takes it as a runtime argument (a compile-time one compiles a kernel
    per value, which the tool's warm-up absorbs, but the step is then not the same binary).
``kagent_stamps``
    An int64 tensor of shape (stages + 1, CTAs) each step fills: row 0 with each CTA's
    ``%globaltimer`` (ns) when it starts, row s + 1 when it arrives at the barrier that ends
    stage s. The tool zeroes it before each step it reads.

Per sweep point the tool times many steps by device events behind a spin kernel that keeps
the device busy while the host queues them, so a step's time is the device's and not the
host's; it reports each stage's difference, its stamped time, its bytes against its share of
the floor, and how the stages add up against the step timed back to back as a decode loop
runs it.
"""

from __future__ import annotations

import fnmatch
import re
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

from pydantic import Field

from kagent.tools.base import Args, BaseTool, ToolContext, ToolError, ToolFacts, ToolOutcome
from kagent.tools.children import child_job, run_child

STAGES_TIMEOUT_S = 600.0
# Spin cycles per second of host time to cover (about an H200's clock, with room to spare).
SPIN_CYCLES_PER_S = 2.5e9
# Stages that add up within this of the step timed back to back agree; beyond, it is said.
AGREEMENT = 0.10


# -- the solution's side of the convention ------------------------------------------------------
def declared_stages(model: Any, context_len: Optional[int]) -> list[dict]:
    """The solution's stages as dicts with a name and, where declared, bytes or parts; a
    ToolError-worthy message (ValueError) when they are malformed."""
    declared = getattr(model, "kagent_stages", None)
    if callable(declared):
        declared = declared(context_len)
    if declared is None:
        raise ValueError(
            "the solution declares no stages: give its model a kagent_stages list (see the playbook's "
            "stage instruments)"
        )
    stages = []
    for i, entry in enumerate(declared):
        stage = {"name": entry} if isinstance(entry, str) else dict(entry) if isinstance(entry, dict) else None
        if stage is None or not isinstance(stage.get("name"), str) or set(stage) - {"name", "bytes", "parts"}:
            raise ValueError(f"kagent_stages[{i}] must be a name or a dict with name and bytes or parts, not {entry!r}")
        stages.append(stage)
    if not stages:
        raise ValueError("kagent_stages is empty")
    return stages


def resolve_bytes(stages: list[dict], parts: dict[str, int]) -> list[Optional[int]]:
    """Each stage's bytes: as declared, or the sum of the task's parts it names (patterns
    allowed); None where it says neither. A pattern matching no part is an error."""
    resolved: list[Optional[int]] = []
    for stage in stages:
        if "bytes" in stage:
            resolved.append(int(stage["bytes"]))
            continue
        if "parts" not in stage:
            resolved.append(None)
            continue
        chosen: set[str] = set()
        for pattern in stage["parts"]:
            matched = fnmatch.filter(parts, pattern)
            if not matched:
                known = ", ".join(list(parts)[:12]) + (" ..." if len(parts) > 12 else "")
                raise ValueError(
                    f"stage {stage['name']!r}: part {pattern!r} matches none of the task's parts "
                    f"({known or 'the task describes no parts'})"
                )
            chosen.update(matched)
        resolved.append(sum(parts[name] for name in chosen))
    return resolved


def sweep_points(n_stages: int) -> list[int]:
    """The knob's values: -1 (the launch and the barriers alone), then after each stage."""
    return list(range(-1, n_stages))


def stamp_times(stamps: list[list[int]]) -> list[dict[str, float]]:
    """Per stage, from one step's stamps ((stages + 1) rows of per-CTA ns): its time from the
    last arrival at the barrier before (for stage 0, the first CTA's start) to the last arrival
    at its own, and the spread of the arrivals at its own barrier, in µs."""
    rows = [[int(v) for v in row] for row in stamps]
    times = []
    for s in range(1, len(rows)):
        start = min(rows[0]) if s == 1 else max(rows[s - 1])
        times.append({"us": (max(rows[s]) - start) / 1e3, "spread_us": (max(rows[s]) - min(rows[s])) / 1e3})
    return times


# -- the table ----------------------------------------------------------------------------
def _mb(n: Optional[float]) -> str:
    return "–" if n is None else f"{n / 1e6:.1f} MB"


def stage_rows(result: dict) -> list[dict[str, Any]]:
    """The table's rows from a child's result: per stage its sweep µs (the difference between
    consecutive points), stamped µs, bytes, GB/s, share of the floor's bytes and how close it
    comes to its floor (its bytes at the copy bandwidth)."""
    medians = {int(k): v for k, v in result["sweep_us"].items()}
    bandwidth, floor_bytes = result["bandwidth_bytes_per_s"], result["floor_bytes"]
    stamped = result.get("stamps") or []
    rows = []
    for s, stage in enumerate(result["stages"]):
        us = medians[s] - medians[s - 1]
        nbytes = result["stage_bytes"][s]
        row = {
            "index": s,
            "name": stage["name"],
            "us": us,
            "bytes": nbytes,
            "stamp_us": stamped[s]["us"] if s < len(stamped) else None,
            "spread_us": stamped[s]["spread_us"] if s < len(stamped) else None,
            "gbps": nbytes / (us * 1e-6) / 1e9 if nbytes and us > 0 else None,
            "share": nbytes / floor_bytes if nbytes and floor_bytes else None,
            "floor_fraction": (nbytes / bandwidth * 1e6) / us if nbytes and bandwidth and us > 0 else None,
        }
        rows.append(row)
    return rows


def kind_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Stages whose names are alike but for their numbers ("L0 KDA_IN", "L1 KDA_IN"), summed
    per kind, the largest first: where a long plan spends its time, without adding up rows."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(re.sub(r"\d+", "#", row["name"]), []).append(row)
    kinds = []
    for kind, members in groups.items():
        if len(members) < 2:
            continue
        us = sum(r["us"] for r in members)
        stamped = [r["stamp_us"] for r in members if r["stamp_us"] is not None]
        nbytes = [r["bytes"] for r in members if r["bytes"]]
        total_bytes = sum(nbytes) if len(nbytes) == len(members) else None
        kinds.append(
            {
                "kind": kind,
                "count": len(members),
                "us": us,
                "stamp_us": sum(stamped) if len(stamped) == len(members) else None,
                "bytes": total_bytes,
                "gbps": total_bytes / (us * 1e-6) / 1e9 if total_bytes and us > 0 else None,
            }
        )
    return sorted(kinds, key=lambda k: -k["us"])


def stage_table(result: dict) -> str:
    """What the model reads: the sweep, the stamps and the bytes per stage, then how they add up."""
    rows = stage_rows(result)
    base = result["sweep_us"]["-1"]
    head = (
        f"stages of the solution on {result['device']}"
        + (f", context {result['context_len']}" if result.get("context_len") else "")
        + (": device time" if result["device"].startswith("cuda") else ": time (the host's clock: no device here)")
        + f" per step, median of {result['steps']} steps x {result['rounds']} rounds per point "
        "(sweep: stop after each stage, every barrier still passed)"
    )
    lines = [
        head,
        " # | stage | sweep µs | stamped µs | CTA spread µs | bytes | GB/s | share of floor bytes | of its floor",
    ]
    lines.append(f" - | launch and barriers alone | {base:.1f} | | | | | |")
    for r in rows:

        def cell(value: Optional[float], form: str) -> str:
            return "–" if value is None else format(value, form)

        lines.append(
            f"{r['index']:>2} | {r['name']} | {r['us']:.1f} | {cell(r['stamp_us'], '.1f')} | "
            f"{cell(r['spread_us'], '.1f')} | {_mb(r['bytes'])} | {cell(r['gbps'], '.0f')} | "
            f"{cell(r['share'], '.1%')} | {cell(r['floor_fraction'], '.0%')}"
        )
    kinds = kind_rows(rows)
    if kinds:
        lines.append(
            "by kind (stages named alike but for their numbers, # for a number): kind | stages | sweep µs | "
            "stamped µs | bytes | GB/s"
        )
        for k in kinds:
            stamped_us = "–" if k["stamp_us"] is None else f"{k['stamp_us']:.1f}"
            gbps = "–" if k["gbps"] is None else f"{k['gbps']:.0f}"
            lines.append(f"  {k['kind']} | {k['count']} | {k['us']:.1f} | {stamped_us} | {_mb(k['bytes'])} | {gbps}")
    total = sum(r["us"] for r in rows)
    step_us = result["steady_us"]
    clock = "device time" if result["device"].startswith("cuda") else "time"
    agreed = abs(total + base - step_us) <= AGREEMENT * step_us
    lines.append(
        f"sum of the stages {total:.1f} µs + launch and barriers alone {base:.1f} µs = {total + base:.1f} µs; "
        f"the whole step: {result['full_us']:.1f} µs of {clock}, {step_us:.1f} µs per step back to back "
        f"({(total + base) / step_us:.0%} of it"
        + ("" if agreed else f": more than {AGREEMENT:.0%} apart, see below")
        + ")"
    )
    if result.get("stamps"):
        stamped = sum(s["us"] for s in result["stamps"])
        share = stamped / result["full_us"]
        lines.append(
            f"stamped stages add up to {stamped:.1f} µs ({share:.0%} of the step's {clock}"
            + ("; the rest is the launch and the time before the first stamp)" if share < 1 else ")")
        )
    elif result.get("stamps_note"):
        lines.append(f"stamps: {result['stamps_note']}")
    declared = [b for b in result["stage_bytes"] if b is not None]
    floor = result["floor_bytes"]
    if floor:
        lines.append(
            f"bytes floor {_mb(floor)} ({result['floor_from']}) at "
            f"{result['bandwidth_bytes_per_s'] / 1e12:.2f}"
            f" TB/s = {floor / result['bandwidth_bytes_per_s'] * 1e6:.1f} µs; the stages declare "
            f"{_mb(sum(declared)) if declared else 'no bytes'}"
        )
    if not agreed:
        lines.append(
            "the step is not the sum of its stages: a host-bound step (its launch costs more than the "
            "kernel), work outside the kernel, or a knob that skips barriers would each do that"
        )
    return "\n".join(lines)


# -- the tool -------------------------------------------------------------------------------
class StagesArgs(Args):
    context_len: Optional[int] = Field(None, ge=1, description="Context length (default: the scale's first)")
    steps: int = Field(20, ge=2, le=500, description="Steps timed per sweep point and round")
    rounds: int = Field(
        3, ge=1, le=20, description="Rounds over all sweep points (they interleave, so drift spreads evenly)"
    )


class Stages(BaseTool):
    name = "stages"
    description = (
        "Time a single-launch solution stage by stage: sweeps its kagent_stop_after knob (every "
        "barrier still passed), reads its kagent_stamps buffer, and prints per stage µs, bytes, "
        "GB/s against its share of the bytes floor, and whether the stages add up to the step. The "
        "solution declares kagent_stages (names with bytes or the task's parts); see the playbook."
    )
    Arguments = StagesArgs
    # It runs the solution's code, in the workspace.
    facts = ToolFacts(changes_files=True)

    def execute(self, args: StagesArgs, ctx: ToolContext) -> ToolOutcome:
        solution = ctx.solution_path
        if not solution.is_file():
            raise ToolError(f"there is no {ctx.solution_name} in the workspace yet: write it first")
        job = child_job(ctx, solution, context_len=args.context_len, steps=args.steps, rounds=args.rounds)
        with tempfile.TemporaryDirectory(prefix="kagent-stages-") as tmp:
            result, _ = run_child(
                ctx, "kagent.tools.stages.stages_child", job, Path(tmp), STAGES_TIMEOUT_S, what="the stage sweep"
            )
        if result.get("error"):
            raise ToolError(result["error"])
        rows = stage_rows(result)
        return ToolOutcome(
            content=stage_table(result),
            data={"stages": rows, "kinds": kind_rows(rows), **{k: result[k] for k in ("steady_us", "full_us")}},
        )


# -- the child: runs in a fresh process, builds the solution, sweeps --------------------------
class _Clock:
    """Per-step times of a step function: device time by CUDA events (behind a spin kernel,
    so the host's queueing does not count), or host time on the CPU."""

    def __init__(self, device: Any):
        import torch

        self.torch, self.device, self.cuda = torch, device, device.type == "cuda"
        self.host_s_per_step = 1e-3

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize(self.device)

    def per_step_us(self, step: Any, steps: int) -> list[float]:
        if not self.cuda:
            times = []
            for _ in range(steps):
                started = time.perf_counter()
                step()
                times.append((time.perf_counter() - started) * 1e6)
            return times
        torch = self.torch
        events = [torch.cuda.Event(enable_timing=True) for _ in range(steps + 1)]
        self.sync()
        torch.cuda._sleep(int(SPIN_CYCLES_PER_S * self.host_s_per_step * steps * 2) + 100_000)
        queued = time.perf_counter()
        for i in range(steps):
            events[i].record()
            step()
        events[steps].record()
        self.host_s_per_step = max(self.host_s_per_step, (time.perf_counter() - queued) / steps)
        self.sync()
        return [events[i].elapsed_time(events[i + 1]) * 1e3 for i in range(steps)]

    def back_to_back_us(self, step: Any, steps: int) -> float:
        """Wall time per step over ``steps`` consecutive steps, as a decode loop runs them."""
        self.sync()
        started = time.perf_counter()
        for _ in range(steps):
            step()
        self.sync()
        return (time.perf_counter() - started) / steps * 1e6


def _floor(job: dict, model: Any, context_len: Optional[int]) -> tuple[dict[str, int], int, str]:
    """The task's parts, its bytes floor and where the floor comes from."""
    if job["task_kind"] == "mega":
        import torch

        from kagent.sandbox.harness.mega import Task

        task = Task(Path(job["task_path"]), job["scale"], torch.device(job["device"]))
        roofline = task.roofline
        if roofline is None:
            return {}, 0, "the task has no roofline"
        parts = dict(roofline.bytes_by_part(task.cfg, context_len)) if hasattr(roofline, "bytes_by_part") else {}
        return parts, int(roofline.bytes_per_step(task.cfg, context_len)), "the task's roofline"
    weights = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    return {}, weights, "the solution's weights only"


def stages_child(job_file: str) -> None:
    import json

    import torch

    from kagent.sandbox.harness import environment
    from kagent.sandbox.harness.bandwidth import copy_bandwidth
    from kagent.sandbox.harness.loading import DiskCache
    from kagent.tools.evaluation import build_solution

    job = json.loads(Path(job_file).read_text())
    device = torch.device(job["device"])

    def fail(message: str) -> None:
        Path(job["result"]).write_text(json.dumps({"error": message}))

    cache = DiskCache(Path(job["cache_dir"]) if job["cache_dir"] else None, Path(job["result"]).parent / "staged")
    with torch.no_grad():
        model, step, context_len = build_solution(job, device)
        clock = _Clock(device)
        step()  # the first step builds and compiles; the stages are read after it (they may be sized by it)
        clock.sync()
        try:
            stages = declared_stages(model, context_len)
            parts, floor_bytes, floor_from = _floor(job, model, context_len)
            stage_bytes = resolve_bytes(stages, parts)
        except ValueError as err:
            return fail(str(err))
        points = sweep_points(len(stages))
        samples: dict[int, list[float]] = {p: [] for p in points}
        try:
            for _ in range(job["rounds"]):
                for point in points:
                    model.kagent_stop_after = point
                    step()  # a warm-up at this point (a kernel compiled per value, a first call)
                    samples[point] += clock.per_step_us(step, job["steps"])
        finally:
            model.kagent_stop_after = None
        full = clock.per_step_us(step, job["steps"])
        steady = clock.back_to_back_us(step, max(job["steps"], 10))
        stamps, stamps_note = _stamps(model, step, clock, len(stages), job["steps"])
    result = {
        "device": str(device),
        "context_len": context_len,
        "steps": job["steps"],
        "rounds": job["rounds"],
        "stages": stages,
        "stage_bytes": stage_bytes,
        "floor_bytes": floor_bytes,
        "floor_from": floor_from,
        # The copy bandwidth the evaluations cached for this device (measured here when none did).
        "bandwidth_bytes_per_s": copy_bandwidth(device, environment.describe(device), cache)["bytes_per_s"],
        "sweep_us": {str(p): statistics.median(v) for p, v in samples.items()},
        "full_us": statistics.median(full),
        "steady_us": steady,
        "stamps": stamps,
        "stamps_note": stamps_note,
    }
    Path(job["result"]).write_text(json.dumps(result))


def _stamps(model: Any, step: Any, clock: _Clock, n_stages: int, steps: int) -> tuple[list[dict], str]:
    """Per stage, the median over ``steps`` steps of stamp_times, or why there are none."""
    buffer = getattr(model, "kagent_stamps", None)
    if buffer is None:
        return [], "the solution keeps no kagent_stamps buffer"
    if buffer.dim() != 2 or buffer.shape[0] != n_stages + 1:
        return [], (
            f"kagent_stamps has shape {tuple(buffer.shape)}; ({n_stages + 1}, CTAs) expected: a row for "
            "the start, then one per stage"
        )
    per_step = []
    for _ in range(steps):
        buffer.zero_()
        step()
        clock.sync()
        values = buffer.cpu().tolist()
        if any(v == 0 for row in values for v in row):
            return [], "some CTAs left stamps unwritten (zeros): every CTA must stamp its start and every barrier"
        per_step.append(stamp_times(values))
    return [
        {key: statistics.median(s[i][key] for s in per_step) for key in ("us", "spread_us")} for i in range(n_stages)
    ], ""
