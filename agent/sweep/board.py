"""What a sweep shows: the live status table, the board at its end, and its one JSON.

All of it is made from the record and the members' run folders, whenever asked: `kagent sweep
status` and the end of the sweep read the same ``summarize``. The JSON (``sweep.json``, a
versioned model) lists each member with its run folder, so a board across runs can read the
runs themselves.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field
from rich import box
from rich.table import Table
from rich.text import Text

from kagent.agent.report.run_list import STATE_STYLE
from kagent.agent.settings import format_duration
from kagent.agent.storage.lock import lock_holder
from kagent.agent.sweep.figures import MemberFigures, read_figures
from kagent.agent.sweep.member import Outcome, read_heartbeat, runs_of
from kagent.agent.sweep.plan import SweepSpec
from kagent.agent.sweep.record import MemberState, SweepView, fold, read_record
from kagent.agent.sweep.usage import GpuUsage, gpu_usage

SUMMARY_NAME = "sweep.json"
BOARD_NAME = "board.md"
OUTCOME_STYLE = {
    "pending": "dim",
    "queued": "dim",
    "hung": "red",
    "failed": "red",
    "skipped": "yellow",
    "cut": "yellow",
}


class MemberRow(BaseModel):
    model_config = ConfigDict(extra="forbid")
    index: int
    run_id: str
    task: str
    model: str
    branch: int
    direction: Optional[str]
    state: str = Field(
        description="pending, queued, running, the run's end state (kagent runs), hung, failed, skipped or cut"
    )
    outcome: Optional[Outcome] = Field(None, description="How the sweep's driving of it ended, once it has")
    detail: str = ""
    run_dir: str = Field(description="Its run folder, relative to the sweep's folder")
    where: str = Field("", description="The host and GPUs it last ran on")
    figures: MemberFigures


class SweepSummary(BaseModel):
    """sweep.json: the sweep, each member and each GPU, as it stands."""

    model_config = ConfigDict(extra="forbid")
    version: Literal[1] = 1
    sweep_id: str
    state: Literal["running", "ended", "stopped"] = Field(
        description="stopped: its driver is gone before the end; `kagent sweep --resume` goes on"
    )
    spec: SweepSpec
    started_at: str
    elapsed_s: float
    resumes: int
    members: list[MemberRow]
    gpus: list[GpuUsage]
    cost_usd: float
    tokens: int


def _state(state: MemberState, figures: MemberFigures, driver_alive: bool) -> str:
    ended = state.ended
    if ended is not None:
        return ended.run_state or ended.outcome if ended.outcome == "ended" else ended.outcome
    if not state.launches:
        return "pending"
    if not driver_alive:
        return "cut"
    return "queued" if figures.state is None else "running"


def summarize(sweep_dir: Path) -> SweepSummary:
    view: SweepView = fold(read_record(sweep_dir))
    alive = lock_holder(sweep_dir) is not None
    rows = []
    for state in view.members.values():
        member = state.member
        figures = read_figures(runs_of(sweep_dir) / member.run_id)
        beat = read_heartbeat(sweep_dir, member.run_id)
        rows.append(
            MemberRow(
                index=member.index,
                run_id=member.run_id,
                task=member.task_name,
                model=member.model,
                branch=member.branch,
                direction=member.direction,
                state=_state(state, figures, alive),
                outcome=state.ended.outcome if state.ended else None,
                detail=state.ended.detail if state.ended else "",
                run_dir=f"runs/{member.run_id}",
                where=f"{beat['host']} gpu {beat['gpus']}"
                if beat and beat.get("gpus")
                else beat["host"]
                if beat
                else "",
                figures=figures,
            )
        )
    return SweepSummary(
        sweep_id=view.spec.sweep_id,
        state="ended" if view.ended else "running" if alive else "stopped",
        spec=view.spec,
        started_at=_iso(view.started.at),
        elapsed_s=round(view.elapsed_s, 1),
        resumes=view.resumes,
        members=rows,
        gpus=gpu_usage(sweep_dir, view.segments),
        cost_usd=round(sum(r.figures.cost_usd for r in rows), 4),
        tokens=sum(r.figures.tokens for r in rows),
    )


def _iso(stamp: float) -> str:
    return datetime.fromtimestamp(stamp, timezone.utc).isoformat(timespec="seconds")


def _cells(row: MemberRow) -> list[str]:
    """The figures of a member as both the table and the board show them."""
    f = row.figures
    result = f"{f.result_score:.3f}x #{f.best_attempt}" if f.result_score is not None else "–"
    ms = "  ".join(f"{ms:.4g} ({label})" for label, ms in f.ms_per_token.items()) or "–"
    return [result, ms, format_duration(f.elapsed_s), f"{f.tokens:,}", f"${f.cost_usd:.2f}"]


def status_table(summary: SweepSummary) -> Table:
    """The live table: one row per member."""
    title = (
        f"sweep {summary.sweep_id}: {summary.state}, {format_duration(summary.elapsed_s)}, ${summary.cost_usd:.2f}"
        + (f", resumed {summary.resumes}x" if summary.resumes else "")
    )
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False)
    for name in ("#", "task", "model", "b", "state", "best verified", "ms/token", "time", "tokens", "cost", "where"):
        table.add_column(
            name,
            no_wrap=name in ("#", "state"),
            justify="right" if name in ("#", "b", "time", "tokens", "cost") else "left",
        )
    for row in summary.members:
        style = STATE_STYLE.get(row.state) or OUTCOME_STYLE.get(row.state, "")
        table.add_row(
            str(row.index), row.task, row.model, str(row.branch), Text(row.state, style=style), *_cells(row), row.where
        )
    return table


def board_markdown(summary: SweepSummary) -> str:
    """The board at the end: every member, then every GPU's use, as markdown."""
    counts: dict[str, int] = {}
    for row in summary.members:
        counts[row.state] = counts.get(row.state, 0) + 1
    lines = [
        f"# kagent sweep {summary.sweep_id}",
        "",
        f"- state: {summary.state}" + (f" (resumed {summary.resumes} times)" if summary.resumes else ""),
        f"- members: {len(summary.members)} ({', '.join(f'{n} {s}' for s, n in sorted(counts.items()))})",
        f"- started: {summary.started_at}; running time {format_duration(summary.elapsed_s)}",
        f"- cost: ${summary.cost_usd:.2f}; tokens: {summary.tokens:,}",
        f"- engine: {summary.spec.engine}"
        + (f" ({summary.spec.ray_address})" if summary.spec.ray_address else "")
        + f"; device {summary.spec.device}, {summary.spec.per_gpu} member(s) per "
        + ("GPU" if summary.spec.device == "cuda" else "CPU"),
        "",
        "| # | task | model | branch | state | best verified | ms/token | time | tokens | cost | run |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in summary.members:
        lines.append(
            "| "
            + " | ".join([str(row.index), row.task, row.model, str(row.branch), row.state, *_cells(row), row.run_dir])
            + " |"
        )
    notes = [f"- #{row.index} {row.state}: {row.detail}" for row in summary.members if row.detail]
    if notes:
        lines += ["", *notes]
    if summary.gpus:
        lines += [
            "",
            "| device | busy | timed alone | holds (timed) | waited | overlaps | nvidia-smi utilization |",
            "|---|---|---|---|---|---|---|",
        ]
        for gpu in summary.gpus:
            sampled = f"{gpu.sampled_utilization:.1%} ({gpu.samples} samples)" if gpu.samples else "–"
            lines.append(
                f"| {gpu.lease} | {gpu.busy_fraction:.1%} | {gpu.timed_fraction:.1%} | {gpu.holds} "
                f"({gpu.timed_holds}) | {gpu.waited_s:.0f} s | {gpu.overlaps} | {sampled} |"
            )
        lines += [
            "",
            "busy: some evaluation held the device (loading, checking, timing: host work too, so an upper "
            "bound); timed alone: it held it exclusively; overlaps: exclusive holds that overlapped another "
            "(0 when the lease works); nvidia-smi utilization: the share of time a kernel ran, the GPU's "
            "own busy time.",
        ]
    return "\n".join(lines) + "\n"


def write_results(sweep_dir: Path) -> SweepSummary:
    """sweep.json and board.md in the sweep's folder, as the sweep stands now."""
    summary = summarize(sweep_dir)
    (Path(sweep_dir) / SUMMARY_NAME).write_text(summary.model_dump_json(indent=1))
    (Path(sweep_dir) / BOARD_NAME).write_text(board_markdown(summary))
    return summary
