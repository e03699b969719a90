"""Attempts: every measured change committed, judged against the best and reverted if it lost,
and the loop-control tools (design, revert, finish) that steer them.

``Attempts`` is the handle (kagent.tools.base.LoopControl) that those tools act on; the loop
hands it to them in their context and asks it, after each turn, whether the model finished.
"""

from __future__ import annotations

from typing import Optional

from kagent.agent.loop.briefing import NOTES_FILE
from kagent.agent.loop.budget import BudgetTracker
from kagent.agent.loop.ledger import GOAL_FLOOR_FRACTION, Attempt, Design, Ledger, floor_fraction, single_launch
from kagent.agent.loop.state import Rebuilt
from kagent.agent.loop.status import Shared
from kagent.agent.settings import RunConfig
from kagent.agent.storage.trace import AttemptRecorded
from kagent.agent.storage.workspace import ATTEMPTS_REF, SCRATCH_DIR, Reverted
from kagent.sandbox.noise import score_interval
from kagent.sandbox.results import EvalResult, Verdict
from kagent.tasks import TaskRef
from kagent.tools.base import ToolError

# A finish with more than this share of the wall budget left, and the task's goal unmet, is
# answered with what remains instead of ending the run; a second finish ends it.
EARLY_FINISH_SHARE = 0.25


class Attempts:
    """The ledger's only writer, and the state of the loop-control tools between turns."""

    def __init__(self, shared: Shared):
        s = shared
        self.config, self.task, self.workspace, self.trace = s.config, s.task, s.workspace, s.trace
        self.tracker, self.books, self.live = s.tracker, s.books, s.live
        self.pending_design: Optional[Design] = None
        self.drafting = False  # the last design was a draft: failed attempts stay in place
        self.undecided = False  # the last design call was refused: failed attempts stay in place too
        self.finish_answered = False  # an early finish was answered once; the next one ends the run
        self.finished_summary: Optional[str] = None  # the model finished, with this summary

    @property
    def ledger(self) -> Ledger:
        return self.books.ledger

    def go_on_from(self, state: Rebuilt) -> None:
        """Where a resumed run's designs, drafts and finish stood."""
        self.pending_design, self.drafting, self.undecided = state.pending_design, state.drafting, state.undecided
        self.finish_answered, self.finished_summary = state.finish_answered, state.finished_summary

    def finished_reason(self) -> str:
        return f"the model finished: {(self.finished_summary or '')[:300]}"

    # -- an attempt --------------------------------------------------------------------------
    def record(self, kind: str, result: EvalResult, call_id: str, scored: bool) -> str:
        """Commit the measured change, judge it against the best, revert it if it lost; returns
        what the model is told."""
        # Past every attempt ref too: a run killed between a commit and its trace event left one.
        number = max(self.ledger.next_number(), max(self.workspace.attempts(), default=0) + 1)
        previous = self.workspace.attempts().get(number - 1) or self.workspace.head()
        files = self.workspace.changed_files(previous)
        score = result.score if scored and result.verdict is Verdict.PASS else None
        design, sha = self._commit(number, kind, result, score)
        kept, reverted_to, draft, revert_text, restored = True, None, False, "", None
        note, lost, new_best = self.ledger.judge(result, score, single_launch_goal=self.task.wants_single_launch)
        if new_best:
            self.ledger.best = number
            self.workspace.tag_best(sha)
        if lost and (self.drafting or self.undecided):
            draft = True
            note += self._kept_as_draft()
        elif lost and self.config.auto_revert:
            target = self._revert_target()
            if target is not None:
                reverted_to = self.workspace.attempts()[target]
                reverted = self.workspace.revert_solution(reverted_to, keep=[NOTES_FILE])
                self.workspace.commit(f"revert to attempt {target} after attempt {number} ({note[:60]})")
                kept = False
                note += f" — the solution was reverted to attempt {target}"
                back = (
                    f"attempt {number} (ref {ATTEMPTS_REF}{number}): revert(attempt={number}) brings it back, and "
                    f"`git show {ATTEMPTS_REF}{number}:PATH` in the shell reads one of its files"
                )
                revert_text, restored = reverted_text(target, reverted, back), reverted.restored
            else:
                note += " — nothing better to revert to yet: fix it in place"
        measured = score is not None
        attempt = Attempt(
            number=number,
            kind=kind,
            hypothesis=design.hypothesis if design else None,
            predicted=design.predicted if design else None,
            verdict=result.verdict.value,
            reason=result.reason,
            score=score,
            interval=score_interval(result) if measured else None,
            speedups={t.label: t.speedup for t in result.timings} if measured else {},
            files=files,
            commit=sha,
            kept=kept,
            draft=draft,
            single_launch=single_launch(result),
            floor_fraction=floor_fraction(result) if measured else None,
            candidate_ms={t.label: t.candidate.median_ms for t in result.timings} if measured else {},
            device_bound=result.device_bound if measured else None,
            note=note,
            elapsed_s=round(self.tracker.elapsed(), 1),
            tokens=self.books.usage.total_tokens,
        )
        self.ledger.attempts.append(attempt)
        message = f"Attempt {number} recorded (commit {sha[:10]}): {note}." + (
            f"\n{revert_text}" if revert_text else ""
        )
        self.trace.append(
            AttemptRecorded(
                attempt=attempt.model_dump(),
                evaluation=result.model_dump(mode="json"),
                commit=sha,
                reverted_to=reverted_to,
                restored=restored,
                call_id=call_id,
                message=message,
            )
        )
        self.live.show(f"attempt {number}: {note}")
        return message

    def _commit(
        self, number: int, kind: str, result: EvalResult, score: Optional[float]
    ) -> tuple[Optional[Design], str]:
        """The attempt's commit, with its figures as trailers, under the design it was made by."""
        trailers = {
            "Kagent-Attempt": str(number),
            "Kagent-Kind": kind,
            "Kagent-Verdict": result.verdict.value,
            "Kagent-Speedup": f"{score:.4f}" if score is not None else "-",
            "Kagent-Tokens": str(self.books.usage.total_tokens),
            "Kagent-Elapsed": f"{self.tracker.elapsed():.0f}s",
        }
        design, self.pending_design = self.pending_design, None
        sha = self.workspace.commit(
            f"attempt {number}: {kind} {result.verdict.value}\n\n"
            f"{design.hypothesis if design else 'no design recorded'}",
            trailers,
        )
        self.workspace.mark_attempt(number, sha)
        return design, sha

    def _kept_as_draft(self) -> str:
        best = self.ledger.best_attempt()
        return (
            " — kept in place as a draft: "
            if self.drafting
            else " — kept in place (your last design call was refused, so whether this is a draft is "
            "undecided; call design again): "
        ) + (
            f"the best, attempt {best.number}, is safe and is what the run delivers" if best else "there is no best yet"
        )

    def _revert_target(self) -> Optional[int]:
        """The best attempt; before there is one, the last attempt that passed a check."""
        if self.ledger.best is not None:
            return self.ledger.best
        passing = [a.number for a in self.ledger.attempts if a.verdict == Verdict.PASS.value and a.kept]
        return passing[-1] if passing else None

    # -- what the loop-control tools do (LoopControl) -----------------------------------------
    def record_design(
        self, hypothesis: str, predicted: str, draft: bool = False, why: Optional[str] = None
    ) -> Optional[int]:
        self.pending_design = Design(hypothesis=hypothesis, predicted=predicted, draft=draft)
        self.drafting, self.undecided = draft, False
        last = self.ledger.attempts[-1] if self.ledger.attempts else None
        if why is None or last is None:
            return None
        last.why = why
        return last.number

    def design_refused(self) -> None:
        self.undecided = True

    def ending(self) -> str:
        best = self.ledger.best_attempt()
        if best is None or best.score is None:
            return (
                "Finishing. No attempt has passed a benchmark, so there is nothing to re-verify: the run ends "
                "without a result, the workspace left as it is."
            )
        return (
            f"Finishing: kagent re-verifies the best attempt, {best.number} ({best.score:.3f}x), with fresh secret "
            f"inputs and makes it the final solution."
        )

    def revert_to(self, attempt: Optional[int]) -> tuple[int, str, list[str]]:
        number = attempt if attempt is not None else self.ledger.best
        if number is None:
            raise ToolError("there is no best attempt yet; give the attempt number to go back to")
        target = self.workspace.attempts().get(number)
        if target is None:
            raise ToolError(f"there is no attempt {number}; attempts: {sorted(self.workspace.attempts())}")
        before = self.workspace.commit(f"the workspace before the revert to attempt {number}")
        reverted = self.workspace.revert_solution(target, keep=[NOTES_FILE])
        self.workspace.commit(f"revert to attempt {number} (asked by the model)")
        back = f"commit {before[:10]} (`git show {before[:10]}:{self.config.solution_name}` reads it)"
        return number, reverted_text(number, reverted, back), reverted.restored

    def finish(self, summary: str) -> Optional[str]:
        unmet = None if self.finish_answered else goal_unmet(self.config, self.task, self.tracker, self.ledger)
        if unmet is None:
            self.finished_summary = summary
            return None
        self.finish_answered = True
        return unmet


def reverted_text(number: int, reverted: Reverted, back: str) -> str:
    """What a revert changed and kept, and where the version it replaced stays."""
    shown = ", ".join(reverted.kept[:12]) + (f" and {len(reverted.kept) - 12} more" if len(reverted.kept) > 12 else "")
    return (
        f"The solution's files are back at attempt {number}: "
        f"{', '.join(reverted.restored) or 'none differed'} restored. "
        + (f"Left as they are: {shown}. " if reverted.kept else "")
        + f"A revert puts back only the solution's files (the solution and the files it names); files "
        f"made since, {SCRATCH_DIR}/ and {NOTES_FILE} are never reverted. What you had is {back}."
    )


def goal_unmet(config: RunConfig, task: TaskRef, tracker: BudgetTracker, ledger: Ledger) -> Optional[str]:
    """What remains of the task's goal while much of the budget does, or None. The goal of a
    megakernel task is an attempt that passes as one launch per step, at GOAL_FLOOR_FRACTION
    of the bytes floor's speed or better where the floor is known; launches can be counted
    only on a GPU."""
    budget = config.budget.wall_s
    remaining = tracker.deadline() - tracker.clock.now()
    counted = config.device.startswith("cuda") or any(a.single_launch is not None for a in ledger.attempts)
    best = ledger.best_attempt()
    if not task.wants_single_launch or not counted or remaining <= EARLY_FINISH_SHARE * budget:
        return None
    slow = best is not None and best.floor_fraction is not None and best.floor_fraction < GOAL_FLOOR_FRACTION
    if best is not None and best.single_launch and not slow:
        return None
    if best is not None and best.single_launch and best.floor_fraction is not None:
        where = (
            f"the best, attempt {best.number}, is one launch per step but at {best.floor_fraction:.0%} of the "
            f"bytes floor's speed at its slowest shape, short of the goal's {GOAL_FLOOR_FRACTION:.0%}"
        )
        todo = (
            "time it with `stages` and `profile`, close the largest gap to each stage's floor first (the "
            "playbook's workflow), and keep the barrier count low"
        )
    else:
        where = (
            f"the goal, one kernel launch per step, is unmet (the best is attempt {best.number}, "
            f"{best.score:.3f}x, in more than one launch per step)"
            if best is not None and best.score is not None
            else "the goal, one kernel launch per step, is unmet (no attempt has passed a benchmark yet)"
        )
        todo = (
            "fuse what is left into one persistent kernel (the playbook's stage plan and grid barrier), keep "
            "it correct stage by stage (design with draft=true keeps failing attempts in place while you "
            "build), then time it with `stages` and `profile`"
        )
    return (
        f"Not finished yet: {remaining / 60:.0f} of {budget / 60:.0f} min remain, and {where}. What remains "
        f"to try: {todo}. The run delivers the best attempt as it stands whenever it ends. Call finish again "
        f"to end the run now anyway."
    )
