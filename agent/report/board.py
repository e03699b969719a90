"""`kagent report --runs`: a board across runs, by task, model and GPU, each run linked to its page.

The runs come from kagent.agent.report.run_list (the same list, and the same true states, as `kagent
runs`); each run's figures from its trace. Each run's page is written beside the board, in
``<board name>-runs/<run id>.html``, so that the board and its pages move together.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from kagent.agent.report.html import document, esc, relative_href, state_span, write_page
from kagent.agent.report.page import render_run
from kagent.agent.report.run_list import RunSummary, list_runs
from kagent.agent.report.story import RunStory, read_story
from kagent.agent.report.trace_reading import minutes
from kagent.core.errors import KagentError
from kagent.sandbox.noise import score_interval, score_text

BOARD_NAME = "board.html"
FILTER_KEYS = ("task", "model", "gpu", "state")


@dataclass(frozen=True)
class BoardRow:
    summary: RunSummary
    story: Optional[RunStory]
    problem: str  # why the trace could not be read, else ""
    page: Optional[Path]

    @property
    def gpu(self) -> str:
        if self.story is None:
            return "?"
        env = self.story.environment
        return (env.gpu_name or env.device) if env else str(self.story.config.get("device", "?"))

    def fields(self) -> dict[str, str]:
        """What a filter's words match against."""
        return {"task": self.summary.task, "model": self.summary.model, "gpu": self.gpu, "state": self.summary.state}


def parse_filter(text: str) -> list[tuple[Optional[str], str]]:
    """Words that must all match: ``key=text`` (key in FILTER_KEYS) or plain text."""
    terms: list[tuple[Optional[str], str]] = []
    for word in text.split():
        key, sep, value = word.partition("=")
        if sep and key.lower() in FILTER_KEYS:
            terms.append((key.lower(), value.lower()))
        elif sep:
            raise KagentError(f"the filter's {word!r} names no field", hint=f"fields: {', '.join(FILTER_KEYS)}")
        else:
            terms.append((None, word.lower()))
    return terms


def _matches(row: BoardRow, terms: list[tuple[Optional[str], str]]) -> bool:
    fields = {key: value.lower() for key, value in row.fields().items()}
    anywhere = " ".join([row.summary.run_id.lower(), *fields.values()])
    return all(value in (fields[key] if key else anywhere) for key, value in terms)


def _result_figures(story: RunStory) -> tuple[str, str, str]:
    """ms per token, fraction of the floor and single launch of the run's result: the final
    re-verification where it passed, else the best attempt."""
    result = story.final_result
    if result is not None and result.verdict.value == "pass" and result.timings:
        ms = [f"{t.label}: {t.candidate.median_ms:.4g}" for t in result.timings]
        floor = [f"{t.label}: {t.roofline.candidate_fraction:.2%}" for t in result.timings if t.roofline]
        launches = result.launches_of("candidate")
        single = launches.single_launch if launches else None
    elif story.best is not None:
        ms = [f"{s.label}: {s.candidate_ms:.4g}" for s in story.best.shapes]
        floor = [f"{s.label}: {s.fraction_of_floor:.2%}" for s in story.best.shapes if s.fraction_of_floor is not None]
        single = story.best.single_launch
    else:
        return "–", "–", "–"
    return (
        "<br>".join(map(esc, ms)) or "–",
        "<br>".join(map(esc, floor)) or "–",
        "–" if single is None else "yes" if single else "no",
    )


def _row_html(row: BoardRow, board: Path) -> str:
    s = row.summary
    link = f'<a href="{relative_href(row.page, board)}">{esc(s.run_id)}</a>' if row.page is not None else esc(s.run_id)
    if row.story is None:
        return (
            f"<tr><td>{link}</td><td>{esc(s.model)}</td><td>?</td><td>{state_span(s.state)}</td>"
            f'<td colspan="7" class="error">{esc(row.problem)}</td></tr>'
        )
    story, best = row.story, row.story.best
    result = story.final_result
    # As `kagent runs` says it (RunSummary.result_score), with the interval of the measurement it is.
    if result is not None and result.verdict.value == "pass" and result.score is not None:
        verified = score_text(result.score, score_interval(result))
    elif best is not None and story.final is None:
        verified = score_text(best.score, best.interval)
    else:
        verified = score_text(s.result_score)
    ms, floor, single = _result_figures(story)
    to_best = f"{minutes(best.elapsed_s)} · ${story.cost_at(best.elapsed_s):.2f}" if best is not None else "–"
    return (
        f"<tr><td>{link}</td><td>{esc(s.model)}</td><td>{esc(row.gpu)}</td><td>{state_span(s.state)}</td>"
        f'<td class="num">{esc(verified)}</td><td class="num">{ms}</td><td class="num">{floor}</td>'
        f'<td>{single}</td><td class="num">{esc(to_best)}</td>'
        f'<td class="num">{esc(minutes(story.elapsed_s))} · ${story.cost_usd:.2f}</td>'
        f'<td class="num">{len(story.attempts)}</td></tr>'
    )


def render_board(rows: list[BoardRow], board: Path, title: str) -> str:
    head = (
        "<tr><th>run</th><th>model</th><th>GPU</th><th>state</th><th>best verified score</th>"
        "<th>ms per token</th><th>of floor</th><th>single launch</th><th>time · cost to the best</th>"
        "<th>time · cost in all</th><th>attempts</th></tr>"
    )
    sections = []
    for task in sorted({row.summary.task or "?" for row in rows}):
        ours = sorted(
            (row for row in rows if (row.summary.task or "?") == task),
            key=lambda row: (row.gpu, row.summary.model, -(row.summary.result_score or 0.0)),
        )
        sections.append(
            f"<section><h2>{esc(task)}</h2><table>{head}"
            f"{''.join(_row_html(row, board) for row in ours)}</table></section>"
        )
    body = (
        f"<h1>{esc(title)}</h1>\n"
        '<p class="dim">Per task, one row per run, by GPU and model, the best verified score first. The best '
        "verified score is the final re-verification's once a run has ended (the best attempt's before); its "
        "ms per token, fraction of the bytes floor and launches are the same measurement's. Each run links to "
        "its page.</p>\n" + ("\n".join(sections) or '<p class="dim">No run matches.</p>')
    )
    return document(title, body)


def write_board(root: Path, filter_text: str = "", out: Optional[Path] = None) -> tuple[Path, int]:
    """Write the board of the runs under ``root`` that match ``filter_text``, and each one's page
    beside it. Returns the board's path and how many runs it holds."""
    terms = parse_filter(filter_text)
    board = Path(out) if out is not None else Path(root) / BOARD_NAME
    pages = board.with_name(f"{board.stem}-runs")
    rows = []
    for summary in list_runs(Path(root)):
        try:
            story: Optional[RunStory] = read_story(summary.path)
            problem = ""
        except KagentError as err:  # no trace yet, or a corrupted one: the run still gets its row
            story, problem = None, err.message
        row = BoardRow(summary, story, problem, None)
        if not _matches(row, terms):
            continue
        if story is not None:
            page = pages / f"{summary.run_id}.html"
            write_page(page, render_run(story, page))
            row = BoardRow(summary, story, problem, page)
        rows.append(row)
    title = f"kagent runs in {Path(root).absolute()}"
    if filter_text.strip():
        title += f" matching “{filter_text}”"
    write_page(board, render_board(rows, board, title))
    return board, len(rows)
