"""Tasks kagent can grade: its built-in ones (folders beside this file) and the user's own.

A task argument is a built-in name, a KernelBench-Mega-style problem folder (reference.py,
shapes.py, problem.yaml, PROMPT.txt, optional baseline.py), or a KernelBench-style single
file (class Model, get_inputs(), get_init_inputs(); solutions define ModelNew).

A folder is read in kagent's own layout or in the public KernelBench-Mega board's, as
published: settings kagent keeps under its own keys (``correctness``, ``forbidden_imports``)
the board keeps elsewhere (``tolerance.cos_sim``, a ``forbidden`` list of source strings,
``GRADING_SEEDS`` in shapes.py); the harness (sandbox/harness/mega.py) reads both.
"""

from __future__ import annotations

import ast
import hashlib
import re
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, Field

from kagent.core.errors import KagentError

BUILTIN_DIR = Path(__file__).resolve().parent
MEGA_REQUIRED_FILES = ("reference.py", "shapes.py")
# The one kind of problem folder kagent grades: a stateful decode step. Its reference.py
# builds the config from a shape, draws the inputs from a seed and defines the model whose
# step(hidden, state) is the task; its shapes.py lists the shapes.
MEGA_REFERENCE_NAMES = ("build_config", "init_state", "init_token", "Model")
MEGA_SHAPES_NAMES = ("SHAPES",)
MEGA_LAYOUT = (
    "reference.py defining build_config(shape), init_state(cfg, context_len, seed), "
    "init_token(cfg, seed) and Model(cfg) with step(hidden, state); shapes.py defining SHAPES "
    "(dicts with context_len and steps)"
)
# What a KernelBench problem file defines.
KERNELBENCH_NAMES = ("Model", "get_inputs", "get_init_inputs")
# An entry of the public board's `forbidden` list that is an import ("import gym").
_IMPORT_STATEMENT = re.compile(r"^(?:import|from)\s+([A-Za-z_][\w.]*)$")
# One that is a package's name ("vllm", "auto_gptq").
_PACKAGE_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")


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
        """kagent's own list, and the modules the public board's `forbidden` list names; for a
        KernelBench file, its own module (the solution's folder lies beside the task's, and
        the file is the grader's reference: never the solution's code at run time)."""
        board = self.problem.get("forbidden")
        named = [m for entry in board if (m := forbidden_module(entry))] if isinstance(board, list) else []
        own = [self.path.stem] if self.kind == "kernelbench" and self.path.stem.isidentifier() else []
        return list(dict.fromkeys([*self.problem.get("forbidden_imports", []), *named, *own]))

    @property
    def wants_single_launch(self) -> bool:
        """The task's goal is one kernel launch per step (problem.yaml's ``megakernel: true``)."""
        return self.problem.get("megakernel") is True

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


def forbidden_module(entry: object) -> str | None:
    """The module an entry of the public board's `forbidden` list names, or None.

    The board rejects a solution whose source merely contains one of those strings; kagent
    forbids imports, of whole top-level packages, instead. So an entry becomes a rule only
    where it names a package ("import gym", "vllm"): a dotted entry is a path the board
    forbids ("cuda.graph", that is torch.cuda.graph), and forbidding its package would forbid
    far more than the board does (there, the CUDA Python bindings). The torch APIs the board
    lists (torch.compile, CUDA graphs) are kagent's own rules anyway.
    """
    if not isinstance(entry, str):
        return None
    entry = entry.strip()
    statement = _IMPORT_STATEMENT.match(entry)
    if statement:
        return statement.group(1)
    return entry if _PACKAGE_NAME.match(entry) else None


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


def _top_level_names(path: Path) -> dict[str, bool]:
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


def _check_mega_layout(folder: Path) -> None:
    """One clear error for a folder of another kind (a training loop, a forward pass), before
    any of it runs."""
    for file, wanted in (("reference.py", MEGA_REFERENCE_NAMES), ("shapes.py", MEGA_SHAPES_NAMES)):
        names = _top_level_names(folder / file)
        missing = [n for n in wanted if n not in names]
        if missing:
            # What it does define says what kind of task it is (train(): a training loop).
            own = [n for n, defined in names.items() if defined and not n.startswith("_")]
            what = f" (its functions and classes: {', '.join(own)})" if own else ""
            raise KagentError(
                f"{folder} is a problem folder of a kind kagent does not grade: its {file} defines "
                f"no {', '.join(missing)}{what}",
                hint=f"kagent grades a stateful decode step: {MEGA_LAYOUT}",
            )


def _kernelbench_files(folder: Path) -> list[Path]:
    """The KernelBench problem files a folder holds (Model, get_inputs and get_init_inputs)."""
    found = []
    for path in sorted(folder.glob("*.py")):
        try:
            names = _top_level_names(path)
        except KagentError:
            continue
        if all(names.get(n) for n in KERNELBENCH_NAMES):
            found.append(path)
    return found


def _mega(folder: Path, builtin: bool) -> TaskRef:
    missing = [f for f in MEGA_REQUIRED_FILES if not (folder / f).is_file()]
    if missing:
        problems = _kernelbench_files(folder)
        if problems:
            raise KagentError(
                f"{folder} is a folder of {len(problems)} KernelBench problem files ({problems[0].name}, ...), "
                "not one problem",
                hint=f"grade one with `kagent eval {problems[0]} SOLUTION`, or run an agent on each with "
                f"`kagent sweep {folder}`",
            )
        raise KagentError(f"{folder} is not a KernelBench-Mega problem folder: it has no {', '.join(missing)}")
    _check_mega_layout(folder)
    problem = _read_problem(folder)
    # The public board describes a problem by its display_name.
    description = problem.get("description") or problem.get("display_name") or ""
    return TaskRef(
        name=problem.get("name") or folder.name,
        kind="mega",
        path=folder.resolve(),
        builtin=builtin,
        description=str(description).strip(),
        problem=problem,
    )


def _kernelbench(file: Path) -> TaskRef:
    try:
        tree = ast.parse(file.read_text(encoding="utf-8"), filename=str(file))
    except (OSError, SyntaxError, UnicodeDecodeError) as err:
        raise KagentError(f"cannot read {file} as Python: {err}") from err
    defined = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    missing = [n for n in KERNELBENCH_NAMES if n not in defined]
    if missing:
        raise KagentError(f"{file} is not a KernelBench problem file: it defines no {', '.join(missing)}")
    model = next(n for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef)) and n.name == "Model")
    doc = ast.get_docstring(tree) or ast.get_docstring(model)
    return TaskRef(
        name=file.stem,
        kind="kernelbench",
        path=file.resolve(),
        description=(doc or "KernelBench problem").strip().splitlines()[0],
    )


def builtin_tasks() -> list[TaskRef]:
    return [
        _mega(d, builtin=True) for d in sorted(BUILTIN_DIR.iterdir()) if d.is_dir() and (d / "reference.py").is_file()
    ]


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
    raise KagentError(
        f"no task named {arg!r}",
        hint=f"built-in tasks: {', '.join(sorted(names))}; "
        "or give the path of a problem folder or of a KernelBench .py file",
    )
