"""What the report's pages share: escaping, the document around a page's body, its style sheet,
the colours that say a verdict or a state, and the blocks a page is made of (a preformatted
text, a capped one, a fold, a diff).

Every text that comes from a run (what the model wrote, tool outputs, file contents, even the
run id) goes through :func:`esc`. The page forbids itself every script and every fetch
(Content-Security-Policy ``default-src 'none'``), so that a text that slipped through could not
run or call anywhere: it has no external asset to load in the first place.
"""

from __future__ import annotations

import html
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

from kagent.agent.report.trace_reading import diff_line_kind

# Colour of each verdict (kagent.sandbox.results.Verdict), on the charts and in the tables.
VERDICT_COLOURS = {
    "pass": "#1a9850",
    "incorrect": "#d73027",
    "error": "#f46d43",
    "crash": "#a50026",
    "timeout": "#e6a100",
    "forbidden": "#762a83",
    "tampered": "#c51b7d",
    "internal_error": "#777777",
}
OTHER_COLOUR = "#444444"
# How each run state (kagent.agent.outcome) reads on a page.
STATE_COLOURS = {
    "running": "#1f6fb2",
    "finished": "#1a9850",
    "no_result": "#b07d00",
    "stopped": "#b07d00",
    "stuck": "#d73027",
    "failed": "#d73027",
    "interrupted": "#b07d00",
    "unknown": "#762a83",
}

CSS = """
:root { --ink: #1d1f21; --dim: #6a737d; --line: #e1e4e8; --soft: #f6f8fa; --accent: #1f4e9c; }
* { box-sizing: border-box; }
body { font: 14px/1.45 -apple-system, "Segoe UI", "DejaVu Sans", Helvetica, Arial, sans-serif; color: var(--ink);
       margin: 0 auto; max-width: 1320px; padding: 16px 24px 48px; }
h1 { font-size: 20px; margin: 4px 0 12px; word-break: break-all; }
h2 { font-size: 17px; margin: 28px 0 8px; padding-bottom: 4px; border-bottom: 1px solid var(--line); }
h3 { font-size: 14px; margin: 18px 0 4px; color: var(--dim); font-weight: 600; }
a { color: var(--accent); }
nav a { margin-right: 14px; }
pre, code { font: 12px/1.4 "DejaVu Sans Mono", Menlo, Consolas, monospace; }
pre { background: var(--soft); padding: 8px 10px; margin: 4px 0; overflow-x: auto; white-space: pre-wrap;
      word-break: break-word; border-radius: 4px; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 3px 16px; margin: 0; }
dl.facts dt { color: var(--dim); }
dl.facts dd { margin: 0; }
.banner { padding: 8px 12px; border-left: 4px solid #b07d00; background: #fff8e1; margin: 8px 0; }
figure { margin: 8px 0 4px; }
figure svg { width: 100%; height: auto; display: block; }
figcaption { color: var(--dim); font-size: 12px; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { border-bottom: 1px solid var(--line); padding: 4px 6px; text-align: left; vertical-align: top; }
th { background: var(--soft); position: sticky; top: 0; }
td.num { text-align: right; white-space: nowrap; font-variant-numeric: tabular-nums; }
tr:target { background: #fff3c4; }
.verdict, .state { font-weight: 700; }
.dim { color: var(--dim); }
.turn { margin-top: 14px; padding-top: 6px; border-top: 1px dashed var(--line); color: var(--dim); }
.say { white-space: pre-wrap; margin: 4px 0; }
.call { margin: 6px 0 0; }
.call b { color: var(--accent); }
.result { margin: 0 0 0 18px; }
.error { color: #b31d28; }
.notice { color: #8a6100; }
.event { margin: 6px 0; }
details > summary { cursor: pointer; color: var(--dim); }
details.thinking > summary { font-style: italic; }
.diff .add { color: #22863a; } .diff .del { color: #b31d28; } .diff .hunk { color: #6f42c1; }
.diff .head { color: var(--dim); }
@media print { details { break-inside: avoid; } th { position: static; } }
"""

# No script, no fetch, no frame: only the page's own style and the SVG inside it.
CONTENT_SECURITY_POLICY = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"


def esc(value: object) -> str:
    """Text for HTML content or a quoted attribute value: <, >, &, " and ' escaped."""
    return html.escape(str(value), quote=True)


def verdict_colour(verdict: str) -> str:
    return VERDICT_COLOURS.get(verdict, OTHER_COLOUR)


def verdict_span(verdict: str) -> str:
    return f'<span class="verdict" style="color:{verdict_colour(verdict)}">{esc(verdict.upper())}</span>'


def state_span(state: str) -> str:
    return f'<span class="state" style="color:{STATE_COLOURS.get(state, OTHER_COLOUR)}">{esc(state)}</span>'


def relative_href(target: Path, page: Path) -> str:
    """A link from the page to a file beside it (a blob, a run's page), relative so that the
    folders can be moved together."""
    return esc(Path(os.path.relpath(Path(target).absolute(), Path(page).absolute().parent)).as_posix())


def document(title: str, body: str) -> str:
    """A whole page around ``body`` (already HTML): one file, nothing to fetch."""
    made = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    return (
        f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{CONTENT_SECURITY_POLICY}">\n'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f'<meta name="generator" content="kagent report">\n<title>{esc(title)}</title>\n'
        f"<style>{CSS}</style>\n</head>\n<body>\n{body}\n"
        f'<p class="dim">made by <code>kagent report</code> at {esc(made)}</p>\n</body>\n</html>\n'
    )


def write_page(path: Path, text: str) -> Path:
    """Write a page whole or not at all: a reader never opens half a page."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path


def pre(text: str, css: str = "") -> str:
    return f"<pre{f' class={css!r}' if css else ''}>{esc(text)}</pre>"


def capped(text: str, limit: int, rest: str) -> str:
    """``text`` escaped, cut at ``limit`` with a line that says how much more there is and where
    (``rest``, already HTML)."""
    if len(text) <= limit:
        return esc(text)
    return f'{esc(text[:limit])}\n<span class="dim">… {len(text) - limit:,} more characters: {rest}</span>'


def fold(summary: str, body: str, open_: bool = False, css: str = "") -> str:
    """A <details> block: ``summary`` and ``body`` are HTML."""
    return (
        f"<details{f' class={css!r}' if css else ''}{' open' if open_ else ''}><summary>{summary}</summary>"
        f"{body}</details>"
    )


def diff_html(lines: list[str], limit: Optional[int] = None, anchor: str = "") -> str:
    shown = lines if limit is None else lines[:limit]
    parts = []
    for line in shown:
        css = diff_line_kind(line)
        parts.append(f'<span class="{css}">{esc(line)}</span>' if css else esc(line))
    if len(lines) > len(shown):
        parts.append(f'<span class="dim">… {len(lines) - len(shown):,} more diff lines</span>')
    return f'<pre class="diff"{f" id={anchor!r}" if anchor else ""}>' + "\n".join(parts) + "</pre>"
