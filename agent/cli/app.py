"""The ``kagent`` command line: its commands, but ``kagent eval`` (evaluation.py) and
``kagent sweep`` (sweep.py), which it registers, and the entry point that runs them."""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from kagent.agent.cli.evaluation import eval_command
from kagent.agent.cli.shared import Scale, console, documents_exit_codes, err_console, keys_not_echoed, warn
from kagent.agent.outcome import ENDINGS, EXIT_CTRL_C, EXIT_INTERRUPTED
from kagent.core.errors import KagentError
from kagent.core.paths import RUNS_ELSEWHERE, runs_folder
from kagent.core.providers import model_help


def _flags_take_no_value() -> None:
    """The help's type column says nothing for a flag. Recent typer (0.29 with click 8.5) labels
    every flag ``<bool>`` there (``--version <bool>``, ``--help <bool>``), as though it took a
    value; a flag's presence is its value. Older typer has no such column to mend."""
    option = getattr(typer.core, "TyperOption", None)
    labelled = getattr(option, "display_type_rich", None)
    if option is None or labelled is None or getattr(labelled, "mended", False):
        return

    def display_type_rich(self, ctx):
        return None if self.is_flag and not self.count else labelled(self, ctx)

    display_type_rich.mended = True  # type: ignore[attr-defined]
    option.display_type_rich = display_type_rich


_flags_take_no_value()

app = typer.Typer(
    name="kagent",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _show_version(asked: bool) -> None:
    if asked:
        from importlib.metadata import version

        console.print(f"kagent {version('kagent')}", highlight=False)
        raise typer.Exit()


@app.callback()
def kagent_options(
    version: bool = typer.Option(
        False, "--version", callback=_show_version, is_eager=True, help="Show kagent's version and exit."
    ),
) -> None:
    """kagent makes GPU code fast on its own, and grades it with numbers you can trust.

    Start with `kagent tasks`, then `kagent eval TASK --solution FILE`.
    """


@app.command("tasks")
def tasks_command() -> None:
    """List the built-in tasks."""
    from kagent.agent.cli.views import tasks_table
    from kagent.tasks import builtin_tasks

    console.print(tasks_table(builtin_tasks()))


# `kagent eval` is a module of its own (evaluation.py); registered here, so that the help
# lists it where it always stood.
app.command("eval")(eval_command)


@app.command("run")
@documents_exit_codes
def run_command(
    task: str = typer.Argument(..., help="A built-in task name, a problem folder, or a KernelBench .py file."),
    model: Optional[str] = typer.Option(
        None,
        "--model",
        "-m",
        help=model_help(),
    ),
    budget: Optional[str] = typer.Option(None, help="Wall-clock budget: 3h, 90m, 2h30m (default 3h)."),
    max_cost: Optional[float] = typer.Option(None, help="Stop exploring once the model calls cost this many USD."),
    max_tokens: Optional[int] = typer.Option(None, help="Stop exploring after this many tokens in all."),
    device: Optional[str] = typer.Option(None, help="auto, cpu, cuda or cuda:N (default auto)."),
    scale: Optional[Scale] = typer.Option(None, help="Default: full on CUDA, smoke on the CPU."),
    thinking: Optional[str] = typer.Option(
        None,
        help="on (the default where the model thinks), off, or a "
        "budget in tokens per turn for a model that takes one (Anthropic "
        "extended thinking; by default half the output cap).",
    ),
    reasoning_effort: Optional[str] = typer.Option(
        None,
        "--reasoning-effort",
        help="For a model that takes an "
        "effort (OpenAI reasoning models, Anthropic adaptive "
        "thinking): none, minimal, low, medium, high (the default), "
        "xhigh or max, as far as the model knows them.",
    ),
    max_output_tokens: Optional[int] = typer.Option(
        None,
        "--max-output-tokens",
        help="Output cap per model "
        "call, thinking included (default: the most the model "
        "allows; $KAGENT_HOME/models.yaml extends the table).",
    ),
    no_revert: bool = typer.Option(False, "--no-revert", help="Keep failed or slower attempts in place."),
    config: Optional[Path] = typer.Option(
        None,
        "--config",
        help="YAML file of settings by name: any of the run's "
        "settings (the README lists them) or the flags' names (budget, max_cost, "
        "max_tokens, thinking, reasoning_effort, max_output_tokens, revert); "
        "the flags given override it.",
    ),
    run_id: Optional[str] = typer.Option(
        None,
        "--run-id",
        help="The run's id, the name of its folder (default: "
        "task, time and a random suffix; a sweep names its members so).",
    ),
    direction: Optional[str] = typer.Option(
        None,
        help="What this run should try, told to the model in its first "
        "message (a sweep's branches of one task are told apart so).",
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No live view; the report at the end only."),
    json_output: bool = typer.Option(False, "--json", help="Print the final report as JSON only."),
) -> None:
    """Optimize a task with a model, under a budget: every attempt committed, everything traced.

    The run lives in runs/<run-id>/: workspace (a git repository, one commit per attempt),
    trace.jsonl, config.json, status.json and the final report. API keys come from the
    provider's variable (--model names it) and are never written anywhere.
    """
    from kagent.agent.cli.config import load_settings
    from kagent.agent.lifecycle.device import check_device_name
    from kagent.agent.loop.models import run_model
    from kagent.agent.storage.folders import check_run_id

    # Every option is checked before torch is imported (resolve_device), which takes seconds.
    if run_id is not None:
        check_run_id(run_id)
    settings = load_settings(
        task,
        config,
        {
            "model": model,
            "budget": budget,
            "max_cost": max_cost,
            "max_tokens": max_tokens,
            "device": device,
            "scale": scale.value if scale else None,
            "thinking": thinking,
            "reasoning_effort": reasoning_effort,
            "max_output_tokens": max_output_tokens,
            "revert": False if no_revert else None,
            "run_id": run_id,
            "direction": direction,
        },
    )
    check_device_name(settings.device)
    # The model is made once, here, before torch is imported; start_run resolves the device.
    chat_model = run_model(settings)

    from kagent.agent.lifecycle.runs import start_run

    _show_run(
        lambda view: start_run(settings, view=view, model=chat_model, warn=warn), quiet or json_output, json_output
    )


@app.command("resume")
@documents_exit_codes
def resume_command(
    run: str = typer.Argument(..., help="A run id (see `kagent runs`) or the path of a run folder."),
    budget: Optional[str] = typer.Option(
        None, help="More wall-clock time for the run, e.g. 1h (needed to extend a finished run)."
    ),
    root: Optional[Path] = typer.Option(None, help="The runs folder (default: ./runs or KAGENT_RUNS)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No live view; the report at the end only."),
    json_output: bool = typer.Option(False, "--json", help="Print the final report as JSON only."),
) -> None:
    """Go on with a run that was interrupted (killed, rebooted, an outage), or extend a finished one.

    The conversation is rebuilt from the trace alone; the workspace goes back to where it was
    after the last tool call that finished, with later changes kept on a side ref; a tool call
    cut short runs again there, except a shell command (it may have acted outside the
    workspace), which is answered as interrupted. The budget counts the time of all segments.
    """
    from kagent.agent.lifecycle.runs import resume_run
    from kagent.agent.settings import parse_duration

    extra = parse_duration(budget) if budget else None

    def notice(text: str) -> None:
        err_console.print(f"[yellow]note:[/] {text}", highlight=False)

    _show_run(
        lambda view: resume_run(run, extra_budget_s=extra, view=view, root=root, notice=notice, warn=warn),
        quiet or json_output,
        json_output,
    )


def _show_run(drive, quiet: bool, json_output: bool) -> None:
    """Drive a run (new or resumed) with or without the live view, then show its report."""
    from rich.live import Live

    from kagent.agent.cli.views import LiveRunView, ProgressLines
    from kagent.agent.lifecycle.runs import RunInterrupted

    try:
        if quiet:
            run_dir, report = drive(None)
        elif not console.is_terminal:  # a CI log or a pipe: a live view would print only at the end
            run_dir, report = drive(ProgressLines(console).update)
        else:
            view = LiveRunView()
            with keys_not_echoed(), Live(view, console=console, refresh_per_second=4, transient=False):
                run_dir, report = drive(view.update)
    except RunInterrupted as stop:
        # Caught here: typer would turn it into a silent exit 130 before main() could speak.
        err_console.print(interrupted_summary(stop), highlight=False, soft_wrap=True)
        err_console.print(f"go on with: kagent resume {stop.run_id}", highlight=False, soft_wrap=True)
        raise typer.Exit(EXIT_INTERRUPTED[stop.cause]) from None
    except KeyboardInterrupt:
        err_console.print("interrupted before the run started")
        raise typer.Exit(EXIT_CTRL_C) from None
    if json_output:
        sys.stdout.write(report.model_dump_json(indent=1) + "\n")
    else:
        # Unwrapped: a path cut at 80 columns (a pipe's width) cannot be copied whole.
        console.print()
        console.print((run_dir / "report.md").read_text(), soft_wrap=True, highlight=False, markup=False)
        console.print(f"run folder: {run_dir}", soft_wrap=True, highlight=False)
    raise typer.Exit(ENDINGS[report.status].exit_code)


def interrupted_summary(stop) -> str:
    """What a run stopped by Ctrl-C or a signal had come to (``stop``: a RunInterrupted)."""
    from kagent.agent.settings import minutes
    from kagent.sandbox.noise import score_text

    status = stop.status
    if status.result_score is not None:
        best = f"result {score_text(status.result_score, status.result_interval)} (attempt {status.best_attempt})"
    elif status.best_attempt is not None:
        best = f"best attempt {status.best_attempt}, not verified"
    else:
        best = "no attempt passed a benchmark yet"
    return (
        f"interrupted by {stop.cause}: run {stop.run_id} stopped at {minutes(status.elapsed_s)}; {best}; "
        f"{status.tokens:,} tokens, ${status.cost_usd:.2f}; its attempts and trace are kept"
    )


@app.command("runs")
def runs_command(
    root: Optional[Path] = typer.Option(None, help="The runs folder (default: ./runs or KAGENT_RUNS)."),
    json_output: bool = typer.Option(False, "--json", help="Print the runs as a JSON list only."),
) -> None:
    """List the runs, newest first: state, result, time, tokens and cost of each.

    A run whose process died without recording its end shows as interrupted (`kagent resume` goes on with it).
    """
    from kagent.agent.report.run_list import list_runs, runs_view, summaries_json

    folder, origin = runs_folder(root)
    summaries = list_runs(folder)
    if json_output:
        # Scripts get valid JSON even when there is nothing: an empty list.
        sys.stdout.write(summaries_json(summaries) + "\n")
        return
    if not summaries:
        console.print(
            f"No runs in {folder} ({origin}) yet. Start one with `kagent run TASK --model PROVIDER:MODEL`; "
            f"{RUNS_ELSEWHERE}.",
            highlight=False,
        )
        return
    console.print(runs_view(summaries, f"Runs in {folder} (newest first)", console), crop=False)


@app.command("replay")
def replay_command(
    run: str = typer.Argument(..., help="A run id (see `kagent runs`) or the path of a run folder."),
    attempts: bool = typer.Option(False, "--attempts", help="Only the attempts and the end."),
    errors: bool = typer.Option(
        False, "--errors", help="Only tool errors, failed attempts, model retries and errors (and the end)."
    ),
    follow_trace: bool = typer.Option(
        False, "--follow", "-f", help="Keep printing new events as the run goes, until it ends (Ctrl-C stops)."
    ),
    root: Optional[Path] = typer.Option(None, help="The runs folder (default: ./runs or KAGENT_RUNS)."),
    execute: bool = typer.Option(
        False,
        "--execute",
        help="Re-run the recorded session on a fresh workspace "
        "(no model is called), re-measure, and report per attempt whether its verdict and "
        "speedup reproduce.",
    ),
    device: Optional[str] = typer.Option(
        None, help="With --execute: the device to re-measure on (default: the run's)."
    ),
    scale: Optional[Scale] = typer.Option(None, help="With --execute: the scale (default: the run's)."),
    tolerance: float = typer.Option(
        0.10,
        min=0.0,
        help="With --execute: how far a re-measured speedup may be "
        "off (as a fraction) when the intervals do not overlap; "
        "a busy CPU drifts more than a GPU.",
    ),
) -> None:
    """Tell a run turn by turn from its trace, or audit its numbers on this machine with --execute.

    The model's words, tool calls (file writes as diffs), results, attempts, budget, and how it
    ended. With --execute the recorded session is re-run on a fresh workspace and re-measured.

    Exit code with --execute: 0 everything reproduces, 1 something diverges."""
    from kagent.agent.cli.replay import follow, replay
    from kagent.agent.storage.folders import find_run

    if execute:
        from kagent.agent.cli.views import audit_table
        from kagent.agent.lifecycle.device import resolve_device
        from kagent.agent.lifecycle.reexecute import execute_replay

        audit = execute_replay(
            run, root, resolve_device(device) if device else None, scale.value if scale else None, tolerance
        )
        console.print(audit_table(audit))
        console.print(f"re-executed run: {audit.replay_dir}")
        raise typer.Exit(0 if audit.reproduces else 1)
    run_dir = find_run(run, root)
    if not follow_trace:
        console.print(replay(run_dir, only_attempts=attempts, only_errors=errors))
        return
    try:
        follow(run_dir, console, only_attempts=attempts, only_errors=errors)
    except KeyboardInterrupt:
        # Stopping the view is the normal way out of --follow; the run itself goes on.
        err_console.print("[dim]stopped following (the run is not affected)[/]")


# In its docstring, \\[ keeps the help's rich markup from taking [report] for a style.
@app.command("report")
def report_command(
    run: Optional[str] = typer.Argument(
        None,
        help="A run id (see `kagent runs`), a run folder or a trace file; "
        "with --runs, a filter of the runs instead (see below).",
    ),
    runs: bool = typer.Option(False, "--runs", help="A board across the runs instead of one run's page."),
    out: Optional[Path] = typer.Option(
        None,
        "--out",
        "-o",
        help="The HTML file to write (default: report.html in "
        "the run folder; with --runs, board.html in the runs folder).",
    ),
    root: Optional[Path] = typer.Option(None, help="The runs folder (default: ./runs or KAGENT_RUNS)."),
) -> None:
    """Write a run as one self-contained HTML page, or a board across runs (--runs).

    A run's page: its header, speedup over time, time per token against the bytes floor with
    launches, tokens and cost over time, the attempts with each one's diff and file, and the
    transcript. It works for a run in progress or interrupted (what its trace holds so far).

    The board: one row per run (best verified score, ms per token, fraction of the floor,
    single launch, time and cost to the best), grouped by task, each linked to its page,
    written beside the board in <board name>-runs/. FILTER: words that must all match, each
    either text found in a run's id, task, model, GPU or state, or key=text with key one of
    task, model, gpu, state (e.g. "task=kimi model=claude").

    Needs the report extra: pip install 'kagent\\[report]'. Exit code 0: written; 2: bad usage,
    no such run, or the extra missing."""
    from kagent.agent.report import require_charts

    require_charts()
    if runs:
        from kagent.agent.report.board import write_board

        folder, _origin = runs_folder(root)
        path, count = write_board(folder, run or "", out)
        console.print(f"wrote {path}: {count} run(s)", highlight=False)
        return
    if run is None:
        raise KagentError(
            "give a run id or a run folder, or --runs for a board across runs", hint="`kagent runs` lists the runs"
        )
    from kagent.agent.report.page import write_run_page
    from kagent.agent.storage.folders import find_run

    # A trace on its own (mailed, or left by a run whose folder is gone) makes a page too.
    trace = Path(run)
    path = write_run_page(trace if trace.suffix == ".jsonl" and trace.is_file() else find_run(run, root), out)
    console.print(f"wrote {path} ({path.stat().st_size / 1e3:,.0f} kB)", highlight=False)


from kagent.agent.cli.sweep import sweep_app  # noqa: E402  (its own module: kagent sweep ...)

app.add_typer(sweep_app, name="sweep")


def main() -> None:
    """Console entry point: click reports usage errors; errors users can fix get one clear line.

    Ctrl-C never reaches this far: typer turns it into exit code 130 inside the command, so the
    commands that take long (run, resume, eval) say what was interrupted themselves.

    ``kill -USR1 PID`` prints every thread's stack to stderr, without stopping kagent: what a
    run that seems stuck is doing (a run once outlasted Ctrl-C by 15 minutes on a loaded CI
    machine, and nothing said where it waited)."""
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    try:
        app(prog_name="kagent")
    except KagentError as err:
        if os.environ.get("KAGENT_DEBUG"):
            raise
        # Escaped: a message is plain text, and rich would take its [brackets] for markup
        # (`pip install 'kagent[report]'` lost its extra).
        err_console.print(f"[bold red]error:[/] {escape(err.message)}")
        if err.hint:
            err_console.print(f"[dim]{escape(err.hint)}[/]")
        sys.exit(err.exit_code)


if __name__ == "__main__":
    main()
