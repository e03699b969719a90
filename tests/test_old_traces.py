"""A run written by an earlier kagent (trace format 1, the config a free dict) still resumes,
rebuilt from its trace alone, and still replays (fixtures/README.md says how they were made)."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest
from rich.console import Console

from kagent.agent.cli.replay import replay
from kagent.agent.lifecycle.runs import resume_run
from kagent.agent.loop.models.scripted import ScriptedModel, load_script
from kagent.agent.settings import RunConfig
from kagent.agent.storage.trace import AttemptRecorded, RunStarted, read_trace

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SCRIPT = FIXTURES / "v1_script.json"


def unpack(name: str, folder: Path) -> Path:
    with tarfile.open(FIXTURES / name) as archive:
        archive.extractall(folder, filter="tar")
    (run_dir,) = folder.iterdir()
    return run_dir


def as_text(renderable: object) -> str:
    console = Console(record=True, width=200)
    console.print(renderable)
    return console.export_text()


def the_scripted_model() -> ScriptedModel:
    """The model the run was started with; its script's path was the machine's that made it."""
    return ScriptedModel(load_script(SCRIPT), name="scripted:v1_script.json")


# The runs were made when the task's Config had an `eps` field that the public board's lacks; a
# solution copied from that reference fails today with the field named.
OLD_CONTRACT = "Config has no field 'eps'"


def test_its_trace_reads_in_todays_terms(tmp_path):
    run_dir = unpack("v1_run_killed_after_finish.tar.gz", tmp_path)
    events = read_trace(run_dir / "trace.jsonl").events
    assert {event.v for event in events} == {1}
    started = next(e for e in events if isinstance(e, RunStarted))
    assert isinstance(started.config, RunConfig)  # the free dict of format 1, read typed
    assert started.config.scale == "smoke" and started.config.budget.wall_s == 1800
    assert started.config.max_repeated_failures == 5 and started.config.runs_root is None
    designs = [e.data["design"] for e in events if e.type == "tool_finished" and e.name == "design"]
    assert designs == [
        {"hypothesis": "a straight port of the reference", "predicted": "about 1x"},
        {"hypothesis": "the port, timed", "predicted": "1.0x at ctx 16"},
    ]
    assert [e.data["finished"] for e in events if e.type == "tool_finished" and e.name == "finish"] == [
        "the port, measured"
    ]


@pytest.mark.slow
def test_a_run_killed_after_a_design_resumes_and_its_next_attempt_carries_that_design(tmp_path):
    run_dir = unpack("v1_run_killed_after_a_design.tar.gz", tmp_path)
    _, report = resume_run(str(run_dir), model=the_scripted_model())
    assert report.turns == 5
    attempts = [e.attempt for e in read_trace(run_dir / "trace.jsonl").events if isinstance(e, AttemptRecorded)]
    # The run's solution is a copy of the reference of its day, which read `cfg.eps`; today's task
    # has the public board's Config, without that field (OLD_CONTRACT), so the attempt made after
    # the resume fails to run, and no attempt is left to be the result.
    assert [(a["number"], a["kind"], a["hypothesis"], a["verdict"]) for a in attempts] == [
        (1, "check", "a straight port of the reference", "pass"),
        (2, "benchmark", "the port, timed", "error"),
    ]
    assert report.status == "no_result"


@pytest.mark.slow
def test_a_run_killed_after_finish_finishes_without_asking_the_model_again(tmp_path):
    run_dir = unpack("v1_run_killed_after_finish.tar.gz", tmp_path)
    model = the_scripted_model()
    _, report = resume_run(str(run_dir), model=model)
    assert model.calls == []  # the trace said the model had finished
    # Re-verified against today's task (OLD_CONTRACT): the field its solution reads is named.
    assert report.best_attempt == 2 and report.final_verdict == "error"
    assert OLD_CONTRACT in report.reason, report.reason


def test_it_replays_turn_by_turn(tmp_path):
    text = as_text(replay(unpack("v1_run_killed_after_finish.tar.gz", tmp_path)))
    assert "run 02_kimi_linear_decode-" in text and "task 02_kimi_linear_decode · model scripted:" in text
    assert "cpu smoke · budget wall 30m00s" in text
    assert '▶ design(hypothesis="the port, timed", predicted="1.0x at ctx 16")' in text
    assert "▶ write_file solution.py" in text
    assert "■ attempt 1 check PASS  score –  kept" in text and "■ attempt 2 benchmark PASS" in text
