"""`kagent run` from the command line: the demo session, settings from a file, bad input."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "examples" / "demo_session.yaml"
KAGENT = str(Path(sys.executable).parent / "kagent")


def kagent(*args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([KAGENT, *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)


def test_demo_session_as_json(tmp_path):
    proc = kagent("run", "02_kimi_linear_decode", "--model", f"scripted:{DEMO}", "--budget", "20m",
                  "--device", "cpu", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["status"] == "finished" and report["best_attempt"] == 2 and report["attempts"] == 3
    assert report["final_verdict"] == "pass"
    (run_dir,) = (tmp_path / "runs").iterdir()  # KAGENT_RUNS, set by conftest
    assert (run_dir / "trace.jsonl").exists() and (run_dir / "workspace" / ".git").is_dir()


def test_settings_from_a_config_file_and_quiet_output(tmp_path):
    config = tmp_path / "kagent.yaml"
    config.write_text(f"model: scripted:{DEMO}\nbudget: 20m\ndevice: cpu\nscale: smoke\n")
    proc = kagent("run", "02_kimi_linear_decode", "--config", str(config), "--quiet", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "best attempt: 2" in proc.stdout and "run folder:" in proc.stdout


@pytest.mark.parametrize("args, message", [
    (["--model", f"scripted:{DEMO}", "--budget", "3 hours"], "--budget takes a duration"),
    ([], "give --model"),
    (["--model", "nosuch:thing"], "unknown provider"),
    (["--model", "anthropic:claude-x", "--config", "/nonexistent.yaml"], "cannot read the config file"),
])
def test_bad_run_arguments_give_one_clear_message(args, message, tmp_path, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    proc = kagent("run", "02_kimi_linear_decode", "--device", "cpu", *args, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr


def test_missing_api_key_is_named(tmp_path, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    proc = kagent("run", "02_kimi_linear_decode", "--model", "anthropic:claude-sonnet-4-5", "--device", "cpu",
                  cwd=tmp_path, timeout=120)
    assert proc.returncode == 2 and "ANTHROPIC_API_KEY" in proc.stderr
