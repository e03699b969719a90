"""A run on disk: ``runs/<run-id>/`` with its config, status, trace, workspace and report."""

from __future__ import annotations

import os
import platform
import secrets
import shutil
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Literal, Optional

from pydantic import BaseModel, Field

from kagent import prompts
from kagent.agent.lifecycle.device import machine_text, resolve_device
from kagent.agent.lifecycle.resume import rebuild
from kagent.agent.loop.agent import Agent, RunReport, ViewUpdate
from kagent.agent.loop.budget import BudgetTracker, Clock, SystemClock
from kagent.agent.loop.finalize import report_markdown
from kagent.agent.loop.models import run_model
from kagent.agent.loop.models.retry import RetryingModel
from kagent.agent.outcome import RunState
from kagent.agent.settings import RunConfig, RunSettings, scale_warning
from kagent.agent.storage.folders import RUN_FILES, check_run_id, find_run
from kagent.agent.storage.lock import RunLock
from kagent.agent.storage.trace import Interrupted, InterruptionCause, RunResumed, TraceWriter, read_trace
from kagent.agent.storage.workspace import Workspace
from kagent.core.errors import KagentError
from kagent.core.messages import ChatModel
from kagent.core.paths import kagent_home, runs_dir
from kagent.sandbox.evaluate import EvalOptions
from kagent.tasks import TaskRef, resolve_task
from kagent.tools import all_tools


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C or a stopping signal stopped a run: the trace records it, its status is written as
    interrupted with the figures it stopped at (``status``), and ``kagent resume`` goes on with it.

    A KeyboardInterrupt still, so that whatever catches Ctrl-C above a run sees it as one.
    """

    def __init__(self, run_id: str, run_dir: Path, cause: InterruptionCause, status: RunStatus):
        super().__init__(run_id)
        self.run_id = run_id
        self.run_dir = run_dir
        self.cause = cause
        self.status = status


class StopSignal(KeyboardInterrupt):
    """Ctrl-C, SIGTERM or SIGHUP, raised where the run's thread stands, as Ctrl-C's own
    KeyboardInterrupt is (a plain `kill`, `timeout`, `docker stop` or a CI's cancel then ends the
    run as Ctrl-C does), with what the run was doing when it came (the loop's activity is gone
    by the time the exception reaches the code that records it)."""

    def __init__(self, cause: InterruptionCause, during: str):
        super().__init__(cause)
        self.cause: InterruptionCause = cause
        self.during = during


STOP_SIGNALS: dict[int, InterruptionCause] = {
    signal.SIGINT: "Ctrl-C",
    signal.SIGTERM: "SIGTERM",
    signal.SIGHUP: "SIGHUP",
}


@contextmanager
def signals_stop_the_run(doing: Callable[[], str]) -> Iterator[None]:
    """While the block runs, Ctrl-C, SIGTERM and SIGHUP raise StopSignal in it, with ``doing()``
    at that moment. A signal ignored when kagent started (``nohup`` ignores SIGHUP) stays
    ignored; a second signal while the first is being recorded is ignored, so that the record
    is written whole. Only the main thread takes signals: elsewhere (a test driving a run in a
    thread) the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    raised = False

    def stop(signum: int, frame: object) -> None:
        nonlocal raised
        if not raised:
            raised = True
            raise StopSignal(STOP_SIGNALS[signum], doing())

    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    for sig, handler in previous.items():
        if handler is not signal.SIG_IGN:
            signal.signal(sig, stop)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class RunStatus(BaseModel):
    """status.json: what `kagent runs` lists; rewritten atomically as the run goes."""

    version: Literal[1] = 1
    run_id: str
    state: RunState
    pid: int
    task: str
    model: str
    updated_at: str
    best_attempt: Optional[int] = None
    best_score: Optional[float] = Field(None, description="The best attempt's score while exploring")
    result_score: Optional[float] = Field(None, description="The run's verified result (RunReport.result_score)")
    result_interval: Optional[tuple[float, float]] = Field(
        None, description="The 95% interval of result_score's measurement (kagent.sandbox.noise.score_interval)"
    )
    elapsed_s: float = Field(0.0, description="Budgeted run time, all segments; once stopped, the trace's last event's")
    tokens: int = 0
    cost_usd: float = 0.0
    reason: str = ""


def write_json_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def new_run_id(task_name: str) -> str:
    return f"{task_name}-{datetime.now(timezone.utc):%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


def versions() -> dict[str, Optional[str]]:
    found: dict[str, Optional[str]] = {"python": platform.python_version()}
    for name in ("kagent", "torch", "anthropic", "openai", "pydantic", "GitPython"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def _drive(
    run_dir: Path,
    config: RunConfig,
    task: TaskRef,
    inner: ChatModel,
    workspace: Workspace,
    tracker: BudgetTracker,
    view: Optional[Callable[[ViewUpdate], None]],
    go: Callable[[Agent], RunReport],
    warn: Callable[[str], None],
) -> RunReport:
    """What a new and a resumed run share: trace, status file, model wrapper, agent, report.
    ``warn`` is told, before the run goes on, what the user should beware of in its figures."""
    trace = TraceWriter(run_dir, elapsed=tracker.elapsed)
    eval_options = EvalOptions(
        device=config.device,
        scale=config.scale,
        cache_dir=kagent_home(),
        home=run_dir / "home",
        timeout_s=config.eval_timeout_s,
        rounds=config.eval_rounds,
        min_request_ms=config.eval_min_request_ms,
    )
    status = RunStatus(
        run_id=config.run_id, state="running", pid=os.getpid(), task=task.name, model=config.model, updated_at=_now()
    )
    write_json_atomically(run_dir / RUN_FILES["status"], status.model_dump_json(indent=1))
    agent_box: list[Agent] = []

    def on_retry(error: Exception, wait_s: float, attempt: int) -> None:
        agent_box[0].on_retry(error, wait_s, attempt)

    retrying = RetryingModel(
        inner, remaining_s=lambda: max(0.0, tracker.final_slice_starts() - tracker.clock.now()), on_retry=on_retry
    )

    def write_status(**fields: object) -> RunStatus:
        current = status.model_copy(update={"updated_at": _now(), **_figures(agent_box[0]), **fields})
        write_json_atomically(run_dir / RUN_FILES["status"], current.model_dump_json(indent=1))
        return current

    def on_update(update: ViewUpdate) -> None:
        write_status()
        if view:
            view(update)

    agent = Agent(
        config,
        task,
        retrying,
        all_tools(),
        workspace,
        trace,
        tracker,
        eval_options,
        view=on_update,
        system_prompt=prompts.system_prompt(task),
        versions=versions(),
        machine=machine_text(config.device, eval_options.python, task.path),
    )
    agent_box.append(agent)
    for text in agent.warnings:
        warn(text)
    try:
        with signals_stop_the_run(lambda: agent.activity.what if agent.activity else ""):
            report = go(agent)
    except KeyboardInterrupt as interrupt:
        stop = interrupt if isinstance(interrupt, StopSignal) else StopSignal("Ctrl-C", "")
        cause = stop.cause
        trace.append(Interrupted(cause=cause, during=stop.during))
        # The figures as they stand now, not as the run started: `kagent runs` shows them, and the
        # time is the interruption's, as the trace has it (what resume and the page count).
        stopped = write_status(state="interrupted", reason=f"by {cause}", elapsed_s=trace.elapsed_s)
        raise RunInterrupted(config.run_id, run_dir, cause, stopped) from interrupt
    finally:
        trace.close()
    # The run's time is its trace's, to the event it ended with: the same figure in every view.
    report = report.model_copy(update={"elapsed_s": trace.elapsed_s})
    write_json_atomically(run_dir / RUN_FILES["report"], report.model_dump_json(indent=1))
    (run_dir / "report.md").write_text(report_markdown(report))
    solution = workspace.root / config.solution_name
    if solution.exists():
        shutil.copy2(solution, run_dir / config.solution_name)
    write_status(state=report.status, reason=report.reason, elapsed_s=report.elapsed_s)
    return report


def _figures(agent: Agent) -> dict[str, object]:
    """What status.json says of a run's progress, read from the agent at this moment."""
    best = agent.ledger.best_attempt()
    return {
        "best_attempt": best.number if best else None,
        "best_score": best.score if best else None,
        "result_score": agent.result_score(),
        "result_interval": agent.finalizer.result_interval(),
        "elapsed_s": round(agent.tracker.elapsed(), 3),
        "tokens": agent.usage.total_tokens,
        "cost_usd": agent.cost,
    }


def _check_the_model_can_run_on(model: ChatModel, device: str) -> None:
    """A scripted session written for a GPU is refused on a CPU at the start, before a run
    folder exists, instead of failing at every step it plays."""
    needs = getattr(model, "needs", None)
    if needs == "cuda" and not device.startswith("cuda"):
        raise KagentError(
            f"{model.name} plays a session written for a CUDA device, and this run's device is "
            f"{device}: its steps build and time GPU kernels, and none of them can run here",
            hint=getattr(model, "hint", None) or "run it on a machine with a GPU (--device cuda)",
        )


def start_run(
    settings: RunSettings,
    view: Optional[Callable[[ViewUpdate], None]] = None,
    clock: Optional[Clock] = None,
    model: Optional[ChatModel] = None,
    warn: Callable[[str], None] = lambda text: None,
) -> tuple[Path, RunReport]:
    """Create the run folder and drive the agent until it ends; returns the folder and report.
    ``warn`` is told what the user should beware of: a full-size task on the CPU, and the
    figures' caveats."""
    task: TaskRef = resolve_task(settings.task)
    inner = model or run_model(settings)
    # The device is resolved here alone (auto made concrete, a CUDA device checked to exist),
    # and the scale chosen from it by for_run: the command line passes the settings as given.
    device = resolve_device(settings.device)
    _check_the_model_can_run_on(inner, device)
    run_id = settings.run_id or new_run_id(task.name)
    check_run_id(run_id)
    run_dir = Path(settings.runs_root or runs_dir()) / run_id
    try:
        run_dir.mkdir(parents=True)
    except FileExistsError:
        raise KagentError(
            f"there is a run {run_id} already ({run_dir})", hint=f"kagent resume {run_id} goes on with it"
        ) from None
    config = settings.for_run(run_id, device)
    if (warning := scale_warning(config.device, config.scale)) is not None:
        warn(warning)
    write_json_atomically(run_dir / RUN_FILES["config"], config.model_dump_json(indent=1))
    with RunLock(run_dir):
        tracker = BudgetTracker(config.budget, clock or SystemClock())
        workspace = Workspace.create(run_dir / "workspace", task.files(), solution_name=config.solution_name)
        report = _drive(run_dir, config, task, inner, workspace, tracker, view, lambda agent: agent.run(), warn)
    return run_dir, report


def resume_run(
    run: str,
    extra_budget_s: Optional[float] = None,
    view: Optional[Callable[[ViewUpdate], None]] = None,
    root: Optional[Path] = None,
    clock: Optional[Clock] = None,
    model: Optional[ChatModel] = None,
    notice: Callable[[str], None] = lambda text: None,
    warn: Callable[[str], None] = lambda text: None,
) -> tuple[Path, RunReport]:
    """Go on with a run from its trace: after any interruption, or to extend a finished run.
    ``notice`` is told, in a sentence, what the user should know before it goes on; ``warn``,
    what to beware of in its figures."""
    run_dir = find_run(run, root)
    with RunLock(run_dir) as lock:
        try:
            config = RunConfig.model_validate_json((run_dir / RUN_FILES["config"]).read_text())
        except (OSError, ValueError) as err:
            raise KagentError(
                f"{run_dir / RUN_FILES['config']} is missing or not a valid run config",
                hint=str(err).splitlines()[0][:200],
            ) from err
        resolve_device(config.device)  # a run started on a GPU machine cannot go on without one
        read = read_trace(run_dir / "trace.jsonl")
        state = rebuild(read.events, run_dir)
        if state.ended is not None and not extra_budget_s:
            raise KagentError(
                f"run {config.run_id} has ended ({state.ended.reason[:120]})",
                hint="give --budget to extend it with more time",
            )
        workspace = Workspace.open(run_dir / "workspace")
        if extra_budget_s:
            config = config.model_copy(
                update={"budget": config.budget.model_copy(update={"wall_s": config.budget.wall_s + extra_budget_s})}
            )
            write_json_atomically(run_dir / RUN_FILES["config"], config.model_dump_json(indent=1))
        task = resolve_task(config.task)
        spent_before_s = spent_s(run_dir, state.elapsed_s)
        tracker = BudgetTracker(
            config.budget,
            clock or SystemClock(),
            spent_before_s=spent_before_s,
            tokens_before=state.usage.total_tokens,
            cost_before_usd=state.cost,
        )
        inner = model or run_model(config)
        if hasattr(inner, "start_at"):  # a scripted model goes on with the turn after the last answered one
            inner.start_at = state.responses
        segment = state.segments + 1
        # Everything the killed process left goes on a side ref; then main and the files go back
        # to where the trace last saw them, so every recorded step is what the model believes.
        side_ref = workspace.stash_uncommitted(f"resume-{segment}")
        orphans = workspace.set_aside_attempts({0, *(a.number for a in state.ledger.attempts)})
        head = state.head or workspace.attempts()[0]
        previous_main = workspace.reset_main(head, keep_as=f"resume-{segment}")
        workspace.restore(state.snapshot or head)
        resumed = RunResumed(
            segment=segment,
            spent_before_s=spent_before_s,
            budget_wall_s=config.budget.wall_s,
            torn_tail_dropped=read.torn_tail,
            workspace_side_ref=side_ref,
            workspace_head=head,
            workspace_snapshot=state.snapshot or head,
            orphaned_attempts={str(n): sha for n, sha in orphans.items()},
            stale_lock=lock.took_over,
            previous_main_ref=previous_main,
        )
        if state.started is None:
            notice(_restart_notice(config.run_id, resumed))

        def go(agent: Agent) -> RunReport:
            return agent.resume(state, resumed) if state.started is not None else agent.run(restart=resumed)

        report = _drive(run_dir, config, task, inner, workspace, tracker, view, go, warn)
    return run_dir, report


def spent_s(run_dir: Path, trace_elapsed_s: float) -> float:
    """The time a run has spent: its trace's last event's, or later still what status.json said
    (a process killed outright wrote its time there while a tool ran, after the trace's last
    event); so that time counts against the budget, and every view of the run reads it."""
    try:
        status = RunStatus.model_validate_json((run_dir / RUN_FILES["status"]).read_text())
    except (OSError, ValueError):
        return trace_elapsed_s
    return max(trace_elapsed_s, status.elapsed_s)


def _restart_notice(run_id: str, resumed: RunResumed) -> str:
    kept = [f"main's commits on {resumed.previous_main_ref}"] if resumed.previous_main_ref else []
    if resumed.orphaned_attempts:
        kept.append(f"attempts {', '.join(sorted(resumed.orphaned_attempts, key=int))} under refs/kagent/orphans/")
    if resumed.workspace_side_ref:
        kept.append(f"uncommitted files on {resumed.workspace_side_ref}")
    return (
        f"the trace of run {run_id} holds no recorded step, so the run starts over from turn 1 with the "
        f"workspace at its starting point"
        + (f"; its earlier work is kept in the workspace's git: {'; '.join(kept)}" if kept else "")
    )


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
