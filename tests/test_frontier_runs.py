"""Scripted sessions in the shapes frontier models take over a long run (issue 46): plans and
thinking aloud without a tool call, ends of turn to wait for a job, scratch scripts made
between attempts, long free-text arguments, other harnesses' argument names. Each run must go
on to its end, lose nothing the model wrote outside the solution, and say what happened.

The evaluations are made up, as in test_long_runs (the loop is under test, not the harness)."""

from __future__ import annotations

import test_long_runs
from test_long_runs import call, calls, outcome, run

from kagent.agent.storage.trace import read_trace

made_up = test_long_runs.made_up  # the fixture of made-up evaluations


def text(words: str) -> dict:
    return {"text": words}


def notices(run_dir) -> list[str]:
    return [e.text for e in read_trace(run_dir / "trace.jsonl").events if e.type == "user_notice"]


def test_a_plan_and_later_thinking_aloud_are_answered_and_the_run_goes_on(tmp_path, made_up):
    queue, _ = made_up
    queue += [outcome("pass", 1.5)]
    turns = [
        text("Plan: read the reference, port it, then fuse the MoE."),
        calls(("write_file", {"path": "solution.py", "content": "a\n"}), ("benchmark", {})),
        text("Thinking aloud: the router is cheap, the experts dominate."),
        call("finish", summary="done"),
    ]
    run_dir, report = run(tmp_path, turns)
    assert report.status == "finished" and report.turns == 4, report.reason
    first, _, second, _ = notices(run_dir)
    # Each text answer is answered, and the count starts over after any call.
    assert first.startswith("No tool was called (1 answer in a row without one; after 2 more in a row the run ends)")
    assert second.startswith("No tool was called (1 answer in a row without one; after 2 more")


def test_three_text_answers_in_a_row_end_the_run_each_reminder_counting_down(tmp_path, made_up):
    turns = [text("Let me think."), text("Still thinking."), text("Done, I believe."), call("finish", summary="-")]
    run_dir, report = run(tmp_path, turns)
    assert report.turns == 3 and "3 times in a row without calling a tool" in report.reason
    said = notices(run_dir)
    assert "after 2 more in a row" in said[0] and "after 1 more in a row" in said[1]
    assert said[2].startswith("No tool was called, 3 answers in a row: the run ends here.")


def test_an_answer_that_waits_for_a_job_is_answered_with_the_job_s_state(tmp_path, made_up):
    turns = [
        call("jobs", action="start", command="sleep 30"),
        text("The build is running in the background; I will wait for it to finish."),
        call("jobs", action="stop", job=1),
        text("Waiting for the job again."),
        call("finish", summary="-"),
    ]
    run_dir, report = run(tmp_path, turns)
    assert report.turns == 5, report.reason
    said = [n for n in notices(run_dir) if n.startswith("No tool was called")]
    assert "You seem to be waiting" in said[0] and "job 1: running for" in said[0] and "sleep 30" in said[0]
    assert "action=wait" in said[0]
    assert "job 1: stopped after" in said[1]
