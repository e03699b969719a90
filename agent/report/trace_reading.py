"""What every view of a run's trace shares (`kagent replay` in a terminal, `kagent report` in a
browser): the workspace's files rebuilt event by event, and the wording of the events that
both tell in a line.

Files are not stored in the trace, but every call is, and each tool says what its calls do to
the files (Tool.file_change: write_file and edit_file spell it out, revert goes back to an
attempt, shell may do anything), so the content of each file the model wrote can be rebuilt as
the events are read: that is what lets a view show a write_file as the diff against the
previous version instead of the whole new file.
"""

from __future__ import annotations

import difflib
import functools
import posixpath
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Optional, cast

from kagent.agent.loop.budget import BudgetSummary
from kagent.agent.loop.ledger import Attempt
from kagent.agent.settings import minutes
from kagent.agent.storage.trace import AttemptRecorded, Interrupted, RunResumed, ToolFinished, ToolStarted, UserNotice
from kagent.tools import all_tools
from kagent.tools.base import UNTOUCHED, FileEffect, Restore, Rewrite, Tool, Unknown

TRACE_NAME = "trace.jsonl"


def trace_path(path: Path) -> Path:
    """A run folder's trace, or the path itself when it names the trace file."""
    path = Path(path)
    return path / TRACE_NAME if path.is_dir() or path.suffix != ".jsonl" else path


def shorten(text: str, limit: int) -> str:
    """``text`` in at most ``limit`` characters: cut at the last word boundary that keeps most
    of it (a note cut mid-word read "worst: seed 1 c"), with an ellipsis."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    if space >= limit * 2 // 3:
        cut = cut[:space]
    return cut.rstrip(" ,;:·—-") + "…"


def thinking_line(block: dict[str, Any]) -> str:
    """A thinking block in one line: its size and its first line (the whole is for who asks)."""
    if block.get("redacted_data"):
        return "thinking (redacted by the provider)"
    thought = block.get("thinking") or ""
    first = next((line.strip() for line in thought.splitlines() if line.strip()), "")
    return f"thinking ({len(thought):,} chars): {shorten(first, 100)}"


def budget_line(budget: dict[str, Any]) -> str:
    """The budget's numbers of a user notice: phase, time, tokens and cost, each of its limit."""
    b = cast(BudgetSummary, budget)  # as BudgetTracker.summary() made it
    return " · ".join(
        [
            f"phase {b['phase']}",
            f"elapsed {minutes(b['elapsed'])} of {minutes(b['wall'])}",
            f"tokens {b['tokens']:,}" + (f" of {b['max_tokens']:,}" if b["max_tokens"] else ""),
            f"cost ${b['cost']:.2f}" + (f" of ${b['max_cost']:.2f}" if b["max_cost"] else ""),
        ]
    )


def notice_line(event: UserNotice) -> Optional[str]:
    """The first line of what kagent told the model on its own (a nudge, a revert notice); None
    for the usual status line, which the budget line says."""
    if event.text.startswith("[budget]"):
        return None
    text = event.text.strip()
    return text.splitlines()[0] if text else ""


def interrupted_line(event: Interrupted) -> str:
    """What stopped the run short, when, and what it was doing, after the word "interrupted"."""
    who = "the budget's final slice (exploring ended there)" if event.cause == "deadline" else event.cause
    text = f"by {who} at {minutes(event.elapsed_s)}" + (f", during {event.during}" if event.during else "")
    return text if event.cause == "deadline" else f"{text}; `kagent resume` goes on with the run"


def resumed_line(event: RunResumed) -> str:
    """What a resume did, after the word "resumed"."""
    text = (
        f"(segment {event.segment}): {minutes(event.spent_before_s)} spent before, wall budget now "
        f"{minutes(event.budget_wall_s)}"
    )
    if event.restarted:
        text += "; the trace held no recorded step, so the run started over from turn 1"
    if event.settled_calls:
        text += f"; {len(event.settled_calls)} unfinished tool call(s) settled"
    if event.workspace_side_ref:
        text += f"; uncommitted changes kept at {event.workspace_side_ref}"
    if event.previous_main_ref:
        text += f"; main's earlier commits kept at {event.previous_main_ref}"
    if event.stale_lock:
        text += f"; took over the lock of dead process {event.stale_lock.get('pid')}"
    if event.torn_tail_dropped:
        text += "; a torn last trace line was dropped"
    return text


def norm_path(path: str) -> str:
    """One key per file, however the model spelled it (./solution.py, solution.py)."""
    return posixpath.normpath(path.strip())


def line_count(text: str) -> int:
    return text.count("\n") + (1 if text and not text.endswith("\n") else 0)


def unified_diff(before: str, after: str, name: str, context: int = 2) -> list[str]:
    return list(
        difflib.unified_diff(
            before.splitlines(), after.splitlines(), fromfile=f"a/{name}", tofile=f"b/{name}", lineterm="", n=context
        )
    )


def diff_line_kind(line: str) -> str:
    """What a line of ``unified_diff`` is, as every view colours it: "head" (the file names),
    "add", "del", "hunk" (an @@ line), or "" (context)."""
    if line.startswith(("---", "+++")):
        return "head"
    if line.startswith(("+", "-")):
        return "add" if line.startswith("+") else "del"
    return "hunk" if line.startswith("@@") else ""


@dataclass(frozen=True)
class FileChange:
    """What one call that rewrites a file (write_file, edit_file) does to it, as far as the
    trace knows.

    ``against`` says what ``diff`` is: "previous", the unified diff against the contents known
    before the call (empty when the call changes nothing); "replacement", a change of a file
    whose contents are unknown, shown as its own old → new lines; "nothing", a write of a file
    whose earlier contents are unknown (a first write), with no diff. ``whole``: the call gave
    the file's whole new content (so a diff is against the previous version); ``note``: what
    the tool says beside the path (a write's line count).
    """

    path: str
    diff: list[str]
    against: Literal["previous", "replacement", "nothing"]
    note: str = ""
    whole: bool = False


@functools.cache
def _tools() -> dict[str, Tool]:
    return {tool.spec.name: tool for tool in all_tools()}


def file_effect(name: str, arguments: dict[str, Any]) -> FileEffect:
    """What a call does to the files, as its tool tells from its arguments; a tool this version
    does not know is taken to have changed nothing."""
    tool = _tools().get(name)
    return tool.file_change(arguments) if tool is not None else UNTOUCHED


class TraceFiles:
    """Contents of the workspace files as far as the trace tells them.

    A path is known after a write_file; edits apply to known contents; attempts snapshot the
    known contents so that a revert (automatic or asked for) restores them. A revert that
    lists the files it put back (``restored``) restores only those, and every other file keeps
    what it had, as in the workspace; one of an older trace, which lists none, restored the
    whole tree. Anything the trace cannot follow (a shell command, a revert to a commit never
    snapshotted) forgets what it may have changed, so that a diff is never shown against a
    guess. Feed it every event in trace order (``follow``); ``change`` tells what a call is
    about to do.
    """

    def __init__(self) -> None:
        self.known: dict[str, str] = {}
        self.by_commit: dict[str, dict[str, str]] = {}
        self.by_attempt: dict[int, dict[str, str]] = {}
        self.best: Optional[int] = None
        self.calls: dict[str, ToolStarted] = {}  # calls awaiting their result

    def follow(self, event: Any) -> Optional[ToolStarted]:
        """Update the contents from one event. For a tool's result, returns the call it answers
        (None when the trace holds no start for it)."""
        if isinstance(event, ToolStarted):
            self.calls[event.call_id] = event
        elif isinstance(event, ToolFinished):
            started = self.calls.pop(event.call_id, None)
            self._apply(event, started)
            return started
        elif isinstance(event, AttemptRecorded):
            attempt = Attempt.model_validate(event.attempt)
            self._snapshot(attempt.number, event.commit, is_best=attempt.note.startswith("new best"))
            if event.reverted_to:
                self._restore(self.by_commit.get(event.reverted_to), event.restored)
        elif isinstance(event, RunResumed):
            # Calls cut short by the interruption were settled by the resume: none awaits a result now.
            self.calls.clear()
            if event.workspace_side_ref:  # changes after the last commit were moved aside: contents unknown
                self.known = {}
        return None

    def change(self, call: ToolStarted) -> Optional[FileChange]:
        """What a call that rewrites a file changes, against the contents known before it;
        None for any other call (or one whose arguments are not those of a file change)."""
        effect = file_effect(call.name, call.arguments)
        if not isinstance(effect, Rewrite):
            return None
        whole = effect.excerpt is None
        before = self.known.get(norm_path(effect.path))
        after = effect.after(before) if before is not None else None
        if before is not None and after is not None:
            return FileChange(effect.path, unified_diff(before, after, effect.path), "previous", effect.note, whole)
        if effect.excerpt is None:
            return FileChange(effect.path, [], "nothing", effect.note, whole)
        # The file is not known (or the change will not apply): the changed text itself, old → new.
        old, new = effect.excerpt
        snippet = [
            line for line in unified_diff(old, new, effect.path, context=1) if not line.startswith(("---", "+++"))
        ]
        return FileChange(effect.path, snippet, "replacement", effect.note, whole)

    def _apply(self, event: ToolFinished, started: Optional[ToolStarted]) -> None:
        """Replay the call's effect on the rebuilt file contents. A call that failed changed
        nothing, unless what it does cannot be told (a failed command may have written files)."""
        effect = file_effect(event.name, started.arguments if started is not None else {})
        if isinstance(effect, Unknown):
            self.known = {}
        elif event.is_error or started is None:
            return
        elif isinstance(effect, Rewrite):
            key = norm_path(effect.path)
            after = effect.after(self.known.get(key))
            if after is None:
                self.known.pop(key, None)
            else:
                self.known[key] = after
        elif isinstance(effect, Restore):
            # The result names the attempt it went back to (the best, when the call named none)
            # and the files it put back; a result without them is of an older trace.
            number = event.data.get("attempt", effect.attempt if effect.attempt is not None else self.best)
            restored = event.data.get("restored")
            snapshot = self.by_attempt.get(number) if number is not None else None
            self._restore(snapshot, [str(path) for path in restored] if isinstance(restored, list) else None)

    def _snapshot(self, number: int, commit: str, is_best: bool) -> None:
        self.by_commit[commit] = dict(self.known)
        self.by_attempt[number] = dict(self.known)
        if is_best:
            self.best = number

    def _restore(self, snapshot: Optional[dict[str, str]], restored: Optional[list[str]]) -> None:
        """Put back what a revert put back: the ``restored`` files as ``snapshot`` has them
        (a file it lacks, or a snapshot never taken, becomes unknown), or, where the revert
        listed none (an older trace), the whole tree."""
        if restored is None:
            self.known = dict(snapshot) if snapshot is not None else {}
            return
        for key in map(norm_path, restored):
            content = snapshot.get(key) if snapshot is not None else None
            if content is None:
                self.known.pop(key, None)
            else:
                self.known[key] = content
