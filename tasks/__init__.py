"""Tasks kagent can grade: its built-in ones (folders beside this file) and the user's own.

A task argument is a built-in name, or the path of a task of one of the kinds in ``KINDS``: a
KernelBench-Mega-style problem folder (tasks/mega.py) or a KernelBench-style single file
(tasks/kernelbench.py). A kind is a plugin: its module owns how its files are read and what
the harness is told of it (TaskKind.harness, which names the harness module that evaluates
it), and its line in ``KINDS`` makes kagent grade it.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, BaseModel, Field

from kagent.core.errors import KagentError
from kagent.tasks.kernelbench import KernelBench
from kagent.tasks.kind import TaskKind
from kagent.tasks.mega import Mega

BUILTIN_DIR = Path(__file__).resolve().parent
# Every kind of task kagent grades, by name; the order is the order paths are offered to them.
KINDS: dict[str, TaskKind] = {kind.name: kind for kind in (Mega(), KernelBench())}
# An entry of the public board's `forbidden` list that is an import ("import gym").
_IMPORT_STATEMENT = re.compile(r"^(?:import|from)\s+([A-Za-z_][\w.]*)$")
# One that is a package's name ("vllm", "auto_gptq").
_PACKAGE_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")


def _known_kind(name: str) -> str:
    if name not in KINDS:
        raise ValueError(f"no task kind {name!r}: kagent grades {', '.join(KINDS)}")
    return name


# A kind's name, as the trace and the results record it.
KindName = Annotated[str, AfterValidator(_known_kind)]


class TaskRef(BaseModel):
    """Where a task lives and how to grade it."""

    name: str = Field(description="Built-in name, or the folder or file name of a user's task")
    kind: KindName = Field(description="; ".join(f"{k.name}: {k.summary}" for k in KINDS.values()))
    path: Path = Field(description="The task folder (mega) or file (kernelbench)")
    builtin: bool = False
    description: str = ""
    problem: dict = Field(default_factory=dict, description="problem.yaml, for mega folders")

    @property
    def forbidden_imports(self) -> list[str]:
        """kagent's own list, the modules the public board's `forbidden` list names, and those
        the task's kind forbids (a KernelBench file's own module)."""
        board = self.problem.get("forbidden")
        named = [m for entry in board if (m := forbidden_module(entry))] if isinstance(board, list) else []
        own = self.kind_of.own_forbidden_imports(self.path)
        return list(dict.fromkeys([*self.problem.get("forbidden_imports", []), *named, *own]))

    @property
    def wants_single_launch(self) -> bool:
        """The task's goal is one kernel launch per step (problem.yaml's ``megakernel: true``)."""
        return self.problem.get("megakernel") is True

    @property
    def kind_of(self) -> TaskKind:
        """The task's kind (tasks/kind.py): what its files are and how it is graded."""
        return KINDS[self.kind]

    @property
    def prompt(self) -> str:
        return self.kind_of.prompt(self.path)

    @property
    def root(self) -> Path:
        """The folder that holds the task's files: ``path`` itself, or the folder of a file."""
        return self.kind_of.root(self.path)

    def files(self) -> list[Path]:
        """The files that make up the task, all of which the grading copy must hold unchanged."""
        return self.kind_of.files(self.path)

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


def _read(path: Path, builtin: bool = False) -> TaskRef | None:
    """The task at ``path``, read by the first kind that claims it; None where none does."""
    kind = next((k for k in KINDS.values() if path.exists() and k.claims(path)), None)
    if kind is None:
        return None
    return TaskRef(kind=kind.name, path=path.resolve(), builtin=builtin, **vars(kind.read(path)))


def looks_like_task(path: Path) -> bool:
    """Whether ``path`` is meant as a task of some kind, by its names alone (TaskKind.looks_like)."""
    return any(kind.looks_like(path) for kind in KINDS.values())


def builtin_tasks() -> list[TaskRef]:
    found = (_read(d, builtin=True) for d in sorted(BUILTIN_DIR.iterdir()) if (d / "reference.py").is_file())
    return [task for task in found if task is not None]


def resolve_task(arg: str) -> TaskRef:
    """A built-in name or a path, as the user typed it."""
    names = {t.path.name: t for t in builtin_tasks()}
    if arg in names:
        return names[arg]
    path = Path(arg).expanduser()
    task = _read(path)
    if task is not None:
        return task
    raise KagentError(
        f"no task named {arg!r}",
        hint=f"built-in tasks: {', '.join(sorted(names))}; "
        "or give the path of a problem folder or of a KernelBench .py file",
    )
