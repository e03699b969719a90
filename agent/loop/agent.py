"""The agent loop: ask the model for a turn, run the tools it called, keep the books, repeat.

Control flow that leaves the loop (the model finished, the budget is spent, the final slice
has come) is a ``Stop`` carrying the reason; everything that happens is in the trace. The jobs
beside the loop are objects of their own, which ``Agent`` composes: the tool calls
(kagent.agent.loop.calls), the attempts and the loop-control tools (attempts), compaction
(compaction), the re-verification and the report (finalize), and what the run shows of itself
(status).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Optional

from kagent.agent.loop import pricing
from kagent.agent.loop.attempts import Attempts
from kagent.agent.loop.briefing import goal_text, rules_text
from kagent.agent.loop.budget import BudgetTracker
from kagent.agent.loop.calls import ToolCalls, sha256_of
from kagent.agent.loop.compaction import Compaction
from kagent.agent.loop.context import ContextMeter, user_limit
from kagent.agent.loop.cut_answers import CutAnswers
from kagent.agent.loop.finalize import Finalizer, RunReport
from kagent.agent.loop.ledger import Ledger
from kagent.agent.loop.models.limits import limits_of, limits_warning
from kagent.agent.loop.state import Rebuilt
from kagent.agent.loop.status import Activity, Books, Live, Shared, Status, ViewUpdate
from kagent.agent.loop.text_answers import TextAnswers
from kagent.agent.outcome import Cause
from kagent.agent.settings import RunConfig
from kagent.agent.storage.trace import (
    ErrorRecorded,
    Interrupted,
    ModelRequested,
    ModelResponded,
    ModelRetried,
    RunResumed,
    RunStarted,
    TraceWriter,
    UserNotice,
)
from kagent.agent.storage.workspace import Workspace
from kagent.core.errors import KagentError, TransientModelError
from kagent.core.messages import ChatModel, Message, ModelResponse, TextBlock, ToolCall, ToolResult, Usage
from kagent.sandbox.evaluate import EvalOptions
from kagent.sandbox.results import EvalResult
from kagent.tasks import TaskRef
from kagent.tools.base import Tool

__all__ = ["Agent", "RunReport", "Stop", "ViewUpdate"]


class Stop(Exception):
    """Exploring is over; ``cause`` says what ended it (the state follows from it and the result)."""

    def __init__(self, reason: str, cause: Cause):
        super().__init__(reason)
        self.reason = reason
        self.cause = cause


def _said(message: Message) -> str:
    return " ".join(b.text for b in message.content if isinstance(b, TextBlock))


def resumed_notice(resumed: RunResumed, plan: list[tuple[ToolCall, str]]) -> str:
    """What a resumed run tells the model first: where its workspace stands, how the calls of the
    interrupted turn were answered."""
    where = "the workspace is as it was after the last tool call that finished" + (
        f"; what the interrupted process changed after it is kept on {resumed.workspace_side_ref}"
        if resumed.workspace_side_ref
        else ""
    )
    return (
        f"[resumed] The run was interrupted and has been resumed (segment {resumed.segment}); {where}. "
        + (
            "Calls of the interrupted turn: " + ", ".join(f"{c.name} {action}" for c, action in plan) + ". "
            if plan
            else ""
        )
        + "\n"
    )


class Agent:
    """The loop, and the run's handle for its driver (kagent.agent.lifecycle.runs): its books,
    its result so far, what it is doing now."""

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
        self.system = system_prompt
        self.versions = versions or {}
        self.machine = machine  # what the first message says of the machine (kagent.agent.lifecycle.device)
        self.messages: list[Message] = []
        self.books = Books()
        self.live = Live(view or (lambda update: None), tracker, self.books)
        shared = Shared(config, task, workspace, trace, tracker, eval_options, self.books, self.live)
        self.status = Status(tracker, self.books)
        self.attempts = Attempts(shared)
        # Answers the output cap cut; the calls of such an answer are answered with how to split it.
        answer_room = config.max_output_tokens - (config.thinking_budget or 0)
        self.cut_answers = CutAnswers(config.max_output_tokens, answer_room)
        self.calls = ToolCalls(shared, tools, self.attempts, room_tokens=self.cut_answers.room_tokens)
        self.text_answers = TextAnswers(config.max_text_answers)
        # What the user should beware of in this run's figures, said at its start and in its report.
        self.warnings = [text for text in [pricing.price_warning(model.name), limits_warning(model.name)] if text]
        # The window the conversation must fit, prompt and answer together.
        context = ContextMeter(limits_of(model.name).context_window, config.max_output_tokens, user_limit(config))
        self.context = context
        self.compaction = Compaction(shared, context, (system_prompt, self.calls.specs()), self.status)
        self.finalizer = Finalizer(shared)

    # -- what the run's driver reads ---------------------------------------------------------
    @property
    def ledger(self) -> Ledger:
        return self.books.ledger

    @property
    def usage(self) -> Usage:
        return self.books.usage

    @property
    def cost(self) -> float:
        return self.books.cost

    @property
    def turn(self) -> int:
        return self.books.turn

    @property
    def activity(self) -> Optional[Activity]:
        return self.live.activity

    @property
    def final_evaluation(self) -> Optional[EvalResult]:
        return self.finalizer.final_evaluation

    def result_score(self) -> Optional[float]:
        """The run's result so far: the re-verified score once there is one, the best attempt's before."""
        return self.finalizer.result_score()

    # -- starting and going on ---------------------------------------------------------------
    def first_message(self) -> Message:
        text = (
            f"{self.task.prompt.strip()}\n\n"
            f"Your workspace holds the task's files under task/ (read-only) and your solution goes in "
            f"{self.config.solution_name}. Evaluation runs on device {self.config.device} at {self.config.scale} "
            f"scale.\n\n"
            + (f"{self.machine}\n\n" if self.machine else "")
            + f"{goal_text(self.task)}\n\n{rules_text(self.config, self.task)}\n\n"
            + (f"Your direction in this run: {self.config.direction}\n\n" if self.config.direction else "")
            + self.status.text()
        )
        return Message(role="user", content=[TextBlock(text=text)])

    def run(self, restart: Optional[RunResumed] = None) -> RunReport:
        """A new run: record how it starts, then drive it. ``restart`` is the resume of a run
        whose trace held no start: recorded right after this new start, it says what was kept."""
        self.messages = [self.first_message()]
        specs = [s.model_dump() for s in self.calls.specs()]
        self.trace.append(
            RunStarted(
                run_id=self.config.run_id,
                config=self.config,
                versions=self.versions,
                prompt_sha256=sha256_of([self.system, self.messages[0].model_dump()]),
                tools_sha256=sha256_of(specs),
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
        self.messages = state.messages
        self.books.go_on_from(state)
        self.attempts.go_on_from(state)
        self.compaction.memory = state.memory
        calls = self.calls
        plan = [(call, calls.settlement(call, state)) for call in state.pending_calls if call.id not in state.results]
        resumed.settled_calls = [{"call_id": c.id, "name": c.name, "action": action} for c, action in plan]
        resumed.warnings = self.warnings
        self.trace.append(resumed)
        for call, action in plan:
            state.results[call.id] = calls.settle(call, action, state)
        notice = resumed_notice(resumed, plan) + self.status.text()
        self.trace.append(UserNotice(turn=self.turn, text=notice, budget=dict(self.tracker.summary())))
        if state.pending_calls:
            results = [state.results[c.id] for c in state.pending_calls]
            self.messages.append(Message(role="user", content=[*results, TextBlock(text=notice)]))
        elif self.messages[-1].role == "user":
            self.messages[-1] = Message(role="user", content=[*self.messages[-1].content, TextBlock(text=notice)])
        else:
            self.messages.append(Message(role="user", content=[TextBlock(text=notice)]))
        return self.drive()

    # -- the loop ----------------------------------------------------------------------------
    def drive(self) -> RunReport:
        """Turns until a Stop, then the final slice and the end (also for a resumed run)."""
        cause: Cause
        try:
            if self.attempts.finished_summary is not None:  # a resumed run whose model had already finished
                raise Stop(self.attempts.finished_reason(), "model")
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
        self.calls.close()  # background jobs end with the exploration: the final re-verification runs alone
        self.finalizer.finalize()
        return self.finalizer.end(cause, reason, self.model.name, self.warnings)

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
        response = self._ask()
        summary_kept = self.compaction.heard(_said(response.message))
        self.calls.cut_cap = self.config.max_output_tokens if response.stop_reason == "max_tokens" else None
        calls = response.message.tool_calls()
        if not calls:
            self._no_tool_calls(response, summary_kept)
            return
        self.cut_answers.watch(response)
        self.text_answers.answered_with_calls()
        results: list[ToolResult | TextBlock] = [self.calls.call(call) for call in calls]
        status = self.status.text() + self.compaction.warning(self.messages)
        self.trace.append(UserNotice(turn=self.turn, text=status, budget=dict(self.tracker.summary())))
        self.messages.append(Message(role="user", content=[*results, TextBlock(text=status)]))
        if self.attempts.finished_summary is not None:
            raise Stop(self.attempts.finished_reason(), "model")
        repetition = self.calls.repetition
        if repetition.stuck:
            raise Stop(
                f"stuck: the model sent the same failing call ({repetition.name}) {repetition.count} times in a row",
                "stuck",
            )

    def _ask(self) -> ModelResponse:
        """A new turn: the conversation compacted if need be, the model's answer charged and kept."""
        self.books.turn += 1
        self.messages = self.compaction.compacted(self.messages)
        self.trace.append(ModelRequested(turn=self.turn, message_count=len(self.messages)))
        with self.live.busy("waiting for the model"):
            response = self._call_model()
        cost = pricing.cost(self.model.name, response.usage)
        self.books.charge(response.usage, cost)
        self.tracker.charge(response.usage.total_tokens, cost)
        self.trace.append(ModelResponded(turn=self.turn, response=response.model_dump(mode="json"), cost_usd=cost))
        self.context.counted(response.usage, len(self.messages))
        self.messages.append(response.message)
        self.live.show("model answered")
        return response

    def _no_tool_calls(self, response: ModelResponse, summary_kept: bool = False) -> None:
        cut = self.cut_answers.watch(response)
        if self.cut_answers.exhausted:
            raise Stop(self.cut_answers.reason(), "model")
        if cut is None and response.stop_reason == "refusal":
            raise Stop("the model refused to go on", "model")
        if cut is None and summary_kept:  # the answer asked for: no reminder, and it does not count
            cut = "Your summary is kept for the compaction. Go on with the tools."
        elif cut is None:
            cut = self.text_answers.reminder(_said(response.message), self.calls.under_way())
        text = cut + "\n\n" + self.status.text()
        self.trace.append(UserNotice(turn=self.turn, text=text, budget=dict(self.tracker.summary())))
        self.messages.append(Message(role="user", content=[TextBlock(text=text)]))
        if self.text_answers.exhausted:
            raise Stop(
                f"the model answered {self.text_answers.in_a_row} times in a row without calling a tool", "model"
            )

    def _call_model(self) -> ModelResponse:
        """One model turn, abandoned (not awaited) if it runs into the final slice."""
        box: dict[str, Any] = {}
        max_tokens = self.context.answer_cap(self.compaction.prompt_tokens(self.messages))
        specs = self.calls.specs()

        def call() -> None:
            try:
                box["response"] = self.model.complete(self.system, self.messages, specs, max_tokens)
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
        self.live.show(f"retrying the model in {wait_s:.0f} s ({error})")
