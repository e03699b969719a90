"""The agent loop: ask the model for a turn, run the tools it called, keep the books, repeat.

Control flow that leaves the loop (the model finished, the budget is spent, the final slice
has come) is a ``Stop`` carrying the reason; everything that happens is in the trace.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal, Optional

from pydantic import BaseModel, Field

from kagent.agent.loop import memory, pricing
from kagent.agent.loop.briefing import goal_text, rules_text
from kagent.agent.loop.budget import BudgetTracker
from kagent.agent.loop.context import ContextMeter, user_limit
from kagent.agent.loop.cut_answers import CutAnswers, cut_call_result
from kagent.agent.loop.ledger import GOAL_FLOOR_FRACTION, Attempt, Design, Ledger, floor_fraction, single_launch
from kagent.agent.loop.models.limits import limits_of, limits_warning
from kagent.agent.loop.state import Rebuilt
from kagent.agent.loop.text_answers import TextAnswers
from kagent.agent.outcome import Cause, EndState, end_state, reverification_inconclusive, reverification_note
from kagent.agent.settings import RunConfig
from kagent.agent.storage.trace import (
    INLINE_LIMIT,
    AttemptRecorded,
    Compacted,
    ErrorRecorded,
    Finalized,
    Interrupted,
    ModelRequested,
    ModelResponded,
    ModelRetried,
    RunEnded,
    RunResumed,
    RunStarted,
    ToolFinished,
    ToolStarted,
    TraceWriter,
    UserNotice,
)
from kagent.agent.storage.workspace import ATTEMPTS_REF, SCRATCH_DIR, Reverted, Workspace
from kagent.core.errors import KagentError, TransientModelError
from kagent.core.messages import ChatModel, Message, ModelResponse, TextBlock, ToolCall, ToolResult, ToolSpec, Usage
from kagent.sandbox import progress
from kagent.sandbox.evaluate import EvalOptions, evaluate
from kagent.sandbox.noise import score_interval
from kagent.sandbox.results import EvalResult, Verdict
from kagent.tasks import TaskRef
from kagent.tools.base import Tool, ToolContext, ToolError, ToolOutcome, cap, decoded_arguments
from kagent.tools.evaluation import summarize

# The final re-verification, the verdict a run ends on, draws this many times the secret
# inputs of an evaluation: a solution wrong on rare inputs must not slip through at the end.
FINAL_HIDDEN_SEEDS_FACTOR = 2

# The model's notes, in the workspace: kept as they are through every revert, and shown in full
# after every compaction, so that what a long run learned outlives its conversation.
NOTES_FILE = "notes.md"
NOTES_SHOWN_CHARS = 16_000
# A finish with more than this share of the wall budget left, and the task's goal unmet, is
# answered with what remains instead of ending the run; a second finish ends it.
EARLY_FINISH_SHARE = 0.25
# Past this share of the context limit the model is told, once, to bring its notes up to date
# before older turns are compacted away.
COMPACTION_WARNING_SHARE = 0.8


class Stop(Exception):
    """Exploring is over; ``cause`` says what ended it (the state follows from it and the result)."""

    def __init__(self, reason: str, cause: Cause):
        super().__init__(reason)
        self.reason = reason
        self.cause = cause


class ViewUpdate(BaseModel):
    """What a live view shows after each event of interest."""

    phase: str
    turn: int
    elapsed_s: float
    remaining_s: float
    tokens: int
    cost_usd: float
    best_score: Optional[float]
    best_attempt: Optional[int]
    final_score: Optional[float] = Field(None, description="The best attempt's re-verified score, once it passed")
    attempts: list[Attempt] = Field(default_factory=list)
    last_event: str = Field("", description="The last thing that happened")
    activity: str = Field("", description="What is going on now (a tool, the model, the re-verification)")
    activity_since_s: float = Field(0.0, description="elapsed_s when that began")
    detail: str = Field("", description="The latest progress of the activity (an evaluation's phase)")
    ended: bool = False


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


COMPACTED_MARK = "[compacted]"


def with_summary(first: Message, summary: str) -> Message:
    """The first message (the task) with the latest compaction's summary in place of any
    earlier one: each summary holds the whole of what the model needs, and summaries left to
    pile up would grow the context by a solution's copy at every compaction."""
    task = [b for b in first.content if not (isinstance(b, TextBlock) and b.text.startswith(COMPACTED_MARK))]
    return Message(role="user", content=[*task, TextBlock(text=summary)])


def _sha256(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


@dataclass
class Activity:
    """What the loop is doing now, for the live view."""

    what: str
    since_s: float  # the run's elapsed time when it began
    detail: str = ""


class RepeatedFailures:
    """Identical failing tool calls in a row. A model that sends the same failing call again
    gets the same error again (one did 860 times): from the second time it is told so in the
    tool's result, and at ``limit`` the run ends. Any other call, or a success, starts over."""

    def __init__(self, limit: int):
        self.limit = limit
        self.count = 0
        self.name = ""
        self._fingerprint: Optional[str] = None

    @property
    def stuck(self) -> bool:
        return self.count >= self.limit

    def watch(self, call: ToolCall, outcome: ToolOutcome) -> ToolOutcome:
        """The outcome to give the model, with a plain word added when the call repeats a failure."""
        fingerprint = _sha256([call.name, call.arguments]) if outcome.is_error else None
        same = fingerprint is not None and fingerprint == self._fingerprint
        self.count = self.count + 1 if same else int(fingerprint is not None)
        self._fingerprint, self.name = fingerprint, call.name
        if self.count < 2:
            return outcome
        if self.stuck:
            note = (
                f"[kagent] This exact call ({call.name}, same arguments) has now failed {self.count} times in a "
                f"row. The run ends here."
            )
        else:
            note = (
                f"[kagent] This exact call ({call.name}, same arguments) has failed {self.count} times in a row "
                f"now. Sent again unchanged, it will most likely fail again: change the arguments or do "
                f"something else. After {self.limit} identical failures in a row the run ends."
            )
        return outcome.model_copy(update={"content": f"{outcome.content}\n\n{note}"})


class Agent:
    """The loop. It is also the handle (kagent.tools.base.LoopControl) through which the
    loop-control tools (design, revert, finish) act on it."""

    def __init__(
        self,
        config: RunConfig,
        task: TaskRef,
        model: ChatModel,
        tools: list[Tool],
        workspace: Workspace,
        trace: TraceWriter,
        tracker: BudgetTracker,
        eval_options: EvalOptions,
        view: Optional[Callable[[ViewUpdate], None]] = None,
        system_prompt: str = "",
        versions: Optional[dict[str, Optional[str]]] = None,
        machine: str = "",
    ):
        self.config, self.task, self.model = config, task, model
        self.workspace, self.trace, self.tracker = workspace, trace, tracker
        self.eval_options = eval_options
        self.view = view or (lambda update: None)
        self.system = system_prompt
        self.versions = versions or {}
        self.machine = machine  # what the first message says of the machine (kagent.agent.lifecycle.device)
        self.tools: dict[str, Tool] = {t.spec.name: t for t in tools}
        self.ledger = Ledger()
        self.messages: list[Message] = []
        self.turn = 0
        self.usage = Usage()
        self.cost = 0.0
        self.pending_design: Optional[Design] = None
        self.drafting = False  # the last design was a draft: failed attempts stay in place
        self.undecided = False  # the last design call was refused: failed attempts stay in place too
        self.finish_answered = False  # an early finish was answered once; the next one ends the run
        self.ledger_shown: Optional[str] = None  # the ledger as last shown in full
        self.compaction_warned = False  # asked for a summary before the coming compaction
        self.memory: Optional[str] = None  # the newest summary the model wrote for a compaction
        self.finished_summary: Optional[str] = None
        self.text_answers = TextAnswers(config.max_text_answers)
        self.final_evaluation: Optional[EvalResult] = None
        self.repetition = RepeatedFailures(config.max_repeated_failures)
        # Answers the output cap cut; cut_cap is set while the calls of such an answer run.
        answer_room = config.max_output_tokens - (config.thinking_budget or 0)
        self.cut_answers = CutAnswers(config.max_output_tokens, answer_room)
        self.cut_cap: Optional[int] = None
        self.activity: Optional[Activity] = None
        self.last_event = ""
        # What the user should beware of in this run's figures, said at its start and in its report.
        self.warnings = [text for text in [pricing.price_warning(model.name), limits_warning(model.name)] if text]
        # The window the conversation must fit, prompt and answer together.
        window = limits_of(model.name).context_window
        self.context = ContextMeter(window, config.max_output_tokens, user_limit(config))

    # -- set-up ------------------------------------------------------------------------------
    def tool_specs(self) -> list[ToolSpec]:
        return [t.spec for t in self.tools.values()]

    def first_message(self) -> Message:
        text = (
            f"{self.task.prompt.strip()}\n\n"
            f"Your workspace holds the task's files under task/ (read-only) and your solution goes in "
            f"{self.config.solution_name}. Evaluation runs on device {self.config.device} at {self.config.scale} "
            f"scale.\n\n"
            + (f"{self.machine}\n\n" if self.machine else "")
            + f"{goal_text(self.task)}\n\n{rules_text(self.config, self.task)}\n\n"
            + (f"Your direction in this run: {self.config.direction}\n\n" if self.config.direction else "")
            + self._status_text()
        )
        return Message(role="user", content=[TextBlock(text=text)])

    # -- the loop ----------------------------------------------------------------------------
    def run(self, restart: Optional[RunResumed] = None) -> RunReport:
        """A new run: record how it starts, then drive it. ``restart`` is the resume of a run
        whose trace held no start: recorded right after this new start, it says what was kept."""
        self.messages = [self.first_message()]
        specs = [s.model_dump() for s in self.tool_specs()]
        self.trace.append(
            RunStarted(
                run_id=self.config.run_id,
                config=self.config,
                versions=self.versions,
                prompt_sha256=_sha256([self.system, self.messages[0].model_dump()]),
                tools_sha256=_sha256(specs),
                system=self.system,
                first_message=self.messages[0].model_dump(),
                tools=specs,
                warnings=self.warnings,
            )
        )
        if restart is not None:
            self.trace.append(restart.model_copy(update={"restarted": True}))
        return self.drive()

    def resume(self, state: Rebuilt, resumed: RunResumed) -> RunReport:
        """Go on from a rebuilt state: settle the cut turn, tell the model, then drive."""
        self.messages, self.ledger = state.messages, state.ledger
        self.finished_summary = state.finished_summary
        self.memory = state.memory
        self.pending_design, self.usage, self.cost = state.pending_design, state.usage, state.cost
        self.drafting, self.finish_answered = state.drafting, state.finish_answered
        self.undecided = state.undecided
        self.turn = state.turn
        plan = [(call, self._settlement(call, state)) for call in state.pending_calls if call.id not in state.results]
        resumed.settled_calls = [{"call_id": c.id, "name": c.name, "action": action} for c, action in plan]
        resumed.warnings = self.warnings
        self.trace.append(resumed)
        for call, action in plan:
            state.results[call.id] = self._settle(call, action, state)
        where = "the workspace is as it was after the last tool call that finished" + (
            f"; what the interrupted process changed after it is kept on {resumed.workspace_side_ref}"
            if resumed.workspace_side_ref
            else ""
        )
        notice = (
            f"[resumed] The run was interrupted and has been resumed (segment {resumed.segment}); {where}. "
            + (
                "Calls of the interrupted turn: " + ", ".join(f"{c.name} {action}" for c, action in plan) + ". "
                if plan
                else ""
            )
            + "\n"
            + self._status_text()
        )
        self.trace.append(UserNotice(turn=self.turn, text=notice, budget=dict(self.tracker.summary())))
        if state.pending_calls:
            results = [state.results[c.id] for c in state.pending_calls]
            self.messages.append(Message(role="user", content=[*results, TextBlock(text=notice)]))
        elif self.messages[-1].role == "user":
            self.messages[-1] = Message(role="user", content=[*self.messages[-1].content, TextBlock(text=notice)])
        else:
            self.messages.append(Message(role="user", content=[TextBlock(text=notice)]))
        return self.drive()

    def _settlement(self, call: ToolCall, state: Rebuilt) -> str:
        if call.id in state.attempt_messages:
            return "answered from its recorded attempt"
        tool = self.tools.get(call.name)
        return "answered as interrupted" if tool is not None and not tool.facts.rerun_after_crash else "run again"

    def _settle(self, call: ToolCall, action: str, state: Rebuilt) -> ToolResult:
        if action == "run again":
            return self._call_tool(call)
        if action == "answered as interrupted":
            content, is_error = self.tools[call.name].facts.interrupted_answer, True
        else:
            message, evaluation = state.attempt_messages[call.id]
            content, is_error = f"{summarize(EvalResult.model_validate(evaluation))}\n\n{message}", False
        self.trace.append(
            ToolFinished(
                turn=self.turn,
                call_id=call.id,
                name=call.name,
                content=content,
                is_error=is_error,
                seconds=0.0,
                data={"settled": action},
            )
        )
        return ToolResult(tool_call_id=call.id, content=content, is_error=is_error)

    def drive(self) -> RunReport:
        """Turns until a Stop, then the final slice and the end (also for a resumed run)."""
        cause: Cause
        try:
            if self.finished_summary is not None:  # a resumed run whose model had already finished
                raise Stop(self._finished_reason(), "model")
            while True:
                self._check_budget()
                self._turn()
        except Stop as stop:
            cause, reason = stop.cause, stop.reason
        except KagentError as err:  # a permanent model error: stop with the best attempt in place
            self.trace.append(ErrorRecorded(message=err.message, fatal=True))
            cause, reason = "error", err.message
        except TransientModelError as err:  # still failing after every retry: resumable later
            self.trace.append(ErrorRecorded(message=f"the model stayed unavailable: {err}", fatal=True))
            cause, reason = "unavailable", f"the model stayed unavailable: {err}"
        for tool in self.tools.values():
            tool.close()  # background jobs end with the exploration: the final re-verification runs alone
        self._finalize()
        return self._end(cause, reason)

    def _finished_reason(self) -> str:
        return f"the model finished: {(self.finished_summary or '')[:300]}"

    def _check_budget(self) -> None:
        exhausted = self.tracker.exhausted()
        if exhausted:
            raise Stop(f"budget spent: {exhausted}", "budget")
        if self.tracker.phase() != "explore":
            # Said as it is: with no best attempt there is nothing to re-verify in the final slice.
            then = (
                ": re-verifying the best attempt"
                if self.ledger.best_attempt()
                else "; no attempt passed a benchmark, so there is nothing to re-verify"
            )
            raise Stop(f"the final slice of the budget has come{then}", "budget")

    def _turn(self) -> None:
        self.turn += 1
        self._maybe_compact()
        self.trace.append(ModelRequested(turn=self.turn, message_count=len(self.messages)))
        with self._busy("waiting for the model"):
            response = self._call_model()
        cost = pricing.cost(self.model.name, response.usage)
        self.usage = self.usage + response.usage
        self.cost += cost
        self.tracker.charge(response.usage.total_tokens, cost)
        self.trace.append(ModelResponded(turn=self.turn, response=response.model_dump(mode="json"), cost_usd=cost))
        self.context.counted(response.usage, len(self.messages))
        self.messages.append(response.message)
        self._show("model answered")
        calls = response.message.tool_calls()
        said = " ".join(b.text for b in response.message.content if isinstance(b, TextBlock))
        written = memory.summary_in(said) if self.compaction_warned else None
        if written is not None:
            self.memory = written
        self.cut_cap = self.config.max_output_tokens if response.stop_reason == "max_tokens" else None
        if not calls:
            self._no_tool_calls(response, summary_kept=written is not None)
            return
        self.cut_answers.watch(response)
        self.text_answers.answered_with_calls()
        results: list[ToolResult | TextBlock] = [self._call_tool(call) for call in calls]
        status = self._status_text() + self._compaction_warning()
        self.trace.append(UserNotice(turn=self.turn, text=status, budget=dict(self.tracker.summary())))
        self.messages.append(Message(role="user", content=[*results, TextBlock(text=status)]))
        if self.finished_summary is not None:
            raise Stop(self._finished_reason(), "model")
        if self.repetition.stuck:
            raise Stop(
                f"stuck: the model sent the same failing call ({self.repetition.name}) "
                f"{self.repetition.count} times in a row",
                "stuck",
            )

    def _no_tool_calls(self, response: ModelResponse, summary_kept: bool = False) -> None:
        cut = self.cut_answers.watch(response)
        if self.cut_answers.exhausted:
            raise Stop(self.cut_answers.reason(), "model")
        if cut is None and response.stop_reason == "refusal":
            raise Stop("the model refused to go on", "model")
        if cut is None and summary_kept:  # the answer asked for: no reminder, and it does not count
            cut = "Your summary is kept for the compaction. Go on with the tools."
        elif cut is None:
            said = " ".join(b.text for b in response.message.content if isinstance(b, TextBlock))
            under_way = "\n".join(filter(None, (tool.under_way() for tool in self.tools.values())))
            cut = self.text_answers.reminder(said, under_way)
        text = cut + "\n\n" + self._status_text()
        self.trace.append(UserNotice(turn=self.turn, text=text, budget=dict(self.tracker.summary())))
        self.messages.append(Message(role="user", content=[TextBlock(text=text)]))
        if self.text_answers.exhausted:
            raise Stop(
                f"the model answered {self.text_answers.in_a_row} times in a row without calling a tool", "model"
            )

    def _call_model(self) -> ModelResponse:
        """One model turn, abandoned (not awaited) if it runs into the final slice."""
        box: dict[str, Any] = {}
        max_tokens = self.context.answer_cap(self._estimate_tokens())

        def call() -> None:
            try:
                box["response"] = self.model.complete(self.system, self.messages, self.tool_specs(), max_tokens)
            except BaseException as err:  # handed to the loop's thread below
                box["error"] = err

        worker = threading.Thread(target=call, daemon=True, name=f"model-turn-{self.turn}")
        worker.start()
        # Waited for in short slices, the clock read again each time: the tracker's clock need not
        # be this process's (a fake one in tests), so one wait computed up front could overshoot.
        while worker.is_alive():
            left = self.tracker.final_slice_starts() - self.tracker.clock.now()
            if left <= 0:
                self.trace.append(Interrupted(cause="deadline", during="waiting for the model"))
                raise Stop("the final slice came during a model call", "budget")
            worker.join(timeout=min(left, 0.5))
        if "error" in box:
            raise box["error"]
        return box["response"]

    def on_retry(self, error: Exception, wait_s: float, attempt: int) -> None:
        """Called by the retrying model wrapper before it waits (the wait counts as run time)."""
        self.trace.append(ModelRetried(turn=self.turn, error=str(error)[:500], wait_s=wait_s, attempt=attempt))
        self._show(f"retrying the model in {wait_s:.0f} s ({error})")

    # -- tools -------------------------------------------------------------------------------
    def tool_context(self, deadline: float) -> ToolContext:
        """Tools count time with time.monotonic(); the tracker's clock may be another one."""
        monotonic_deadline = time.monotonic() + (deadline - self.tracker.clock.now())
        return ToolContext(
            workspace=self.workspace.root,
            task=self.task,
            eval_options=self.eval_options,
            solution_name=self.config.solution_name,
            deadline=monotonic_deadline,
            max_output_chars=self.config.tool_output_chars,
            progress=self._on_progress,
            loop=self,
        )

    def _call_tool(self, call: ToolCall) -> ToolResult:
        self.trace.append(ToolStarted(turn=self.turn, call_id=call.id, name=call.name, arguments=call.arguments))
        started = self.tracker.clock.now()
        tool = self.tools.get(call.name)
        with self._busy(f"tool {call.name}"):
            outcome = self._dispatch(call, tool)
        if tool is not None and tool.facts.changes_files:
            outcome = self._with_the_task_put_back(outcome)
        if tool is not None and tool.facts.records_attempt and outcome.evaluation is not None:
            note = self._record_attempt(call.name, outcome.evaluation, call.id, scored=tool.facts.scores_attempt)
            outcome = outcome.model_copy(update={"content": f"{outcome.content}\n\n{note}"})
        outcome = self.repetition.watch(call, outcome)
        if tool is not None and tool.facts.changes_files:
            # The state a resumed run goes back to, should the process die before the next one.
            outcome.data = {**outcome.data, "snapshot": self.workspace.snapshot(), "head": self.workspace.head()}
        blob = self.trace.blob(outcome.content) if len(outcome.content) > INLINE_LIMIT else None
        self.trace.append(
            ToolFinished(
                turn=self.turn,
                call_id=call.id,
                name=call.name,
                content=cap(outcome.content, INLINE_LIMIT),
                is_error=outcome.is_error,
                seconds=round(self.tracker.clock.now() - started, 3),
                data=outcome.data,
                blob=blob,
            )
        )
        return ToolResult(tool_call_id=call.id, content=outcome.content, is_error=outcome.is_error)

    def _with_the_task_put_back(self, outcome: ToolOutcome) -> ToolOutcome:
        """The task's files stay as the task gave them: whatever a call changed there is put
        back, and the model is told."""
        put_back = self.workspace.put_back_task_files()
        if not put_back:
            return outcome
        note = f"[kagent] The task's files are read-only; put back as the task gave them: {', '.join(put_back)}."
        return outcome.model_copy(
            update={
                "content": f"{outcome.content}\n\n{note}",
                "data": {**outcome.data, "task_files_put_back": put_back},
            }
        )

    def _dispatch(self, call: ToolCall, tool: Optional[Tool]) -> ToolOutcome:
        arguments, note = call.arguments, ""
        if "_raw" in arguments:
            decoded = decoded_arguments(str(arguments["_raw"])) if self.cut_cap is None else None
            if decoded is None:
                content = cut_call_result(call, self.cut_cap, self.cut_answers.room_tokens)
                return ToolOutcome(content=content, is_error=True)
            arguments, note = decoded, "\n[kagent] The arguments came as a JSON string, not an object: decoded them."
        if tool is None:
            names = ", ".join(sorted(self.tools))
            return ToolOutcome(content=f"there is no tool named {call.name!r}; the tools are: {names}", is_error=True)
        outcome = tool.run(arguments, self.tool_context(self.tracker.final_slice_starts()))
        return outcome.model_copy(update={"content": outcome.content + note}) if note else outcome

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
        return number, self._reverted_text(number, reverted, back), reverted.restored

    def _reverted_text(self, number: int, reverted: Reverted, back: str) -> str:
        """What a revert changed and kept, and where the version it replaced stays."""
        shown = ", ".join(reverted.kept[:12]) + (
            f" and {len(reverted.kept) - 12} more" if len(reverted.kept) > 12 else ""
        )
        return (
            f"The solution's files are back at attempt {number}: "
            f"{', '.join(reverted.restored) or 'none differed'} restored. "
            + (f"Left as they are: {shown}. " if reverted.kept else "")
            + f"A revert puts back only the solution's files (the solution and the files it names); files "
            f"made since, {SCRATCH_DIR}/ and {NOTES_FILE} are never reverted. What you had is {back}."
        )

    def finish(self, summary: str) -> Optional[str]:
        unmet = None if self.finish_answered else self._goal_unmet()
        if unmet is None:
            self.finished_summary = summary
            return None
        self.finish_answered = True
        return unmet

    def _goal_unmet(self) -> Optional[str]:
        """What remains of the task's goal while much of the budget does, or None. The goal of a
        megakernel task is an attempt that passes as one launch per step, at GOAL_FLOOR_FRACTION
        of the bytes floor's speed or better where the floor is known; launches can be counted
        only on a GPU."""
        budget = self.config.budget.wall_s
        remaining = self.tracker.deadline() - self.tracker.clock.now()
        counted = self.config.device.startswith("cuda") or any(
            a.single_launch is not None for a in self.ledger.attempts
        )
        best = self.ledger.best_attempt()
        if not self.task.wants_single_launch or not counted or remaining <= EARLY_FINISH_SHARE * budget:
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

    # -- attempts ----------------------------------------------------------------------------
    def _record_attempt(self, kind: str, result: EvalResult, call_id: str, scored: bool) -> str:
        """Commit the measured change, judge it against the best, revert it if it lost."""
        # Past every attempt ref too: a run killed between a commit and its trace event left one.
        number = max(self.ledger.next_number(), max(self.workspace.attempts(), default=0) + 1)
        previous = self.workspace.attempts().get(number - 1) or self.workspace.head()
        files = self.workspace.changed_files(previous)
        score = result.score if scored and result.verdict is Verdict.PASS else None
        trailers = {
            "Kagent-Attempt": str(number),
            "Kagent-Kind": kind,
            "Kagent-Verdict": result.verdict.value,
            "Kagent-Speedup": f"{score:.4f}" if score is not None else "-",
            "Kagent-Tokens": str(self.usage.total_tokens),
            "Kagent-Elapsed": f"{self.tracker.elapsed():.0f}s",
        }
        design = self.pending_design
        self.pending_design = None
        sha = self.workspace.commit(
            f"attempt {number}: {kind} {result.verdict.value}\n\n"
            f"{design.hypothesis if design else 'no design recorded'}",
            trailers,
        )
        self.workspace.mark_attempt(number, sha)
        kept, reverted_to, draft, revert_text, restored = True, None, False, "", None
        note, lost, new_best = self.ledger.judge(result, score, single_launch_goal=self.task.wants_single_launch)
        if new_best:
            self.ledger.best = number
            self.workspace.tag_best(sha)
        if lost and (self.drafting or self.undecided):
            draft = True
            best = self.ledger.best_attempt()
            note += (
                " — kept in place as a draft: "
                if self.drafting
                else " — kept in place (your last design call was refused, so whether this is a draft is "
                "undecided; call design again): "
            ) + (
                f"the best, attempt {best.number}, is safe and is what the run delivers"
                if best
                else "there is no best yet"
            )
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
                revert_text, restored = self._reverted_text(target, reverted, back), reverted.restored
            else:
                note += " — nothing better to revert to yet: fix it in place"
        attempt = Attempt(
            number=number,
            kind=kind,
            hypothesis=design.hypothesis if design else None,
            predicted=design.predicted if design else None,
            verdict=result.verdict.value,
            reason=result.reason,
            score=score,
            interval=score_interval(result) if score is not None else None,
            speedups={t.label: t.speedup for t in result.timings} if score is not None else {},
            files=files,
            commit=sha,
            kept=kept,
            draft=draft,
            single_launch=single_launch(result),
            floor_fraction=floor_fraction(result) if score is not None else None,
            candidate_ms={t.label: t.candidate.median_ms for t in result.timings} if score is not None else {},
            device_bound=result.device_bound if score is not None else None,
            note=note,
            elapsed_s=round(self.tracker.elapsed(), 1),
            tokens=self.usage.total_tokens,
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
        self._show(f"attempt {number}: {note}")
        return message

    def _revert_target(self) -> Optional[int]:
        """The best attempt; before there is one, the last attempt that passed a check."""
        if self.ledger.best is not None:
            return self.ledger.best
        passing = [a.number for a in self.ledger.attempts if a.verdict == Verdict.PASS.value and a.kept]
        return passing[-1] if passing else None

    # -- status, compaction, the end ---------------------------------------------------------
    def _status_text(self) -> str:
        s = self.tracker.summary()
        best = self.ledger.best_attempt()
        best_text = f"{best.score:.3f}x (attempt {best.number})" if best else "none yet"
        return (
            f"[budget] phase {s['phase']}; elapsed {s['elapsed'] / 60:.1f} min, remaining "
            f"{s['remaining'] / 60:.1f} min (the final slice starts "
            f"{max(0.0, self.tracker.final_slice_starts() - self.tracker.clock.now()) / 60:.1f} min from now); "
            f"tokens {self.usage.total_tokens:,}; cost ${self.cost:.2f}; best verified speedup {best_text}\n"
            + self._ledger_text()
        )

    def _ledger_text(self) -> str:
        """The ledger in full when it changed since the model last saw it in full, else a line:
        on a long run it would otherwise fill the context with copies of itself. A compaction's
        summary holds it in full, and a resumed loop shows it in full again."""
        render = self.ledger.render()
        if render == self.ledger_shown and self.ledger.attempts:
            return f"Ledger: unchanged since it was last shown ({len(self.ledger.attempts)} attempts)."
        self.ledger_shown = render
        return render

    def _compaction_warning(self) -> str:
        """Once per compaction, as the context nears its limit: the model's cue to bring its
        notes up to date while it still sees what they should say."""
        near = self._estimate_tokens() > COMPACTION_WARNING_SHARE * self.context.compact_above
        if self.compaction_warned or not near:
            return ""
        self.compaction_warned = True
        return memory.request(NOTES_FILE, self.config.solution_name)

    def _estimate_tokens(self) -> int:
        """The next request's prompt (kagent.agent.loop.context: the service's count where it gave one)."""
        return self.context.size(self.messages, self.system, self.tool_specs())

    def _maybe_compact(self) -> None:
        if not self.context.over(self._estimate_tokens()):
            return
        keep = self.config.keep_recent_messages
        cut = len(self.messages) - keep
        while cut > 1 and self.messages[cut].role != "assistant":
            cut += 1  # the kept part starts with an assistant turn, so every call keeps its result
        if cut <= 1 or cut >= len(self.messages):
            return
        dropped = self.messages[1:cut]
        solution = self.workspace.root / self.config.solution_name
        current = solution.read_text(errors="replace") if solution.is_file() else None
        notes = self.workspace.root / NOTES_FILE
        notes_text = (
            f"Your notes ({NOTES_FILE}), as they are now:\n```\n"
            f"{cap(notes.read_text(errors='replace'), NOTES_SHOWN_CHARS)}\n```"
            if notes.is_file()
            else f"You keep no {NOTES_FILE} yet: write one, and it will be shown here."
        )
        self.ledger_shown, self.compaction_warned = self.ledger.render(), False
        own = (
            f"Your own summary, as you wrote it before a compaction:\n{self.memory}"
            if self.memory
            else "You gave no summary before this compaction (asked for one under fixed headings)."
        )
        summary = (
            f"{COMPACTED_MARK} {len(dropped)} earlier messages were dropped to save context.\n{own}\n\n"
            f"{self.ledger_shown}\n{notes_text}\n"
            + memory.solution_text(self.config.solution_name, current, self.context.compact_above)
        )
        self.messages = [with_summary(self.messages[0], summary), *self.messages[cut:]]
        self.context.forget()
        self.trace.append(Compacted(turn=self.turn, dropped_messages=len(dropped), summary=summary, memory=self.memory))
        self._show("compacted the conversation")

    def _finalize(self) -> None:
        """Put the best attempt in place and re-verify it with the full harness, time permitting."""
        best = self.ledger.best_attempt()
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
        note = "re-verified"
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
                with self._busy(f"re-verifying attempt {best.number}"):
                    self.final_evaluation = evaluate(
                        self.task, self.workspace.root / self.config.solution_name, options, progress=self._on_progress
                    )
                note = reverification_note(self.final_evaluation)
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
        best, final = self.ledger.best_attempt(), self.final_evaluation
        if best is None or not self._verified():
            return None
        return final.score if final is not None and final.verdict is Verdict.PASS else best.score

    def _verified(self) -> bool:
        """Whether a verified result stands: a best attempt its final re-verification did not refute
        (see reverification_inconclusive)."""
        best, final = self.ledger.best_attempt(), self.final_evaluation
        return best is not None and (
            final is None or final.verdict is Verdict.PASS or reverification_inconclusive(final)
        )

    def _end(self, cause: Cause, reason: str) -> RunReport:
        best, final = self.ledger.best_attempt(), self.final_evaluation
        verified = self._verified()
        if best is not None and final is not None and not verified:
            reason += (
                f"; the best attempt ({best.number}) failed its final re-verification: "
                f"{final.verdict.value}: {final.reason[:200]}"
            )
        status = end_state(cause, verified)
        self.trace.append(
            RunEnded(
                status=status,
                reason=reason,
                best_attempt=best.number if best else None,
                best_speedup=best.score if best else None,
                tokens=self.usage.total_tokens,
                cost_usd=self.cost,
            )
        )
        self._show(f"run ended: {reason}", ended=True)
        reverified = final if final is not None and final.verdict is Verdict.PASS else None
        return RunReport(
            run_id=self.config.run_id,
            task=self.task.name,
            model=self.model.name,
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
            attempts=len(self.ledger.attempts),
            turns=self.turn,
            usage=self.usage,
            cost_usd=self.cost,
            elapsed_s=round(self.tracker.elapsed(), 1),
            warnings=self.warnings,
        )

    @contextmanager
    def _busy(self, what: str) -> Iterator[None]:
        """Shown as what is going on now, with the time since it began, until the block ends."""
        self.activity = Activity(what, self.tracker.elapsed())
        self._show()
        try:
            yield
        finally:
            self.activity = None

    def _on_progress(self, event: dict) -> None:
        """An evaluation's harness event, as it arrives: the view shows how far it has got."""
        text = progress.describe(event)
        if text and self.activity is not None:
            self.activity.detail = text
            self._show()

    def _show(self, event: Optional[str] = None, ended: bool = False) -> None:
        if event is not None:
            self.last_event = event
        best, final = self.ledger.best_attempt(), self.final_evaluation
        s = self.tracker.summary()
        activity = self.activity or Activity("", 0.0)
        self.view(
            ViewUpdate(
                phase=s["phase"],
                turn=self.turn,
                elapsed_s=s["elapsed"],
                remaining_s=s["remaining"],
                tokens=self.usage.total_tokens,
                cost_usd=self.cost,
                best_score=best.score if best else None,
                best_attempt=best.number if best else None,
                final_score=final.score if final is not None and final.verdict is Verdict.PASS else None,
                attempts=self.ledger.attempts[-6:],
                last_event=self.last_event,
                activity=activity.what,
                activity_since_s=activity.since_s,
                detail=activity.detail,
                ended=ended,
            )
        )
