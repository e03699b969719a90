"""What the harness is told of a task's kind: a ``Kind``, read from the job (job.py's ``Job``,
the instruments' ``ChildJob``), which the agent side writes from the kind's own object
(kagent.tasks.kind.TaskKind.harness). The harness keeps no list of kinds: a kind's evaluation
is whichever module of this package its job names.

A kind names the module of this package that evaluates it, imported only when a job of that
kind runs (nothing here imports torch: the referee starts the evaluation's other processes
before it does, spawn.py), the class its solutions define, whether its secret cases are
computed by reference workers beside the referee, and how the instruments (sandbox/instruments:
profile, stages, dump, compile) build one step of it. So a new kind is its module here, beside
its module and line on the agent side (kagent.tasks).
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

    @classmethod
    def read(cls, fields: Any) -> Kind:
        """The kind a job's ``kind`` object states; a ValueError where it states another shape."""
        if not isinstance(fields, dict):
            raise ValueError(f"a job's kind is an object, not {type(fields).__name__}")
        try:
            return cls(**fields)
        except TypeError as err:
            raise ValueError(f"not a kind: {err}") from err

    def evaluation_class(self) -> Any:
        return _named(self.evaluation)

    def instrument_steps(self) -> Any:
        return _named(self.steps)()


def _named(qualified: str) -> Any:
    module, _, name = qualified.rpartition(".")
    return getattr(importlib.import_module(f"{__package__}.{module}"), name)
