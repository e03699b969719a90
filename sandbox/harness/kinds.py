"""Each kind of task the harness grades, by the name the agent side's registry gives it
(kagent.tasks.KINDS; a test holds the two to the same names).

A kind names the module of this package that evaluates it, imported only when a job of that
kind runs (nothing here imports torch: the referee starts the evaluation's other processes
before it does, spawn.py), the class its solutions define, whether its secret cases are
computed by reference workers beside the referee, and how the instruments (sandbox/instruments:
profile, stages, dump, compile) build one step of it. So a new kind is one module here and one
line below, beside its module and line on the agent side (kagent.tasks).
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from typing import Any, Optional

# What a kind's instrument steps build: (the model, a no-argument callable running one step of
# it, the context it uses).
Step = tuple[Any, Callable[[], Any], Optional[int]]


@dataclasses.dataclass(frozen=True)
class Kind:
    name: str
    # "module.Class" of this package: the evaluation of a job of this kind.
    evaluation: str
    # The class a solution defines.
    model_class: str
    # Whether reference workers compute its secret cases (spawn.reference_workers).
    has_reference_workers: bool
    # "module.Class" of this package: one step of the solution or the reference, and the bytes
    # floor, as the instruments build them.
    steps: str

    def evaluation_class(self) -> Any:
        return _named(self.evaluation)

    def instrument_steps(self) -> Any:
        return _named(self.steps)()


def _named(qualified: str) -> Any:
    module, _, name = qualified.rpartition(".")
    return getattr(importlib.import_module(f"{__package__}.{module}"), name)


# The class a solution of each kind defines, as building.py builds it: a decode task's solution
# replaces the reference's Model, a KernelBench file's adds ModelNew beside the file's Model.
MEGA_SOLUTION_CLASS = "Model"
KERNELBENCH_SOLUTION_CLASS = "ModelNew"

KINDS: dict[str, Kind] = {
    kind.name: kind
    for kind in (
        Kind(
            "mega",
            "mega.MegaEvaluation",
            MEGA_SOLUTION_CLASS,
            has_reference_workers=True,
            steps="decode_task.DecodeSteps",
        ),
        Kind(
            "kernelbench",
            "kernelbench.KernelBenchEvaluation",
            KERNELBENCH_SOLUTION_CLASS,
            has_reference_workers=False,
            steps="kernelbench.KernelBenchSteps",
        ),
    )
}
