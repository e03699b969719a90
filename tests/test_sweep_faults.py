"""Sweeps with their faults, on the CPU: 2 tasks × 2 branches of a scripted model that thinks
a second per turn. On a local Ray cluster (2 CPUs, no GPU, started here) one worker is
killed mid-run and Ray's retry resumes its member; without Ray, a member's process is killed
and then the driver, and `kagent sweep --resume` goes on. Every member ends finished, with
the ledger of a run never interrupted, and no timed work overlapped any other work.

Slow: about a minute each on 2 cores (four members, each with two short evaluations).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

import pytest
import yaml
from test_resume import events_of
from test_sweep import KB_SOLUTION, write_tasks

from kagent.agent.sweep.usage import gpu_usage

from conftest import WAIT_S

KAGENT = str(Path(sys.executable).parent / "kagent")
THINK_S = 1
# Two members run at once (--per-gpu 2): enough for a kill to land beside a member that goes on.
TASKS = 2
# Write a solution, benchmark it (attempt 1, the best), try an import the rules forbid (attempt
# 2, refused before anything runs, reverted), finish (the final re-verification). No shell
# command: every call may run again after a kill (a shell command is answered as interrupted
# instead), so the ledger is the same wherever a kill lands.
SCRIPT = [
    {
        "tool_calls": [
            {"name": "design", "arguments": {"hypothesis": "a port of the task's model", "predicted": "about 1x"}},
            {"name": "write_file", "arguments": {"path": "solution.py", "content": KB_SOLUTION}},
        ]
    },
    {"tool_calls": [{"name": "benchmark", "arguments": {}}]},
    {
        "tool_calls": [
            {"name": "design", "arguments": {"hypothesis": "kagent's own helpers", "predicted": "refused"}},
            {
                "name": "edit_file",
                "arguments": {"path": "solution.py", "old": "import torch", "new": "import kagent\nimport torch"},
            },
        ]
    },
    {"tool_calls": [{"name": "check", "arguments": {}}]},
    {"tool_calls": [{"name": "finish", "arguments": {"summary": "the port, attempt 1"}}]},
]
UNINTERRUPTED_LEDGER = [(1, "benchmark", "pass", True), (2, "check", "forbidden", False)]
# Every member's `kagent run --config`: two timed pairs of single calls, not KernelBench's 40 of
# 10-ms blocks (what is tested here is the sweep's faults, not the timing).
RUN_CONFIG = {"eval_rounds": 2, "eval_min_request_ms": 0}


@pytest.fixture
def sweep_args(tmp_path) -> list[str]:
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump(SCRIPT))
    tasks = write_tasks(tmp_path / "tasks", count=TASKS)
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(RUN_CONFIG))
    return [
        str(tasks),
        "--config",
        str(config),
        "--model",
        f"scripted:{script}?delay={THINK_S}",
        "--branches",
        "2",
        "--budget",
        "15m",
        "--device",
        "cpu",
        "--per-gpu",
        "2",
        "--name",
        "faults",
        "--quiet",
    ]


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "KAGENT_RUNS": str(tmp_path / "runs"), "COLUMNS": "200", **extra}


def _wait_for(what: str, found: Callable[[], Optional[object]], sweep: Optional[subprocess.Popen] = None) -> object:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        value = found()
        if value:
            return value
        if sweep is not None and sweep.poll() is not None:
            pytest.fail(f"the sweep ended (exit {sweep.returncode}) before {what}: {sweep.communicate()[0]}")
        time.sleep(0.1)
    pytest.fail(f"never saw {what}")


def _sweep_dir(tmp_path: Path) -> Optional[Path]:
    found = list((tmp_path / "runs" / "sweeps").glob("faults-*"))
    return found[0] if found else None


def _events(run_dir: Path) -> list[dict]:
    return events_of(run_dir / "trace.jsonl")  # as far as it is written


def _waiting_for_the_model(tmp_path: Path, turn: int, besides: tuple[str, ...] = ()) -> Optional[tuple[Path, int]]:
    """A member's run waiting for its model's answer to turn ``turn``, and its process."""
    sweep_dir = _sweep_dir(tmp_path)
    for run_dir in sorted((sweep_dir / "runs").iterdir()) if sweep_dir and (sweep_dir / "runs").is_dir() else []:
        events = _events(run_dir)
        if run_dir.name in besides or not events or events[-1]["type"] != "model_requested":
            continue
        if events[-1]["turn"] == turn:
            try:
                return run_dir, json.loads((run_dir / "lock").read_text())["pid"]
            except (OSError, ValueError):
                continue
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    return state != "Z"


def _ledger(run_dir: Path) -> list[tuple]:
    return [
        (e["attempt"]["number"], e["attempt"]["kind"], e["attempt"]["verdict"], e["attempt"]["kept"])
        for e in _events(run_dir)
        if e["type"] == "attempt_recorded"
    ]


def _check_every_member_complete(sweep_dir: Path, killed: set[str], cut: set[str] = frozenset()) -> dict:
    """Every member finished with the uninterrupted ledger; those ``killed`` were resumed, and
    of the others only those ``cut`` with the driver (if their run had begun)."""
    summary = json.loads((sweep_dir / "sweep.json").read_text())
    assert summary["state"] == "ended" and len(summary["members"]) == 2 * TASKS
    assert {(m["task"], m["branch"]) for m in summary["members"]} == {
        (f"times_{n + 2}", b) for n in range(TASKS) for b in (1, 2)
    }
    for member in summary["members"]:
        run_dir = sweep_dir / member["run_dir"]
        assert (member["outcome"], member["state"]) == ("ended", "finished"), member
        # No attempt lost, none counted twice: the ledger of a run never interrupted.
        assert _ledger(run_dir) == UNINTERRUPTED_LEDGER, member["run_id"]
        (benchmark,) = [e for e in _events(run_dir) if e["type"] == "attempt_recorded" and e["attempt"]["number"] == 1]
        assert [t["pairs"] for t in benchmark["evaluation"]["timings"]] == [RUN_CONFIG["eval_rounds"]]
        resumed = [e for e in _events(run_dir) if e["type"] == "run_resumed"]
        if member["run_id"] in killed:
            assert resumed, member["run_id"]
        elif member["run_id"] not in cut:
            assert not resumed, member["run_id"]
        assert member["figures"]["resumes"] == len(resumed) and member["figures"]["ms_per_token"]
        if member["direction"] is not None:
            first = next(e for e in _events(run_dir) if e["type"] == "run_started")
            assert member["direction"] in first["first_message"]["content"][0]["text"]
    # Timed work never overlapped other work on the (one) device, and each timing held it alone.
    usage = gpu_usage(sweep_dir, [(0, time.time())])
    assert [u.overlaps for u in usage] == [0] and usage[0].timed_holds >= 2 * 2 * TASKS
    board = (sweep_dir / "board.md").read_text()
    assert board.count("| finished |") == 2 * TASKS
    return summary


@contextmanager
def ray_cluster() -> Iterator[str]:
    """A local Ray cluster of 2 CPUs and no GPU, for as long as the block runs: its head is a
    process of this test's (its socket paths short enough for Unix sockets)."""
    temp = tempfile.mkdtemp(prefix="kr", dir="/tmp")
    head = (
        "import ray, sys; ray.init(num_cpus=2, num_gpus=0, include_dashboard=False, "
        f"object_store_memory=128 << 20, _temp_dir={temp!r}); "
        "print(ray.get_runtime_context().gcs_address, flush=True); sys.stdin.read()"
    )
    # Without token authentication (Ray's default for a head it starts): the sweep joins it as
    # any driver of this machine would, with no token to hand over.
    proc = subprocess.Popen(
        [sys.executable, "-c", head],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "RAY_AUTH_MODE": "disabled"},
    )
    try:
        yield proc.stdout.readline().strip()
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(temp, ignore_errors=True)


def test_a_ray_sweep_goes_on_when_a_worker_is_killed(sweep_args, tmp_path):
    pytest.importorskip("ray")
    with ray_cluster() as address:
        proc = subprocess.Popen(
            [KAGENT, "sweep", *sweep_args, "--ray", address],
            env=_env(tmp_path),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        run_dir, pid = _wait_for("a member waiting for its model", lambda: _waiting_for_the_model(tmp_path, 2), proc)
        worker = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])  # its parent
        assert b"ray" in Path(f"/proc/{worker}/cmdline").read_bytes()  # the Ray worker driving it
        os.kill(worker, signal.SIGKILL)
        output, _ = proc.communicate(timeout=WAIT_S)
    assert proc.returncode == 0, output
    assert "| finished |" in output  # the board, printed at the end
    sweep_dir = _sweep_dir(tmp_path)
    summary = _check_every_member_complete(sweep_dir, killed={run_dir.name})
    assert summary["spec"]["engine"] == "ray"
    killed = next(m for m in summary["members"] if m["run_id"] == run_dir.name)
    assert killed["figures"]["resumes"] == 1  # Ray retried it once; it went on from its trace


def test_a_sweep_without_ray_goes_on_when_a_member_and_then_the_driver_are_killed(sweep_args, tmp_path):
    shim = tmp_path / "no_ray"  # an import of ray fails here: the local engine needs none
    (shim / "ray").mkdir(parents=True)
    (shim / "ray" / "__init__.py").write_text("raise ImportError('no ray here')\n")
    env = _env(tmp_path, PYTHONPATH=str(shim))
    proc = subprocess.Popen(
        [KAGENT, "sweep", *sweep_args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    first, pid = _wait_for("a member waiting for its model", lambda: _waiting_for_the_model(tmp_path, 2), proc)
    os.kill(pid, signal.SIGKILL)  # the member's run: its driver resumes it
    second, second_pid = _wait_for(
        "another member waiting for its model", lambda: _waiting_for_the_model(tmp_path, 2, besides=(first.name,)), proc
    )
    proc.kill()  # the driver, SIGKILL: nothing of it runs on
    proc.communicate()
    _wait_for("the members to die with their driver", lambda: not _alive(second_pid))
    resume = subprocess.run(
        [KAGENT, "sweep", "--resume", _sweep_dir(tmp_path).name, "--quiet"],
        env=env,
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )
    assert resume.returncode == 0, resume.stdout + resume.stderr
    sweep_dir = _sweep_dir(tmp_path)
    record = [json.loads(line) for line in (sweep_dir / "sweep.jsonl").read_text().splitlines()]
    (resumed,) = [e for e in record if e["type"] == "sweep_resumed"]
    assert second.name in resumed["cut"] and resumed["spec"]["engine"] == "local"
    cut = [e["run_id"] for e in record if e["type"] == "member_ended" and e["outcome"] == "cut"]
    summary = _check_every_member_complete(sweep_dir, killed={first.name, second.name}, cut=set(cut))
    assert summary["resumes"] == 1
    assert next(m for m in summary["members"] if m["run_id"] == first.name)["figures"]["resumes"] >= 1
