"""Each kind of task the harness grades, by the name the agent side's registry gives it
(kagent.tasks.KINDS; a test holds the two to the same names).

A kind names the module of this package that evaluates it, imported only when a job of that
kind runs (nothing here imports torch: the referee starts the evaluation's other processes
before it does, spawn.py), the class its solutions define, and whether its secret cases are
computed by reference workers beside the referee.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any


@dataclasses.dataclass(frozen=True)
class Kind:
    name: str
    # "module.Class" of this package: the evaluation of a job of this kind.
    evaluation: str
    # The class a solution defines.
    model_class: str
    # Whether reference workers compute its secret cases (spawn.reference_workers).
    has_reference_workers: bool

    def evaluation_class(self) -> Any:
        module, _, name = self.evaluation.rpartition(".")
        return getattr(importlib.import_module(f"{__package__}.{module}"), name)


# The class a solution of each kind defines, as building.py builds it: a decode task's solution
# replaces the reference's Model, a KernelBench file's adds ModelNew beside the file's Model.
MEGA_SOLUTION_CLASS = "Model"
KERNELBENCH_SOLUTION_CLASS = "ModelNew"

KINDS: dict[str, Kind] = {
    kind.name: kind
    for kind in (
        Kind("mega", "mega.MegaEvaluation", MEGA_SOLUTION_CLASS, has_reference_workers=True),
        Kind(
            "kernelbench", "kernelbench.KernelBenchEvaluation", KERNELBENCH_SOLUTION_CLASS, has_reference_workers=False
        ),
    )
}
