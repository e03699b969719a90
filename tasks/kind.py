"""What a kind of task is, on the agent side: the base class every kind derives from.

A kind (a KernelBench-Mega problem folder, a KernelBench problem file) owns how a path is
recognised and read as a task, which files make the task up, the text the model is given, the
few facts the rest of kagent asks of it (how many seeds an evaluation draws at run time, what
one timed call is called), and what the harness is told of it: which of the harness's modules
evaluates it, the class its solutions define, whether reference workers compute its secret
cases, and how the instruments build one step of it. The harness imports nothing of kagent and
keeps no list of kinds: every job it reads states its kind whole (``harness``, read there as a
``kagent.sandbox.harness.kinds.Kind``). The registry, ``kagent.tasks.KINDS``, maps each kind's
name to its object; so a new kind is its module here, its line there, and the module of the
harness that evaluates it.
"""

from __future__ import annotations

import abc
import ast
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from kagent.core.errors import KagentError


@dataclass
class TaskFields:
    """What a kind reads from a task's files: the rest of its ``TaskRef``."""

    name: str
    description: str
    problem: dict = field(default_factory=dict)


class TaskKind(abc.ABC):
    """One kind of task. A subclass states its facts as class attributes and reads its files."""

    name: ClassVar[str]
    # What a solution of this kind implements, said in TaskRef.kind's description.
    summary: ClassVar[str]
    # Seeds an evaluation draws at run time, which no solution can know in advance.
    hidden_seeds: ClassVar[int]
    # What one timed call of a solution computes, and the rate of them the results show.
    step_name: ClassVar[str]
    rate_unit: ClassVar[str]
    # Whether the task has a smoke and a full scale (a KernelBench file has one size only).
    has_scales: ClassVar[bool]
    # What the harness is told of the kind (names in kagent.sandbox.harness, which this layer
    # may not import; tests/test_kinds.py holds them to what is there):
    # "module.Class" of the harness package: the evaluation of a task of this kind.
    harness_evaluation: ClassVar[str]
    # The class a solution of this kind defines.
    model_class: ClassVar[str]
    # Whether reference workers beside the referee compute its secret cases.
    has_reference_workers: ClassVar[bool]
    # "module.Class" of the harness package: how the instruments build one step of the
    # solution or of the reference, and its bytes floor.
    instrument_steps: ClassVar[str]

    @abc.abstractmethod
    def claims(self, path: Path) -> bool:
        """Whether ``path`` (an existing file or folder) is to be read as a task of this kind."""

    @abc.abstractmethod
    def looks_like(self, path: Path) -> bool:
        """Whether ``path`` is meant as a task of this kind, judged by its names alone: what a
        folder of tasks is searched for (reading one may still fail, and then says why)."""

    @abc.abstractmethod
    def read(self, path: Path) -> TaskFields:
        """The task at ``path``; a KagentError that says why when it is not one of this kind."""

    @abc.abstractmethod
    def root(self, path: Path) -> Path:
        """The folder that holds the task's files (an evaluation copies it)."""

    @abc.abstractmethod
    def files(self, path: Path) -> list[Path]:
        """The files that make up the task, all of which the grading copy must hold unchanged."""

    @abc.abstractmethod
    def prompt(self, path: Path) -> str:
        """The task's own text for the model ("" where it has none)."""

    def own_forbidden_imports(self, path: Path) -> list[str]:
        """Modules a solution of this task may not import because of where the task lies."""
        return []

    def harness(self) -> dict[str, Any]:
        """What the harness is told of this kind, as its jobs carry it (the fields of
        kagent.sandbox.harness.kinds.Kind)."""
        return {
            "name": self.name,
            "evaluation": self.harness_evaluation,
            "model_class": self.model_class,
            "has_reference_workers": self.has_reference_workers,
            "steps": self.instrument_steps,
        }


def top_level_names(path: Path) -> dict[str, bool]:
    """The names a Python file binds at its top level (functions, classes, assignments,
    imports), read without running it; True for those it defines with def or class."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, SyntaxError, UnicodeDecodeError) as err:
        raise KagentError(f"cannot read {path} as Python: {err}") from err
    names: dict[str, bool] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = True
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update({n.id: False for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)})
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update({alias.asname or alias.name.split(".")[0]: False for alias in node.names})
    return names
