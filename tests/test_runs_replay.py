"""`kagent runs` and `kagent replay`: true run states, and a run's trace told for a person.

One real scripted session (two checks, a failed one reverted, a tool error) is shared by the
replay tests; the run-list tests use run folders written by hand, with live and dead pids.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from rich.console import Console

from kagent.agent.cli.replay import follow, render_trace, replay
from kagent.agent.lifecycle.runs import RunStatus, start_run
from kagent.agent.loop.ledger import Attempt
from kagent.agent.report.run_list import list_runs
from kagent.agent.settings import Budget, RunSettings
from kagent.agent.storage.trace import AttemptRecorded, RunEnded, ToolFinished, ToolStarted, read_trace

from conftest import WAIT_S

KAGENT = str(Path(sys.executable).parent / "kagent")
BAD_LINE = "w = w / (w.sum() + 1e-9) * cfg.routed_scaling"
GOOD_LINE = "w = w / (w.sum() + 1e-9)"
THOUGHT = "Port the reference first, then measure.\nSecond line of the plan, not shown."


def call(name: str, **arguments: object) -> dict:
    return {"name": name, "arguments": arguments}


def kagent(*args: str, runs: Path, timeout: float = WAIT_S, columns: int = 200) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": str(columns), "KAGENT_RUNS": str(runs)}
    return subprocess.run([KAGENT, *args], capture_output=True, text=True, timeout=timeout, env=env)


def as_text(renderable: object) -> str:
    console = Console(record=True, width=120)
    console.print(renderable)
    return console.export_text()


# -- a real session, shared ------------------------------------------------------------------


@pytest.fixture(scope="module")
def session_run(tmp_path_factory, kagent_home, kimi) -> Path:
    """A scripted run: look around, write the port, check it (pass), overwrite it with a broken
    version, check it (incorrect, reverted), edit the reverted file, fail an edit, finish."""
    reference = (kimi.path / "reference.py").read_text()
    assert BAD_LINE in reference
    broken = reference.replace(BAD_LINE, GOOD_LINE)
    turns = [
        {"thinking": THOUGHT, "text": "Looking at the files first.", "tool_calls": [call("list_files")]},
        {
            "tool_calls": [
                call("design", hypothesis="a straight port", predicted="about 1x"),
                call("write_file", path="solution.py", content=reference),
            ]
        },
        {"tool_calls": [call("check")]},
        {
            "text": "Dropping the routed scaling.",
            "tool_calls": [call("write_file", path="solution.py", content=broken)],
        },
        {"tool_calls": [call("check")]},
        # Applies only to the reverted file (the port): its diff proves the revert was followed.
        {"tool_calls": [call("edit_file", path="solution.py", old=BAD_LINE, new=BAD_LINE + "  # needed")]},
        {"tool_calls": [call("edit_file", path="solution.py", old="no such text anywhere", new="x")]},
        {"text": "Done.", "tool_calls": [call("finish", summary="the port stays")]},
    ]
    folder = tmp_path_factory.mktemp("replay_session")
    script = folder / "script.json"
    script.write_text(json.dumps(turns))
    # Module-scoped, so it runs before conftest's per-test environment: point KAGENT_HOME at the shared cache here.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KAGENT_HOME", str(kagent_home))
        run_dir, report = start_run(
            RunSettings(
                task="02_kimi_linear_decode",
                model=f"scripted:{script}",
                budget=Budget(wall_s=900),
                device="cpu",
                scale="smoke",
                runs_root=folder / "runs",
                eval_timeout_s=WAIT_S,
            )
        )
    assert report.status == "no_result" and report.attempts == 2  # checks only: nothing was benchmarked
    return run_dir


@pytest.mark.slow
def test_replay_tells_the_session_turn_by_turn(session_run):
    text = as_text(replay(session_run))
    lines = text.splitlines()
    assert f"thinking ({len(THOUGHT):,} chars): Port the reference first, then measure." in text
    assert "Second line of the plan" not in text
    assert "Looking at the files first." in text and "Dropping the routed scaling." in text
    assert any(line.startswith("turn 1 ·") for line in lines) and any(line.startswith("turn 8 ·") for line in lines)
    assert "▶ list_files" in text and '▶ design(hypothesis="a straight port", predicted="about 1x")' in text
    # The first write has nothing to diff against; the second is shown as a diff, not as 395 lines.
    writes = [i for i, line in enumerate(lines) if "▶ write_file solution.py" in line]
    assert len(writes) == 2
    assert "diff" not in lines[writes[0]] and "diff against the previous version" in lines[writes[1]]
    after = "\n".join(lines[writes[1] : writes[1] + 12])
    assert f"-        {BAD_LINE}" in after and f"+        {GOOD_LINE}" in after
    assert text.count("--- a/solution.py") == 2  # the second write and the edit of the reverted file
    # The edit after the revert is diffed against the port (restored from attempt 1's snapshot).
    assert f"+        {BAD_LINE}  # needed" in text
    # Attempts: number, verdict, kept or reverted, the note.
    assert "■ attempt 1 check PASS  score –  kept" in text
    assert "■ attempt 2 check INCORRECT  score –  reverted" in text
    assert "the solution was reverted to attempt 1" in text
    assert "error: `old` does not occur in solution.py" in text
    assert "budget: phase explore · elapsed" in text
    assert "final: no attempt passed a benchmark" in text
    assert lines[-1].startswith("run ended: no_result — the model finished: the port stays")


@pytest.mark.slow
def test_replay_filters(session_run):
    attempts = as_text(replay(session_run, only_attempts=True))
    assert "attempt 1 check PASS" in attempts and "attempt 2 check INCORRECT" in attempts
    assert "run ended: no_result" in attempts
    for noise in ("thinking", "list_files", "budget:", "turn 1", "does not occur"):
        assert noise not in attempts

    errors = as_text(replay(session_run, only_errors=True))
    assert "attempt 2 check INCORRECT" in errors and "attempt 1 check" not in errors
    # A tool error comes with the call that failed.
    assert "▶ edit_file solution.py" in errors and "error: `old` does not occur in solution.py" in errors
    assert "run ended: no_result" in errors
    for noise in ("thinking", "list_files", "budget:", "write_file", "Recorded."):
        assert noise not in errors


@pytest.mark.slow
def test_follow_prints_events_as_they_are_appended(session_run, tmp_path):
    data = (session_run / "trace.jsonl").read_bytes()
    lines = data.splitlines(keepends=True)
    growing = tmp_path / "trace.jsonl"
    growing.write_bytes(b"".join(lines[:5]))
    cut = len(lines) // 2

    def writer() -> None:
        with open(growing, "ab") as f:
            for index in range(5, len(lines)):
                line = lines[index]
                if index == cut:
                    f.write(line[:40])  # half a line: must not be shown, nor break the reader
                    f.flush()
                    time.sleep(0.15)
                    f.write(line[40:])
                else:
                    f.write(line)
                f.flush()
                time.sleep(0.01)

    thread = threading.Thread(target=writer)
    console = Console(record=True, width=120)
    started = time.monotonic()
    thread.start()
    ended = follow(growing, console, poll_s=0.05, stop=lambda: time.monotonic() - started > 30)
    thread.join()
    assert isinstance(ended, RunEnded) and ended.status == "no_result"
    # What was followed piece by piece reads exactly like the replay of the finished trace.
    assert console.export_text() == as_text(render_trace(read_trace(session_run / "trace.jsonl").events))


@pytest.mark.slow
def test_follow_stops_when_asked_and_waits_for_a_trace(tmp_path, session_run):
    polls: list[int] = []

    def stop() -> bool:
        polls.append(1)
        return len(polls) >= 3

    console = Console(record=True, width=120)
    assert follow(tmp_path / "not-yet", console, poll_s=0.01, stop=stop) is None
    assert console.export_text() == ""
    # A trace without its end: everything is shown, then it keeps waiting until stopped.
    head = b"".join((session_run / "trace.jsonl").read_bytes().splitlines(keepends=True)[:4])
    (tmp_path / "trace.jsonl").write_bytes(head + b'{"v": 1, "seq": 4, "ty')
    polls.clear()
    assert follow(tmp_path, console, poll_s=0.01, stop=stop) is None
    assert "▶ list_files" in console.export_text() and len(polls) == 3


@pytest.mark.slow
def test_a_torn_last_line_is_noted_not_shown(tmp_path, session_run):
    lines = (session_run / "trace.jsonl").read_bytes().splitlines(keepends=True)
    (tmp_path / "trace.jsonl").write_bytes(b"".join(lines[:-1]) + lines[-1][:30])
    text = as_text(replay(tmp_path))
    assert "run ended" not in text and "cut short" in text and "final: no attempt" in text


@pytest.mark.slow
def test_replay_command(session_run):
    proc = kagent("replay", session_run.name, "--attempts", runs=session_run.parent)
    assert proc.returncode == 0, proc.stderr
    assert "attempt 2 check INCORRECT" in proc.stdout and "list_files" not in proc.stdout
    proc = kagent("replay", str(session_run), "--errors", runs=session_run.parent / "elsewhere")
    assert proc.returncode == 0, proc.stderr
    assert "does not occur" in proc.stdout and "attempt 1 check" not in proc.stdout


def test_replay_of_a_missing_run_says_where_it_looked(tmp_path):
    proc = kagent("replay", "no-such-run", runs=tmp_path / "runs")
    assert proc.returncode == 2
    said = " ".join(proc.stderr.split())
    assert f"no run 'no-such-run' in {tmp_path / 'runs'} (KAGENT_RUNS)" in said and "--root FOLDER" in said
    assert "Traceback" not in proc.stderr and proc.stdout == ""


# -- the files a revert puts back --------------------------------------------------------------


def started(turn: int, name: str, **arguments: object) -> ToolStarted:
    return ToolStarted(turn=turn, call_id=f"c{turn}", name=name, arguments=arguments)


def finished(turn: int, name: str, **data: object) -> ToolFinished:
    return ToolFinished(turn=turn, call_id=f"c{turn}", name=name, content="ok", is_error=False, seconds=0.1, data=data)


def attempt(number: int, passed: bool, **revert: object) -> AttemptRecorded:
    entry = Attempt(
        number=number,
        kind="check",
        verdict="pass" if passed else "incorrect",
        reason="",
        commit=f"commit{number}",
        kept=passed,
        note="new best: 1.000x" if passed else "incorrect: output differs",
    )
    return AttemptRecorded(
        attempt=entry.model_dump(), evaluation={}, commit=f"commit{number}", call_id="c", message="", **revert
    )


def write(turn: int, path: str, content: str) -> list[object]:
    return [started(turn, "write_file", path=path, content=content), finished(turn, "write_file")]


def call_lines(text: str, path: str) -> list[str]:
    return [line for line in text.splitlines() if f"▶ write_file {path}" in line]


@pytest.mark.parametrize("by", ["a failed check", "the revert tool"])
def test_a_revert_puts_back_only_the_files_it_names(by):
    """A scratch file made after attempt 1 survives a revert to it: a later write of it is a diff
    against what the model wrote, while the solution is diffed against attempt 1's version."""
    revert: list[object] = (
        [attempt(2, passed=False, reverted_to="commit1", restored=["./solution.py"])]
        if by == "a failed check"
        else [
            attempt(2, passed=False),
            started(6, "revert", attempt=1),
            finished(6, "revert", attempt=1, restored=["solution.py"]),
        ]
    )
    events = [
        *write(1, "solution.py", "port\n"),
        attempt(1, passed=True),
        *write(3, "compare.py", "probe one\n"),
        *write(4, "solution.py", "broken\n"),
        *revert,
        *write(7, "compare.py", "probe two\n"),
        *write(8, "solution.py", "port, faster\n"),
    ]
    text = as_text(render_trace(events))
    assert "diff against the previous version" in call_lines(text, "compare.py")[-1]
    assert "-probe one" in text and "+probe two" in text
    assert "-port" in text and "-broken" not in text  # the solution came back as attempt 1 had it


def test_a_revert_of_an_older_trace_resets_the_whole_tree():
    """An older trace's revert lists no files: it restored the whole tree, so a file made after
    the attempt it went back to was gone, and its next write has nothing to diff against."""
    events = [
        *write(1, "solution.py", "port\n"),
        attempt(1, passed=True),
        *write(3, "compare.py", "probe one\n"),
        attempt(2, passed=False, reverted_to="commit1"),
        *write(5, "compare.py", "probe two\n"),
    ]
    text = as_text(render_trace(events))
    assert "diff" not in call_lines(text, "compare.py")[-1] and "-probe one" not in text


# -- the run list ----------------------------------------------------------------------------


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def make_run(root: Path, run_id: str, state: str, updated_at: str, pid: int, **fields: object) -> Path:
    run_dir = root / run_id
    run_dir.mkdir(parents=True)
    status = RunStatus(
        run_id=run_id,
        state=state,
        pid=pid,
        task="02_kimi_linear_decode",
        model="scripted:x",
        updated_at=updated_at,
        **fields,
    )
    (run_dir / "status.json").write_text(status.model_dump_json(indent=1))
    return run_dir


def write_lock(run_dir: Path, pid: int) -> None:
    (run_dir / "lock").write_text(json.dumps({"pid": pid, "host": socket.gethostname(), "since": time.time()}))


@pytest.fixture
def runs_root(tmp_path) -> Path:
    root = tmp_path / "runs"
    gone = dead_pid()
    make_run(
        root,
        "done",
        "finished",
        "2026-01-01T10:00:00+00:00",
        gone,
        best_attempt=2,
        best_score=1.3,
        result_score=1.25,
        elapsed_s=600,
        tokens=12345,
        cost_usd=0.5,
        reason="the model finished",
    )
    make_run(root, "broke", "failed", "2026-01-01T11:00:00+00:00", gone, reason="bad key")
    make_run(root, "killed", "running", "2026-01-01T12:00:00+00:00", gone)  # no lock, pid gone
    write_lock(make_run(root, "stale-lock", "running", "2026-01-01T13:00:00+00:00", os.getpid()), gone)
    write_lock(make_run(root, "live", "running", "2026-01-01T14:00:00+00:00", gone), os.getpid())
    corrupt = root / "corrupt"
    corrupt.mkdir()
    (corrupt / "status.json").write_text('{"run_id": "corrupt", "state": ')
    (corrupt / "config.json").write_text(json.dumps({"task": "01_other", "model": "openai:gpt"}))
    (root / "evals").mkdir()  # not a run: no status.json
    (root / "evals" / "result.json").write_text("{}")
    return root


def test_list_runs_shows_true_states_newest_first(runs_root):
    runs = list_runs(runs_root)
    states = {r.run_id: r.state for r in runs}
    assert states == {
        "done": "finished",
        "broke": "failed",
        "killed": "interrupted",
        "stale-lock": "interrupted",
        "live": "running",
        "corrupt": "unknown",
    }
    ordered = [r.run_id for r in runs if r.run_id != "corrupt"]
    assert ordered == ["live", "stale-lock", "killed", "broke", "done"]
    by_id = {r.run_id: r for r in runs}
    assert by_id["killed"].reason.startswith("its process (pid")
    assert by_id["corrupt"].task == "01_other" and "unreadable" in by_id["corrupt"].reason
    assert by_id["done"].result_score == 1.25 and by_id["done"].path == runs_root / "done"
    assert list_runs(runs_root / "missing") == []


def test_runs_command_json_and_table(runs_root, tmp_path):
    proc = kagent("runs", "--json", runs=runs_root)
    assert proc.returncode == 0, proc.stderr
    listed = json.loads(proc.stdout)
    assert [r["run_id"] for r in listed if r["run_id"] != "corrupt"][:2] == ["live", "stale-lock"]
    done = next(r for r in listed if r["run_id"] == "done")
    assert done["state"] == "finished" and done["tokens"] == 12345 and done["path"] == str(runs_root / "done")
    assert next(r for r in listed if r["run_id"] == "killed")["state"] == "interrupted"

    table = kagent("runs", runs=runs_root)
    assert table.returncode == 0, table.stderr
    row = next(line for line in table.stdout.splitlines() if " done " in line)
    assert "finished" in row and "1.250x #2" in row and "10m00s" in row and "12.3k" in row and "$0.50" in row
    assert "interrupted" in next(line for line in table.stdout.splitlines() if " killed " in line)

    (tmp_path / "empty").mkdir()
    for empty in (tmp_path / "empty", tmp_path / "missing"):
        quiet = kagent("runs", "--root", str(empty), runs=runs_root)
        assert quiet.returncode == 0 and "No runs in" in quiet.stdout and "Traceback" not in quiet.stderr
        assert json.loads(kagent("runs", "--json", "--root", str(empty), runs=runs_root).stdout) == []


def test_run_ids_are_never_wrapped_at_80_columns(runs_root):
    long_ids = ["02_kimi_linear_decode-20261130-060013-5596", "02_kimi_linear_decode-20261201-082513-1287"]
    gone = dead_pid()
    for run_id in long_ids:
        make_run(
            runs_root,
            run_id,
            "finished",
            "2026-01-02T10:00:00+00:00",
            gone,
            best_attempt=2,
            result_score=1.05,
            elapsed_s=65,
        )
    proc = kagent("runs", runs=runs_root, columns=80)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    # Every line fits but the title, whose path (longer under pytest-xdist's folders) is not wrapped.
    assert all(len(line.rstrip()) <= 80 for line in lines if str(runs_root) not in line)
    for run_id in [*long_ids, "done", "killed"]:
        assert any(line.split() and line.split()[0] == run_id for line in lines), run_id
    assert f"Runs in {runs_root}" in proc.stdout


def test_no_runs_says_where_it_looked_and_how_to_look_elsewhere(tmp_path):
    here = tmp_path / "elsewhere"
    here.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "KAGENT_RUNS"}
    proc = subprocess.run(
        [KAGENT, "runs"], capture_output=True, text=True, timeout=WAIT_S, cwd=here, env={**env, "COLUMNS": "300"}
    )
    assert proc.returncode == 0
    assert f"No runs in {here / 'runs'} (./runs here, the default)" in proc.stdout
    assert "KAGENT_RUNS" in proc.stdout and "--root FOLDER" in proc.stdout
