"""`kagent sweep`: start a sweep, go on with one (--resume), or show where one stands (status)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.live import Live
from typer.core import TyperGroup

from kagent.agent.outcome import EXIT_CTRL_C
from kagent.core.errors import KagentError

console = Console()
err_console = Console(stderr=True)
# The live table reads every member's run folder: often enough to follow, not so often as to cost.
REFRESH_S = 5.0
EXIT_ALL_ENDED = 0
EXIT_SOME_DID_NOT_END = 1  # a member failed, hung or was skipped


class _StartByDefault(TyperGroup):
    """`kagent sweep TASK...` and `kagent sweep --resume SWEEP` mean `kagent sweep start ...`."""

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["start", *args]
        return super().parse_args(ctx, args)


sweep_app = typer.Typer(
    cls=_StartByDefault,
    no_args_is_help=True,
    add_completion=False,
    help="Run tasks × models × branches at once, on every GPU or a Ray cluster.",
)


def _absolute_model(spec: str) -> str:
    """A scripted model's file as an absolute path: a Ray worker starts elsewhere."""
    provider, _, rest = spec.partition(":")
    if provider != "scripted" or not rest:
        return spec
    path, sep, query = rest.partition("?")
    return f"scripted:{Path(path).resolve()}{sep}{query}"


def _directions(given: list[str], file: Optional[Path], branches: int) -> list[str]:
    import yaml

    found = list(given)
    if file is not None:
        try:
            listed = yaml.safe_load(file.read_text())
        except (OSError, yaml.YAMLError) as err:
            raise KagentError(f"cannot read the directions file {file}: {err}") from err
        if not isinstance(listed, list) or not all(isinstance(d, str) for d in listed):
            raise KagentError(f"{file}: a directions file is a YAML list of strings, one per branch")
        found += listed
    if len(found) > branches:
        raise KagentError(f"{len(found)} directions for {branches} branch(es)", hint="--branches N, one direction each")
    return found


def _check_models(models: list[str], engine: str) -> None:
    """Each model spec known; made here when members run on this machine (keys, script files)."""
    from kagent.agent.loop.models import PROVIDERS, SPEC_FORMS, make_model

    for spec in models:
        if engine == "local":
            make_model(spec)
        elif spec.partition(":")[0] not in PROVIDERS:
            raise KagentError(f"bad model spec {spec!r}", hint="valid forms: " + ", ".join(SPEC_FORMS))


def _sweep_device(device: str, on_ray: bool) -> str:
    """cpu or cuda; auto is what this machine has, and cuda is checked here unless Ray's
    cluster runs the members (its driver may have no GPU)."""
    from kagent.agent.lifecycle.device import resolve_device

    if device == "cuda" and on_ray:
        return device
    return resolve_device(device)


def _gpu_list(text: Optional[str]) -> Optional[list[int]]:
    if text is None:
        return None
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise KagentError(f"--gpus takes GPU indices separated by commas, such as 0,1; got {text!r}") from None


@sweep_app.command("start")
def start_command(
    tasks: Optional[list[str]] = typer.Argument(
        None, help="Built-in task names, problem folders, KernelBench .py files, or folders of them."
    ),
    model: Optional[list[str]] = typer.Option(
        None, "--model", "-m", help="A model spec; give it again for more models (each task runs with each)."
    ),
    branches: int = typer.Option(1, min=1, help="Runs of each task and model, each from the same baseline."),
    direction: Optional[list[str]] = typer.Option(
        None, help="What branch 1, 2, ... is told to try, one per --direction (default: its number, as a seed)."
    ),
    directions: Optional[Path] = typer.Option(None, help="A YAML list of directions, one per branch."),
    budget: str = typer.Option("1h", help="Each member's wall-clock budget."),
    total_budget: Optional[str] = typer.Option(None, help="The whole sweep's wall-clock budget."),
    max_cost: Optional[float] = typer.Option(
        None, help="The whole sweep's cost cap in USD, shared out among the members as they start."
    ),
    max_tokens: Optional[int] = typer.Option(None, help="Each member's token cap."),
    device: str = typer.Option(
        "auto",
        help="auto, cpu or cuda: what the members run on (auto: this machine's GPUs, "
        "else the CPU; give cuda to drive a GPU cluster from elsewhere).",
    ),
    scale: Optional[str] = typer.Option(None, help="smoke or full (default: full on CUDA, smoke on the CPU)."),
    per_gpu: Optional[int] = typer.Option(
        None,
        min=1,
        help="Members that share one GPU, their timing serialized "
        "by its lease (default 1; on a CPU-only sweep, per CPU).",
    ),
    gpus: Optional[str] = typer.Option(
        None, help="The GPUs of this machine to use, e.g. 0,1, numbered as torch sees them (default: all)."
    ),
    ray: Optional[str] = typer.Option(
        None,
        help="Run the members as Ray tasks: auto starts a local Ray instance "
        "with every local GPU; an address (host:port) joins a cluster.",
    ),
    retries: Optional[int] = typer.Option(
        None, min=0, help="How often a member whose worker died is resumed (default 2)."
    ),
    grace: Optional[str] = typer.Option(
        None, help="How long past its budget a member may run before it is ended as hung (default 2m)."
    ),
    config: Optional[Path] = typer.Option(None, "--config", help="A `kagent run --config` file for every member."),
    name: Optional[str] = typer.Option(None, help="The sweep id's first word (default: sweep)."),
    root: Optional[Path] = typer.Option(
        None, help="The runs folder; sweeps go to its sweeps/ (default: ./runs or KAGENT_RUNS)."
    ),
    resume: Optional[str] = typer.Option(
        None,
        "--resume",
        help="Go on with this sweep (an id or a folder): members that were cut are resumed, those not started start.",
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No live table; the board at the end only."),
) -> None:
    """Start a sweep of tasks × models × branches (`kagent sweep TASK... --model M` says the same), or go on
    with one (`kagent sweep --resume SWEEP`). Each member is an ordinary kagent run with its own folder.

    Exit code: 0 every member's run recorded its end; 1 a member failed, hung or was skipped;
    2 bad usage; 130 interrupted (`kagent sweep --resume` goes on)."""
    from kagent.agent.settings import parse_duration
    from kagent.agent.sweep.driver import create_sweep, find_sweep
    from kagent.agent.sweep.plan import SweepSpec, expand_tasks, new_sweep_id
    from kagent.agent.sweep.record import fold, read_record

    if scale not in (None, "smoke", "full"):
        raise KagentError(f"--scale takes smoke or full, not {scale!r}")
    engine_fields: dict[str, Any] = {
        k: v
        for k, v in {
            "per_gpu": per_gpu,
            "gpus": _gpu_list(gpus),
            "retries": retries,
            "grace_s": parse_duration(grace) if grace else None,
        }.items()
        if v is not None
    }
    if ray is not None:
        from kagent.agent.sweep.engines import import_ray

        import_ray()  # before anything is made: one clear line where Ray is not installed
        engine_fields.update(engine="ray", ray_address=ray)
    if resume is not None:
        if tasks or model:
            raise KagentError("--resume goes on with a sweep as it was planned: give no tasks or models")
        sweep_dir = find_sweep(resume, root)
        caps = {
            k: v
            for k, v in {
                "total_budget_s": parse_duration(total_budget) if total_budget else None,
                "max_cost_usd": max_cost,
            }.items()
            if v is not None
        }
        spec = SweepSpec.model_validate({**fold(read_record(sweep_dir)).spec.model_dump(), **engine_fields, **caps})
    else:
        if not tasks or not model:
            raise KagentError(
                "give the tasks and at least one --model",
                hint="e.g. kagent sweep 02_kimi_linear_decode --model anthropic:claude-sonnet-4-5 --branches 4",
            )
        engine = "ray" if ray is not None else "local"
        task_list = expand_tasks(tasks)
        if device not in ("auto", "cpu", "cuda"):
            raise KagentError(
                f"--device {device}: a sweep's members take auto, cpu or cuda",
                hint="--gpus 0,2 picks this machine's GPUs",
            )
        _check_models(model, engine)
        spec = SweepSpec(
            sweep_id=new_sweep_id(name),
            tasks=task_list,
            models=[_absolute_model(m) for m in model],
            branches=branches,
            directions=_directions(direction or [], directions, branches),
            budget_s=parse_duration(budget),
            total_budget_s=parse_duration(total_budget) if total_budget else None,
            max_cost_usd=max_cost,
            max_tokens=max_tokens,
            device=_sweep_device(device, ray is not None),
            scale=scale,
            run_config=str(config.resolve()) if config else None,
            **engine_fields,
        )
        sweep_dir = create_sweep(spec, root)
        err_console.print(
            f"[dim]sweep {spec.sweep_id}: {sweep_dir}\nfollow it with `kagent sweep status "
            f"{spec.sweep_id} --watch`; after a crash, `kagent sweep --resume {spec.sweep_id}`[/]",
            highlight=False,
        )
    _drive(sweep_dir, spec if resume is not None else None, quiet)


def _drive(sweep_dir: Path, resume_spec, quiet: bool) -> None:
    from kagent.agent.sweep.board import board_markdown, status_table, summarize, write_results
    from kagent.agent.sweep.driver import drive_sweep

    live = None if quiet or not console.is_terminal else Live(console=console, refresh_per_second=1)
    shown = [0.0]

    def on_update(folder: Path) -> None:
        if live is not None and time.monotonic() - shown[0] >= REFRESH_S:
            shown[0] = time.monotonic()
            live.update(status_table(summarize(folder)))

    try:
        if live is not None:
            with live:
                drive_sweep(sweep_dir, resume_spec, on_update)
        else:
            drive_sweep(sweep_dir, resume_spec, on_update)
    except KeyboardInterrupt:
        write_results(sweep_dir)
        err_console.print(f"interrupted: sweep {sweep_dir.name} stopped; its members' runs are kept", highlight=False)
        err_console.print(f"go on with: kagent sweep --resume {sweep_dir.name}", highlight=False)
        raise typer.Exit(EXIT_CTRL_C) from None
    summary = write_results(sweep_dir)
    console.print(board_markdown(summary), highlight=False, markup=False)
    console.print(f"sweep folder: {sweep_dir} (sweep.json, board.md)", highlight=False)
    ended = all(row.outcome == "ended" for row in summary.members)
    raise typer.Exit(EXIT_ALL_ENDED if ended else EXIT_SOME_DID_NOT_END)


@sweep_app.command("status")
def status_command(
    sweep: Optional[str] = typer.Argument(None, help="A sweep id or folder (default: the newest sweep)."),
    root: Optional[Path] = typer.Option(None, help="The runs folder (default: ./runs or KAGENT_RUNS)."),
    watch: bool = typer.Option(
        False,
        "--watch",
        "-w",
        help="Keep the table up to date until the sweep ends (Ctrl-C stops watching; the sweep goes on).",
    ),
    json_output: bool = typer.Option(False, "--json", help="Print the sweep's JSON (as sweep.json holds it) only."),
) -> None:
    """Where a sweep stands: each member's state, best verified score, ms per token, time and cost."""
    from kagent.agent.sweep.board import status_table, summarize
    from kagent.agent.sweep.driver import find_sweep

    sweep_dir = find_sweep(sweep, root)
    if json_output:
        sys.stdout.write(summarize(sweep_dir).model_dump_json(indent=1) + "\n")
        return
    if not watch:
        console.print(status_table(summarize(sweep_dir)))
        return
    try:
        with Live(status_table(summarize(sweep_dir)), console=console, refresh_per_second=1) as live:
            while True:
                summary = summarize(sweep_dir)
                live.update(status_table(summary))
                if summary.state != "running":
                    return
                time.sleep(REFRESH_S)
    except KeyboardInterrupt:
        err_console.print("[dim]stopped watching (the sweep is not affected)[/]")
