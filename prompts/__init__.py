"""Prompt texts for the agent, kept as files beside this module.

The system prompt of a run is ``system.md``; a task that asks for a single launch per step
(``megakernel: true`` in its problem.yaml) adds the megakernel playbook (``playbook.md``), and a
task with a section of its own (``tasks/<task name>.md``) adds that. The whole text is recorded
in the run's trace and hashed there (RunStarted.system, prompt_sha256).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

PROMPTS_DIR = Path(__file__).resolve().parent
TASK_SECTIONS_DIR = PROMPTS_DIR / "tasks"


def load(name: str) -> str:
    """The prompt file ``name`` (e.g. "system.md")."""
    return (PROMPTS_DIR / name).read_text()


def system_prompt(task: Any) -> str:
    """The system prompt for ``task`` (a TaskRef): the general prompt, then the playbook where
    the task wants one launch per step, then the task's own section where there is one."""
    parts = [load("system.md")]
    if (task.problem or {}).get("megakernel"):
        parts.append(load("playbook.md"))
    section = TASK_SECTIONS_DIR / f"{task.name}.md"
    if section.is_file():
        parts.append(section.read_text())
    return "\n\n".join(part.strip() for part in parts) + "\n"
