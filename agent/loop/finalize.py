"""Finalize: once exploring is over, put the best attempt in place, re-verify it with fresh
secret inputs, and build the run's report from what stands and render it (report.md).
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, Field

from kagent.agent.loop.briefing import NOTES_FILE
from kagent.agent.loop.status import Shared
from kagent.agent.outcome import Cause, EndState, end_state, reverification_inconclusive, reverification_note
from kagent.agent.settings import minutes
from kagent.agent.storage.trace import Finalized, RunEnded
from kagent.core.errors import KagentError
from kagent.core.messages import Usage
from kagent.sandbox.evaluate import evaluate
from kagent.sandbox.noise import score_interval, score_text
from kagent.sandbox.results import EvalResult, Verdict

# The final re-verification, the verdict a run ends on, draws this many times the secret
# inputs of an evaluation: a solution wrong on rare inputs must not slip through at the end.
FINAL_HIDDEN_SEEDS_FACTOR = 2


class RunReport(BaseModel):
    version: Literal[1] = 1
    run_id: str
    task: str
    model: str
    status: EndState
    reason: str
    best_attempt: Optional[int]
    best_score: Optional[float] = Field(description="The best attempt's geomean speedup, measured while exploring")
    best_speedups: dict[str, float] = Field(default_factory=dict, description="Per shape, measured while exploring")
    final_verdict: Optional[str] = Field(None, description="Verdict of the final re-verification, if it ran")
    final_score: Optional[float] = Field(
        None, description="The best attempt's geomean speedup as the final re-verification measured it, when it passed"
    )
    final_speedups: dict[str, float] = Field(default_factory=dict, description="Per shape, re-verified")
    result_score: Optional[float] = Field(
        None,
        description="The run's result: final_score; best_score when the "
        "re-verification stopped short after its secret inputs "
        "passed; None without a verified result",
    )
    result_from: Optional[Literal["final re-verification", "exploration"]] = Field(
        None, description="Which measurement result_score is"
    )
    result_interval: Optional[tuple[float, float]] = Field(
        None, description="The 95% interval of that measurement's score (kagent.sandbox.noise.score_interval)"
    )
    best_interval: Optional[tuple[float, float]] = Field(
        None, description="The 95% interval of best_score's benchmark (kagent.sandbox.noise.score_interval)"
    )
    attempts: int
    turns: int
    usage: Usage
    cost_usd: float
    elapsed_s: float
    warnings: list[str] = Field(
        default_factory=list,
        description="What to beware of in these figures, such as a model without a price (its cost reads $0)",
    )


class Finalizer:
    """The re-verification and the report; until the re-verification, the result is the best
    attempt's as measured while exploring."""

    def __init__(self, shared: Shared):
        s = shared
        self.config, self.task, self.workspace, self.trace = s.config, s.task, s.workspace, s.trace
        self.tracker, self.eval_options, self.books, self.live = s.tracker, s.eval_options, s.books, s.live
        self.final_evaluation: Optional[EvalResult] = None

    def finalize(self) -> None:
        """Put the best attempt in place and re-verify it with the full harness, time permitting."""
        best = self.books.ledger.best_attempt()
        if best is None:
            self.trace.append(
                Finalized(
                    best_attempt=None,
                    commit=None,
                    evaluation=None,
                    note="no attempt passed a benchmark; the workspace is left as it was",
                )
            )
            return
        # The tree as the model left it stays in history; the final one is the best's, exactly.
        self.workspace.commit("the workspace at the end of exploring")
        self.workspace.restore(best.commit, keep=[NOTES_FILE])
        commit = self.workspace.commit(f"final: attempt {best.number} ({best.score:.3f}x)")
        remaining = self.tracker.deadline() - self.tracker.clock.now()
        if remaining > 30:
            hidden_seeds = FINAL_HIDDEN_SEEDS_FACTOR * self.eval_options.hidden_seeds_for(self.task.kind)
            options = self.eval_options.model_copy(
                update={
                    "mode": "eval",
                    "hidden_seeds": hidden_seeds,
                    "timeout_s": min(self.config.eval_timeout_s, remaining),
                }
            )
            try:
                with self.live.busy(f"re-verifying attempt {best.number}"):
                    final = evaluate(
                        self.task,
                        self.workspace.root / self.config.solution_name,
                        options,
                        progress=self.live.on_progress,
                    )
                self.final_evaluation = final
                self.live.final_score = final.score if final.verdict is Verdict.PASS else None
                note = reverification_note(final)
            except KagentError as err:
                note = f"re-verification could not run: {err.message}"
        else:
            note = "no time left to re-verify; the best attempt stays in place as measured"
        self.trace.append(
            Finalized(
                best_attempt=best.number,
                commit=commit,
                note=note,
                evaluation=self.final_evaluation.model_dump(mode="json") if self.final_evaluation else None,
            )
        )

    def result_score(self) -> Optional[float]:
        """The run's result so far: the re-verified score once there is one, the best attempt's before."""
        best, final = self.books.ledger.best_attempt(), self.final_evaluation
        if best is None or not self.verified():
            return None
        return final.score if final is not None and final.verdict is Verdict.PASS else best.score

    def result_interval(self) -> Optional[tuple[float, float]]:
        """The interval of the measurement the run's result is (result_score): the final
        re-verification's once it passed, else the best attempt's benchmark's."""
        if self.result_score() is None:
            return None
        final = self.final_evaluation
        if final is not None and final.verdict is Verdict.PASS:
            return score_interval(final)
        best = self.books.ledger.best_attempt()
        return best.interval if best else None

    def verified(self) -> bool:
        """Whether a verified result stands: a best attempt its final re-verification did not refute
        (see reverification_inconclusive)."""
        best, final = self.books.ledger.best_attempt(), self.final_evaluation
        return best is not None and (
            final is None or final.verdict is Verdict.PASS or reverification_inconclusive(final)
        )

    def end(self, cause: Cause, reason: str, model: str, warnings: list[str]) -> RunReport:
        """Record the run's end and report it."""
        best, final = self.books.ledger.best_attempt(), self.final_evaluation
        verified = self.verified()
        if best is not None and final is not None and not verified:
            reason += (
                f"; the best attempt ({best.number}) failed its final re-verification: "
                f"{final.verdict.value}: {final.reason[:200]}"
            )
        status = end_state(cause, verified)
        books = self.books
        self.trace.append(
            RunEnded(
                status=status,
                reason=reason,
                best_attempt=best.number if best else None,
                best_speedup=best.score if best else None,
                tokens=books.usage.total_tokens,
                cost_usd=books.cost,
            )
        )
        self.live.show(f"run ended: {reason}", ended=True)
        reverified = final if final is not None and final.verdict is Verdict.PASS else None
        return RunReport(
            run_id=self.config.run_id,
            task=self.task.name,
            model=model,
            status=status,
            reason=reason,
            best_attempt=best.number if best else None,
            best_score=best.score if best else None,
            best_speedups=best.speedups if best else {},
            final_verdict=final.verdict.value if final else None,
            final_score=reverified.score if reverified else None,
            final_speedups={t.label: t.speedup for t in reverified.timings} if reverified else {},
            result_score=self.result_score(),
            result_from=None if not verified else "final re-verification" if reverified else "exploration",
            result_interval=self.result_interval(),
            best_interval=best.interval if best else None,
            attempts=len(books.ledger.attempts),
            turns=books.turn,
            usage=books.usage,
            cost_usd=books.cost,
            elapsed_s=round(self.tracker.elapsed(), 1),
            warnings=warnings,
        )


def report_markdown(report: RunReport) -> str:
    """The report as report.md has it, for a person reading the run's folder."""
    lines = [
        f"# kagent run {report.run_id}",
        "",
        f"- task: {report.task}",
        f"- model: {report.model}",
        *(f"- warning: {text}" for text in report.warnings),
        f"- status: {report.status} ({report.reason})",
        f"- result: {_result_line(report)}",
        f"- best attempt while exploring: {report.best_attempt if report.best_attempt is not None else 'none'}"
        + (f", {score_text(report.best_score, report.best_interval)}" if report.best_score is not None else ""),
        f"- final re-verification: {report.final_verdict or 'not run'}"
        + (f", {score_text(report.final_score, report.result_interval)}" if report.final_score is not None else ""),
        f"- attempts: {report.attempts}, turns: {report.turns}",
        f"- tokens: {report.usage.total_tokens:,} (input {report.usage.input_tokens:,}, output "
        f"{report.usage.output_tokens:,}, cache read {report.usage.cache_read_tokens:,}, cache write "
        f"{report.usage.cache_write_tokens:,}, reasoning {report.usage.reasoning_tokens:,})",
        f"- cost: ${report.cost_usd:.2f}",
        f"- elapsed: {minutes(report.elapsed_s)}",
    ]
    if report.best_speedups:
        lines += ["", "| shape | while exploring | re-verified (the result) |", "|---|---|---|"]
        lines += [
            f"| {label} | {value:.3f}x | "
            + (f"{report.final_speedups[label]:.3f}x" if label in report.final_speedups else "–")
            + " |"
            for label, value in report.best_speedups.items()
        ]
    return "\n".join(lines) + "\n"


def _result_line(report: RunReport) -> str:
    """Which number is the run's result, and why that one."""
    if report.result_score is None:
        if report.best_attempt is not None and report.final_verdict:
            return f"none: attempt {report.best_attempt} failed its final re-verification ({report.final_verdict})"
        return "none: no attempt passed a benchmark"
    result = score_text(report.result_score, report.result_interval)
    if report.result_from == "final re-verification":
        change = report.result_score / report.best_score - 1 if report.best_score else 0.0
        return (
            f"{result}, attempt {report.best_attempt} as the final re-verification measured it "
            f"({change:+.1%} from {report.best_score:.3f}x while exploring)"
        )
    why = f"the re-verification ended {report.final_verdict}" if report.final_verdict else "it was not re-verified"
    return f"{result}, attempt {report.best_attempt} as measured while exploring ({why})"
