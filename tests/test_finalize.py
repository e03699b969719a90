"""Finalize builds the run's report whole: the intervals of its scores come with it, so that
report.json, report.md and status.json give the same figures without a caller adding them."""

from __future__ import annotations

from kagent.agent.loop.budget import BudgetTracker, SystemClock
from kagent.agent.loop.finalize import Finalizer, report_markdown
from kagent.agent.loop.ledger import Attempt, Ledger
from kagent.agent.loop.status import Books, Live, Shared
from kagent.agent.settings import Budget, RunSettings
from kagent.agent.storage.trace import TraceWriter
from kagent.sandbox.evaluate import EvalOptions
from kagent.tasks import resolve_task


def finalizer(tmp_path, ledger: Ledger) -> Finalizer:
    settings = RunSettings(task="02_kimi_linear_decode", model="scripted:demo", budget=Budget(wall_s=600))
    tracker = BudgetTracker(settings.budget, SystemClock())
    books = Books(ledger=ledger)
    shared = Shared(
        config=settings.for_run("r1", "cpu"),
        task=resolve_task(settings.task),
        workspace=None,  # type: ignore[arg-type]  # the report reads no file of it
        trace=TraceWriter(tmp_path),
        tracker=tracker,
        eval_options=EvalOptions(),
        books=books,
        live=Live(lambda update: None, tracker, books),
    )
    return Finalizer(shared)


def test_the_report_carries_the_interval_of_the_best_attempts_benchmark(tmp_path):
    best = Attempt(
        number=1, kind="benchmark", verdict="pass", reason="", score=1.2, interval=(1.1, 1.3), commit="c", kept=True
    )
    report = finalizer(tmp_path, Ledger(attempts=[best], best=1)).end("model", "the model finished", "m", [])
    assert (report.result_from, report.result_score) == ("exploration", 1.2)
    assert report.result_interval == (1.1, 1.3) and report.best_interval == (1.1, 1.3)
    assert "- result: 1.200x [1.100–1.300]" in report_markdown(report)


def test_a_run_without_a_result_has_no_interval(tmp_path):
    report = finalizer(tmp_path, Ledger()).end("budget", "the budget ran out", "m", [])
    assert report.result_interval is None and report.best_interval is None
    assert "- result: none: no attempt passed a benchmark" in report_markdown(report)
