"""Every figure the megakernel playbook (prompts/playbook.md) states is one we measured, in the
lab notebook's entry on the building blocks, or is one of the few derived from those."""

from __future__ import annotations

import re
from pathlib import Path

from kagent import prompts

from lab_isolation import isolated_env  # noqa: F401  (autouse)

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK_DAY = REPO / "lab" / "notebook" / "2026-12-01.md"
SECTION = "## Megakernel building blocks and the stage instruments — H200, 2026-12-01"
FIGURE = re.compile(r"(\d[\d,]*(?:\.\d+)?) (µs|ns|GB/s)")


def measured_section() -> str:
    text = NOTEBOOK_DAY.read_text()
    start = text.index(SECTION)
    return " ".join(text[start : text.index("\n## ", start + 1)].split())  # a figure may wrap a line


def test_every_measured_figure_of_the_playbook_is_in_measurements():
    measured = measured_section()
    figures = FIGURE.findall(prompts.load("playbook.md"))
    # Derived, not measured: a barrier budget of 20 barriers at 1-1.5 µs each, against the floor
    # (the task section below checks that one).
    derived = {("1.5", "µs"), ("30", "µs"), ("60", "µs")}
    assert len(figures) >= 12
    for number, unit in figures:
        if (number, unit) not in derived:
            assert f"{number} {unit}" in measured, f"{number} {unit} is not in the notebook's section"


def test_the_task_section_s_measured_inputs_are_in_the_notebook():
    """The copy bandwidth and the barrier costs that prompts/tasks/02_kimi_linear_decode.md
    derives its floor and barrier budget from (tests/test_playbook.py checks the derivation)."""
    measured = measured_section()
    assert "4044 GB/s" in measured and "0.97 µs" in measured and "1.40 µs" in measured
