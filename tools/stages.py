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

import re
import tempfile
from pathlib import Path
from typing import Any, Optional

from pydantic import Field

from kagent.tools.base import Args, BaseTool, ToolContext, ToolError, ToolFacts, ToolOutcome
from kagent.tools.children import child_job, run_instrument

STAGES_TIMEOUT_S = 600.0
# The child half, run in a fresh python (kagent.sandbox.instruments.stages).
STAGES_CHILD = "kagent.sandbox.instruments.stages.stages_child"
# Stages that add up within this of the step timed back to back agree; beyond, it is said.
AGREEMENT = 0.10


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
        with tempfile.TemporaryDirectory(prefix="kagent-stages-") as tmp:
            job = child_job(
                ctx,
                solution,
                Path(tmp) / "result.json",
                context_len=args.context_len,
                steps=args.steps,
                rounds=args.rounds,
            )
            result, _ = run_instrument(ctx, STAGES_CHILD, job, Path(tmp), STAGES_TIMEOUT_S, what="the stage sweep")
        if result.get("error"):
            raise ToolError(result["error"])
        rows = stage_rows(result)
        return ToolOutcome(
            content=stage_table(result),
            data={"stages": rows, "kinds": kind_rows(rows), **{k: result[k] for k in ("steady_us", "full_us")}},
        )
