"""A task kind is a plugin: its object (kagent.tasks.KINDS) owns every fact of it, those the
harness is told included (TaskKind.harness, carried by each job: the harness keeps no list of
kinds), and no other module spells a kind's name."""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path

import pytest

from kagent.sandbox.harness.base import EvaluationBase
from kagent.sandbox.harness.kinds import Kind
from kagent.sandbox.instruments.job import ChildJob
from kagent.tasks import KINDS, TaskRef, builtin_tasks, resolve_task

REPO = Path(__file__).resolve().parents[1]


def harness_kinds() -> list[Kind]:
    """Each kind as its jobs tell the harness of it."""
    return [Kind.read(kind.harness()) for kind in KINDS.values()]


def test_the_harness_grades_every_kind_the_agent_side_knows():
    """Each kind names an evaluation of the harness's, under its own name."""
    assert [kind.name for kind in harness_kinds()] == list(KINDS)
    for kind in harness_kinds():
        assert issubclass(kind.evaluation_class(), EvaluationBase), kind
        assert kind.model_class.isidentifier() and isinstance(kind.has_reference_workers, bool), kind


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


def test_the_instruments_build_every_kind_from_the_steps_it_names():
    for kind in harness_kinds():
        steps = kind.instrument_steps()
        for method in ("solution_step", "reference_step", "bytes_floor"):
            assert callable(getattr(steps, method, None)), (kind.name, method)


# Where a kind's name may be spelled: the modules that are the kinds (the registry,
# tasks/__init__.py, names none: it lists their objects).
REGISTRY_MODULES = {
    "tasks/mega.py",
    "tasks/kernelbench.py",
}


def test_no_kind_is_named_outside_its_own_module():
    """No ``kind == "mega"`` anywhere: what differs by kind is asked of the kind's object."""
    found = []
    product = [p for folder in ("agent", "core", "prompts", "sandbox", "tools") for p in (REPO / folder).rglob("*.py")]
    for path in [*product, *(REPO / "tasks").glob("*.py")]:
        name = str(path.relative_to(REPO))
        if name in REGISTRY_MODULES:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in KINDS:
                found.append(f"{name}:{node.lineno} {node.value!r}")
    assert not found, found


def test_an_instrument_refuses_a_job_of_another_version(tmp_path: Path):
    kind = Kind.read(KINDS["mega"].harness())
    job = ChildJob(kind=kind, task="t", solution=None, scale="smoke", device="cpu", cache_dir=None, result="r")
    job.write(tmp_path / "job.json")
    assert ChildJob.read(tmp_path / "job.json") == job
    (tmp_path / "old.json").write_text(json.dumps({**dataclasses.asdict(job), "version": 0}))
    with pytest.raises(ValueError, match="version 0"):
        ChildJob.read(tmp_path / "old.json")
    (tmp_path / "named.json").write_text(json.dumps({**dataclasses.asdict(job), "kind": "mega"}))
    with pytest.raises(ValueError, match="kind is an object"):  # a kind by its name alone, as version 1 had it
        ChildJob.read(tmp_path / "named.json")


def test_the_harness_refuses_a_job_of_another_protocol(tmp_path: Path):
    from kagent.sandbox.harness.job import Job

    job = Job(
        kind=Kind.read(KINDS["kernelbench"].harness()),
        mode="check",
        task="t.py",
        solution="s.py",
        scale="smoke",
        device="cpu",
        timeout_s=60.0,
        hang_after_s=60.0,
        hidden_seeds=2,
        cache_dir=None,
        cache_staging=None,
        cache_identity=None,
    )
    job.write(tmp_path / "job.json")
    assert Job.read(tmp_path / "job.json") == job
    (tmp_path / "old.json").write_text(json.dumps({**dataclasses.asdict(job), "protocol": 0}))
    with pytest.raises(ValueError, match="job protocol 0"):
        Job.read(tmp_path / "old.json")
    (tmp_path / "dead.json").write_text(json.dumps({**dataclasses.asdict(job), "timing_seed": 1}))
    with pytest.raises(ValueError, match="not a job"):  # a key nothing reads is an error, not ignored
        Job.read(tmp_path / "dead.json")
    kind = {**dataclasses.asdict(job)["kind"], "solution_class": "ModelNew"}
    (tmp_path / "odd_kind.json").write_text(json.dumps({**dataclasses.asdict(job), "kind": kind}))
    with pytest.raises(ValueError, match="not a kind"):
        Job.read(tmp_path / "odd_kind.json")
