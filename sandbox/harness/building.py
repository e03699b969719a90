"""How a contestant is built: the one place that says what a contestant's process imports
and how it makes a model of it.

A contestant is what a timed run compares: the solution, the task's baseline, or (in an A/A
run) the baseline standing in for the solution. Each is built in a process of its own, the
contestant's server (solution_server.py), from a ``Spec`` the referee sends: the file to
import and under which name, the class, its constructor's arguments, the seed set before
construction, and the weights it is given after. ``build`` is what that process runs; the
profile tool's child (kagent.tools.evaluation) runs the same function, so that what it
profiles is built exactly as what an evaluation times.

Built as a plain harness would: no device context while the class is constructed (a solution
may seed CPU generators while it builds), then moved, then given the reference's weights.

Standard library and torch only: the contestant's process imports this module.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

import torch

# What a problem file exposes; the class a solution defines is its kind's (the job's
# kinds.Kind.model_class), and a decode task's reference.py and baseline.py define the same
# class as its solutions.
KERNELBENCH_TASK_CLASS = "Model"
# KernelBench builds both its models after this seed.
KERNELBENCH_SEED = 42
KERNELBENCH_MODULE = "_kagent_kernelbench_problem"


@dataclasses.dataclass(frozen=True)
class Spec:
    """What one contestant's process imports and builds (plain data: it crosses as JSON)."""

    module: str  # the name it is imported under
    path: str  # the file
    search: list[str]  # folders put first on sys.path for its own imports (and only there)
    cls: str  # the class to construct
    label: str  # how messages name it: "the solution", "the baseline", ...
    seed: Optional[int] = None  # torch.manual_seed before construction (KernelBench)
    strict: bool = True  # weights must match every key (decode tasks) or only where they fit (KernelBench)
    # Put in eval mode once built (decode tasks). KernelBench never calls .eval(): its models
    # run in the training mode a module starts in (BatchNorm on the batch's statistics).
    eval_mode: bool = True

    def request(self, init: dict, weights: Optional[str]) -> dict:
        """The server's load request: ``init`` the tagged constructor arguments, ``weights``
        the file of the reference's weights (None: none)."""
        return {"op": "load", **dataclasses.asdict(self), "init": init, "weights": weights}

    @classmethod
    def of(cls, request: dict) -> Spec:
        return cls(**{f.name: request[f.name] for f in dataclasses.fields(cls) if f.name in request})


def mega_spec(who: str, task_dir: Path, solution: Optional[Path], has_baseline: bool, model_class: str) -> Spec:
    """A decode task's contestant: ``who`` is "solution" (the solution's file, or in an A/A
    run, ``solution`` None, the task's baseline) or "baseline" (the task's baseline.py, or its
    reference.py where the folder has none); each defines ``model_class``, the kind's."""
    if who == "solution" and solution is not None:
        return Spec("solution", str(solution), [str(solution.parent)], model_class, "the solution")
    path = task_dir / ("baseline.py" if has_baseline else "reference.py")
    return Spec(path.stem, str(path), [str(task_dir)], model_class, f"the {path.stem}")


def kernelbench_spec(
    who: str, task_file: Path, solution: Optional[Path], model_class: str, eval_mode: bool = False
) -> Spec:
    """A KernelBench file's contestant: the solution's ``model_class`` (the kind's: ModelNew),
    or the file's own Model; in the training mode KernelBench leaves them in unless
    ``eval_mode``."""
    if who == "solution" and solution is not None:
        return Spec(
            "solution",
            str(solution),
            [str(solution.parent)],
            model_class,
            "the solution",
            seed=KERNELBENCH_SEED,
            strict=False,
            eval_mode=eval_mode,
        )
    return Spec(
        KERNELBENCH_MODULE,
        str(task_file),
        [str(task_file.parent)],
        KERNELBENCH_TASK_CLASS,
        "the task",
        seed=KERNELBENCH_SEED,
        strict=False,
        eval_mode=eval_mode,
    )


def _run(what: str, fn: Callable, *args: Any) -> Any:
    return fn(*args)


def import_file(name: str, path: Path, search: list[str]) -> Any:
    """Import ``path`` as module ``name``, with ``search`` first on sys.path for its imports."""
    for folder in reversed(search):
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def build(
    spec: Spec, init: list, device: torch.device, weights: Any = None, guard: Callable = _run, module: Any = None
) -> Any:
    """Import ``spec``'s file (unless ``module`` is it, imported already), construct its class
    from ``init``, move it to ``device``, load ``weights`` (a state dict, or the path of a file
    of one) and put it in eval mode where ``spec`` says so.

    ``guard(what, fn, *args)`` runs each stage: the contestant's server attributes whatever
    a stage raises to the code it built (see solution_server.solution_call)."""
    if module is None:
        module = guard(f"importing {spec.label}", import_file, spec.module, Path(spec.path), list(spec.search))
    cls = getattr(module, spec.cls, None)
    if cls is None:
        raise LookupError(f"{spec.label} defines no class {spec.cls}")
    if spec.seed is not None:
        torch.manual_seed(int(spec.seed))
    model = guard(f"{spec.label} {spec.cls}(...)", lambda: cls(*init))
    model = guard(f"{spec.label} .to(device)", lambda: model.to(device))
    if isinstance(weights, (str, Path)):
        weights = torch.load(weights, map_location=device, weights_only=True, mmap=True)
    if weights is not None:
        if spec.strict:
            guard(f"{spec.label} load_state_dict (strict)", model.load_state_dict, weights, True)
        else:  # KernelBench: the reference's values where the parameters are the same
            own = model.state_dict()
            if own.keys() == weights.keys() and all(own[k].shape == v.shape for k, v in weights.items()):
                guard(f"{spec.label} load_state_dict", model.load_state_dict, weights)
    return guard(f"{spec.label} .eval()", model.eval) if spec.eval_mode else model
