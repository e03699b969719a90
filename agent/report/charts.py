"""The report's charts: matplotlib figures written as SVG and put inline in the page.

SVG keeps a page one file with no script: it scales, prints and mails as it is, and a chart
of a few hundred attempts weighs tens of kilobytes. Text stays text (svg.fonttype none), so it
is searchable and small; mathtext is off, so a label with a dollar sign reads as written. Each
chart hashes its ids with its own name, so that several inline SVGs never share one.
"""

from __future__ import annotations

import io
import re
import textwrap
from typing import TYPE_CHECKING, Any

import matplotlib
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, MaxNLocator, NullLocator

from kagent.agent.report.html import verdict_colour
from kagent.agent.report.story import PRICED_KINDS, TOKEN_KINDS, AttemptRow, RunStory
from kagent.sandbox.noise import score_interval

if TYPE_CHECKING:  # the names of rc settings (matplotlib 3.9 on; the charts run from 3.8)
    from matplotlib.typing import RcKeyType

STYLE: dict[RcKeyType, Any] = {
    "svg.fonttype": "none",
    "text.parse_math": False,
    "font.size": 9,
    "font.family": "sans-serif",
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "legend.fontsize": 8,
    "legend.frameon": False,
}
# How an attempt's flag (AttemptRow.flags) is drawn over its verdict's mark. A flag without an
# entry is not drawn: a new one needs its marker here and nothing else.
MARKS: dict[str, dict[str, Any]] = {
    "reverted": {"marker": "x", "s": 46, "color": "#222222", "linewidths": 1.2},
    "draft": {"marker": "D", "s": 70, "color": "#7b3294", "facecolors": "none", "linewidths": 1.2},
}
BEST_COLOUR = "#1f4e9c"
SHAPE_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f"]
KIND_COLOURS = {
    "input_tokens": "#1f77b4",
    "output_tokens": "#d62728",
    "cache_read_tokens": "#2ca02c",
    "cache_write_tokens": "#ff7f0e",
    "reasoning_tokens": "#9467bd",
}
WIDTH_IN = 10.0
# Unscored attempts (checks, failures) sit on a strip this far up the axes, in axes fraction.
FOOT = 0.05


def _svg(figure: Figure, name: str) -> str:
    """The figure as an <svg> element to put inline: no XML prolog, sized by the page."""
    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.hashsalt": f"kagent-{name}"}):
        figure.savefig(buffer, format="svg", metadata={"Date": None, "Creator": "kagent report (matplotlib)"})
    text = buffer.getvalue()
    text = text[text.index("<svg") :]
    # The page's style sizes it (width 100%, height from the viewBox); the fixed size in points goes.
    return re.sub(
        r'^<svg([^>]*?) width="[^"]*" height="[^"]*"', rf'<svg\1 role="img" aria-label="{name} chart"', text, count=1
    )


def _figure(height_in: float, right: float = 0.80) -> Figure:
    """Fixed margins, the legend in the right-hand one: a layout engine doubled the drawing time."""
    figure = Figure(figsize=(WIDTH_IN, height_in))
    figure.subplots_adjust(left=0.07, right=right, bottom=0.14, top=0.9, wspace=0.35)
    return figure


def _empty(ax: Any, text: str, width: int = 48) -> None:
    """Say in the axes why they hold nothing (yet)."""
    lines = "\n".join(textwrap.fill(line, width) for line in text.splitlines())
    ax.text(0.5, 0.5, lines, transform=ax.transAxes, ha="center", va="center", color="#6a737d")


def _count(value: float, _position: object = None) -> str:
    """A tick's number without mathtext (which is off): 0.5, 20, 5,000, 12k, 3.4M."""
    size = abs(value)
    if size >= 1e6:
        return f"{value / 1e6:.3g}M"
    if size >= 1e4:
        return f"{value / 1e3:.3g}k"
    return f"{value:,.0f}" if size >= 1e3 else f"{value:.3g}"


def _log_axis(axis: Any) -> None:
    """A log scale whose labels are plain numbers (the default ones are mathtext, which is off),
    without minor ticks: each tick is a handful of artists to lay out."""
    axis.set_major_formatter(FuncFormatter(_count))
    axis.set_minor_locator(NullLocator())


def _title(ax: Any, text: str) -> None:
    """A panel's name at its top left: an axes title costs a layout pass of its own when drawn."""
    ax.text(0.0, 1.03, text, transform=ax.transAxes, fontsize=10, va="bottom")


def _minutes(seconds: float) -> float:
    return seconds / 60.0


def _scores(rows: list[AttemptRow]) -> list[float]:
    """The scores of attempts that have one (the others are drawn at the foot)."""
    return [a.score for a in rows if a.score is not None]


def speedup_chart(story: RunStory) -> str:
    """Speedup over elapsed time: a mark per attempt coloured by verdict (a scored benchmark at its
    score with its interval, anything else on the strip at the foot), the best so far, the
    re-verified result, reverts."""
    with matplotlib.rc_context(STYLE):
        figure = _figure(3.8)
        ax = figure.add_subplot()
        ax.set_xlabel("elapsed (minutes)")
        ax.set_ylabel("speedup over the baseline (geomean)")
        scored = [a for a in story.attempts if a.score is not None]
        values = [1.0] + [v for a in scored for v in (a.score, *(a.interval or ()))]
        final_score = story.final_result.score if story.final_result is not None else None
        final_interval = (
            score_interval(story.final_result) if story.final_result is not None and final_score is not None else None
        )
        if final_score is not None:
            values += [final_score, *(final_interval or ())]
        ax.axhline(1.0, color="#888888", lw=0.8, ls="--", zorder=1)
        handles: list[Line2D] = [Line2D([], [], color="#888888", lw=0.8, ls="--", label="baseline (1x)")]
        ranged = [(a, a.interval) for a in scored if a.interval]
        if ranged:  # one collection for all the intervals: an artist each doubled the chart's drawing time
            ax.vlines(
                [_minutes(a.elapsed_s) for a, _ in ranged],
                [low for _, (low, _high) in ranged],
                [high for _, (_low, high) in ranged],
                colors=[verdict_colour(a.verdict) for a, _ in ranged],
                lw=1.2,
                alpha=0.45,
            )
        for verdict in dict.fromkeys(a.verdict for a in story.attempts):
            ours = [a for a in scored if a.verdict == verdict]
            if ours:
                ax.scatter(
                    [_minutes(a.elapsed_s) for a in ours],
                    _scores(ours),
                    s=30,
                    zorder=3,
                    color=verdict_colour(verdict),
                    edgecolors="white",
                    linewidths=0.5,
                )
            foot = [a for a in story.attempts if a.score is None and a.verdict == verdict]
            if foot:
                ax.scatter(
                    [_minutes(a.elapsed_s) for a in foot],
                    [FOOT] * len(foot),
                    marker="^",
                    s=34,
                    zorder=3,
                    color=verdict_colour(verdict),
                    transform=ax.get_xaxis_transform(),
                    clip_on=False,
                )
            handles.append(Line2D([], [], marker="o", ls="", color=verdict_colour(verdict), label=verdict))
        for flag, style in MARKS.items():
            flagged = [a for a in story.attempts if flag in a.flags]
            for on_foot in (False, True):
                ours = [a for a in flagged if (a.score is None) == on_foot]
                if ours:
                    extra: dict[str, Any] = {"transform": ax.get_xaxis_transform(), "clip_on": False} if on_foot else {}
                    ax.scatter(
                        [_minutes(a.elapsed_s) for a in ours],
                        [FOOT] * len(ours) if on_foot else _scores(ours),
                        zorder=4,
                        **style,
                        **extra,
                    )
            if flagged:
                handles.append(
                    Line2D(
                        [],
                        [],
                        marker=style["marker"],
                        ls="",
                        color=style["color"],
                        label=flag,
                        markerfacecolor=style.get("facecolors", style["color"]),
                    )
                )
        best = _best_so_far(story.attempts)
        if best:
            xs, ys = zip(*best, strict=True)
            ax.step([*xs, _minutes(story.elapsed_s)], [*ys, ys[-1]], where="post", color=BEST_COLOUR, lw=1.6, zorder=2)
            handles.append(Line2D([], [], color=BEST_COLOUR, lw=1.6, label="best so far"))
        for elapsed_s, _target in story.model_reverts:
            ax.axvline(_minutes(elapsed_s), color="#222222", lw=0.8, ls=":", zorder=1)
        if story.model_reverts:
            handles.append(Line2D([], [], color="#222222", lw=0.8, ls=":", label="revert asked by the model"))
        if final_score is not None and story.final is not None:
            x = _minutes(story.final.elapsed_s)
            if final_interval:
                ax.vlines(x, *final_interval, color=BEST_COLOUR, lw=1.4, alpha=0.6)
            ax.scatter([x], [final_score], marker="*", s=150, color=BEST_COLOUR, edgecolors="white", zorder=5)
            handles.append(
                Line2D([], [], marker="*", ls="", markersize=10, color=BEST_COLOUR, label="re-verified result")
            )
        if story.attempts:
            handles.append(Line2D([], [], marker="^", ls="", color="#888888", label="no score (foot)"))
        low, high = min(values), max(values)
        if high / low > 8:
            ax.set_yscale("log")
            _log_axis(ax.yaxis)
        pad = (high - low) * 0.12 or 0.1
        ax.set_ylim(max(low - pad, low / 2) if ax.get_yscale() == "log" else low - pad, high + pad)
        ax.set_xlim(0, max(_minutes(story.elapsed_s), 0.1) * 1.03)
        if not story.attempts:
            _empty(ax, "no attempt yet")
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        return _svg(figure, "speedup")


def _best_so_far(attempts: list[AttemptRow]) -> list[tuple[float, float]]:
    """(minutes, score) each time the best score rose."""
    points: list[tuple[float, float]] = []
    for a in attempts:
        if a.score is not None and (not points or a.score > points[-1][1]):
            points.append((_minutes(a.elapsed_s), a.score))
    return points


def roofline_chart(story: RunStory) -> str:
    """Per attempt, each shape's ms per token (log axis) against the baseline's and the bytes
    floor's; beside it, the solution's launches per step."""
    with matplotlib.rc_context(STYLE):
        figure = _figure(3.8)
        grid = figure.add_gridspec(1, 2, width_ratios=[3, 1])
        ax, launches_ax = figure.add_subplot(grid[0]), figure.add_subplot(grid[1])
        _title(ax, "ms per token")
        ax.set_xlabel("attempt")
        ax.set_ylabel("ms per token (log)")
        ax.set_yscale("log")
        _log_axis(ax.yaxis)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
        timed = [a for a in story.attempts if a.shapes]
        labels = list(dict.fromkeys(s.label for a in timed for s in a.shapes)) or [t.label for t in story.baseline]
        handles: list[Line2D] = []
        for index, label in enumerate(labels):
            colour = SHAPE_COLOURS[index % len(SHAPE_COLOURS)]
            points = [(a.number, s) for a in timed for s in a.shapes if s.label == label]
            if points:
                xs = [n for n, _ in points]
                ax.plot(xs, [s.candidate_ms for _, s in points], marker="o", ms=4, lw=1.2, color=colour)
                ax.plot(
                    xs, [s.baseline_ms for _, s in points], ls="--", marker="_", ms=9, lw=1, color=colour, alpha=0.7
                )
                floors = [s.floor_ms for _, s in points if s.floor_ms]
            else:
                floors = []
            baseline = next((t for t in story.baseline if t.label == label), None)
            if not points and baseline is not None:  # no timed attempt yet: the baseline tool's figures
                ax.axhline(baseline.baseline.median_ms, ls="--", lw=1, color=colour, alpha=0.7)
                floors = [baseline.roofline.floor_ms] if baseline.roofline else []
            if floors:
                ax.axhline(floors[-1], ls=":", lw=1.2, color=colour)
            handles.append(Line2D([], [], color=colour, marker="o", ms=4, label=label))
        if labels:
            handles += [
                Line2D([], [], color="#555555", lw=1.2, label="solution"),
                Line2D([], [], color="#555555", lw=1, ls="--", label="baseline"),
                Line2D([], [], color="#555555", lw=1.2, ls=":", label="bytes floor"),
            ]
            figure.legend(handles=handles, loc="upper left", bbox_to_anchor=(0.81, 0.9))
        if timed:  # whole attempts only: a lone attempt's axis would read 1.900 to 2.100
            ax.set_xlim(timed[0].number - 0.5, timed[-1].number + 0.5)
        else:
            ax.set_xlim(0.5, 1.5)
            _empty(
                ax,
                "no timed attempt yet"
                + (": the baseline and the floor as the baseline tool measured them" if story.baseline else ""),
            )
        _launches(launches_ax, story.attempts)
        return _svg(figure, "roofline")


def _launches(ax: Any, attempts: list[AttemptRow]) -> None:
    _title(ax, "launches per step")
    ax.set_xlabel("attempt")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
    counted = [a for a in attempts if a.launches is not None]
    if not counted:
        notes = list(dict.fromkeys(a.launch_note for a in attempts if a.launch_note))
        _empty(ax, "no launch counts" + (f":\n{notes[-1]}" if notes else " yet"), width=28)
        ax.set_xticks([])
        ax.set_yticks([])
        return
    # Points, not bars: on the log axis that a count of hundreds needs, a bar has no bottom.
    ax.plot([a.number for a in counted], [a.launches for a in counted], color="#999999", lw=0.8, zorder=1)
    ax.scatter(
        [a.number for a in counted],
        [a.launches for a in counted],
        s=16,
        zorder=2,
        color=[BEST_COLOUR if a.single_launch else verdict_colour(a.verdict) for a in counted],
    )
    ax.axhline(1, color=BEST_COLOUR, lw=0.8, ls="--")
    if max(a.launches or 0 for a in counted) > 20:
        ax.set_yscale("log")
        _log_axis(ax.yaxis)
    ax.set_ylim(bottom=0.7 if ax.get_yscale() == "log" else 0)
    ax.set_ylabel("launches (1: a single launch)")


def usage_chart(story: RunStory) -> str:
    """Tokens by kind and cost over elapsed time, as running totals."""
    with matplotlib.rc_context(STYLE):
        figure = _figure(3.2, right=0.98)
        token_ax, cost_ax = figure.subplots(1, 2)
        _title(token_ax, "tokens by kind")
        _title(cost_ax, "cost")
        for ax in (token_ax, cost_ax):
            ax.set_xlabel("elapsed (minutes)")
            ax.set_xlim(0, max(_minutes(story.elapsed_s), 0.1) * 1.03)
        token_ax.yaxis.set_major_formatter(FuncFormatter(_count))
        steps = story.usage
        xs = [0.0] + [_minutes(step.elapsed_s) for step in steps]
        for kind, name in TOKEN_KINDS.items():
            token_ax.step(
                xs,
                [0] + [step.tokens[kind] for step in steps],
                where="post",
                color=KIND_COLOURS[kind],
                ls="--" if kind == "reasoning_tokens" else "-",
                lw=1.3,
                label=name + (" (part of output)" if kind == "reasoning_tokens" else ""),
            )
        token_ax.legend(loc="upper left")
        token_ax.set_ylabel("tokens so far")
        if not steps:
            _empty(token_ax, "no model response yet")
        elif story.total_tokens == 0:
            _empty(token_ax, "the model's responses counted no tokens")
        cost_ax.set_ylabel("USD so far")
        split = [step.cost_by_kind for step in steps if step.cost_by_kind is not None]
        if steps and len(split) == len(steps):
            cost_ax.stackplot(
                xs,
                *[[0.0] + [part[kind] for part in split] for kind in PRICED_KINDS],
                step="post",
                colors=[KIND_COLOURS[k] for k in PRICED_KINDS],
                alpha=0.8,
                labels=[TOKEN_KINDS[k] for k in PRICED_KINDS],
            )
            cost_ax.legend(loc="upper left")
        cost_ax.step(xs, [0.0] + [step.cost_usd for step in steps], where="post", color="#222222", lw=1.2)
        if story.cost_usd == 0:
            _empty(cost_ax, "no cost recorded\n(a free, local or scripted model, or one without a price)")
            cost_ax.set_ylim(0, 1)
        if story.total_tokens == 0:
            token_ax.set_ylim(0, 1)
        cost_ax.set_ylim(bottom=0)
        token_ax.set_ylim(bottom=0)
        return _svg(figure, "usage")


def charts(story: RunStory) -> dict[str, str]:
    """Every chart of a run's page, by the name of its place on the page."""
    return {"speedup": speedup_chart(story), "roofline": roofline_chart(story), "usage": usage_chart(story)}
