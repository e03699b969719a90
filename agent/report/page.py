"""`kagent report RUN`: one run as one self-contained HTML page.

In order: the header (task, model, machine, state, budget, tokens and cost, the result), the
speedup over time, time per token against the bytes floor with launches beside it, tokens and
cost over time, the ledger of attempts, each attempt's diff and file, and the transcript
(transcript.py). A long output is folded, and cut at a cap with a link to its blob (or the
trace event that holds it whole), so that a run of hundreds of turns stays a page a mail can
carry.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

from kagent.agent.outcome import reverification_inconclusive
from kagent.agent.report import require_charts
from kagent.agent.report.html import diff_html, document, esc, fold, state_span, verdict_span, write_page
from kagent.agent.report.story import AttemptRow, AttemptSource, RunStory, attempt_sources, read_story
from kagent.agent.report.trace_reading import line_count, minutes, shorten
from kagent.agent.report.transcript import Transcript, tokens_text
from kagent.agent.storage.trace import RunResumed
from kagent.sandbox.noise import score_interval, score_text

PAGE_NAME = "report.html"
# Caps on what the attempts' part of the page shows; the transcript's are transcript.py's.
MAX_ATTEMPT_DIFF_CHARS = 200_000  # one attempt's diff from the attempt before
# The attempts' solution files in all, the best attempt's first, then the newest: past it, an
# attempt's file is named by the git command that shows it (its diff still shows). A file the
# same as an earlier attempt's is shown once.
FILES_BUDGET_CHARS = 1_500_000


# -- the header -------------------------------------------------------------------------------


def _wall_budget(story: RunStory) -> float:
    """The wall budget now: the run's, or what its last resume extended it to."""
    resumed = [e for e in story.events if isinstance(e, RunResumed)]
    return resumed[-1].budget_wall_s if resumed else float((story.config.get("budget") or {}).get("wall_s") or 0)


def _result_text(story: RunStory) -> str:
    best, final, result = story.best, story.final, story.final_result
    if result is not None and result.verdict.value == "pass" and result.score is not None:
        explored = f"; {best.score:.3f}x while exploring" if best is not None and best.score is not None else ""
        return (
            f"<b>{esc(score_text(result.score, score_interval(result)))}</b>, attempt "
            f"{esc(final.best_attempt if final else '?')} re-verified{esc(explored)}"
        )
    if result is not None and reverification_inconclusive(result) and best is not None:
        # As `kagent runs` says it: the benchmark that made it the best stands (RunReport.result_score).
        return (
            f"<b>{esc(score_text(best.score, best.interval))}</b>, attempt {best.number} as measured while "
            f"exploring; its final re-verification was inconclusive: {verdict_span(result.verdict.value)} "
            f"{esc(shorten(result.reason, 300))}"
        )
    if result is not None:
        return (
            f"none: attempt {esc(final.best_attempt if final else '?')} failed its final re-verification: "
            f"{verdict_span(result.verdict.value)} {esc(shorten(result.reason, 300))}"
        )
    if final is not None:
        return esc(final.note) + (
            f" (best while exploring: {esc(score_text(best.score))}, attempt {best.number})" if best is not None else ""
        )
    if best is not None:
        return (
            f"not re-verified yet: the best while exploring is {esc(score_text(best.score, best.interval))} "
            f"(attempt {best.number})"
        )
    return "none yet: no attempt has passed a benchmark"


def _environment_text(story: RunStory) -> str:
    env = story.environment
    if env is None:
        return esc(f"{story.config.get('device', '?')} (no evaluation has run yet)")
    parts = [env.gpu_name or env.device]
    parts += [
        f"{name} {value}"
        for name, value in (
            ("UUID", env.gpu_uuid),
            ("driver", env.driver),
            ("CUDA", env.cuda),
            ("torch", env.torch),
            ("triton", env.triton),
            ("python", env.python),
            ("host", env.hostname),
        )
        if value
    ]
    return esc(" · ".join(parts))


def _header(story: RunStory) -> str:
    wall = _wall_budget(story)
    budget = story.config.get("budget") or {}
    used = [minutes(story.elapsed_s) + (f" of {minutes(wall)} ({story.elapsed_s / wall:.0%})" if wall else "")]
    if budget.get("max_tokens"):
        used.append(f"{story.total_tokens:,} of {int(budget['max_tokens']):,} tokens")
    if budget.get("max_cost_usd") is not None:
        used.append(f"${story.cost_usd:.2f} of ${float(budget['max_cost_usd']):.2f}")
    versions = " · ".join(f"{name} {value}" for name, value in story.versions.items() if value)
    facts = [
        ("task", esc(story.task)),
        ("model", esc(story.model)),
        ("device", esc(f"{story.config.get('device', '?')}, {story.config.get('scale', '?')} scale")),
        ("machine", _environment_text(story)),
        ("state", f"{state_span(story.state)} {esc(story.reason)}"),
        ("result", _result_text(story)),
        ("budget used", esc(" · ".join(used))),
        ("tokens", esc(f"{story.total_tokens:,} ({tokens_text(story.tokens)})")),
        ("cost", esc(f"${story.cost_usd:.2f}")),
        ("attempts", esc(f"{len(story.attempts)} in {story.turns} turns; {len(story.events):,} trace events")),
        ("versions", esc(versions or "–")),
    ]
    rows = "".join(f"<dt>{name}</dt><dd>{value}</dd>" for name, value in facts)
    return f'<h1>kagent run {esc(story.run_id)}</h1>\n<dl class="facts" id="summary">{rows}</dl>'


def _banners(story: RunStory) -> str:
    lines = []
    if story.ended is None:
        what = {
            "running": "the run is still going: this page shows its trace as it stood when the page was made",
            "interrupted": "the run was interrupted: this page shows its trace up to there; `kagent resume` "
            "goes on with it",
        }.get(story.state, "the trace records no end of the run")
        lines.append(what)
    if story.torn_tail:
        lines.append(
            "the trace's last line is incomplete (being written, or cut short when the process was "
            "killed): it is not shown"
        )
    return "".join(f'<p class="banner">{esc(line)}</p>' for line in lines)


# -- the ledger and each attempt's files --------------------------------------------------------


def _shape_lines(row: AttemptRow, cell: Callable[[Any], str]) -> str:
    return "<br>".join(esc(f"{s.label}: {cell(s)}") for s in row.shapes) or "–"


def _ledger(story: RunStory, sources: dict[int, AttemptSource], solution_name: str) -> str:
    if not story.attempts:
        return '<p class="dim">No attempt yet.</p>'
    head = (
        "<tr><th>#</th><th>kind</th><th>design</th><th>predicted</th><th>outcome</th><th>verdict</th>"
        "<th>score [95% interval]</th><th>ms per token (baseline)</th><th>launches</th><th>of floor</th>"
        "<th>elapsed</th><th>files</th></tr>"
    )
    best = story.best
    rows = []
    for row in story.attempts:
        source = sources.get(row.number)
        links = []
        if source is not None:
            links.append(
                f'<a href="#attempt-{row.number}-diff">diff from '
                f"{'#' + str(source.previous) if source.previous is not None else 'nothing'}</a>"
            )
            if source.solution is not None:
                links.append(f'<a href="#attempt-{row.number}-file">{esc(solution_name)}</a>')
        launches = "–" if row.launches is None else f"{row.launches}" + (" (single)" if row.single_launch else "")
        mark = " ★" if best is not None and row.number == best.number else ""
        kept = (
            '<br><span class="dim">draft</span>'
            if "draft" in row.flags
            else ""
            if row.kept
            else '<br><span class="dim">reverted</span>'
        )
        why = f'<br><span class="dim">why: {esc(shorten(row.why, 300))}</span>' if row.why else ""
        rows.append(
            f'<tr id="attempt-{row.number}"><td class="num"><a href="#event-{row.seq}">{row.number}</a>{mark}</td>'
            f"<td>{esc(row.kind)}</td><td>{esc(row.hypothesis or '–')}</td><td>{esc(row.predicted or '–')}</td>"
            f"<td>{esc(shorten(row.note, 400))}{why}</td><td>{verdict_span(row.verdict)}{kept}</td>"
            f'<td class="num">{esc(score_text(row.score, row.interval))}</td>'
            f'<td class="num">{_shape_lines(row, lambda s: f"{s.candidate_ms:.4g} ({s.baseline_ms:.4g})")}</td>'
            f'<td class="num" title="{esc(row.launch_note)}">{esc(launches)}</td>'
            f'<td class="num">{_shape_lines(row, _floor_text)}</td>'
            f'<td class="num">{esc(minutes(row.elapsed_s))}</td><td>{"<br>".join(links) or "–"}</td></tr>'
        )
    return f'<table id="ledger-table">{head}{"".join(rows)}</table>'


def _floor_text(shape: Any) -> str:
    return f"{shape.fraction_of_floor:.2%}" if shape.fraction_of_floor is not None else "–"


def _files_shown(story: RunStory, sources: dict[int, AttemptSource]) -> tuple[dict[int, int], set[int]]:
    """Which attempt's file each attempt's file is (the earliest with the same text), and which of
    those are shown within FILES_BUDGET_CHARS: the best attempt's first, then the newest."""
    owner: dict[str, int] = {}
    same: dict[int, int] = {}
    for number in sorted(sources):
        text = sources[number].solution
        if text is not None:
            same[number] = owner.setdefault(text, number)
    best = story.best.number if story.best is not None and story.best.number in same else None
    budget, shown = FILES_BUDGET_CHARS, set()
    for number in ([best] if best is not None else []) + sorted(same, reverse=True):
        first = same[number]
        size = len(sources[first].solution or "")
        if first not in shown and size <= budget:
            shown.add(first)
            budget -= size
    return same, shown


def _attempt_files(story: RunStory, sources: dict[int, AttemptSource], missing: str, solution_name: str) -> str:
    if missing:
        return f'<p class="dim">No attempt files: {esc(missing)}</p>'
    if not sources:
        return '<p class="dim">No attempt yet.</p>'
    workspace = story.run_dir / "workspace"
    same, shown = _files_shown(story, sources)
    parts = []
    for row in story.attempts:
        source = sources.get(row.number)
        if source is None:
            continue
        previous = f"attempt {source.previous}" if source.previous is not None else "an empty workspace"
        diff_lines = source.diff[:MAX_ATTEMPT_DIFF_CHARS].splitlines()
        cut = (
            f'<p class="dim">diff cut at {MAX_ATTEMPT_DIFF_CHARS:,} characters: <code>git -C {esc(workspace)} diff '
            f"refs/kagent/attempts/{source.previous} refs/kagent/attempts/{row.number}</code></p>"
            if len(source.diff) > MAX_ATTEMPT_DIFF_CHARS
            else ""
        )
        diff = (
            diff_html(diff_lines, anchor=f"attempt-{row.number}-diff") + cut
            if diff_lines
            else f'<p class="dim" id="attempt-{row.number}-diff">no change from {esc(previous)}</p>'
        )
        blocks = [fold(f"attempt {row.number}: diff from {esc(previous)} ({len(diff_lines):,} lines)", diff)]
        text = source.solution
        if text is not None:
            first = same[row.number]
            summary = f"attempt {row.number}: {esc(solution_name)} ({line_count(text):,} lines)"
            if first != row.number:
                body = (
                    f'<p class="dim" id="attempt-{row.number}-file">the same file as attempt '
                    f'<a href="#attempt-{first}-file">{first}</a></p>'
                )
            elif first in shown:
                body = f'<pre id="attempt-{row.number}-file">{esc(text)}</pre>'
            else:
                body = (
                    f'<p class="dim" id="attempt-{row.number}-file">not in this page (the files shown passed '
                    f"{FILES_BUDGET_CHARS:,} characters): <code>git -C {esc(workspace)} show "
                    f"refs/kagent/attempts/{row.number}:{esc(solution_name)}</code></p>"
                )
            blocks.append(fold(summary, body))
        parts.append(f'<div class="event">{"".join(blocks)}</div>')
    return "\n".join(parts)


# -- the page -----------------------------------------------------------------------------------


def _chart(name: str, title: str, svg: str, caption: str) -> str:
    return (
        f'<section id="{name}"><h2>{esc(title)}</h2><figure id="chart-{name}">{svg}'
        f"<figcaption>{esc(caption)}</figcaption></figure></section>"
    )


def render_run(story: RunStory, page: Path) -> str:
    """The whole page of a run; ``page`` is where it will be written (links to blobs are relative)."""
    from kagent.agent.report.charts import charts

    drawn = charts(story)
    sources, missing = attempt_sources(story)
    solution_name = str(story.config.get("solution_name") or "solution.py")
    body = "\n".join(
        [
            _header(story),
            _banners(story),
            '<nav><a href="#speedup">speedup</a><a href="#roofline">time per token</a>'
            '<a href="#usage">tokens and cost</a><a href="#ledger">attempts</a><a href="#files">diffs and files</a>'
            '<a href="#transcript">transcript</a></nav>',
            _chart(
                "speedup",
                "Speedup over time",
                drawn["speedup"],
                "One mark per attempt, coloured by verdict: a benchmark that passed at its score with its 95% "
                "interval, any other attempt (a check, a failure) on the strip at the foot; x: reverted; "
                "hollow diamond: a draft (failed, kept in place to work on); the line: the best "
                "so far; the star: the final re-verification.",
            ),
            _chart(
                "roofline",
                "Time per token against the bytes floor",
                drawn["roofline"],
                "Per timed attempt and shape: the solution's median ms per token (solid), the baseline's in the same "
                "evaluation (dashed) and the bytes floor (dotted), on a log axis; beside it, the solution's launches "
                "per step (as its own process counted them).",
            ),
            _chart(
                "usage",
                "Tokens and cost over time",
                drawn["usage"],
                "Running totals after each model response. Reasoning tokens are part of output tokens. The cost is as "
                "recorded; its split by kind follows the price table's rates for the model.",
            ),
            f'<section id="ledger"><h2>Attempts</h2>{_ledger(story, sources, solution_name)}</section>',
            f'<section id="files"><h2>Diffs and files</h2>{_attempt_files(story, sources, missing, solution_name)}'
            "</section>",
            f'<section id="transcript"><h2>Transcript</h2>{Transcript(story, page).render()}</section>',
        ]
    )
    return document(f"kagent run {story.run_id}", body)


def write_run_page(run_dir: Path, out: Optional[Path] = None) -> Path:
    """Write the page of the run in ``run_dir`` to ``out`` (default: report.html in the run folder)."""
    require_charts()
    story = read_story(run_dir)
    page = Path(out) if out is not None else story.run_dir / PAGE_NAME
    return write_page(page, render_run(story, page))
