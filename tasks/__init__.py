"""Tasks kagent can grade: its built-in ones (folders beside this file) and the user's own.

A task argument is a built-in name, a KernelBench-Mega-style problem folder (reference.py,
shapes.py, problem.yaml, PROMPT.txt, optional baseline.py), or a KernelBench-style single
file (class Model, get_inputs(), get_init_inputs(); solutions define ModelNew).
"""
from __future__ import annotations

import ast
import hashlib
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, Field

from kagent.agent.errors import KagentError

BUILTIN_DIR = Path(__file__).resolve().parent
MEGA_REQUIRED_FILES = ("reference.py", "shapes.py")


class TaskRef(BaseModel):
    """Where a task lives and how to grade it."""

    name: str = Field(description="Built-in name, or the folder or file name of a user's task")
    kind: Literal["mega", "kernelbench"] = Field(description="mega: stateful step(); kernelbench: forward()")
    path: Path = Field(description="The task folder (mega) or file (kernelbench)")
    builtin: bool = False
    description: str = ""
    problem: dict = Field(default_factory=dict, description="problem.yaml, for mega folders")

    @property
    def forbidden_imports(self) -> list[str]:
        return list(self.problem.get("forbidden_imports", []))

    @property
    def prompt(self) -> str:
        prompt_file = self.path / "PROMPT.txt" if self.kind == "mega" else None
        if prompt_file and prompt_file.exists():
            return prompt_file.read_text()
        return self.path.read_text() if self.kind == "kernelbench" else ""

    def files(self) -> list[Path]:
        """The files that make up the task, all of which the grading copy must hold unchanged."""
        if self.kind == "kernelbench":
            return [self.path]
        return sorted(p for p in self.path.iterdir() if p.is_file() and not p.name.startswith("."))

    def sha256(self) -> str:
        h = hashlib.sha256()
        for f in self.files():
            h.update(f.name.encode() + b"\0" + f.read_bytes())
        return h.hexdigest()


def _read_problem(folder: Path) -> dict:
    path = folder / "problem.yaml"
    if not path.exists():
        return {}
    try:
        problem = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise KagentError(f"{path} is not valid YAML: {err}") from err
    if not isinstance(problem, dict):
        raise KagentError(f"{path} must hold a mapping, not {type(problem).__name__}")
    return problem


def _mega(folder: Path, builtin: bool) -> TaskRef:
    missing = [f for f in MEGA_REQUIRED_FILES if not (folder / f).is_file()]
    if missing:
        raise KagentError(f"{folder} is not a KernelBench-Mega problem folder: it has no {', '.join(missing)}")
    problem = _read_problem(folder)
    return TaskRef(name=problem.get("name") or folder.name, kind="mega", path=folder.resolve(), builtin=builtin,
                   description=str(problem.get("description", "")).strip(), problem=problem)


def _kernelbench(file: Path) -> TaskRef:
    try:
        tree = ast.parse(file.read_text(encoding="utf-8"), filename=str(file))
    except (OSError, SyntaxError, UnicodeDecodeError) as err:
        raise KagentError(f"cannot read {file} as Python: {err}") from err
    defined = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if n not in defined]
    if missing:
        raise KagentError(f"{file} is not a KernelBench problem file: it defines no {', '.join(missing)}")
    doc = ast.get_docstring(tree) or ast.get_docstring(next(n for n in tree.body if getattr(n, "name", "") == "Model"))
    return TaskRef(name=file.stem, kind="kernelbench", path=file.resolve(),
                   description=(doc or "KernelBench problem").strip().splitlines()[0])


def builtin_tasks() -> list[TaskRef]:
    return [_mega(d, builtin=True) for d in sorted(BUILTIN_DIR.iterdir())
            if d.is_dir() and (d / "reference.py").is_file()]


def resolve_task(arg: str) -> TaskRef:
    """A built-in name or a path, as the user typed it."""
    names = {t.path.name: t for t in builtin_tasks()}
    if arg in names:
        return names[arg]
    path = Path(arg).expanduser()
    if path.is_dir():
        return _mega(path, builtin=False)
    if path.is_file():
        if path.suffix != ".py":
            raise KagentError(f"{path} is neither a problem folder nor a Python problem file")
        return _kernelbench(path)
    raise KagentError(f"no task named {arg!r}", hint=f"built-in tasks: {', '.join(sorted(names))}; "
                      "or give the path of a problem folder or of a KernelBench .py file")
