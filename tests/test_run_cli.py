"""`kagent run` from the command line: the demo session, settings from a file, bad input."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kagent.agent.outcome import ENDINGS, exit_codes_text

from conftest import WAIT_S, kagent_counting_torch, processes_with
from terminal import CTRL_C, Terminal

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "examples" / "demo_session.yaml"
KAGENT = str(Path(sys.executable).parent / "kagent")


def kagent(*args: str, cwd: Path, timeout: float = WAIT_S) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([KAGENT, *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)


@pytest.mark.slow
def test_demo_session_as_json(tmp_path):
    proc = kagent(
        "run",
        "02_kimi_linear_decode",
        "--model",
        f"scripted:{DEMO}",
        "--budget",
        "20m",
        "--device",
        "cpu",
        "--json",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["status"] == "finished" and report["best_attempt"] == 2 and report["attempts"] == 3
    assert report["final_verdict"] == "pass"
    (run_dir,) = (tmp_path / "runs").iterdir()  # KAGENT_RUNS, set by conftest
    assert (run_dir / "trace.jsonl").exists() and (run_dir / "workspace" / ".git").is_dir()


@pytest.mark.slow
def test_settings_from_a_config_file_and_quiet_output(tmp_path, kimi):
    # A session shorter than the demo's (which test_demo_session_as_json plays): the port,
    # benchmarked at one context, is the best attempt.
    spec = script(
        tmp_path,
        tool("write_file", path="solution.py", content=(kimi.path / "reference.py").read_text()),
        tool("benchmark", contexts=[16]),
        tool("finish", summary="the port"),
    )
    config = tmp_path / "kagent.yaml"
    config.write_text(f"model: {spec}\nbudget: 20m\ndevice: cpu\nscale: smoke\n")
    proc = kagent("run", "02_kimi_linear_decode", "--config", str(config), "--quiet", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "best attempt while exploring: 1" in proc.stdout and "run folder:" in proc.stdout
    # No dependency warns on every command (pydantic before 2.10 did, of the fields named model_*).
    assert "Warning:" not in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["--model", f"scripted:{DEMO}", "--budget", "3 hours"], "--budget takes a duration"),
        ([], "give --model"),
        (["--model", "nosuch:thing"], "unknown provider"),
        (["--model", "anthropic:claude-x", "--config", "/nonexistent.yaml"], "cannot read the config file"),
    ],
)
def test_bad_run_arguments_give_one_clear_message(args, message, tmp_path, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    proc = kagent("run", "02_kimi_linear_decode", "--device", "cpu", *args, cwd=tmp_path)
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr


def test_missing_api_key_is_named(tmp_path, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    proc = kagent(
        "run", "02_kimi_linear_decode", "--model", "anthropic:claude-sonnet-4-5", "--device", "cpu", cwd=tmp_path
    )
    assert proc.returncode == 2 and "ANTHROPIC_API_KEY" in proc.stderr


def read_status(runs: Path) -> dict:
    statuses = list(runs.glob("*/status.json"))
    try:
        return json.loads(statuses[0].read_text()) if statuses else {}
    except ValueError:  # written atomically, but a reader can still race the first write
        return {}


@pytest.mark.slow
def test_ctrl_c_keeps_the_figures_and_says_how_to_resume(tmp_path, kimi):
    """Ctrl-C typed at the terminal during a long tool, after a benchmark: status.json keeps
    the best score, the time and the tokens; the screen says interrupted and how to go on."""
    usage = {"input_tokens": 1000}
    turns = [
        {
            "tool_calls": [
                {
                    "name": "write_file",
                    "arguments": {"path": "solution.py", "content": (kimi.path / "reference.py").read_text()},
                }
            ],
            "usage": usage,
        },
        {"tool_calls": [{"name": "benchmark", "arguments": {"contexts": [16]}}], "usage": usage},
        {"tool_calls": [{"name": "shell", "arguments": {"command": "sleep 600", "timeout_s": 600}}], "usage": usage},
        {"tool_calls": [{"name": "finish", "arguments": {"summary": "never reached"}}]},
    ]
    script = tmp_path / "script.json"
    script.write_text(json.dumps(turns))
    runs = Path(os.environ["KAGENT_RUNS"])
    with Terminal(
        [KAGENT, "run", "02_kimi_linear_decode", "--model", f"scripted:{script}", "--budget", "30m", "--device", "cpu"],
        cwd=str(tmp_path),
    ) as term:
        term.wait_until(lambda: read_status(runs).get("tokens") == 3000, WAIT_S, "third model turn")
        # Nothing reports while the shell command sleeps: the live view's clock moves all the same
        # (it once showed 0m00s through a 75 s baseline). The view redraws 4 times a second, so a
        # view still short of 3 s after 2 minutes is frozen.
        term.wait_until(
            lambda: re.search(r"now +tool shell for 0m0[3-9]s", term.text()),
            120,
            "the live view's clock ticking through the shell command",
        )
        # SIGUSR1 prints where every thread is, and the run goes on.
        term.proc.send_signal(signal.SIGUSR1)
        term.wait_until(
            lambda: "most recent call first" in term.text() and "run_command" in term.text(),
            30,
            "the stacks printed on SIGUSR1, the main thread's in the shell tool",
        )
        term.type(CTRL_C)
        assert term.wait(timeout=WAIT_S) == 130
        screen = term.text()
    status = read_status(runs)
    assert status["state"] == "interrupted"
    assert status["best_attempt"] == 1 and status["best_score"] > 0
    assert status["elapsed_s"] > 1 and status["tokens"] == 3000
    assert "interrupted by Ctrl-C" in screen and f"kagent resume {status['run_id']}" in screen
    last = trace_events(runs)[-1]  # the interruption is in the trace, with the time it came
    assert (last["type"], last["cause"], last["during"]) == ("interrupted", "Ctrl-C", "tool shell")
    assert status["elapsed_s"] == last["elapsed_s"]
    # Keys typed during the live view are not echoed: an echoed ^C pushed the view one line down,
    # and its top border was drawn twice.
    assert "^C" not in screen


def script(tmp_path: Path, *turns: dict) -> str:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(list(turns)))
    return f"scripted:{path}"


def tool(name: str, usage: dict | None = None, **arguments) -> dict:
    return {"tool_calls": [{"name": name, "arguments": arguments}], **({"usage": usage} if usage else {})}


@pytest.mark.parametrize(
    "turns, options, state",
    [
        # The model finishes at once: nothing was measured.
        ([tool("finish", summary="nothing to do")], [], "no_result"),
        # The first turn spends 2,000 tokens of the 1,000 allowed: stopped before any attempt.
        (
            [tool("list_files", usage={"input_tokens": 2000}), tool("finish", summary="never reached")],
            ["--max-tokens", "1000"],
            "stopped",
        ),
        # The model (here its script) fails for good: the run failed.
        ([tool("list_files")], [], "failed"),
        # The same failing read, again and again: at the fifth in a row the run ends as stuck.
        ([*[tool("read_file", path="missing.txt")] * 5, tool("finish", summary="never reached")], [], "stuck"),
    ],
    ids=["no_result", "stopped", "failed", "stuck"],
)
@pytest.mark.slow
def test_a_run_that_achieves_nothing_says_so_in_its_state_and_exit_code(turns, options, state, tmp_path):
    proc = kagent(
        "run",
        "02_kimi_linear_decode",
        "--model",
        script(tmp_path, *turns),
        "--device",
        "cpu",
        "--budget",
        "10m",
        "--quiet",
        *options,
        cwd=tmp_path,
        timeout=WAIT_S,
    )
    assert proc.returncode == ENDINGS[state].exit_code != 0, proc.stdout + proc.stderr
    assert f"status: {state}" in proc.stdout
    assert read_status(Path(os.environ["KAGENT_RUNS"]))["state"] == state


def test_cuda_is_checked_before_the_run_starts(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    proc = kagent(
        "run",
        "02_kimi_linear_decode",
        "--model",
        script(tmp_path, tool("finish", summary="-")),
        "--device",
        "cuda",
        cwd=tmp_path,
        timeout=WAIT_S,
    )
    assert proc.returncode == 2 and "sees no CUDA device" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "runs").exists() and not Path(os.environ["KAGENT_RUNS"]).exists()


def test_a_session_written_for_a_gpu_is_refused_on_the_cpu_saying_what_to_run_instead(tmp_path):
    session = REPO / "examples" / "megakernel_session.yaml"
    proc = kagent(
        "run",
        "02_kimi_linear_decode",
        "--model",
        f"scripted:{session}",
        "--device",
        "cpu",
        cwd=tmp_path,
        timeout=WAIT_S,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "plays a session written for a CUDA device, and this run's device is cpu" in proc.stderr
    assert "the demo session plays: kagent run 02_kimi_linear_decode --model scripted:demo" in proc.stderr
    assert not Path(os.environ["KAGENT_RUNS"]).exists()  # refused before a run folder was made


def test_exit_codes_are_documented_in_help_and_docs():
    help_text = kagent("run", "--help", cwd=REPO).stdout
    page = (REPO / "docs" / "runs.md").read_text()
    for state, ending in ENDINGS.items():
        assert f"{ending.exit_code} {state}:" in help_text
        assert f"| `{state}` | {ending.exit_code} | {ending.meaning} |" in page, state
    assert len({ending.exit_code for ending in ENDINGS.values()}) == len(ENDINGS)
    assert exit_codes_text().count("\n") == len(ENDINGS) + 1  # and usage, and Ctrl-C


@pytest.mark.parametrize(
    "args, message",
    [
        (["--budget", "nonsense", "--model", f"scripted:{DEMO}"], "--budget takes a duration"),
        (["--budget", "30d", "--model", f"scripted:{DEMO}"], "--budget takes a duration"),
        (["--budget", "200h", "--model", f"scripted:{DEMO}"], "--budget is at most 168h00m (7 days)"),
        (["--model", "nosuch:thing"], "unknown provider"),
        (["--model", "scripted:/nonexistent.yaml"], "cannot read the script"),
        (
            ["--model", "scripted:nosuch"],
            "nor a session kagent ships by that name (those are: demo, megakernel, sweep)",
        ),
        (["--model", f"scripted:{DEMO}", "--max-cost", "0"], "--max-cost: input should be greater than 0"),
        (["--model", f"scripted:{DEMO}", "--device", "tpu"], "unknown device 'tpu'"),
        # A run with such a model once retried for 1m36s and left a run folder.
        (["--model", "openai-compatible:notaurl#m"], "'notaurl' is not an http(s) URL"),
        (["--model", "openai-compatible:localhost:8000#m"], "is not an http(s) URL"),
        (["--model", f"scripted:{DEMO}", "--budget", "10s"], "--budget 10s is shorter than a run can use"),
        (["--model", f"scripted:{DEMO}", "--budget", "59s"], "give at least --budget 1m00s"),
    ],
)
def test_bad_run_options_are_reported_before_torch_is_imported(args, message, tmp_path):
    """Before torch is imported (conftest.kagent_counting_torch); and nothing was started, so no
    run folder was made."""
    proc = kagent_counting_torch(["run", "02_kimi_linear_decode", *args], tmp_path)
    assert proc.stdout.strip() == "exit 2 False", proc.stdout + proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert not Path(os.environ["KAGENT_RUNS"]).exists()


@pytest.mark.slow
def test_full_scale_on_the_cpu_warns(tmp_path):
    proc = kagent(
        "run",
        "02_kimi_linear_decode",
        "--model",
        script(tmp_path, tool("finish", summary="-")),
        "--device",
        "cpu",
        "--scale",
        "full",
        "--quiet",
        cwd=tmp_path,
        timeout=WAIT_S,
    )
    assert "warning: --scale full on the CPU" in proc.stderr, proc.stderr


def trace_events(runs: Path) -> list[dict]:
    traces = list(runs.glob("*/trace.jsonl"))
    return [json.loads(line) for line in traces[0].read_text().splitlines() if line.strip()] if traces else []


@pytest.mark.slow
@pytest.mark.parametrize("sig, cause, code", [(signal.SIGTERM, "SIGTERM", 143), (signal.SIGHUP, "SIGHUP", 129)])
def test_a_stopping_signal_ends_the_run_as_ctrl_c_does(sig, cause, code, tmp_path):
    """`kill`, `timeout`, `docker stop` or a CI's cancel (SIGTERM), or a closed terminal
    (SIGHUP), during a long tool: the run ends interrupted with its figures, says so and how to
    go on, records the interruption in its trace, and one elapsed time is in every view of it."""
    from kagent.agent.lifecycle.runs import resume_run
    from kagent.agent.report.page import write_run_page
    from kagent.agent.report.story import read_story
    from kagent.agent.settings import minutes

    usage = {"input_tokens": 1000}
    spec = script(
        tmp_path,
        tool("write_file", usage=usage, path="notes.md", content="a plan"),
        tool("shell", usage=usage, command="sleep 600 # kagent-signal-test", timeout_s=600),
        tool("finish", summary="stopped early"),
    )
    runs = Path(os.environ["KAGENT_RUNS"])
    proc = subprocess.Popen(
        [KAGENT, "run", "02_kimi_linear_decode", "--model", spec, "--budget", "30m", "--device", "cpu"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "COLUMNS": "200"},
    )
    deadline = time.monotonic() + WAIT_S
    while not any(e["type"] == "tool_started" and e["name"] == "shell" for e in trace_events(runs)):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.2)
    time.sleep(1.5)  # the shell command runs a while: the time to the signal must count
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=WAIT_S)
    assert proc.returncode == code, out + err
    status = read_status(runs)
    assert status["state"] == "interrupted" and status["reason"] == f"by {cause}" and status["tokens"] == 2000
    last = trace_events(runs)[-1]
    assert last["type"] == "interrupted" and last["cause"] == cause and last["during"] == "tool shell"
    # One elapsed time: the trace's interruption, status.json, `kagent runs`, the page, resume.
    assert status["elapsed_s"] == last["elapsed_s"] > 1.5
    elapsed = minutes(last["elapsed_s"])
    run_id = status["run_id"]
    assert f"interrupted by {cause}: run {run_id} stopped at {elapsed}; no attempt passed a benchmark yet" in err
    assert f"go on with: kagent resume {run_id}" in err
    assert not processes_with("kagent-signal-test")  # the shell command was stopped with the run
    listed = json.loads(kagent("runs", "--json", cwd=tmp_path).stdout)
    assert [(r["state"], r["elapsed_s"]) for r in listed] == [("interrupted", last["elapsed_s"])]
    replayed = kagent("replay", run_id, cwd=tmp_path).stdout
    assert f"interrupted by {cause} at {elapsed}, during tool shell" in replayed
    run_dir = runs / run_id
    assert read_story(run_dir).elapsed_s == last["elapsed_s"]
    page = write_run_page(run_dir).read_text()
    assert f"interrupted</span> by {cause}" in page and f"interrupted</b> by {cause} at {elapsed}" in page
    _, report = resume_run(run_id)
    resumed = next(e for e in trace_events(runs) if e["type"] == "run_resumed")
    assert resumed["spent_before_s"] == last["elapsed_s"] and report.status == "no_result"


@pytest.mark.slow
def test_without_a_terminal_progress_comes_as_lines_as_it_goes_and_paths_stay_whole(tmp_path):
    """Piped (a CI log), `kagent run` said nothing until the end, and its run folder's path
    wrapped at 80 columns. Now a line comes for each thing that happened, while the run goes,
    and no line is wrapped."""
    runs = tmp_path / ("a-runs-folder-with-a-long-name-" * 3)
    spec = script(tmp_path, tool("list_files"), tool("list_files"), tool("finish", summary="nothing to do"))
    proc = subprocess.Popen(
        [KAGENT, "run", "02_kimi_linear_decode", "--model", f"{spec}?delay=1.5", "--device", "cpu", "--budget", "10m"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "COLUMNS": "80", "KAGENT_RUNS": str(runs)},
    )
    assert proc.stdout is not None
    first = proc.stdout.readline()
    alive_then = proc.poll() is None  # the model thinks 1.5 s a turn: two more turns to go
    rest, err = proc.communicate(timeout=WAIT_S)
    assert proc.returncode == ENDINGS["no_result"].exit_code, err
    assert re.fullmatch(r"0m0\ds turn 1: model answered\n", first) and alive_then, first
    lines = (first + rest).splitlines()
    assert re.fullmatch(r"0m0\ds turn 1: tool list_files", lines[1]), lines  # before the next turn
    assert re.fullmatch(r"0m\d\ds turn 3: model answered", lines[4]), lines
    (run_dir,) = runs.iterdir()
    assert f"run folder: {run_dir}" in lines and len(f"run folder: {run_dir}") > 80


def test_the_sessions_kagent_ships_are_found_by_name_from_any_folder(tmp_path, monkeypatch):
    """`--model scripted:demo` plays examples/demo_session.yaml wherever kagent runs from (an
    installed kagent has no checkout around it: test_packaging runs the demo so), and a path
    given names that file as before."""
    from kagent.agent.loop.models import make_model

    monkeypatch.chdir(tmp_path)
    for name in ("demo", "sweep", "megakernel"):
        by_name = make_model(f"scripted:{name}")
        by_path = make_model(f"scripted:{REPO / 'examples' / f'{name}_session.yaml'}")
        assert by_name.name == f"scripted:{name}" and by_name._turns == by_path._turns, name
    assert make_model("scripted:demo?delay=2").delay_s == 2
