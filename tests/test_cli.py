"""The command line as a user meets it: help that reads well, one clear line for mistakes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import WAIT_S, reference_solution
from terminal import Terminal

# The console script the install put next to this interpreter: what a user types.
KAGENT = str(Path(sys.executable).parent / "kagent")


def kagent(*args: str, timeout: float = WAIT_S):
    env = {**os.environ, "COLUMNS": "200"}  # wide enough that no line we look for wraps
    return subprocess.run([KAGENT, *args], capture_output=True, text=True, timeout=timeout, env=env)


@pytest.mark.parametrize("args", [["--help"], ["tasks", "--help"], ["eval", "--help"], ["run", "--help"]])
def test_help_reads_well(args):
    proc = kagent(*args)
    assert proc.returncode == 0 and "Usage: kagent" in proc.stdout
    # A flag takes no value: the help once read `--version <bool>` and `--json <bool>`.
    assert "<bool>" not in proc.stdout, proc.stdout
    if args[0] == "eval":
        for option in ("--solution", "--aa", "--check-only", "--device", "--scale", "--contexts", "--json"):
            assert option in proc.stdout


def test_every_command_is_one_whole_sentence_in_the_list():
    """`kagent --help` lists each command by the first line of its docstring: a sentence cut at
    a line break there (replay's was) shows as half a sentence."""
    from kagent.agent.cli.app import app

    names = [command.name for command in app.registered_commands]
    lines = kagent("--help").stdout.splitlines()
    listed = lines[next(i for i, line in enumerate(lines) if "Commands" in line) + 1 :]
    rows = [line.strip("│ ") for line in listed if not line.startswith("╰")][: len(names)]
    assert [row.split()[0] for row in rows] == names, rows  # one line each, at 200 columns
    assert all(row.endswith(".") for row in rows), rows


def test_version():
    from importlib.metadata import version

    proc = kagent("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"kagent {version('kagent')}"


def test_tasks_lists_the_flagship_with_a_description():
    proc = kagent("tasks")
    assert proc.returncode == 0
    assert "02_kimi_linear_decode" in proc.stdout and "Kimi-Linear" in proc.stdout


@pytest.mark.parametrize(
    "args, message, code",
    [
        ([], "Usage: kagent", 2),
        (["bogus"], "No such command", 2),
        (["eval"], "Missing argument", 2),
        (["eval", "no_such_task", "--aa"], "no task named 'no_such_task'", 2),
        (["eval", "02_kimi_linear_decode"], "give --solution FILE, or --aa", 2),
        (["eval", "02_kimi_linear_decode", "--solution", "/nonexistent/solution.py"], "no solution file at", 2),
        (
            ["eval", "02_kimi_linear_decode", "--solution", "/tmp"],
            "/tmp is a directory: --solution takes the solution's file",
            2,
        ),
        (["eval", "02_kimi_linear_decode", "--aa", "--device", "tpu"], "unknown device 'tpu'", 2),
        (["eval", "02_kimi_linear_decode", "--aa", "--contexts", "2k"], "--contexts takes context lengths", 2),
        (["eval", "02_kimi_linear_decode", "--aa", "--rounds", "0"], "Invalid value for '--rounds'", 2),
        (["eval", "02_kimi_linear_decode", "--aa", "--scale", "huge"], "Invalid value for '--scale'", 2),
        (["eval", "02_kimi_linear_decode", "--aa", "--check-only"], "do not go together", 2),
        (
            ["eval", "02_kimi_linear_decode", "--aa", "--build-home", "/etc/passwd"],
            "--build-home /etc/passwd: cannot use it as a folder",
            2,
        ),
    ],
)
def test_bad_arguments_give_one_clear_message(args, message, code):
    proc = kagent(*args)
    assert proc.returncode == code
    output = proc.stdout + proc.stderr
    assert message in output and "Traceback" not in output


def test_cuda_asked_for_on_a_machine_without_it(kimi, tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    proc = kagent(
        "eval",
        "02_kimi_linear_decode",
        "--solution",
        str(reference_solution(kimi, tmp_path)),
        "--device",
        "cuda",
        "--scale",
        "smoke",
    )
    assert proc.returncode == 2
    assert "sees no CUDA device" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_eval_prints_a_table_and_writes_the_result_under_runs(kimi, tmp_path, monkeypatch):
    runs = tmp_path / "my_runs"
    monkeypatch.setenv("KAGENT_RUNS", str(runs))
    proc = kagent(
        "eval",
        "02_kimi_linear_decode",
        "--solution",
        str(reference_solution(kimi, tmp_path)),
        "--device",
        "cpu",
        "--rounds",
        "2",
        "--contexts",
        "16,32",
        "--min-request-ms",
        "1e6",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "evaluating for" not in proc.stderr  # no progress where no one watches
    # With no --out, the result goes under the runs folder.
    (out,) = (runs / "evals").glob("*_02_kimi_linear_decode.json")
    # A request asked to last that long runs each whole chain as often as allowed.
    assert {t["candidate_chains_per_request"] for t in json.loads(out.read_text())["timings"]} == {16}
    for text in (
        "PASS",
        "Checks",
        "overwrite_in_place",
        "ctx 16",
        "ctx 32",
        "speedup",
        "score (geomean speedup)",
        "copy bandwidth",
        f"result written to {out}",
    ):
        assert text in proc.stdout, text


@pytest.mark.slow
def test_unwritable_result_path_is_one_clear_message(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    proc = kagent(
        "eval",
        "02_kimi_linear_decode",
        "--aa",
        "--device",
        "cpu",
        "--rounds",
        "1",
        "--contexts",
        "16",
        "--out",
        str(blocker / "r.json"),
    )
    assert proc.returncode == 3
    assert "could not write the result" in proc.stderr and "Traceback" not in proc.stderr
    assert "PASS" in proc.stdout  # the evaluation itself is still shown


@pytest.mark.slow
def test_each_eval_builds_in_a_home_of_its_own(kimi, tmp_path):
    # The first solution leaves a file in its HOME (where builds are cached); the second
    # refuses to load if it finds one there. Each `kagent eval` must start from a fresh HOME.
    leaves = reference_solution(
        kimi,
        tmp_path / "leaves",
        "import pathlib as _pathlib\n(_pathlib.Path.home() / 'marker').write_text('left by an earlier evaluation')\n",
    )
    finds = reference_solution(
        kimi,
        tmp_path / "finds",
        "import pathlib as _pathlib\n"
        "if (_pathlib.Path.home() / 'marker').exists():\n"
        "    raise RuntimeError('an earlier evaluation left a marker in HOME')\n",
    )
    for solution in (leaves, finds):
        proc = kagent(
            "eval",
            "02_kimi_linear_decode",
            "--solution",
            str(solution),
            "--check-only",
            "--device",
            "cpu",
            "--scale",
            "smoke",
            "--out",
            str(tmp_path / f"{solution.parent.name}.json"),
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.slow
def test_a_build_home_named_by_the_user_is_kept_between_evaluations(kimi, tmp_path):
    # --build-home: the builds of one evaluation are there for the next (and so is anything
    # else a solution leaves: the user's choice, for their own kernels).
    build_home = tmp_path / "build-home"
    leaves = reference_solution(
        kimi,
        tmp_path / "leaves",
        "import pathlib as _pathlib\n(_pathlib.Path.home() / 'marker').write_text('left by an earlier evaluation')\n",
    )
    finds = reference_solution(
        kimi,
        tmp_path / "finds",
        "import pathlib as _pathlib\n"
        "if (_pathlib.Path.home() / 'marker').exists():\n"
        "    raise RuntimeError('an earlier evaluation left a marker in HOME')\n",
    )
    outcomes = []
    for solution in (leaves, finds):
        proc = kagent(
            "eval",
            "02_kimi_linear_decode",
            "--solution",
            str(solution),
            "--check-only",
            "--device",
            "cpu",
            "--scale",
            "smoke",
            "--build-home",
            str(build_home),
            "--out",
            str(tmp_path / f"{solution.parent.name}.json"),
        )
        outcomes.append(proc.returncode)
    assert (build_home / "marker").read_text() == "left by an earlier evaluation"
    assert outcomes == [0, 1], outcomes
    assert "an earlier evaluation left a marker" in (tmp_path / "finds.json").read_text()


@pytest.mark.slow
def test_eval_shows_progress_on_a_terminal_and_keeps_json_clean(kimi, tmp_path):
    """stderr is a terminal, stdout a file: the harness's steps show as they happen on the
    one, the result alone goes to the other."""
    with (
        open(tmp_path / "stdout.json", "w") as stdout,
        Terminal(
            [
                KAGENT,
                "eval",
                "02_kimi_linear_decode",
                "--aa",
                "--device",
                "cpu",
                "--rounds",
                "1",
                "--contexts",
                "16",
                "--json",
                "--out",
                str(tmp_path / "r.json"),
            ],
            stdout=stdout.fileno(),
        ) as term,
    ):
        assert term.wait(timeout=WAIT_S) == 0, term.text()
        shown = term.text()
    # The line is redrawn as events come; the last phase (its final drawing) is certain to be seen.
    assert "evaluating for 0m" in shown and re.search(r"evaluating for 0m\d\ds · [a-z ]+ done \(\d+\.\d s\)", shown)
    assert json.loads((tmp_path / "stdout.json").read_text())["mode"] == "aa"
    assert json.loads((tmp_path / "r.json").read_text())["mode"] == "aa"  # and to the file --out names


def test_a_solution_that_does_not_compile_is_reported_before_the_harness_starts(tmp_path):
    """A syntax error took 7.7 s to report: the harness imports the solution only after torch,
    the reference's outputs and the secret cases. It is said at once now, in the words the
    harness's load check uses, and the harness never runs."""
    solution = tmp_path / "solution.py"
    solution.write_text("import torch\n\ndef step(:\n    pass\n")
    proc = kagent("eval", "02_kimi_linear_decode", "--solution", str(solution), "--device", "cpu", "--json")
    assert proc.returncode == 1, proc.stderr
    result = json.loads(proc.stdout)
    assert result["verdict"] == "error" and result["phases"] == {} and result["exit_code"] is None
    assert result["reason"] == "load: importing the solution raised SyntaxError: invalid syntax (solution.py, line 3)"
    (load,) = result["checks"]
    assert load["name"] == "load" and "def step(:" in load["details"]
