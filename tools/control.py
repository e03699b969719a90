"""Tools that steer the loop itself: record a design before a change, go back to an earlier
attempt, finish. They act through the loop's handle in their context (ToolContext.loop), and
say in their result's data what they changed, so that a resumed run rebuilds it from the trace."""

from __future__ import annotations

from typing import Optional

from pydantic import Field, ValidationError

from kagent.tools.base import (
    UNTOUCHED,
    Args,
    BaseTool,
    FileEffect,
    Restore,
    ToolContext,
    ToolFacts,
    ToolOutcome,
    understood,
)


class DesignArgs(Args):
    hypothesis: str = Field(description="What you will change and why it should help")
    predicted: str = Field(description="The predicted effect, with numbers")
    draft: bool = Field(
        False,
        description="True while you build something that fails checks before it works (a "
        "large kernel written and fixed in parts): until your next design, an "
        "attempt that fails or regresses stays in place as a draft instead of "
        "being reverted to the best. The best stays safe and is what the run "
        "delivers; revert(attempt=N) goes back to any attempt.",
    )
    why_last: Optional[str] = Field(
        None,
        max_length=400,
        description="One line: why your last attempt came out as it did (faster, "
        "slower, wrong) against what you predicted. It joins that attempt "
        "in the ledger.",
    )


class Design(BaseTool):
    name = "design"
    description = (
        "Record a hypothesis and its predicted effect before a change; the next attempt carries it in "
        "the ledger. Say in why_last why the last attempt came out as it did; set draft=true while a "
        "large change is built through failing attempts."
    )
    Arguments = DesignArgs
    facts = ToolFacts(needs_loop=True)

    def refused(self, message: str, args: dict, ctx: ToolContext) -> ToolOutcome:
        """A design refused for its arguments leaves the next attempt undecided, not a non-draft:
        the model may be building a draft in the same answer, and a revert would take it away."""
        ctx.control().design_refused()
        return ToolOutcome(
            content=f"{message}\nNothing was recorded. Until a design is recorded, an attempt that fails or "
            f"regresses stays in place (undecided: maybe a draft); call design again.",
            is_error=True,
            data={"invalid_args": args, "design_refused": True},
        )

    def execute(self, args: DesignArgs, ctx: ToolContext) -> ToolOutcome:
        explained = ctx.control().record_design(args.hypothesis, args.predicted, args.draft, args.why_last)
        content = "Recorded. The next check or benchmark attempt carries this design in the ledger."
        if args.draft:
            content += (
                " Draft: until your next design, attempts that fail or regress stay in place; the best "
                "attempt stays safe and is what the run delivers."
            )
        data: dict = {"design": {"hypothesis": args.hypothesis, "predicted": args.predicted, "draft": args.draft}}
        if explained is not None:
            data["why"] = {"attempt": explained, "text": args.why_last}
            content += f" Your reason joins attempt {explained}."
        elif args.why_last:
            content += " There is no attempt yet for why_last to join."
        return ToolOutcome(content=content, data=data)


class RevertArgs(Args):
    attempt: Optional[int] = Field(None, description="Attempt number to go back to (default: the best)")


class Revert(BaseTool):
    name = "revert"
    description = (
        "Put the solution's files (the solution and the files it names) back as an earlier attempt had "
        "them (default: the best). Files made since, scratch/ and notes.md stay as they are; the result "
        "says what changed and where the replaced version stays."
    )
    Arguments = RevertArgs
    facts = ToolFacts(changes_files=True, needs_loop=True)

    def file_change(self, args: dict) -> FileEffect:
        try:
            return Restore(RevertArgs.model_validate(understood(RevertArgs, args)[0]).attempt)
        except ValidationError:
            return UNTOUCHED

    def execute(self, args: RevertArgs, ctx: ToolContext) -> ToolOutcome:
        number, told, restored = ctx.control().revert_to(args.attempt)
        # The files put back, for a replay to follow (the others stayed as they were).
        return ToolOutcome(content=told, data={"attempt": number, "restored": restored})


class FinishArgs(Args):
    summary: str = Field(description="What was achieved and what you would try next")


class Finish(BaseTool):
    name = "finish"
    description = "End the session: the best verified attempt becomes the final solution."
    Arguments = FinishArgs
    facts = ToolFacts(needs_loop=True)

    def execute(self, args: FinishArgs, ctx: ToolContext) -> ToolOutcome:
        remains = ctx.control().finish(args.summary)
        if remains is not None:
            return ToolOutcome(content=remains, data={"finish_answered": args.summary})
        return ToolOutcome(content=ctx.control().ending(), data={"finished": args.summary})
