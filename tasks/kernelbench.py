"""The KernelBench kind: a single Python file defining class Model, get_inputs() and
get_init_inputs(); its solutions define ModelNew. Graded by sandbox/harness/kernelbench.py."""

from __future__ import annotations

import ast
from pathlib import Path

from kagent.core.errors import KagentError
from kagent.tasks.kind import TaskFields, TaskKind, top_level_names

# What a KernelBench problem file defines.
KERNELBENCH_NAMES = ("Model", "get_inputs", "get_init_inputs")


class KernelBench(TaskKind):
    name = "kernelbench"
    summary = "forward()"
    # A file's forward can be slow, and its outputs, all held at once, large: 2.
    hidden_seeds = 2
    step_name = "call"
    rate_unit = "calls/s"
    has_scales = False
    harness_evaluation = "kernelbench.KernelBenchEvaluation"
    # A solution adds ModelNew beside the file's Model, as KernelBench's own do.
    model_class = "ModelNew"
    # The referee computes its expected outputs itself, from the file's own Model.
    has_reference_workers = False
    instrument_steps = "kernelbench.KernelBenchSteps"

    def claims(self, path: Path) -> bool:
        return path.is_file()

    def looks_like(self, path: Path) -> bool:
        return path.is_file() and path.suffix == ".py"

    def read(self, path: Path) -> TaskFields:
        if path.suffix != ".py":
            raise KagentError(f"{path} is neither a problem folder nor a Python problem file")
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        except (OSError, SyntaxError, UnicodeDecodeError) as err:
            raise KagentError(f"cannot read {path} as Python: {err}") from err
        defined = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
        missing = [n for n in KERNELBENCH_NAMES if n not in defined]
        if missing:
            raise KagentError(f"{path} is not a KernelBench problem file: it defines no {', '.join(missing)}")
        model = next(n for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef)) and n.name == "Model")
        doc = ast.get_docstring(tree) or ast.get_docstring(model)
        return TaskFields(name=path.stem, description=(doc or "KernelBench problem").strip().splitlines()[0])

    def root(self, path: Path) -> Path:
        return path.parent

    def files(self, path: Path) -> list[Path]:
        return [path]

    def prompt(self, path: Path) -> str:
        return path.read_text()

    def own_forbidden_imports(self, path: Path) -> list[str]:
        """Its own module: the solution's folder lies beside the task's, and the file is the
        grader's reference, never the solution's code at run time."""
        return [path.stem] if path.stem.isidentifier() else []


def problem_files(folder: Path) -> list[Path]:
    """The KernelBench problem files a folder holds (Model, get_inputs and get_init_inputs)."""
    found = []
    for path in sorted(folder.glob("*.py")):
        try:
            names = top_level_names(path)
        except KagentError:
            continue
        if all(names.get(n) for n in KERNELBENCH_NAMES):
            found.append(path)
    return found
