"""The reference's intermediate values, layer by layer and stage by stage: the
`reference_dump` tool.

A single-launch kernel that comes out wrong says only that its output differs. The tool runs
one step of the task's reference from a seed's inputs and records every value that passes
between its parts: the input and output of every submodule's ``forward`` (the projections),
and the tensor arguments and results of every method of the reference's own classes (a
layer's ``step``, the short convolution, the experts' ffn with their expert indices), named by
module path and call, e.g. ``blocks.0.attn.q_proj.out``, ``blocks.0.attn.short_conv#1.out0``,
``blocks.0.moe.ffn#1.in4`` (the second ffn call's expert indices: the shared expert's, after
the routed ones), ``model.step.out1.L3.c_kv``.
It saves them (a dict of CPU tensors, torch.save) in the workspace and shows a summary; given
a file of the solution's own values under the same names, it compares each (cosine, largest
difference) and names the first that differs.
"""

from __future__ import annotations

import fnmatch
import tempfile
from pathlib import Path
from typing import Optional

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
)
from kagent.tools.children import child_job, run_instrument

DUMP_TIMEOUT_S = 600.0
# The child half, run in a fresh python (kagent.sandbox.instruments.dump).
DUMP_CHILD = "kagent.sandbox.instruments.dump.dump_child"
DEFAULT_DUMP = "build/reference_intermediates.pt"
MAX_ROWS = 60
# Below this cosine a compared value is marked as differing (the harness's own threshold is 0.98).
DIFFERS_BELOW = 0.999


# -- the parent side ------------------------------------------------------------------------
def _selected(rows: list[dict], names: Optional[str]) -> list[dict]:
    return [r for r in rows if names is None or fnmatch.fnmatch(r["name"], names)]


def dump_table(result: dict, names: Optional[str], saved_as: str) -> str:
    rows = _selected(result["rows"], names)
    where = f"context {result['context_len']}, " if result.get("context_len") else ""
    lines = [
        f"the reference's intermediates for seed {result['seed']} ({where}{result['device']}): "
        f"{len(result['rows'])} values, saved to {saved_as} (torch.load gives a dict of CPU tensors by name)"
        + (f"; {len(rows)} match {names!r}" if names else "")
    ]
    comparison = result.get("comparison")
    if comparison is None:
        lines.append("name | shape | dtype | norm | first values")
        for r in rows[:MAX_ROWS]:
            first = ", ".join(f"{v:.4g}" for v in r["first"]) if r["saved"] else "(too large to save)"
            lines.append(f"{r['name']} | {tuple(r['shape'])} | {r['dtype']} | {r['norm']:.4g} | {first}")
    else:
        compared = {c["name"]: c for c in comparison["rows"]}
        shown = [r for r in rows if r["name"] in compared]
        differing = [c for c in comparison["rows"] if c["cosine"] is None or c["cosine"] < DIFFERS_BELOW]
        lines.append(
            f"compared {len(compared)} values by name; {comparison['missing']} of the reference's are not in "
            f"your file"
            + (f"; yours only: {', '.join(comparison['only_mine'][:8])}" if comparison["only_mine"] else "")
        )
        lines.append(
            f"first that differs (cosine below {DIFFERS_BELOW}): " + (differing[0]["name"] if differing else "none")
        )
        lines.append("name | shape | cosine | largest difference | note")
        for r in shown[:MAX_ROWS]:
            c = compared[r["name"]]
            cosine = "–" if c["cosine"] is None else f"{c['cosine']:.6f}"
            largest = "–" if c["max_diff"] is None else f"{c['max_diff']:.3g}"
            mark = "  <- differs" if c["cosine"] is None or c["cosine"] < DIFFERS_BELOW else ""
            lines.append(f"{r['name']} | {tuple(r['shape'])} | {cosine} | {largest} | {c['note']}{mark}")
        rows = shown
    if len(rows) > MAX_ROWS:
        lines.append(f"[{len(rows) - MAX_ROWS} more rows: narrow them with names, e.g. names='blocks.0.attn.*']")
    return "\n".join(lines)


class ReferenceDumpArgs(Args):
    context_len: Optional[int] = Field(None, ge=1, description="Context length (default: the scale's first)")
    seed: int = Field(0, ge=0, description="The seed of the inputs (the task's init_state and init_token)")
    salient: bool = Field(
        False,
        description="From the task's salient state (where every part of the step "
        "shows in the output), as the harness also checks",
    )
    names: Optional[str] = Field(
        None, description="Show only the names matching this pattern, e.g. 'blocks.3.attn.*' (all are saved)"
    )
    save_as: str = Field(
        DEFAULT_DUMP,
        description="Where in the workspace to save the values (build/ is kept out of the attempts' history)",
    )
    compare: Optional[str] = Field(
        None,
        description="A .pt file in the workspace holding a dict of your "
        "solution's values under the same names: each is compared",
    )


class ReferenceDump(BaseTool):
    name = "reference_dump"
    description = (
        "Run one step of the task's reference from a seed and record every intermediate value, layer "
        "by layer and stage by stage (each projection's input and output, each method of the "
        "reference's classes); save them as a dict of tensors and show a summary, or compare them with "
        "a file of your solution's values under the same names (cosine, largest difference, the first "
        "that differs)."
    )
    Arguments = ReferenceDumpArgs
    # It saves the values in the workspace (save_as).
    facts = ToolFacts(changes_files=True)

    def execute(self, args: ReferenceDumpArgs, ctx: ToolContext) -> ToolOutcome:
        save_path = resolve_in_workspace(ctx, args.save_as, for_writing=True)
        compare = resolve_in_workspace(ctx, args.compare) if args.compare else None
        if compare is not None and not compare.is_file():
            raise ToolError(f"no file {relative_name(ctx, compare)} to compare with")
        with tempfile.TemporaryDirectory(prefix="kagent-dump-") as tmp:
            job = child_job(
                ctx,
                None,
                Path(tmp) / "result.json",
                context_len=args.context_len,
                seed=args.seed,
                salient=args.salient,
                save_as=str(save_path),
                compare=str(compare) if compare else None,
            )
            result, _ = run_instrument(ctx, DUMP_CHILD, job, Path(tmp), DUMP_TIMEOUT_S, what="the reference's step")
        if result.get("error"):
            raise ToolError(result["error"])
        saved_as = relative_name(ctx, save_path)
        return ToolOutcome(
            content=dump_table(result, args.names, saved_as),
            data={"saved_as": saved_as, "values": len(result["rows"]), "comparison": result.get("comparison")},
        )
