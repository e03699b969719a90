"""The model's tool calls, run: each traced as it starts and finishes, the task's files put back,
an evaluation recorded as an attempt, a failing call sent again unchanged told so, and the
calls of a turn a crash cut settled on resume.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any, Optional

from kagent.agent.loop.attempts import Attempts
from kagent.agent.loop.cut_answers import cut_call_result
from kagent.agent.loop.state import Rebuilt
from kagent.agent.loop.status import Shared
from kagent.agent.storage.trace import INLINE_LIMIT, ToolFinished, ToolStarted
from kagent.core.messages import ToolCall, ToolResult, ToolSpec
from kagent.sandbox.results import EvalResult
from kagent.tools.base import Tool, ToolContext, ToolOutcome, cap, decoded_arguments
from kagent.tools.evaluation import summarize


def sha256_of(value: Any) -> str:
    """A stable digest of a JSON-able value (a prompt, a call's arguments)."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


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
        fingerprint = sha256_of([call.name, call.arguments]) if outcome.is_error else None
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


class ToolCalls:
    """Runs the model's calls against the run's tools."""

    def __init__(self, shared: Shared, tools: list[Tool], attempts: Attempts, room_tokens: int):
        self.tools: dict[str, Tool] = {t.spec.name: t for t in tools}
        s = shared
        self.config, self.task, self.workspace, self.trace = s.config, s.task, s.workspace, s.trace
        self.tracker, self.eval_options, self.books, self.live = s.tracker, s.eval_options, s.books, s.live
        self.attempts = attempts
        self.repetition = RepeatedFailures(self.config.max_repeated_failures)
        self.room_tokens = room_tokens  # what an answer may hold besides its thinking
        self.cut_cap: Optional[int] = None  # set while the calls of an answer the output cap cut run

    def specs(self) -> list[ToolSpec]:
        return [t.spec for t in self.tools.values()]

    def under_way(self) -> str:
        """What the tools have going on in the background, a line each."""
        return "\n".join(filter(None, (tool.under_way() for tool in self.tools.values())))

    def close(self) -> None:
        for tool in self.tools.values():
            tool.close()

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
            progress=self.live.on_progress,
            loop=self.attempts,
        )

    def call(self, call: ToolCall) -> ToolResult:
        turn = self.books.turn
        self.trace.append(ToolStarted(turn=turn, call_id=call.id, name=call.name, arguments=call.arguments))
        started = self.tracker.clock.now()
        tool = self.tools.get(call.name)
        with self.live.busy(f"tool {call.name}"):
            outcome = self._dispatch(call, tool)
        if tool is not None and tool.facts.changes_files:
            outcome = self._with_the_task_put_back(outcome)
        if tool is not None and tool.facts.records_attempt and outcome.evaluation is not None:
            note = self.attempts.record(call.name, outcome.evaluation, call.id, scored=tool.facts.scores_attempt)
            outcome = outcome.model_copy(update={"content": f"{outcome.content}\n\n{note}"})
        outcome = self.repetition.watch(call, outcome)
        if tool is not None and tool.facts.changes_files:
            # The state a resumed run goes back to, should the process die before the next one.
            outcome.data = {**outcome.data, "snapshot": self.workspace.snapshot(), "head": self.workspace.head()}
        blob = self.trace.blob(outcome.content) if len(outcome.content) > INLINE_LIMIT else None
        self.trace.append(
            ToolFinished(
                turn=turn,
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
                return ToolOutcome(content=cut_call_result(call, self.cut_cap, self.room_tokens), is_error=True)
            arguments, note = decoded, "\n[kagent] The arguments came as a JSON string, not an object: decoded them."
        if tool is None:
            names = ", ".join(sorted(self.tools))
            return ToolOutcome(content=f"there is no tool named {call.name!r}; the tools are: {names}", is_error=True)
        outcome = tool.run(arguments, self.tool_context(self.tracker.final_slice_starts()))
        return outcome.model_copy(update={"content": outcome.content + note}) if note else outcome

    # -- the calls of a turn a crash cut -------------------------------------------------------
    def settlement(self, call: ToolCall, state: Rebuilt) -> str:
        """How a resumed run answers a call that had no result: from the attempt it recorded, as
        interrupted (a tool that must not run twice), or by running it again."""
        if call.id in state.attempt_messages:
            return "answered from its recorded attempt"
        tool = self.tools.get(call.name)
        return "answered as interrupted" if tool is not None and not tool.facts.rerun_after_crash else "run again"

    def settle(self, call: ToolCall, action: str, state: Rebuilt) -> ToolResult:
        if action == "run again":
            return self.call(call)
        if action == "answered as interrupted":
            content, is_error = self.tools[call.name].facts.interrupted_answer, True
        else:
            message, evaluation = state.attempt_messages[call.id]
            content, is_error = f"{summarize(EvalResult.model_validate(evaluation))}\n\n{message}", False
        self.trace.append(
            ToolFinished(
                turn=self.books.turn,
                call_id=call.id,
                name=call.name,
                content=content,
                is_error=is_error,
                seconds=0.0,
                data={"settled": action},
            )
        )
        return ToolResult(tool_call_id=call.id, content=content, is_error=is_error)
