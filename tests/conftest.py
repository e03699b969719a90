"""Shared fixtures: kagent's home and runs folders point into temporary folders, and helpers
write solutions for the smoke-scale flagship task."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from kagent.sandbox.evaluate import EvalOptions, evaluate
from kagent.sandbox.results import EvalResult
from kagent.tasks import TaskRef, resolve_task


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: three workers a core. Many tests spend much of their time waiting (a scripted
    model's thinking, a hang being noticed, a killed run being resumed, a sweep's members, a
    worker waiting for a fixture another builds): with two a core the cores still stood idle a
    quarter of the suite, with three they are kept busy. The whole-evaluation tests' checks and
    timings are built to hold on a loaded machine."""
    return 3 * len(os.sched_getaffinity(0))


KIMI = "02_kimi_linear_decode"
# How long a test waits for work that takes seconds (an evaluation, a command), on a CPU other
# jobs share: limits of 120 s and 180 s ran out on a heavily loaded machine. Only a hang should
# ever reach this one. Tests that check a limit (a hang killed, a deadline kept) set their own.
WAIT_S = 900

# The tests' own torch work (a reference built here, a step judged here) runs on one thread, as
# an evaluation's processes do on the CPU (harness_child.py sets OMP_NUM_THREADS=1): on a 2-core
# machine with xdist's other workers and the evaluations' processes beside it, a second thread
# waits for a core, and judging the flagship's 12 fixed-seed steps took 5 s of CPU instead of
# 0.5 s (2026-12-07). The processes the tests start (kagent's CLI, drivers) likewise.
torch.set_num_threads(1)
os.environ.setdefault("OMP_NUM_THREADS", "1")


def shared_folder(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """A folder every xdist worker of this test session shares (their temporary folders lie in
    one), or this process's own without xdist: what a session fixture builds there is built
    once for the whole run, not once a worker."""
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / name
    folder.mkdir(exist_ok=True)
    return folder


@contextmanager
def held(folder: Path) -> Iterator[None]:
    """The folder's lock, held by one worker at a time (the others wait)."""
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@pytest.fixture(scope="session")
def kagent_home(tmp_path_factory) -> Path:
    """One cache for the whole test run, every worker's, so reference weights, outputs and the
    bandwidth are built once (a sweep's members share one the same way)."""
    return shared_folder(tmp_path_factory, "kagent_home")


@pytest.fixture(autouse=True)
def _isolated_env(kagent_home, tmp_path, monkeypatch):
    monkeypatch.setenv("KAGENT_HOME", str(kagent_home))
    monkeypatch.setenv("KAGENT_RUNS", str(tmp_path / "runs"))
    monkeypatch.delenv("KAGENT_DEBUG", raising=False)


@pytest.fixture
def user_home(tmp_path, monkeypatch) -> Path:
    """A KAGENT_HOME of this test's own, for a test that writes the user's files there
    (models.yaml, prices.yaml): the shared kagent_home is every worker's at once."""
    home = tmp_path / "user_home"
    home.mkdir()
    monkeypatch.setenv("KAGENT_HOME", str(home))
    return home


@pytest.fixture(scope="session")
def kimi() -> TaskRef:
    return resolve_task(KIMI)


@pytest.fixture(scope="session")
def scripted_session(tmp_path_factory, kagent_home, kimi) -> SimpleNamespace:
    """The session of test_run_session.session_turns, run once for the whole test run (a whole
    run takes about 40 s; the first worker that asks runs it, the others wait and read what it
    kept): test_run_session checks it end to end, test_resume compares its killed runs with it.
    Its folder is read-only: a test that changes it works on a copy.
    Fields: script, run_dir, report, updates (what the live view was told)."""
    from kagent.agent.lifecycle.runs import start_run
    from kagent.agent.loop.finalize import RunReport
    from kagent.agent.loop.status import ViewUpdate

    from test_run_session import run_options, session_turns, write_script

    folder = shared_folder(tmp_path_factory, "scripted_session")
    kept = folder / "session.json"
    with held(folder):
        if not kept.exists():
            script = write_script(folder / "script.json", session_turns((kimi.path / "reference.py").read_text()))
            updates: list = []
            with pytest.MonkeyPatch.context() as patch:  # session-scoped: the per-test environment is not set yet
                patch.setenv("KAGENT_HOME", str(kagent_home))
                run_dir, report = start_run(run_options(folder, script, wall_s=900), view=updates.append)
            record = {
                "script": str(script),
                "run_dir": str(run_dir),
                "report": report.model_dump(mode="json"),
                "updates": [u.model_dump(mode="json") for u in updates],
            }
            kept.write_text(json.dumps(record))
    record = json.loads(kept.read_text())
    return SimpleNamespace(
        script=Path(record["script"]),
        run_dir=Path(record["run_dir"]),
        report=RunReport.model_validate(record["report"]),
        updates=[ViewUpdate.model_validate(u) for u in record["updates"]],
    )


def write_solution(folder: Path, source: str, name: str = "solution.py") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(source)
    return path


def reference_solution(kimi: TaskRef, folder: Path, patch: str = "") -> Path:
    """A solution made of the reference's own code (copied, not imported) plus ``patch``."""
    return write_solution(folder, (kimi.path / "reference.py").read_text() + "\n" + patch)


def run_eval(task: TaskRef, solution: Path | None, kagent_home: Path, **options) -> EvalResult:
    # min_request_ms 0: the candidate's blocks as the baseline's, however fast it runs here,
    # so that what a test counts does not depend on the machine's speed.
    defaults = dict(device="cpu", scale="smoke", cache_dir=kagent_home, rounds=2, timeout_s=WAIT_S, min_request_ms=0)
    return evaluate(task, solution, EvalOptions(**{**defaults, **options}))


# `kagent ARGS` in a process that prints, at its exit, "exit CODE TORCH": whether torch was
# imported by then (it takes seconds to import, 7-14 s on a loaded machine: a typo must not
# wait for it).
_CLI_PROBE = (
    "import sys\nfrom kagent.agent.cli.app import main\n"
    "try:\n    main()\nexcept SystemExit as end:\n    print('exit', end.code, 'torch' in sys.modules)\n"
)


def kagent_counting_torch(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", _CLI_PROBE, *args],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        cwd=cwd,
        env={**os.environ, "COLUMNS": "200"},
    )


def check_named(result: EvalResult, name: str):
    return next((c for c in result.checks if c.name == name), None)


def processes_with(marker: str) -> list[int]:
    """Live (not zombie) processes whose command line holds ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue  # gone meanwhile
        if marker.encode() in cmdline and state != "Z":  # a zombie is dead, merely not reaped
            found.append(int(entry))
    return found


def install_fake_ncu(bin_dir: Path, report: str, argv_file: Path) -> Path:
    """A stand-in for Nsight Compute in ``bin_dir``: it records how it was called in
    ``argv_file`` and writes ``report`` to the file its --log-file names, as ncu does with a
    report; on stdout only one line of its own."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / "report.txt").write_text(report)
    fake = bin_dir / "ncu"
    fake.write_text(
        f"#!{sys.executable}\nimport shutil, sys\nargs = sys.argv[1:]\n"
        f"open({str(argv_file)!r}, 'w').write(' '.join(args))\n"
        f"print('==PROF== the report goes to the log file; only this on stdout')\n"
        f"shutil.copy({str(bin_dir / 'report.txt')!r}, args[args.index('--log-file') + 1])\n"
    )
    fake.chmod(0o755)
    return fake
