"""`kagent report`: a run's page and the board across runs, rebuilt from run folders; everything a
model or a solution wrote escaped; the pages opened in a real headless Chromium.

One real scripted session (checks, a benchmark, a failed check reverted, a revert the model asks
for, text and output with markup in them) is shared by the tests; the long-run and the edge
cases are run folders written through kagent's own trace writer.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from kagent.agent.lifecycle.runs import start_run
from kagent.agent.report import charts
from kagent.agent.report.board import write_board
from kagent.agent.report.page import render_run, write_run_page
from kagent.agent.report.story import AttemptRow, read_story
from kagent.agent.settings import Budget, RunConfig, RunSettings
from kagent.agent.storage.trace import RunStarted, ToolStarted, TraceWriter
from kagent.core.errors import KagentError

from conftest import WAIT_S
from long_run import build_run

pytest.importorskip("matplotlib", reason="kagent report needs its extra: pip install 'kagent[report]'")

REPO = Path(__file__).resolve().parents[1]
KAGENT = str(Path(sys.executable).parent / "kagent")
BAD_LINE = "w = w / (w.sum() + 1e-9) * cfg.routed_scaling"
GOOD_LINE = "w = w / (w.sum() + 1e-9)"
MODEL_MARKUP = "<script>alert('model')</script>"
THOUGHT_MARKUP = "<img src=x onerror=alert('thinking')>"
FILE_MARKUP = "# <script>alert('file')</script>"
SHELL_MARKUP = "<script>alert('shell')</script>"
THOUGHT = f"Port the reference first.\nThen measure it. {THOUGHT_MARKUP}"
# Markup a page may hold only escaped (as it stands here, and nowhere as a tag).
RAW = [MODEL_MARKUP, THOUGHT_MARKUP, FILE_MARKUP, SHELL_MARKUP]


def call(name: str, **arguments: object) -> dict:
    return {"name": name, "arguments": arguments}


def usage(read: int) -> dict:
    return {
        "input_tokens": 900,
        "output_tokens": 400,
        "cache_read_tokens": read,
        "cache_write_tokens": 1500,
        "reasoning_tokens": 150,
    }


def kagent(*args: str, runs: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    environment = {**os.environ, "KAGENT_RUNS": str(runs), "COLUMNS": "200", **(env or {})}
    return subprocess.run([KAGENT, *args], capture_output=True, text=True, timeout=WAIT_S, env=environment)


@pytest.fixture(scope="module")
def session_run(tmp_path_factory, kagent_home, kimi) -> Path:
    """Look around (with markup in the model's text and thinking), write the port (with markup in a
    comment), check it, benchmark it, break it, check it (incorrect, reverted), echo markup from
    the shell, ask for a revert, finish; the best attempt is then re-verified."""
    reference = (kimi.path / "reference.py").read_text()
    port = reference + f"\n{FILE_MARKUP}\n"
    turns = [
        {
            "thinking": THOUGHT,
            "text": f"Looking at the files first. {MODEL_MARKUP}",
            "usage": usage(0),
            "tool_calls": [call("list_files")],
        },
        {
            "usage": usage(3000),
            "tool_calls": [
                call("design", hypothesis="a straight port", predicted="about 1x"),
                call("write_file", path="solution.py", content=port),
            ],
        },
        {"usage": usage(6000), "tool_calls": [call("check")]},
        {"usage": usage(9000), "tool_calls": [call("benchmark")]},
        {
            "usage": usage(12000),
            "text": "Dropping the routed scaling.",
            "tool_calls": [
                call("design", hypothesis="drop the routed scaling", predicted="1.01x"),
                call("write_file", path="solution.py", content=port.replace(BAD_LINE, GOOD_LINE)),
            ],
        },
        {"usage": usage(15000), "tool_calls": [call("check")]},
        {"usage": usage(18000), "tool_calls": [call("shell", command=f'echo "{SHELL_MARKUP}"')]},
        {"usage": usage(21000), "tool_calls": [call("revert", attempt=2)]},
        {"usage": usage(24000), "text": "Done.", "tool_calls": [call("finish", summary="the port stays")]},
    ]
    folder = tmp_path_factory.mktemp("report_session")
    script = folder / "script.json"
    script.write_text(json.dumps(turns))
    with pytest.MonkeyPatch.context() as patch:  # module-scoped: conftest's per-test environment is not set yet
        patch.setenv("KAGENT_HOME", str(kagent_home))
        run_dir, report = start_run(
            RunSettings(
                task="02_kimi_linear_decode",
                model=f"scripted:{script}",
                budget=Budget(wall_s=1800),
                device="cpu",
                scale="smoke",
                runs_root=folder / "runs",
                eval_timeout_s=WAIT_S,
            )
        )
    assert report.status == "finished" and report.attempts == 3 and report.final_verdict == "pass"
    return run_dir


@pytest.fixture(scope="module")
def session_page(session_run, tmp_path_factory) -> str:
    return write_run_page(session_run).read_text()


class Elements(HTMLParser):
    """The tags, ids and text of an HTML text, as a browser's parser would split them."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []
        self.in_figure: str | None = None
        self.figure_tags: dict[str, list[str]] = {}
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        self.tags.append((tag, attributes))
        if tag == "figure":
            self.in_figure = attributes.get("id")
            self.figure_tags[self.in_figure] = []
        elif self.in_figure:
            self.figure_tags[self.in_figure].append(tag)

    def handle_endtag(self, tag):
        if tag == "figure":
            self.in_figure = None

    def handle_data(self, data):
        self.text.append(data)

    def ids(self) -> set[str]:
        return {attributes["id"] for _tag, attributes in self.tags if "id" in attributes}


# -- the page of a run --------------------------------------------------------------------------


def test_the_page_of_a_finished_run(session_run, session_page):
    page = Elements(session_page)
    text = "".join(page.text)
    story = read_story(session_run)
    assert f"kagent run {story.run_id}" in text and "02_kimi_linear_decode" in text
    assert "finished" in text and "the model finished: the port stays" in text
    result = story.final_result
    assert result is not None and f"{result.score:.3f}x [" in text and "attempt 2 re-verified" in text
    tokens = sum(
        usage(read)[kind]
        for read in range(0, 27000, 3000)
        for kind in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
    )
    assert f"tokens{tokens:,} (" in text.replace("\n", "")
    assert "cpu, smoke scale" in text and "torch" in text
    # Three charts, each an inline SVG with drawn paths, in its own section.
    for name in ("speedup", "roofline", "usage"):
        tags = page.figure_tags[f"chart-{name}"]
        assert tags.count("svg") == 1 and tags.count("path") > 10, (name, tags[:20])
    # The ledger: a row per attempt, linked to its diff and file, each target on the page.
    ids = page.ids()
    for number, _verdict in ((1, "PASS"), (2, "PASS"), (3, "INCORRECT")):
        assert f"attempt-{number}" in ids and f"attempt-{number}-diff" in ids and f"attempt-{number}-file" in ids
    links = {a.get("href") for tag, a in page.tags if tag == "a"}
    assert {"#attempt-1-diff", "#attempt-2-file", "#attempt-3-diff"} <= links
    assert all(link[1:] in ids for link in links if link and link.startswith("#")), "a link to nothing"
    assert "a straight port" in text and "about 1x" in text and "drop the routed scaling" in text
    assert "reverted" in text and "the solution was reverted to attempt 2" in text
    assert "score [95% interval]" in text and re.search(r"\d\.\d{3}x \[\d\.\d{3}–\d\.\d{3}\]", text)
    assert "kernel launches are counted on CUDA devices only" in session_page  # the CPU's launches, said why
    # The diff of attempt 3 from attempt 2 is the broken line; attempt 2's file is attempt 1's, shown once.
    assert f"-        {BAD_LINE}" in text and f"+        {GOOD_LINE}" in text
    assert "the same file as attempt 1" in text
    # The transcript: turns, folded thinking with its first line, calls, results, budget lines, the end.
    assert "turn 1 · " in text and "turn 9 · " in text and "900 input · 400 output" in text
    assert re.search(
        r"<details class='thinking'><summary>thinking \(\d+ chars\): Port the reference first\.", session_page
    )
    assert "▶ write_file solution.py" in text and "— diff against the previous version" in text
    assert "▶ revert" in text and "The solution's files are back at attempt 2" in text
    assert "budget: phase explore · elapsed" in text
    assert "final: attempt 2, re-verified" in text and "run ended:" in text


def test_everything_the_model_or_the_solution_wrote_is_escaped(session_page):
    """Markup from the model's text and thinking, the solution file and a shell's output shows
    as text: never as a tag, and the page could run no script even if one slipped through."""
    page = Elements(session_page)
    text = "".join(page.text)
    for markup in RAW:
        assert markup not in session_page, markup
        assert markup in text, markup  # as text, once parsed
    assert not any(tag in ("script", "img", "iframe", "object", "embed", "link") for tag, _ in page.tags)
    assert not any(name.startswith("on") for _tag, attributes in page.tags for name in attributes)
    policy = next(
        a["content"] for tag, a in page.tags if tag == "meta" and a.get("http-equiv") == "Content-Security-Policy"
    )
    assert policy.startswith("default-src 'none'")
    # Nothing to fetch: every link stays in the page or goes to a file beside it.
    for tag, attributes in page.tags:
        for name in ("href", "src"):
            value = attributes.get(name)
            assert value is None or not re.match(r"^[a-z]+:", value), (tag, value)


def _copy_run(run: Path, to: Path, keep_events: int, torn: bool, pid: int) -> Path:
    """The run as it stood after ``keep_events`` events, still running (``pid`` holds its lock)."""
    shutil.copytree(run, to, symlinks=True)
    lines = (run / "trace.jsonl").read_bytes().splitlines(keepends=True)
    (to / "trace.jsonl").write_bytes(b"".join(lines[:keep_events]) + (lines[keep_events][:40] if torn else b""))
    status = json.loads((to / "status.json").read_text())
    (to / "status.json").write_text(json.dumps({**status, "state": "running", "pid": pid, "reason": ""}))
    (to / "lock").write_text(json.dumps({"pid": pid, "host": socket.gethostname(), "since": 0}))
    return to


def _first_attempt_after(run: Path, number: int) -> int:
    """How many events of the trace come up to and with attempt ``number``'s."""
    for index, line in enumerate((run / "trace.jsonl").read_text().splitlines()):
        event = json.loads(line)
        if event["type"] == "attempt_recorded" and event["attempt"]["number"] == number:
            return index + 1
    raise AssertionError(f"no attempt {number}")


def test_a_run_in_progress_with_a_torn_last_line(session_run, tmp_path):
    run = _copy_run(session_run, tmp_path / "run", _first_attempt_after(session_run, 2), torn=True, pid=os.getpid())
    text = "".join(Elements(render_run(read_story(run), run / "report.html")).text)
    assert "the run is still going" in text and "the trace's last line is incomplete" in text
    assert "running" in text and "not re-verified yet: the best while exploring is" in text
    assert "attempt 2" in text and "attempt 3" not in text and "run ended:" not in text
    assert "benchmark (event " in text and "has no result in the trace yet" in text  # cut by the torn line


def test_an_interrupted_run(session_run, tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    run = _copy_run(
        session_run, tmp_path / "run", _first_attempt_after(session_run, 1), torn=False, pid=int(dead.stdout)
    )
    text = "".join(Elements(render_run(read_story(run), run / "report.html")).text)
    assert "interrupted" in text and "the run was interrupted" in text and "kagent resume" in text
    assert "none yet: no attempt has passed a benchmark" in text and "incomplete" not in text


def test_a_trace_alone_renders(tmp_path):
    """No status, no workspace, no attempt: what the trace holds, and why the rest is missing."""
    run = tmp_path / "bare"
    trace = TraceWriter(run)
    config = RunConfig(run_id="bare", task="t", model="scripted:x", device="cpu", scale="smoke")
    trace.append(
        RunStarted(
            run_id="bare",
            config=config,
            versions={},
            prompt_sha256="",
            tools_sha256="",
            system="sys",
            first_message={},
            tools=[],
        )
    )
    trace.append(ToolStarted(turn=1, call_id="c", name="read_file", arguments={"path": "<b>x</b>"}))
    trace.close()
    html = render_run(read_story(run), run / "report.html")
    text = "".join(Elements(html).text)
    assert "unknown" in text and "the trace records no end" in text and "No attempt yet." in text
    assert 'path="<b>x</b>"' in text and "<b>x</b>" not in html
    assert "no model response yet" in html and "no attempt yet" in html and "no timed attempt yet" in html


def test_a_trace_that_is_not_one_is_a_clear_error(tmp_path):
    (tmp_path / "trace.jsonl").write_text('{"type": "nonsense"}\n{"type": "nonsense"}\n')
    with pytest.raises(KagentError, match="not a valid trace event"):
        read_story(tmp_path)


# -- a long run, and the charts' marks ---------------------------------------------------------


@pytest.fixture(scope="module")
def long_run(tmp_path_factory) -> Path:
    """tests/long_run.py's run at 60 turns, built once (it takes seconds): the tests only read it."""
    return build_run(tmp_path_factory.mktemp("report_long") / "runs" / "long", turns=60)


def test_a_long_run_folds_and_links_what_is_long(long_run):
    """tests/long_run.py's run at 60 turns: outputs kept as blobs are linked, a
    compaction, a retry and a resume are told, launches drawn, files kept to the budget."""
    run = long_run
    out = run.parent.parent / "elsewhere" / "page.html"
    page = write_run_page(run, out).read_text()
    text = "".join(Elements(page).text)
    blobs = sorted(p.name for p in (run / "blobs").iterdir())
    assert blobs and f'href="../runs/long/blobs/{blobs[0]}"' in page  # relative to where the page is
    assert "more characters: the whole output is in" in text
    assert "compacted: 150 earlier messages" in text and "model retry 1" in text and "resumed" in text
    assert "launches per step" in page and "no launch counts" not in page
    assert "anthropic:claude-sonnet-4-5" in text and re.search(r"cost\$\d+\.\d\d", text.replace("\n", ""))
    assert len(page) < 1_000_000


def test_the_long_run_files_budget_shows_the_best_and_the_latest_first(long_run, monkeypatch):
    from kagent.agent.report import page as page_module

    story = read_story(long_run)
    monkeypatch.setattr(page_module, "FILES_BUDGET_CHARS", 3 * 20_000)
    text = "".join(Elements(render_run(story, long_run / "report.html")).text)  # renders, writes nothing
    best, last = story.best.number, story.attempts[-1].number
    shown = {int(n) for n in re.findall(r"attempt (\d+): solution\.py", text)}
    assert shown == {a.number for a in story.attempts}
    assert f"refs/kagent/attempts/{best}:solution.py" not in text
    assert f"refs/kagent/attempts/{last}:solution.py" not in text
    assert "refs/kagent/attempts/1:solution.py" in text  # the oldest passed the budget


def test_a_flag_is_drawn_once_it_has_a_mark(session_run, monkeypatch):
    """An attempt's flag is drawn by its marker in MARKS, and only then: a draft has one."""
    story = read_story(session_run)
    first = story.attempts[0]
    story.attempts = [AttemptRow(**{**first.__dict__, "flags": ("draft",)}), *story.attempts[1:]]
    assert ">draft<" in charts.speedup_chart(story)
    monkeypatch.delitem(charts.MARKS, "draft")
    assert ">draft<" not in charts.speedup_chart(story)


# -- the command line and the board ------------------------------------------------------------


def test_kagent_report_writes_the_page_and_says_where(session_run):
    done = kagent("report", session_run.name, runs=session_run.parent)
    assert done.returncode == 0, done.stderr
    page = session_run / "report.html"
    assert done.stdout.startswith(f"wrote {page}") and page.stat().st_size > 50_000
    missing = kagent("report", "no-such-run", runs=session_run.parent)
    assert missing.returncode == 2 and "no run 'no-such-run'" in missing.stderr
    nothing = kagent("report", runs=session_run.parent)
    assert nothing.returncode == 2 and "give a run id or a run folder, or --runs" in nothing.stderr
    assert "pip install 'kagent[report]'" in kagent("report", "--help", runs=session_run.parent).stdout


def test_a_trace_file_on_its_own_makes_a_page(session_run, tmp_path):
    trace = tmp_path / "mailed" / "trace.jsonl"
    trace.parent.mkdir()
    shutil.copy(session_run / "trace.jsonl", trace)
    done = kagent("report", str(trace), runs=tmp_path / "no-runs")
    assert done.returncode == 0, done.stderr
    text = "".join(Elements((trace.parent / "report.html").read_text()).text)
    assert "attempt 3" in text and "No attempt files: no workspace at" in text and "finished" in text


def test_without_the_extra_kagent_report_says_how_to_get_it(session_run, tmp_path):
    stub = tmp_path / "no_matplotlib" / "matplotlib"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text("raise ImportError('matplotlib is not installed here')\n")
    done = kagent("report", session_run.name, runs=session_run.parent, env={"PYTHONPATH": str(stub.parent)})
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: kagent report draws its charts with matplotlib, which is not installed: pip install 'kagent[report]'"
    ]


def test_the_board_across_runs(session_run, tmp_path):
    runs = tmp_path / "runs"
    shutil.copytree(session_run, runs / session_run.name, symlinks=True)
    build_run(runs / "long", turns=30)
    status = json.loads((runs / session_run.name / "status.json").read_text())
    (runs / "long" / "status.json").write_text(
        json.dumps({**status, "run_id": "long", "model": "anthropic:claude-sonnet-4-5"})
    )
    (runs / "empty").mkdir()
    (runs / "empty" / "status.json").write_text(json.dumps({**status, "run_id": "empty"}))  # no trace yet
    board, count = write_board(runs, "", tmp_path / "out" / "board.html")
    assert count == 3
    html = board.read_text()
    page = Elements(html)
    text = "".join(page.text)
    assert "02_kimi_linear_decode" in text and "NVIDIA H200 (synthetic)" in text and "cpu" in text
    assert "no trace at" in text  # the run without one still has its row
    links = [a["href"] for tag, a in page.tags if tag == "a"]
    assert sorted(links) == sorted([f"board-runs/{session_run.name}.html", "board-runs/long.html"])
    assert all((board.parent / link).is_file() for link in links)
    story = read_story(session_run)
    assert f"{story.final_result.score:.3f}x [" in text and "time · cost to the best" in text
    only = kagent("report", "--runs", "model=claude", "-o", str(tmp_path / "claude.html"), runs=runs)
    assert only.returncode == 0 and only.stdout.startswith(f"wrote {tmp_path / 'claude.html'}: 1 run(s)")
    assert (
        "board-runs" not in (tmp_path / "claude.html").read_text()
        and "claude-runs/long.html" in (tmp_path / "claude.html").read_text()
    )
    wrong = kagent("report", "--runs", "colour=red", runs=runs)
    assert wrong.returncode == 2 and "the filter's 'colour=red' names no field" in wrong.stderr


# -- in a real browser --------------------------------------------------------------------------

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# CI sets it (.ci/run installs Debian's chromium): there a missing browser fails instead of skipping.
REQUIRE_CHROMIUM = os.environ.get("KAGENT_REQUIRE_CHROMIUM") == "1"
# Without the background-networking flags Chromium stalls on a closed network.
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    if CHROMIUM is None:
        if REQUIRE_CHROMIUM:
            pytest.fail("KAGENT_REQUIRE_CHROMIUM=1 but there is no chromium on PATH (apt-get install chromium)")
        pytest.skip(
            "no chromium on PATH (Debian: apt-get install chromium); CI installs it and sets KAGENT_REQUIRE_CHROMIUM=1"
        )
    profile = Path(tmp_path) / f"chromium-profile-{len(list(Path(tmp_path).glob('chromium-profile-*')))}"
    profile.mkdir()
    done = subprocess.run(
        [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args], capture_output=True, text=True, timeout=WAIT_S
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def isolate(page: str, chart: str, width: int) -> str:
    """The page with every part hidden but one chart, pinned to the top left at ``width`` pixels,
    so that a screenshot shows where it is drawn."""
    style = (
        f"<style>html, body {{ overflow: hidden; }} body * {{ visibility: hidden; }}"
        f" #chart-{chart}, #chart-{chart} * {{ visibility: visible; }}"
        f" #chart-{chart} {{ position: fixed; left: 0; top: 0; width: {width}px; margin: 0; z-index: 9; }}"
        " figcaption { display: none; }</style>"
    )
    return page.replace("</head>", style + "</head>", 1)


def colour_share(image, rgb: tuple[int, int, int], tolerance: int = 24) -> float:
    """The share of the image's pixels within ``tolerance`` of ``rgb`` in every channel."""
    import numpy

    pixels = numpy.asarray(image.convert("RGB"), dtype=numpy.int16)
    return float((numpy.abs(pixels - numpy.array(rgb)) <= tolerance).all(axis=2).mean())


def test_the_page_in_a_browser_draws_its_charts(session_run, session_page, tmp_path):
    from PIL import Image, ImageStat

    page = session_run / "report.html"
    dom = chromium(tmp_path, "--dump-dom", page.as_uri()).stdout
    parsed = Elements(dom)
    for name in ("speedup", "roofline", "usage"):
        assert parsed.figure_tags[f"chart-{name}"].count("path") > 10, name
    assert not any(tag == "script" for tag, _ in parsed.tags)
    assert MODEL_MARKUP in "".join(parsed.text)  # a text node, as the browser parsed it

    whole = tmp_path / "page.png"
    chromium(tmp_path, f"--screenshot={whole}", "--window-size=1400,3000", page.as_uri())
    assert ImageStat.Stat(Image.open(whole).convert("L")).stddev[0] > 20  # not a blank page

    width = 1000
    for name, colours in (
        ("speedup", ["#1a9850", "#d73027", "#1f4e9c"]),
        ("roofline", ["#1f77b4", "#ff7f0e"]),
        ("usage", ["#2ca02c", "#ff7f0e"]),
    ):
        alone = tmp_path / f"{name}.html"
        alone.write_text(isolate(session_page, name, width))
        shot = tmp_path / f"{name}.png"
        chromium(tmp_path, f"--screenshot={shot}", "--window-size=1100,900", alone.as_uri())
        svg = re.search(rf'<figure id="chart-{name}"><svg[^>]*viewBox="0 0 ([\d.]+) ([\d.]+)"', session_page)
        height = int(width * float(svg.group(2)) / float(svg.group(1)))
        plot = Image.open(shot).convert("RGB").crop((0, 0, width, height))
        grey = ImageStat.Stat(plot.convert("L"))
        inked = sum(plot.convert("L").histogram()[:200]) / (width * height)
        assert grey.stddev[0] > 15 and inked > 0.01, (name, grey.stddev, inked)
        outside = Image.open(shot).convert("L").crop((0, height + 10, width, 900))
        assert ImageStat.Stat(outside).stddev[0] < 1, f"{name}: the chart is not where its element is"
        for colour in colours:
            rgb = tuple(int(colour[i : i + 2], 16) for i in (1, 3, 5))
            assert colour_share(plot, rgb) > 0.0001, (name, colour)


def test_tick_labels_are_plain_numbers():
    """Tick labels without mathtext, which is off so that text from a run reads as written."""
    assert [charts._count(v) for v in (0, 0.25, 20, 999, 5000, 15000, 2.5e6)] == [
        "0",
        "0.25",
        "20",
        "999",
        "5,000",
        "15k",
        "2.5M",
    ]


def test_report_md_gives_the_result_with_its_interval_and_the_time_as_every_view_does():
    """report.md said `result: 0.830x` where the page said `0.830x [0.744–1.086]`, and its time
    in minutes with a decimal where every other view says 0m20s."""
    from kagent.agent.loop.agent import RunReport
    from kagent.agent.loop.finalize import report_markdown as _report_markdown
    from kagent.core.messages import Usage

    report = RunReport(
        run_id="r",
        task="02_kimi_linear_decode",
        model="scripted:demo",
        status="finished",
        reason="the model finished",
        best_attempt=2,
        best_score=0.9,
        final_verdict="pass",
        final_score=0.83,
        result_score=0.83,
        result_from="final re-verification",
        result_interval=(0.744, 1.086),
        best_interval=(0.85, 0.95),
        attempts=3,
        turns=9,
        usage=Usage(),
        cost_usd=0.0,
        elapsed_s=20.7,
    )
    text = _report_markdown(report)
    assert "- result: 0.830x [0.744–1.086], within noise, attempt 2 as the final re-verification measured it" in text
    assert "- elapsed: 0m20s\n" in text
    assert "- best attempt while exploring: 2, 0.900x [0.850–0.950]\n" in text
    assert "- final re-verification: pass, 0.830x [0.744–1.086], within noise\n" in text
