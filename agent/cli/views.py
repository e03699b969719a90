"""How results look in a terminal (rich)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Optional

from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from kagent.agent.report.trace_reading import minutes, shorten
from kagent.sandbox import progress
from kagent.sandbox.noise import score_lines, score_text
from kagent.sandbox.results import Determinism, EvalResult, Verdict, ms_text
from kagent.tasks import TaskRef

VERDICT_STYLE = {
    Verdict.PASS: "bold green",
    Verdict.INCORRECT: "bold red",
    Verdict.ERROR: "bold red",
    Verdict.FORBIDDEN: "bold red",
    Verdict.TAMPERED: "bold magenta",
    Verdict.TIMEOUT: "bold yellow",
    Verdict.CRASH: "bold red",
    Verdict.INTERNAL_ERROR: "bold magenta",
}


def tasks_table(tasks: list[TaskRef]) -> Table:
    table = Table(title="Built-in tasks", show_lines=False)
    table.add_column("name", style="bold")
    table.add_column("kind")
    table.add_column("description")
    for task in tasks:
        table.add_row(task.name, task.kind, task.description)
    return table


def timing_table(result: EvalResult) -> Table:
    contestant = "the baseline again (A/A)" if result.mode == "aa" else "the solution"
    step = "call" if result.step_name == "call" else "step"
    table = Table(
        title=f"Baseline vs {contestant}, in alternating blocks of {step}s",
        caption=f"ms: median per {step} (p10–p90); CI: 95% interval of the speedup (its blocks' "
        "and the spread between two processes), ≈ when it holds 1.0 (within noise); floor: the bytes "
        "floor over the solution's time",
    )
    for name in ("shape", "base ms", "sol ms", result.rate_unit, "speedup", "CI", "floor"):
        table.add_column(name, justify="left" if name == "shape" else "right", no_wrap=True)
    for t in result.timings:
        roofline = f"{t.roofline.candidate_fraction:.1%}" if t.roofline else "–"
        table.add_row(
            t.label,
            f"{ms_text(t.baseline.median_ms)}\n({ms_text(t.baseline.p10_ms)}–{ms_text(t.baseline.p90_ms)})",
            f"{ms_text(t.candidate.median_ms)}\n({ms_text(t.candidate.p10_ms)}–{ms_text(t.candidate.p90_ms)})",
            f"{t.tokens_per_s:,.0f}",
            f"{t.speedup:.3f}x" + (" ≈" if t.within_noise else ""),
            f"{t.ci_low:.2f}–{t.ci_high:.2f}",
            roofline,
        )
    return table


def checks_table(result: EvalResult) -> Table:
    table = Table(title="Checks")
    table.add_column("check")
    table.add_column("status")
    table.add_column("reason", overflow="fold")
    colors = {"pass": "green", "fail": "red", "error": "red", "crash": "red", "timeout": "yellow"}
    for c in result.checks:
        table.add_row(c.name, Text(c.status, style=colors[c.status]), c.reason)
    return table


def _launch_line(result: EvalResult) -> str:
    parts = []
    for report in result.launches:
        if report.launches is None:
            parts.append(f"{report.who}: {report.note}")
            continue
        flags = [
            f
            for f, on in (("CUDA graph replay", report.cuda_graph_replay), ("torch.compile", report.torch_compile))
            if on
        ]
        single = "single launch" if report.single_launch else "not a megakernel"
        parts.append(
            f"{report.who}: {report.launches} launches/step ({single}"
            + (f"; {', '.join(flags)}" if flags else "")
            + ")"
        )
    return "; ".join(parts)


def _determinism_line(determinism: Determinism) -> str:
    said = f"determinism: two calls on identical inputs ({determinism.case})"
    if determinism.bitwise_equal:
        return f"{said} are bitwise equal"
    difference = (
        f"{determinism.max_abs_diff:.3g}" if determinism.max_abs_diff is not None else "undefined (NaN or infinity)"
    )
    return f"{said} are not bitwise equal: largest difference {difference} in {determinism.largest_in}"


def result_view(result: EvalResult, result_path: str | None = None) -> Group:
    head = Text.assemble((f"{result.verdict.value.upper()}", VERDICT_STYLE[result.verdict]), "  ", result.reason)
    parts: list[RenderableType] = [head, *_result_tables(result), Text("\n".join(_result_lines(result, result_path)))]
    if result.verdict in (Verdict.CRASH, Verdict.ERROR, Verdict.INTERNAL_ERROR):
        evidence = next((c.details for c in result.checks if c.details), "") or result.stderr_tail
        if evidence.strip():
            parts.append(Panel(evidence.strip()[-2000:], title="evidence (tail)", border_style="red"))
    return Group(*parts)


def _result_tables(result: EvalResult) -> list[Table]:
    tables = []
    if result.static_findings:
        table = Table(title="Static findings")
        for col in ("file", "line", "rule", "code"):
            table.add_column(col)
        for f in result.static_findings:
            table.add_row(f.file, str(f.line), f.rule, f.evidence)
        tables.append(table)
    if result.checks:
        tables.append(checks_table(result))
    if result.timings:
        tables.append(timing_table(result))
    return tables


def _result_lines(result: EvalResult, result_path: str | None) -> list[str]:
    """The score, then what the result says of the solution, the machine and the time it took."""
    lines = score_lines(result)
    if result.determinism:
        lines.append(_determinism_line(result.determinism))
    if result.launches:
        lines.append(f"launches: {_launch_line(result)}")
    device_time = result.device_time_check()
    if device_time:
        lines.append(f"device time: {device_time}")
    for t in result.timings:
        if t.candidate_host_overhead_ms is not None and t.candidate_isolated_ms is not None:
            lines.append(
                f"{t.label}: one step on its own takes {ms_text(t.candidate_isolated_ms)} ms ({t.host_overhead_text()})"
            )
    if result.bandwidth:
        source = "cached" if result.bandwidth.cached else "measured now"
        lines.append(f"copy bandwidth: {result.bandwidth.bytes_per_s / 1e12:.3f} TB/s ({source})")
    env = result.environment
    if env:
        where = env.gpu_name or f"CPU ({env.platform})"
        lines.append(f"on {where}, torch {env.torch}, CUDA {env.cuda or '–'}, driver {env.driver or '–'}")
    lease = _lease_line(result)
    if lease:
        lines.append(f"device lease: {lease}")
    phases = ", ".join(f"{k} {v:.1f}s" for k, v in result.phases.items())
    overhead = ", ".join(f"{k} {v:.1f}s" for k, v in result.overhead_seconds.items())
    lines.append(
        f"wall time {result.wall_seconds:.1f} s"
        + (f" ({phases})" if phases else "")
        + (f"; outside the harness's phases: {overhead}" if overhead else "")
    )
    if result_path:
        lines.append(f"result written to {result_path}")
    return lines


def _lease_line(result: EvalResult) -> str:
    """What sharing the device with other evaluations (a sweep's lease) cost and changed: the
    holds with the device alone and their waits, and the probes read busy beside other work
    that were asked again (an empty string without a lease)."""
    parts = []
    if result.gpu_leases:
        kinds = ", ".join(dict.fromkeys(hold.what for hold in result.gpu_leases))
        parts.append(
            f"held alone {len(result.gpu_leases)} times ({kinds}) after waiting "
            f"{sum(hold.waited_s for hold in result.gpu_leases):.1f} s in all"
        )
    asked = result.probes_asked_again
    if asked:
        alone = sum(bool(probe.get("alone")) for probe in asked)
        parts.append(
            f"{len(asked)} probes read busy beside other evaluations' work were read again "
            f"({alone} of them with the device alone)"
        )
    if result.ran_alone_after:
        parts.append(
            f"evaluated a second time with the device alone: the first run's device memory ran out "
            f"while shared ({result.ran_alone_after.splitlines()[0][:160]})"
        )
    return "; ".join(parts)


def print_result(console: Console, result: EvalResult, result_path: str | None = None) -> None:
    console.print(result_view(result, result_path))


def run_panel(update, since_s: float = 0.0) -> Panel:
    """The live view of a run (``update`` is a kagent.agent.loop.agent.ViewUpdate), ``since_s``
    seconds after the update was made: until the run has ended, its clocks move on by that."""
    moved = 0.0 if update.ended else since_s
    elapsed = update.elapsed_s + moved
    # The best attempt's interval is in its ledger entry: the score goes with its noise, as in report.md.
    interval = next((a.interval for a in update.attempts if a.number == update.best_attempt), None)
    best = (
        f"{score_text(update.best_score, interval)} (attempt {update.best_attempt})"
        if update.best_score is not None
        else "none yet"
    )
    if update.final_score is not None:
        best += f" · re-verified {update.final_score:.3f}x: the result"
    head = _label_grid()
    head.add_row("phase", update.phase, "turn", str(update.turn))
    head.add_row("elapsed", minutes(elapsed), "remaining", minutes(update.remaining_s - moved))
    head.add_row("tokens", f"{update.tokens:,}", "cost", f"${update.cost_usd:.2f}")
    # A grid of its own, so that a long line here does not widen the columns above.
    now = _label_grid()
    now.add_row("best", best)
    if update.activity:
        doing = f"{update.activity} for {minutes(elapsed - update.activity_since_s)}"
        now.add_row("now", Text(doing + (f" · {update.detail}" if update.detail else ""), style="bold"))
    attempts = Table(box=None, show_header=True, header_style="dim")
    for column in ("#", "kind", "verdict", "score", "note"):
        attempts.add_column(column)
    for a in update.attempts:
        attempts.add_row(
            str(a.number),
            a.kind,
            a.verdict,
            f"{a.score:.3f}x" if a.score is not None else "–",
            shorten(a.note or a.reason, 60),
        )
    return Panel(Group(head, now, attempts, Text(update.last_event, style="dim")), title="kagent run")


def _label_grid() -> Table:
    """Label and value columns; the labels' column is as wide as the longest label, in every grid."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(min_width=len("elapsed"))
    return grid


class LiveRunView:
    """What rich's Live draws while a run goes: the loop's latest update, rendered anew at every
    refresh with the time since it came, so that the clocks tick while a tool runs for minutes
    with nothing to report. ``update`` is called by the loop's thread, rendering by Live's."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._latest: Optional[tuple[Any, float]] = None  # replaced whole, so a reader sees one consistent pair

    def update(self, update) -> None:
        self._latest = (update, self._clock())

    def __rich__(self) -> RenderableType:
        latest = self._latest
        if latest is None:  # the run is being set up: nothing to show yet (nor to leave behind on an error)
            return Text("")
        update, received = latest
        return run_panel(update, since_s=self._clock() - received)


class ProgressLines:
    """What `kagent run` prints where its output is no terminal (a CI log, a pipe, `tee`): a line
    for each thing that happened, as it happens; a live view there prints once, at the end.
    ``update`` takes the loop's ViewUpdates; the lines are never wrapped, so a path stays whole."""

    def __init__(self, console: Console):
        self.console = console
        self._event: Optional[tuple[int, str]] = None
        self._activity = ""

    def update(self, update) -> None:
        """A line for a new event (the model answered, an attempt recorded), and one for each
        activity as it begins (a tool, the re-verification); an evaluation's progress within
        an activity adds none."""
        event = (update.turn, update.last_event)
        if update.last_event and event != self._event:
            self._event = event
            best = f" · best {update.best_score:.3f}x (attempt {update.best_attempt})" if update.best_score else ""
            self._say(update, f"{update.last_event}{best}")
        if update.activity and update.activity != self._activity and update.activity != "waiting for the model":
            self._say(update, update.activity)
        self._activity = update.activity

    def _say(self, update, text: str) -> None:
        self.console.print(
            f"{minutes(update.elapsed_s)} turn {update.turn}: {text}", soft_wrap=True, highlight=False, markup=False
        )


class EvalProgressView:
    """The line `kagent eval` keeps up to date on a terminal while it runs: the time so far and
    the harness's latest step (``update`` gets its events as they arrive)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._started = clock()
        self._latest = "starting"

    def update(self, event: dict) -> None:
        self._latest = progress.describe(event) or self._latest

    def __rich__(self) -> RenderableType:
        return Text.assemble(
            ("evaluating for ", "dim"), (minutes(self._clock() - self._started), "bold"), (f" · {self._latest}", "dim")
        )


def audit_table(audit) -> Table:
    """Per attempt: recorded against re-measured (``audit`` is a kagent.agent.lifecycle.reexecute.ReplayAudit)."""
    verdict = "[green]everything reproduces[/]" if audit.reproduces else "[red]divergences found[/]"
    table = Table(title=f"Replay of {audit.run_id} on {audit.device} ({audit.scale}): {verdict}")
    for column in ("#", "kind", "verdict then → now", "score then → now", "reproduces", "why"):
        table.add_column(column)
    for a in audit.attempts:
        score = (
            (f"{a.recorded_score:.3f}x" if a.recorded_score is not None else "–")
            + " → "
            + (f"{a.measured_score:.3f}x" if a.measured_score is not None else "–")
        )
        table.add_row(
            str(a.number),
            a.kind,
            f"{a.recorded_verdict} → {a.measured_verdict or 'missing'}",
            score,
            Text("yes", style="green") if a.reproduces else Text("NO", style="bold red"),
            a.why,
        )
    if audit.extra_attempts:
        table.caption = f"{audit.extra_attempts} attempt(s) appeared only in the re-execution"
    return table
