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
from collections import Counter
from collections.abc import Iterator
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
)
from kagent.tools.children import child_job, run_child

DUMP_TIMEOUT_S = 600.0
DEFAULT_DUMP = "build/reference_intermediates.pt"
# A value larger than this is summarized, not saved (a dequantized expert would be 9 MB).
MAX_SAVED_ELEMENTS = 1 << 23
MAX_ROWS = 60
# Below this cosine a compared value is marked as differing (the harness's own threshold is 0.98).
DIFFERS_BELOW = 0.999
# Methods that hand out weights or set things up, not values of the step.
_NOT_RECORDED = {"forward", "weight", "random_init", "reset_parameters", "extra_repr"}


# -- the child side: recording a reference step ---------------------------------------------------
def _flatten(value: Any, name: str) -> Iterator[tuple[str, Any]]:
    """(name, tensor) for every tensor, int and float nested in lists, tuples and dicts (a
    state's layers are named L0, L1, ...)."""
    import torch

    if isinstance(value, torch.Tensor):
        yield name, value
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield name, torch.tensor(value)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _flatten(item, f"{name}.L{i}" if isinstance(item, dict) else f"{name}.{i}")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _flatten(item, f"{name}.{key}")


class Recorder:
    """Records what passes between a module's parts during one call (see the module's doc)."""

    def __init__(self, root: Any):
        self.root = root
        self.values: dict[str, Any] = {}
        self.too_large: dict[str, dict] = {}
        self.calls: Counter = Counter()
        self._handles: list[Any] = []

    def keep_inputs(self, call: str, args: tuple) -> None:
        """A call's arguments as ``call.in0``, ``call.in1``, ..., copied now (the call may change
        them in place, as a step does its state)."""
        for i, arg in enumerate(args):
            self._keep(f"{call}.in{i}", arg)

    def keep_output(self, call: str, out: Any) -> None:
        """A call's result as ``call.out`` (``call.out0``, ``call.out1``, ... for a tuple)."""
        if isinstance(out, tuple):
            for i, item in enumerate(out):
                self._keep(f"{call}.out{i}", item)
        else:
            self._keep(f"{call}.out", out)

    def _keep(self, name: str, value: Any) -> None:
        for key, tensor in _flatten(value, name):
            summary = {"shape": list(tensor.shape), "dtype": str(tensor.dtype).removeprefix("torch.")}
            if tensor.numel() > MAX_SAVED_ELEMENTS:
                self.too_large[key] = {**summary, "norm": float(tensor.detach().double().norm())}
            else:
                self.values[key] = tensor.detach().clone().cpu()

    def _name(self, base: str) -> str:
        self.calls[base] += 1
        return base if self.calls[base] == 1 else f"{base}#{self.calls[base] - 1}"

    def _wrap(self, name: str, function: Any) -> Any:
        def recorded(*args: Any, **kwargs: Any) -> Any:
            import torch

            if not any(isinstance(a, torch.Tensor) for a in (*args, *kwargs.values())):
                return function(*args, **kwargs)  # no tensor in: a helper, not a value of the step
            call = self._name(name)
            self.keep_inputs(call, args)
            out = function(*args, **kwargs)
            self.keep_output(call, out)
            return out

        return recorded

    def __enter__(self) -> Recorder:
        own = type(self.root).__module__
        for path, module in self.root.named_modules():
            prefix = path or "model"

            def hook(mod: Any, inputs: Any, output: Any, prefix: str = prefix) -> None:
                call = self._name(prefix)
                self.keep_inputs(call, inputs)
                self.keep_output(call, output)

            self._handles.append(module.register_forward_hook(hook))
            for cls in type(module).__mro__:
                if cls.__module__ != own:
                    continue  # torch's own classes: their methods are not the task's math
                for attr, value in vars(cls).items():
                    function = value.__func__ if isinstance(value, staticmethod) else value
                    if (
                        attr.startswith("_")
                        or attr in _NOT_RECORDED
                        or not callable(function)
                        or isinstance(value, (type, property, classmethod))
                        or attr in vars(module)
                    ):
                        continue
                    bound = getattr(module, attr)
                    setattr(module, attr, self._wrap(f"{prefix}.{attr}", bound))
        return self

    def __exit__(self, *exc: Any) -> None:
        for handle in self._handles:
            handle.remove()
        for _, module in self.root.named_modules():
            for attr in [a for a, v in vars(module).items() if getattr(v, "__name__", "") == "recorded"]:
                delattr(module, attr)


def summary_rows(values: dict[str, Any], too_large: dict[str, dict]) -> list[dict]:
    """Per recorded value: shape, dtype, norm and its first few elements."""
    rows = []
    for name, tensor in values.items():
        flat = tensor.reshape(-1)
        rows.append(
            {
                "name": name,
                "shape": list(tensor.shape),
                "dtype": str(tensor.dtype).removeprefix("torch."),
                "norm": float(tensor.double().norm()) if tensor.numel() else 0.0,
                "first": [round(float(v), 5) for v in flat[:3]],
                "saved": True,
            }
        )
    rows += [{"name": name, **info, "first": [], "saved": False} for name, info in too_large.items()]
    return rows


def compare_values(reference: dict[str, Any], mine: dict[str, Any]) -> dict:
    """Each name both hold: cosine and the largest difference (equality for integers)."""
    import torch

    rows: list[dict[str, Any]] = []
    for name, ref in reference.items():
        if name not in mine:
            continue
        got = mine[name]
        if not isinstance(got, torch.Tensor) or got.numel() != ref.numel():
            rows.append(
                {
                    "name": name,
                    "cosine": None,
                    "max_diff": None,
                    "note": f"shape {list(getattr(got, 'shape', []))} against {list(ref.shape)}",
                }
            )
            continue
        a, b = ref.reshape(-1).double(), got.reshape(-1).double().cpu()
        if not ref.dtype.is_floating_point:
            rows.append(
                {
                    "name": name,
                    "cosine": 1.0 if torch.equal(a, b) else 0.0,
                    "max_diff": float((a - b).abs().max()) if a.numel() else 0.0,
                    "note": "integers",
                }
            )
            continue
        denominator = a.norm() * b.norm()
        cosine = float(a @ b / denominator) if denominator > 0 else (1.0 if torch.equal(a, b) else 0.0)
        rows.append(
            {
                "name": name,
                "cosine": cosine,
                "max_diff": float((a - b).abs().max()) if a.numel() else 0.0,
                "note": "" if torch.isfinite(b).all() else "non-finite values",
            }
        )
    return {
        "rows": rows,
        "only_mine": [n for n in mine if n not in reference],
        "missing": sum(1 for n in reference if n not in mine),
    }


def dump_child(job_file: str) -> None:
    import json

    import torch

    from kagent.sandbox.harness.loading import DiskCache, load_module, to_device
    from kagent.sandbox.harness.mega import Task, build_reference, clone_state

    job = json.loads(Path(job_file).read_text())
    device = torch.device(job["device"])
    cache = DiskCache(Path(job["cache_dir"]) if job["cache_dir"] else None, Path(job["result"]).parent / "staged")
    model: Any  # the task's Model: a torch Module with the task's own step
    with torch.no_grad():
        if job["task_kind"] == "kernelbench":
            problem = load_module("problem", Path(job["task_path"]))
            torch.manual_seed(42)  # as the harness builds models
            model = problem.Model(*problem.get_init_inputs()).to(device).eval()
            torch.manual_seed(job["seed"])
            inputs = to_device(list(problem.get_inputs()), device)
            context_len = None
            with Recorder(model) as recorder:
                model(*inputs)
        else:
            task = Task(Path(job["task_path"]), job["scale"], device)
            model, _ = build_reference(task, cache)
            context_len = job["context_len"] or task.shapes[0]["context_len"]
            hidden, state = task.init_token(job["seed"]), task.init_state(context_len, job["seed"])
            if job["salient"]:
                if task.salient_state is None:
                    Path(job["result"]).write_text(json.dumps({"error": "the task's reference has no salient_state"}))
                    return
                state = task.salient_state(model, hidden, state)
            with Recorder(model) as recorder:
                model.step(hidden.clone(), clone_state(state))
    save_path = Path(job["save_as"])
    save_path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(recorder.values, save_path)
    result: dict[str, Any] = {
        "context_len": context_len,
        "seed": job["seed"],
        "device": str(device),
        "rows": summary_rows(recorder.values, recorder.too_large),
    }
    if job["compare"]:
        mine = torch.load(job["compare"], map_location="cpu", weights_only=True)
        if not isinstance(mine, dict):
            result["error"] = f"the file to compare holds a {type(mine).__name__}, not a dict of tensors by name"
        else:
            result["comparison"] = compare_values(recorder.values, mine)
    Path(job["result"]).write_text(json.dumps(result))


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
        job = child_job(
            ctx,
            None,
            context_len=args.context_len,
            seed=args.seed,
            salient=args.salient,
            save_as=str(save_path),
            compare=str(compare) if compare else None,
        )
        with tempfile.TemporaryDirectory(prefix="kagent-dump-") as tmp:
            result, _ = run_child(
                ctx,
                "kagent.tools.intermediates.dump_child",
                job,
                Path(tmp),
                DUMP_TIMEOUT_S,
                what="the reference's step",
            )
        if result.get("error"):
            raise ToolError(result["error"])
        saved_as = relative_name(ctx, save_path)
        return ToolOutcome(
            content=dump_table(result, args.names, saved_as),
            data={"saved_as": saved_as, "values": len(result["rows"]), "comparison": result.get("comparison")},
        )
