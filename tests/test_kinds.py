"""A task kind is a plugin: the agent side's registry (kagent.tasks.KINDS) and the harness's
(kagent.sandbox.harness.kinds) name the same kinds, and each kind's facts come from its object."""

from __future__ import annotations

from pathlib import Path

import pytest

from kagent.sandbox.harness import kinds as harness_kinds
from kagent.sandbox.harness.base import EvaluationBase
from kagent.tasks import KINDS, TaskRef, builtin_tasks, resolve_task

REPO = Path(__file__).resolve().parents[1]


def test_the_harness_grades_every_kind_the_agent_side_knows():
    assert list(harness_kinds.KINDS) == list(KINDS)
    for kind in harness_kinds.KINDS.values():
        assert issubclass(kind.evaluation_class(), EvaluationBase)


def test_a_path_is_read_by_the_kind_that_claims_it(tmp_path: Path):
    task = builtin_tasks()[0]
    assert task.kind == "mega" and task.root == task.path and task.prompt
    problem = tmp_path / "relu.py"
    problem.write_text('"""A relu."""\nclass Model: ...\ndef get_inputs(): ...\ndef get_init_inputs(): ...\n')
    file_task = resolve_task(str(problem))
    assert (file_task.kind, file_task.root, file_task.files()) == ("kernelbench", tmp_path, [problem])
    assert file_task.forbidden_imports == ["relu"]  # the task's own module
    assert file_task.prompt == problem.read_text()


def test_an_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="no task kind 'triton'"):
        TaskRef(name="x", kind="triton", path=REPO)
