"""The KernelBench-Mega kind: a problem folder of a stateful decode step (reference.py,
shapes.py, problem.yaml, PROMPT.txt, optional baseline.py). Graded by sandbox/harness/mega.py.

A folder is read in kagent's own layout or in the public KernelBench-Mega board's, as
published: settings kagent keeps under its own keys (``correctness``, ``forbidden_imports``)
the board keeps elsewhere (``tolerance.cos_sim``, a ``forbidden`` list of source strings,
``GRADING_SEEDS`` in shapes.py); the harness reads both.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from kagent.core.errors import KagentError
from kagent.tasks.kernelbench import problem_files
from kagent.tasks.kind import TaskFields, TaskKind, top_level_names

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


class Mega(TaskKind):
    name = "mega"
    summary = "stateful step()"
    # A decode step is cheap and its expected values are small, so many: a solution wrong on 1
    # input in 10 passes 48 of them with probability 0.9**48, about 0.6% (a run's final
    # re-verification uses twice as many: 0.9**96, about 4e-5). More would cost the warm
    # evaluation's time budget at full scale: each secret case is a reference step (about 30 ms
    # on an H200), and about two draws in three are drawn again at routing near-ties.
    hidden_seeds = 48
    step_name = "token"
    rate_unit = "tok/s"
    has_scales = True
    harness_evaluation = "mega.MegaEvaluation"
    # A solution replaces the reference's Model (reference.py and baseline.py define it too).
    model_class = "Model"
    has_reference_workers = True
    instrument_steps = "decode_task.DecodeSteps"

    def claims(self, path: Path) -> bool:
        return path.is_dir()

    def looks_like(self, path: Path) -> bool:
        return path.is_dir() and (path / "reference.py").is_file()  # every problem folder has one

    def read(self, path: Path) -> TaskFields:
        missing = [f for f in MEGA_REQUIRED_FILES if not (path / f).is_file()]
        if missing:
            problems = problem_files(path)
            if problems:
                raise KagentError(
                    f"{path} is a folder of {len(problems)} KernelBench problem files ({problems[0].name}, ...), "
                    "not one problem",
                    hint=f"grade one with `kagent eval {problems[0]} SOLUTION`, or run an agent on each with "
                    f"`kagent sweep {path}`",
                )
            raise KagentError(f"{path} is not a KernelBench-Mega problem folder: it has no {', '.join(missing)}")
        _check_layout(path)
        problem = _read_problem(path)
        # The public board describes a problem by its display_name.
        description = problem.get("description") or problem.get("display_name") or ""
        return TaskFields(name=problem.get("name") or path.name, description=str(description).strip(), problem=problem)

    def root(self, path: Path) -> Path:
        return path

    def files(self, path: Path) -> list[Path]:
        return sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))

    def prompt(self, path: Path) -> str:
        prompt_file = path / "PROMPT.txt"
        return prompt_file.read_text() if prompt_file.exists() else ""


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


def _check_layout(folder: Path) -> None:
    """One clear error for a folder of another kind (a training loop, a forward pass), before
    any of it runs."""
    for file, wanted in (("reference.py", MEGA_REFERENCE_NAMES), ("shapes.py", MEGA_SHAPES_NAMES)):
        names = top_level_names(folder / file)
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
