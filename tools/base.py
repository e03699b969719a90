"""What every tool shares: the context of a run, the outcome the model sees, argument
validation, output capping, a scrubbed environment and workspace-confined paths, and the facts
each tool declares about itself (ToolFacts, file_change), which the loop, a resume and a replay
read instead of keeping lists of tool names.

Errors the model can cause (a bad path, bad arguments, a failing command) are data: a
ToolError turned into an ``is_error`` outcome it can act on. Bugs in kagent still raise.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Optional, Protocol, Union, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kagent.core.messages import ToolSpec
from kagent.sandbox import runner
from kagent.sandbox.evaluate import EvalOptions
from kagent.sandbox.file_plans import FilePlan, file_plan
from kagent.sandbox.results import EvalResult
from kagent.sandbox.scrub import is_secret_name, scrubbed_env  # noqa: F401  (re-exported for tools)
from kagent.tasks import TaskRef

# Folders the model may read but never write: the task's own files and the run's history.
READ_ONLY_DIRS = ("task", ".git")


class ToolError(Exception):
    """A mistake the model made (or a limit it hit); its message is what the model sees."""


class LoopControl(Protocol):
    """What a loop-control tool (design, revert, finish) may do to the loop that runs it; the
    agent's loop implements it (kagent.agent.loop.attempts.Attempts) and hands that to the
    tools in their context."""

    def record_design(
        self, hypothesis: str, predicted: str, draft: bool = False, why: Optional[str] = None
    ) -> Optional[int]:
        """The next attempt carries this design in the ledger (``draft``: attempts under it that
        fail stay in place); ``why``, the model's reason for the last attempt's outcome, joins
        that attempt, whose number is returned (None: there is none yet)."""

    def revert_to(self, attempt: Optional[int]) -> tuple[int, str, list[str]]:
        """Put the solution's files back to ``attempt`` (None: the best) and commit that;
        returns the attempt's number, what the model is told (what changed, what stayed, where
        the replaced version is) and the files put back. ToolError when there is no such attempt."""

    def ending(self) -> str:
        """What happens once the run stops exploring, as a finish is answered: the best attempt
        re-verified, or, where there is none, that there is nothing to re-verify."""

    def design_refused(self) -> None:
        """A design call was refused for its arguments: until a design is recorded, an attempt
        that fails or regresses stays in place, as whether it is a draft is undecided."""

    def finish(self, summary: str) -> Optional[str]:
        """End exploring once this turn's calls are answered; or, once, while the task's goal is
        unmet and much budget remains, decline and return what remains to try."""


@dataclass
class ToolContext:
    """Everything a tool needs about the run it serves."""

    workspace: Path
    task: TaskRef
    eval_options: EvalOptions
    solution_name: str = "solution.py"
    deadline: Optional[float] = None  # time.monotonic() value nothing may run past
    max_output_chars: int = 8000  # in a run, its settings' tool_output_chars
    env: Optional[dict[str, str]] = None  # None: os.environ, scrubbed of credentials
    progress: Optional[Callable[[dict], None]] = None  # an evaluation's harness events as they arrive (live view)
    loop: Optional[LoopControl] = None  # the loop running the tool; only loop-control tools use it

    def timeout(self, own_limit: float) -> float:
        """The seconds a step may take: its own limit, cut to what is left of the run."""
        if self.deadline is None:
            return own_limit
        left = self.deadline - time.monotonic()
        if left <= 1.0:
            raise ToolError("the run's time budget is spent: nothing more can be run")
        return min(own_limit, left)

    def command_env(self) -> dict[str, str]:
        return dict(self.env) if self.env is not None else scrubbed_env()

    @property
    def home(self) -> Path:
        """The commands' HOME, shared with the evaluations (in a run: ``runs/<id>/home``):
        builds cache there (torch extensions, Triton), so they outlive one command."""
        return self.eval_options.home or self.workspace.parent / "home"

    @property
    def solution_path(self) -> Path:
        return self.workspace / self.solution_name

    def control(self) -> LoopControl:
        """The loop, for a tool that controls it. Without one it is a bug: such a tool is run
        only by a loop."""
        if self.loop is None:
            raise RuntimeError("a loop-control tool was run without a loop")
        return self.loop


class ToolOutcome(BaseModel):
    content: str = Field(description="What the model sees, already capped")
    is_error: bool = False
    data: dict[str, Any] = Field(default_factory=dict, description="Structured detail for the trace")
    evaluation: Optional[EvalResult] = Field(None, description="Set by check/benchmark: the attempt's result")


@dataclass(frozen=True)
class ToolFacts:
    """What kagent needs to know of a tool beyond running it. Each tool declares its own; the
    loop, a resumed run and a replay read them (nothing else keeps lists of tool names)."""

    changes_files: bool = False
    """It may change the workspace: its files, or its git history (an attempt's commit, a
    revert). The loop snapshots the workspace after each such call: the state a resumed run
    goes back to."""
    rerun_after_crash: bool = True
    """A call that a crash cut short runs again when the run is resumed, on the workspace as it
    was after the last call that finished. False for a tool that may act outside the
    workspace: the call is answered with ``interrupted_answer`` instead."""
    interrupted_answer: str = ""
    records_attempt: bool = False
    """Its evaluation of the solution is committed as an attempt and judged against the best."""
    scores_attempt: bool = False
    """The attempt it records carries the evaluation's score (a benchmark; a check only passes
    or fails)."""
    needs_loop: bool = False
    """It controls the loop (ToolContext.loop): only a loop can run it."""


@dataclass(frozen=True)
class Untouched:
    """The call leaves the files the model wrote as they were."""


@dataclass(frozen=True)
class Unknown:
    """Any file may have changed, in ways the trace does not say (a shell command)."""


@dataclass(frozen=True)
class Rewrite:
    """A change of one file that the call's arguments spell out (write_file, edit_file): a
    replay rebuilds the file's content from it and shows the change as a diff."""

    path: str
    after: Callable[[Optional[str]], Optional[str]]
    """The file's content after the call, from its content before (None: not known)."""
    note: str = ""
    """Said beside the path, such as how many lines a whole new content has."""
    excerpt: Optional[tuple[str, str]] = None
    """The changed text alone, before and after: shown when the file's content is not known.
    None: the arguments hold the whole new file, so a diff against the previous version is
    what shows the change."""


@dataclass(frozen=True)
class Restore:
    """The files go back to those of an attempt (None: the best one)."""

    attempt: Optional[int]


FileEffect = Union[Untouched, Unknown, Rewrite, Restore]
UNTOUCHED = Untouched()
UNKNOWN = Unknown()


@runtime_checkable
class Tool(Protocol):
    spec: ToolSpec
    facts: ToolFacts

    def run(self, args: dict, ctx: ToolContext) -> ToolOutcome: ...

    def file_change(self, args: dict) -> FileEffect:
        """What a call with these arguments does to the files, as far as they tell."""
        ...

    def close(self) -> None:
        """The run's exploration has ended: let go of what the tool still holds (jobs)."""

    def under_way(self) -> str:
        """What the tool still has running between calls (background jobs), one line each; ""
        when nothing. Told to a model that ended its turn without a call, as it waits for it."""
        ...


class Args(BaseModel):
    """Base of every tool's argument model: unknown arguments are a mistake worth reporting."""

    model_config = ConfigDict(extra="forbid")


# The argument names of the harnesses frontier models were trained on (Claude Code, SWE-agent,
# Codex), taken as ours where a tool has the field and the call does not give it already. Each
# refusal of one cost a turn; the result names what was taken for what.
ALIASES = {
    "file_path": "path",
    "filepath": "path",
    "filename": "path",
    "old_string": "old",
    "old_str": "old",
    "new_string": "new",
    "new_str": "new",
    "cmd": "command",
    "offset": "offset_line",
    "limit": "max_lines",
}
# Arguments other harnesses send that change nothing here (Claude Code's Bash takes a description).
IGNORED = ("description",)
# A ``timeout`` at least this large is taken as milliseconds, Claude Code's unit; below, as seconds.
TIMEOUT_MS_FROM = 1000


def understood(model: type[Args], args: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The arguments as ``model`` names them, and a note for each thing taken otherwise than
    given: another harness's name, a timeout in milliseconds, a free text over its limit (cut,
    not refused: a refusal drops the rest of the model's intent with it)."""
    fields = model.model_fields
    given, notes = dict(args), []
    for alias, name in ALIASES.items():
        if alias in given and alias not in fields and name in fields and name not in given:
            given[name] = given.pop(alias)
            notes.append(f"took {alias} as {name}")
    if "timeout" in given and "timeout" not in fields and "timeout_s" in fields and "timeout_s" not in given:
        value = given.pop("timeout")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            seconds = value / 1000 if value >= TIMEOUT_MS_FROM else value
            unit = "milliseconds" if value >= TIMEOUT_MS_FROM else "seconds"
            given["timeout_s"] = seconds
            notes.append(f"took timeout={value} as {unit}: timeout_s={seconds:g}")
        else:
            given["timeout_s"] = value
    for name in IGNORED:
        if name in given and name not in fields:
            given.pop(name)
            notes.append(f"ignored {name} (no such argument here)")
    for name, field in fields.items():
        limit = next((m.max_length for m in field.metadata if getattr(m, "max_length", None)), None)
        value = given.get(name)
        if limit is not None and isinstance(value, str) and len(value) > limit:
            given[name] = value[: limit - 1] + "…"
            notes.append(f"{name} was {len(value)} characters, over its limit of {limit}: kept its first {limit - 1}")
    return given, notes


def decoded_arguments(raw: str) -> Optional[dict[str, Any]]:
    """Arguments the provider could not take as an object because the model sent the object
    as a JSON string (once or twice encoded): the object, or None when it is not one."""
    value: Any = raw
    for _ in range(3):
        if isinstance(value, dict):
            return value
        if not isinstance(value, str):
            return None
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return None
    return value if isinstance(value, dict) else None


class BaseTool(ABC):
    """A tool whose arguments are a pydantic model; subclasses implement ``execute``."""

    name: ClassVar[str]
    description: ClassVar[str]
    Arguments: ClassVar[type[Args]]
    facts: ToolFacts = ToolFacts()

    def __init__(self) -> None:
        schema = _untitled(self.Arguments.model_json_schema())
        self.spec = ToolSpec(name=self.name, description=self.description, parameters=schema)

    def run(self, args: dict, ctx: ToolContext) -> ToolOutcome:
        given, notes = understood(self.Arguments, args)
        said = f"\n[kagent] {'; '.join(notes)}." if notes else ""
        try:
            parsed = self.Arguments.model_validate(given)
        except ValidationError as err:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in err.errors())
            return self.refused(f"invalid arguments for {self.name}: {problems}{said}", args, ctx)
        try:
            outcome = self.execute(parsed, ctx)
        except ToolError as err:
            return ToolOutcome(content=cap(str(err), ctx.max_output_chars - len(said)) + said, is_error=True)
        outcome.content = cap(outcome.content, ctx.max_output_chars - len(said)) + said
        if notes:
            outcome.data = {**outcome.data, "arguments_understood": notes}
        return outcome

    def refused(self, message: str, args: dict, ctx: ToolContext) -> ToolOutcome:
        """The answer to a call whose arguments do not validate; a tool whose refusal leaves
        something undecided in the loop says so here."""
        return ToolOutcome(content=message, is_error=True, data={"invalid_args": args})

    @abstractmethod
    def execute(self, args: Any, ctx: ToolContext) -> ToolOutcome:
        """Run with validated arguments; raise ToolError for the model's mistakes."""

    def file_change(self, args: dict) -> FileEffect:
        """What a call with ``args`` does to the files the model wrote, as far as the arguments
        tell: by default nothing (a tool that writes files says how, or that it cannot tell)."""
        return UNTOUCHED

    def close(self) -> None:  # noqa: B027  (a hook: most tools hold nothing past a call)
        """The run's exploration has ended; most tools hold nothing past a call."""

    def under_way(self) -> str:
        """Most tools run nothing between calls."""
        return ""


def _untitled(schema: Any) -> Any:
    """The schema without pydantic's generated titles: tokens the model gains nothing from.
    (A property named "title" is a dict under "properties", so it stays.)"""
    if isinstance(schema, dict):
        return {k: _untitled(v) for k, v in schema.items() if not (k == "title" and isinstance(v, str))}
    if isinstance(schema, list):
        return [_untitled(v) for v in schema]
    return schema


def cap(text: str, limit: int) -> str:
    """``text`` cut to about ``limit`` characters, keeping its head and tail (where errors
    and summaries are) and saying how much of the middle went."""
    if len(text) <= limit:
        return text
    marker_room = 40
    keep = max(limit - marker_room, 0)
    head, tail = keep // 2, keep - keep // 2
    omitted = len(text) - head - tail
    return f"{text[:head]}\n[… {omitted} characters omitted …]\n{text[len(text) - tail :] if tail else ''}"


def resolve_in_workspace(ctx: ToolContext, path: str, for_writing: bool = False) -> Path:
    """The absolute, symlink-resolved path of ``path`` inside the workspace, or a ToolError."""
    if not path or "\0" in path:
        raise ToolError("the path is empty or holds a NUL character")
    root = ctx.workspace.resolve()
    given = Path(path)
    candidate = given if given.is_absolute() else root / given
    # strict=False: a file about to be written need not exist; existing parts are resolved,
    # so a symlink pointing outside is caught like a `..`.
    try:
        resolved = candidate.resolve(strict=False)
    except (RuntimeError, OSError) as err:  # a symlink loop the model made
        raise ToolError(f"cannot resolve {path!r}: {err}") from None
    if resolved != root and root not in resolved.parents:
        raise ToolError(f"{path!r} is outside the workspace; paths are relative to the workspace ({root})")
    relative = resolved.relative_to(root)
    if for_writing:
        if resolved == root:
            raise ToolError("cannot write to the workspace folder itself; give a file path")
        if relative.parts and relative.parts[0] in READ_ONLY_DIRS:
            raise ToolError(
                f"{relative} is read-only: the files under {relative.parts[0]}/ belong to the "
                f"task or the run; write your own files elsewhere in the workspace"
            )
    return resolved


def relative_name(ctx: ToolContext, path: Path) -> str:
    """How a resolved path is shown to the model: relative to the workspace."""
    rel = path.relative_to(ctx.workspace.resolve())
    return str(rel) if rel.parts else "."


@dataclass
class Completed:
    exit_code: Optional[int]
    output: str
    timed_out: bool
    seconds: float
    limits_hit: list[str]  # the sandbox's limits the command ran into (memory, processes)


def command_sandbox(
    ctx: ToolContext, show: Sequence[Path] = (), writable: Sequence[Path] = ()
) -> tuple[dict[str, str], FilePlan]:
    """The environment and files of a command run for the model: HOME is ``ctx.home``,
    ``python`` the evaluating interpreter, no credentials. It may write only the workspace
    (not its task files or git history), its HOME and ``writable``; it sees, beyond the
    system, only those and ``show``."""
    ctx.home.mkdir(parents=True, exist_ok=True)
    env = ctx.command_env()
    env["HOME"] = str(ctx.home)
    # `python` and the tools installed beside it are the evaluating interpreter's.
    python_bin = str(Path(ctx.eval_options.python).parent)
    env["PATH"] = os.pathsep.join([python_bin, *filter(None, env.get("PATH", "").split(os.pathsep))])
    files = file_plan(
        writable=[ctx.workspace, ctx.home, *writable],
        show=show,
        read_only=[ctx.workspace / name for name in READ_ONLY_DIRS],
        python=ctx.eval_options.python,
    )
    return env, files


def run_command(
    argv: list[str],
    ctx: ToolContext,
    limit_s: float,
    cwd: Optional[Path] = None,
    show: Sequence[Path] = (),
    writable: Sequence[Path] = (),
    stdout_to: Optional[Path] = None,
) -> Completed:
    """Run ``argv`` contained (``command_sandbox``) with stdout+stderr into one capped text
    (or its stdout whole into the file ``stdout_to``, for a tool that reads a long listing,
    and only stderr into the text); at the limit its whole process group is killed. Its
    processes never outlive it.
    """
    timeout = ctx.timeout(limit_s)
    env, files = command_sandbox(ctx, show, writable)
    # A file, not a pipe: a flood of output cannot fill memory, and a background child
    # holding the pipe open cannot make us wait.
    with tempfile.TemporaryFile() as sink, open(stdout_to, "wb") if stdout_to else nullcontext(sink) as stdout:
        # The model's commands get no network, a pid namespace (so setsid cannot escape the
        # kill at the limit), the files above and caps on processes and memory, wherever this
        # machine supports them.
        done = runner.run(
            argv,
            timeout,
            files,
            env,
            cwd or ctx.workspace,
            stdout=stdout,
            stderr=subprocess.STDOUT if stdout is sink else sink,
        )
        output = read_capped(sink, ctx.max_output_chars)
    limits_hit = done.resources.problems()
    if limits_hit:
        output = output.rstrip("\n") + "".join(f"\n[kagent] {problem}" for problem in limits_hit)
    # Left as the shell convention reads it: through a pid namespace's init a death by
    # signal N arrives as 128+N, just as bash reports its own killed commands.
    return Completed(
        exit_code=None if done.timed_out else done.returncode,
        output=output,
        timed_out=done.timed_out,
        seconds=done.seconds,
        limits_hit=limits_hit,
    )


def read_capped(sink: Any, limit: int) -> str:
    """Head and tail of a binary file object, without reading a huge middle into memory."""
    size = sink.seek(0, os.SEEK_END)
    sink.seek(0)
    if size <= 4 * limit:
        return cap(sink.read().decode("utf-8", errors="replace"), limit)
    half = limit // 2
    head = sink.read(half).decode("utf-8", errors="replace")
    sink.seek(size - half)
    tail = sink.read().decode("utf-8", errors="replace")
    return f"{head}\n[… {size - 2 * half} bytes omitted …]\n{tail}"
