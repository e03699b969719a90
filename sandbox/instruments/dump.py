"""The reference_dump tool's child (kagent.tools.intermediates): one step of the task's
reference from a seed, every value that passes between its parts recorded by ``Recorder``,
saved as a dict of CPU tensors and summarized, or compared with the solution's own values."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from kagent.sandbox.harness.loading import TaskError
from kagent.sandbox.instruments.job import ChildJob

# A value larger than this is summarized, not saved (a dequantized expert would be 9 MB).
MAX_SAVED_ELEMENTS = 1 << 23
# Methods that hand out weights or set things up, not values of the step.
_NOT_RECORDED = {"forward", "weight", "random_init", "reset_parameters", "extra_repr"}


def _flatten(value: Any, name: str) -> Iterator[tuple[str, Any]]:
    """(name, tensor) for every tensor, int and float nested in lists, tuples and dicts (a
    state's layers are named L0, L1, ...)."""
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
    """One step of the task's reference from the job's seed, every value recorded; the values
    saved where the job says, their summary (or their comparison) to the job's result."""
    job = ChildJob.read(job_file)
    device = torch.device(job.device)
    with torch.no_grad():
        try:
            model, step, context_len = job.kind.instrument_steps().reference_step(job, device)
        except TaskError as err:
            Path(job.result).write_text(json.dumps({"error": str(err)}))
            return
        with Recorder(model) as recorder:
            step()
    save_path = Path(str(job.save_as))
    save_path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(recorder.values, save_path)
    result: dict[str, Any] = {
        "context_len": context_len,
        "seed": job.seed,
        "device": str(device),
        "rows": summary_rows(recorder.values, recorder.too_large),
    }
    if job.compare:
        mine = torch.load(job.compare, map_location="cpu", weights_only=True)
        if not isinstance(mine, dict):
            result["error"] = f"the file to compare holds a {type(mine).__name__}, not a dict of tensors by name"
        else:
            result["comparison"] = compare_values(recorder.values, mine)
    Path(job.result).write_text(json.dumps(result))
