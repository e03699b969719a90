"""``kagent eval``: grade one solution (or time the baseline against itself), show the result
and write it, and exit with a code that says how it went."""

from __future__ import annotations

import re
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Optional

import typer

from kagent.agent.cli.shared import Scale, console, err_console, keys_not_echoed, warn
from kagent.agent.outcome import EXIT_CTRL_C
from kagent.core.errors import KagentError
from kagent.core.paths import kagent_home, runs_dir
from kagent.sandbox.timeouts import EVAL_TIMEOUT_S, SMOKE_CLI_TIMEOUT_S, cli_eval_timeout_s

if TYPE_CHECKING:  # imported where used: a mistake in the options is said before torch is imported
    from kagent.sandbox.results import Verdict

# Exit codes of `kagent eval`, for scripts; bad usage (bad arguments, unknown task, missing file)
# is kagent.core.errors.EXIT_USAGE, every command's.
EXIT_PASS = 0
EXIT_SOLUTION_FAILED = 1  # incorrect, error, crash, timeout, forbidden, tampered
EXIT_INTERNAL = 3  # a bug in kagent or in the task


def _build_home(path: Optional[Path]) -> Optional[Path]:
    """--build-home as an existing folder (made if missing), or one clear message."""
    if path is None:
        return None
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise KagentError(f"--build-home {path}: cannot use it as a folder ({err.strerror})") from None
    return path.absolute()


def _parse_contexts(text: Optional[str]) -> Optional[list[int]]:
    if not text:
        return None
    try:
        return [int(part) for part in re.split(r"[,\s]+", text.strip()) if part]
    except ValueError:
        raise KagentError(
            f"--contexts takes context lengths separated by commas, such as 2048,8192; got {text!r}"
        ) from None


def eval_command(
    task: str = typer.Argument(
        ..., help="A built-in task name (see `kagent tasks`), a problem folder, or a KernelBench .py file."
    ),
    solution: Optional[Path] = typer.Option(None, "--solution", "-s", help="The solution file to grade."),
    aa: bool = typer.Option(False, "--aa", help="A/A run: time the baseline against itself (no solution)."),
    check_only: bool = typer.Option(False, "--check-only", help="Correctness checks only, no timing."),
    device: str = typer.Option("auto", help="auto, cpu, cuda or cuda:N."),
    scale: Optional[Scale] = typer.Option(
        None,
        help="full: the real sizes; smoke: a tiny config for CPUs and CI. Default: full on CUDA, smoke on the CPU.",
    ),
    contexts: Optional[str] = typer.Option(None, help="Context lengths to time, e.g. 2048,8192 (default: all)."),
    rounds: Optional[int] = typer.Option(
        None,
        min=1,
        help="Timed chains per contestant at the context with the "
        "longest chain; shorter chains run more, to as many steps.",
    ),
    min_request_ms: Optional[float] = typer.Option(
        None,
        min=0,
        help="The least a timed request to the solution's "
        "process should last: a faster solution runs its whole chain "
        "several times a request (default 10; 0: single steps, "
        "as a host-bound one runs).",
    ),
    timeout: Optional[float] = typer.Option(
        None,
        min=1,
        help=f"Seconds before the run is killed (default {EVAL_TIMEOUT_S:g} full, {SMOKE_CLI_TIMEOUT_S:g} smoke).",
    ),
    atol: Optional[float] = typer.Option(
        None, help="KernelBench files: absolute tolerance (default: 1e-4 for fp32 outputs, 1e-2 fp16/bf16)."
    ),
    rtol: Optional[float] = typer.Option(None, help="KernelBench files: relative tolerance (default as --atol)."),
    eval_mode: bool = typer.Option(
        False, "--eval-mode", help="KernelBench files: models in eval mode (default: training mode, as KernelBench)."
    ),
    build_home: Optional[Path] = typer.Option(
        None,
        "--build-home",
        help="The solution's HOME, kept between "
        "evaluations that name it, so that its builds (Triton, torch "
        "extensions) are reused; whatever a solution leaves there, the "
        "next one sees (default: a fresh HOME each evaluation).",
    ),
    out: Optional[Path] = typer.Option(
        None, "--out", "-o", help="Where to write the result JSON (default: runs/evals/<time>_<task>.json)."
    ),
    json_output: bool = typer.Option(False, "--json", help="Print the result as JSON only."),
) -> None:
    """Grade a solution: correctness against the reference, then speed against the baseline.

    Exit code: 0 pass, 1 the solution failed, 2 bad usage, 3 internal error.
    """
    from rich.live import Live

    from kagent.agent.cli.views import EvalProgressView, print_result
    from kagent.agent.lifecycle.device import check_device_name, resolve_device
    from kagent.agent.settings import default_scale, scale_warning
    from kagent.sandbox.evaluate import EvalOptions, evaluate
    from kagent.tasks import resolve_task

    mode = _eval_mode(aa, check_only, solution)
    task_ref = resolve_task(task)
    if solution is not None:
        _check_solution_file(solution)
    check_device_name(device)
    resolved_device = resolve_device(device)
    chosen_scale = scale.value if scale else default_scale(resolved_device)
    if (warning := scale_warning(resolved_device, chosen_scale)) is not None:
        warn(warning)
    # Without --build-home each evaluation builds in a fresh HOME of its own, so that nothing one
    # solution leaves there (a marker, a doctored build) reaches the next `kagent eval`.
    options = EvalOptions(
        mode=mode,
        device=resolved_device,
        scale=chosen_scale,
        contexts=_parse_contexts(contexts),
        rounds=rounds,
        min_request_ms=min_request_ms,
        timeout_s=timeout or cli_eval_timeout_s(chosen_scale),
        cache_dir=kagent_home(),
        atol=atol,
        rtol=rtol,
        eval_mode=eval_mode,
        home=_build_home(build_home),
    )
    if not json_output:
        what = "A/A (baseline vs baseline)" if aa else str(solution)
        # A KernelBench file has one size, its own: no scale to name.
        where = f"{chosen_scale} scale, {resolved_device}" if task_ref.kind_of.has_scales else resolved_device
        err_console.print(f"[dim]evaluating {what} on {task_ref.name} ({where})…[/]")
    try:
        if err_console.is_terminal:  # progress for a person watching; stdout (--json) stays the result alone
            view = EvalProgressView()
            with keys_not_echoed(), Live(view, console=err_console, refresh_per_second=4, transient=True):
                result = evaluate(task_ref, solution, options, progress=view.update)
        else:
            result = evaluate(task_ref, solution, options)
    except KeyboardInterrupt:
        err_console.print("interrupted: the evaluation was stopped, nothing was written")
        raise typer.Exit(EXIT_CTRL_C) from None
    path = out or runs_dir() / "evals" / f"{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}_{task_ref.name}.json"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(result.model_dump_json(indent=1))
    except OSError as err:
        # The evaluation is done: show it anyway, then say what went wrong with the file.
        print_result(console, result)
        raise KagentError(
            f"could not write the result to {path}: {err.strerror}",
            hint="choose another --out",
            exit_code=EXIT_INTERNAL,
        ) from err
    if json_output:
        sys.stdout.write(result.model_dump_json(indent=1) + "\n")
    else:
        print_result(console, result, str(path))
    raise typer.Exit(_exit_code(result.verdict))


def _eval_mode(aa: bool, check_only: bool, solution: Optional[Path]) -> Literal["aa", "check", "eval"]:
    """What `kagent eval` is asked to do, once its options are known to go together."""
    if aa and solution is not None:
        raise KagentError("--aa times the baseline against itself: leave out --solution")
    if not aa and solution is None:
        raise KagentError("give --solution FILE, or --aa for an A/A run of the baseline")
    if aa and check_only:
        raise KagentError("--aa and --check-only do not go together: an A/A run is about timing")
    return "aa" if aa else "check" if check_only else "eval"


def _check_solution_file(solution: Path) -> None:
    if solution.is_dir():
        raise KagentError(
            f"{solution} is a directory: --solution takes the solution's file",
            hint=f"e.g. --solution {solution / 'solution.py'}; the files beside it are copied with it",
        )
    if not solution.is_file():
        raise KagentError(f"no solution file at {solution}")


def _exit_code(verdict: Verdict) -> int:
    from kagent.sandbox.results import Verdict

    if verdict is Verdict.INTERNAL_ERROR:
        return EXIT_INTERNAL
    return EXIT_PASS if verdict is Verdict.PASS else EXIT_SOLUTION_FAILED
