"""What a run guards against: a hosted model missing from the price table, whose cost reads $0
so that --max-cost cannot stop the run (the user is told at the start and in the result), and a
call that changes the task's files (they are put back, and the model is told)."""

from __future__ import annotations

import json

import pytest

from kagent.agent.lifecycle import runs
from kagent.agent.lifecycle.runs import start_run
from kagent.agent.loop.models.scripted import ScriptedModel, parse_script
from kagent.agent.settings import Budget, RunSettings
from kagent.agent.storage.trace import RunStarted, ToolFinished, read_trace
from kagent.tools import all_tools
from kagent.tools.base import Args, BaseTool, ToolContext, ToolFacts, ToolOutcome

FINISH = {"tool_calls": [{"name": "finish", "arguments": {"summary": "-"}}], "usage": {"input_tokens": 1000}}


def run_with(tmp_path, spec: str, *turns: dict):
    warned: list[str] = []
    model = ScriptedModel(parse_script([*turns, FINISH]), name=spec)
    settings = RunSettings(
        task="02_kimi_linear_decode",
        model=spec,
        budget=Budget(wall_s=600, max_cost_usd=1.0),
        device="cpu",
        scale="smoke",
        runs_root=tmp_path / "runs",
    )
    run_dir, report = start_run(settings, model=model, warn=warned.append)
    return run_dir, report, warned


@pytest.mark.slow
def test_a_model_without_a_price_is_said_at_the_start_and_in_the_result(tmp_path):
    run_dir, report, warned = run_with(tmp_path, "openai:brand-new-model")
    warning, assumed = warned
    assert "openai:brand-new-model has no price" in warning and "--max-cost cannot stop the run" in warning
    # Nor are its limits known: what kagent assumed of them is said too.
    assert assumed.startswith("kagent does not know openai:brand-new-model: it assumes an output cap of")
    assert report.warnings == warned and report.cost_usd == 0 and report.usage.input_tokens == 1000
    assert f"- warning: {warning}" in (run_dir / "report.md").read_text()
    assert json.loads((run_dir / "report.json").read_text())["warnings"] == warned
    started = next(e for e in read_trace(run_dir / "trace.jsonl").events if isinstance(e, RunStarted))
    assert started.warnings == warned


@pytest.mark.slow
def test_a_priced_or_free_model_gets_no_warning(tmp_path):
    for spec in ("openai:gpt-5", "scripted:session.yaml"):
        _, report, warned = run_with(tmp_path / spec.split(":")[0], spec)
        assert warned == [] and report.warnings == []


class Scribble(BaseTool):
    """What a command can do where the jail cannot mount task/ read-only, or as root."""

    name = "scribble"
    description = "Write into the task's files."
    Arguments = Args
    facts = ToolFacts(changes_files=True)

    def execute(self, args: Args, ctx: ToolContext) -> ToolOutcome:
        reference = ctx.workspace / "task" / "reference.py"
        reference.chmod(0o644)
        reference.write_text("def broken(): ...\n")
        (ctx.workspace / "task" / "notes.txt").write_text("mine now\n")
        return ToolOutcome(content="scribbled")


@pytest.mark.slow
def test_a_call_that_changes_the_task_files_has_them_put_back(tmp_path, monkeypatch, kimi):
    monkeypatch.setattr(runs, "all_tools", lambda: [*all_tools(), Scribble()])
    run_dir, _, _ = run_with(tmp_path, "scripted:s.yaml", {"tool_calls": [{"name": "scribble", "arguments": {}}]})
    finished = next(
        e for e in read_trace(run_dir / "trace.jsonl").events if isinstance(e, ToolFinished) and e.name == "scribble"
    )
    assert finished.data["task_files_put_back"] == ["task/notes.txt", "task/reference.py"]
    assert "The task's files are read-only; put back as the task gave them: task/notes.txt" in finished.content
    task = run_dir / "workspace" / "task"
    assert (task / "reference.py").read_text() == (kimi.path / "reference.py").read_text()
    assert not (task / "notes.txt").exists()
