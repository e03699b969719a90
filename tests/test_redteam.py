"""The red-team corpus (tests/redteam) against `kagent eval`, and the rules behind the
anti-cheating checks as units.

Each corpus case is a patch appended to a copy of the flagship reference: a file
``redteam/<name>.py``, or, for an attack that needs files beside the solution, a folder
``redteam/<name>/`` holding ``patch.py`` and those files (``<module>.pyc.src`` is compiled
into a sourceless ``<module>.pyc``: bytecode cannot be committed). The first line of the
patch's docstring says what the harness must conclude: ``expect: <verdict> [<check or rule>
[<text the reason must contain>]]``. Lines right below it, up to the first blank line, may add:

- ``timed: score below X``: evaluate with timing; a pass must score below X (the attack's
  only aim is a fake speedup, so it must pass with an honest score). ``timed`` alone: timed,
  for a verdict that has no score.
- ``requires: cuda``: run on the GPU; skipped where torch sees none.
- ``cache: own, no links``: evaluate with a cache of its own, which must hold no link afterwards.
- ``launches: decide nothing``: whatever the solution's process reports of its launches and
  device time ranks no attempt (ledger.single_launch, EvalResult.device_bound), and on a CPU
  nothing is counted.
"""

from __future__ import annotations

import ast
import os
import py_compile
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from kagent.agent.loop.ledger import Attempt, Ledger, single_launch
from kagent.sandbox import containment, static_checks
from kagent.sandbox.harness import timing
from kagent.sandbox.results import CheckResult, EvalResult, LaunchReport, Verdict, check_verdict
from kagent.tasks import TaskRef, resolve_task

from conftest import WAIT_S, check_named, reference_solution, run_eval

CORPUS = Path(__file__).parent / "redteam"
# Hangs are killed here; everything else finishes in a few seconds at smoke scale.
HANG_LIMIT_S = 20
# Timed cases: one context, and enough rounds that an honest copy of the reference, which
# scores about 1.1 against the baseline on the CPU, stays under 1.5 on a loaded machine.
TIMED_ROUNDS = 4
TIMED_LIMIT_S = WAIT_S
FORK_BOMB_MARK = "kagent-redteam-fork-bomb"
# A case caught by one of these checks may be wrong on a share of inputs only: it is judged on
# the task's own count of secret seeds. Every other case is caught (or passes) whatever that
# count, and takes the few that still give each check its kinds of case: each secret seed
# costs a reference step and a solution step (the lab notebook, 2026-12-08, has the figures).
SEED_COUNTING_CHECKS = {"hidden_seeds", "hidden_work", "chained_steps"}
FEW_SECRET = 4
CAPS = containment.probe()


@dataclass(frozen=True)
class Expectation:
    verdict: Verdict
    check: str | None  # the check whose failure is the reason, or the static rule
    mentions: str | None  # what the reason must name
    timed: bool = False  # evaluated with timing rather than checks only
    score_below: float | None = None  # a pass must score below this
    requires_cuda: bool = False
    cache_of_its_own: bool = False  # evaluated with a cache of its own, which must hold no link after
    launches_decide_nothing: bool = False


def expectation(path: Path) -> Expectation:
    docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
    lines = docstring.splitlines()
    first = lines[0] if lines else ""
    assert first.startswith("expect: "), f"{path}: the docstring must start with 'expect: '"
    words = first.removeprefix("expect: ").split(" ", 2)
    options: dict = {}
    for line in lines[1:]:
        if not line.strip():
            break  # the header ends at the first blank line; prose follows
        if line == "timed":
            options["timed"] = True
        elif line.startswith("timed: score below "):
            options.update(timed=True, score_below=float(line.removeprefix("timed: score below ")))
        elif line == "requires: cuda":
            options["requires_cuda"] = True
        elif line == "cache: own, no links":
            options["cache_of_its_own"] = True
        elif line == "launches: decide nothing":
            options["launches_decide_nothing"] = True
        else:
            raise AssertionError(f"{path}: unknown header line {line!r}")
    return Expectation(
        Verdict(words[0]), words[1] if len(words) > 1 else None, words[2] if len(words) > 2 else None, **options
    )


@dataclass(frozen=True)
class Case:
    """One corpus case: the patch, and the files that go beside the solution (folder cases)."""

    name: str
    patch: Path
    siblings: tuple[Path, ...] = ()

    def write(self, task: TaskRef, folder: Path) -> Path:
        solution = reference_solution(task, folder, self.patch.read_text())
        for source in self.siblings:
            if source.name.endswith(".pyc.src"):
                # Sourceless: the bytecode sits where the module's .py would (not in
                # __pycache__, which is only read beside a source file), and nothing says
                # which source it came from.
                py_compile.compile(
                    str(source),
                    cfile=str(folder / source.name.removesuffix(".src")),
                    doraise=True,
                    invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
                )
            else:
                shutil.copy(source, folder / source.name)
        return solution


def corpus_cases() -> list[Case]:
    cases = [Case(p.stem, p) for p in CORPUS.glob("*.py")]
    for folder in CORPUS.iterdir():
        if (folder / "patch.py").is_file():
            siblings = tuple(sorted(f for f in folder.iterdir() if f.is_file() and f.name != "patch.py"))
            cases.append(Case(folder.name, folder / "patch.py", siblings))
    return sorted(cases, key=lambda c: c.name)


def test_the_corpus_covers_every_kind_of_attack():
    cases = corpus_cases()
    expected = [expectation(c.patch) for c in cases]
    assert len(expected) >= 53
    verdicts = {e.verdict for e in expected}
    assert verdicts >= {
        Verdict.PASS,
        Verdict.INCORRECT,
        Verdict.FORBIDDEN,
        Verdict.TAMPERED,
        Verdict.CRASH,
        Verdict.TIMEOUT,
    }
    assert sum(e.verdict is Verdict.PASS for e in expected) >= 16
    # Attacks on the clock must pass with an honest score, not merely pass.
    assert sum(e.score_below is not None and e.verdict is Verdict.PASS for e in expected) >= 12
    assert sum(e.requires_cuda for e in expected) >= 2
    folders = [c for c in cases if c.siblings]
    assert len(folders) >= 3
    assert any(s.name.endswith(".pyc.src") for c in folders for s in c.siblings)


def eval_options(case: Case, want: Expectation, scratch: Path) -> dict:
    """How the case is evaluated (beyond conftest.run_eval's defaults)."""
    options: dict = {"mode": "check", "timeout_s": HANG_LIMIT_S if want.verdict is Verdict.TIMEOUT else WAIT_S}
    if want.check not in SEED_COUNTING_CHECKS:
        options["hidden_seeds"] = FEW_SECRET
    if want.timed:
        options.update(mode="eval", contexts=[16], rounds=TIMED_ROUNDS, timeout_s=TIMED_LIMIT_S)
    if want.requires_cuda:
        options["device"] = "cuda"
    if case.siblings or want.cache_of_its_own:
        # Files beside the solution can be imported by the harness itself before the cache
        # is sealed: whatever such a case poisons must stay in a cache of its own.
        options["cache_dir"] = scratch / "cache"
    return options


def _live_fork_bomb_children() -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and FORK_BOMB_MARK.encode() in (proc / "cmdline").read_bytes():
                pids.append(int(proc.name))
        except OSError:
            continue  # gone meanwhile, or not ours to read
    return pids


@pytest.mark.slow
@pytest.mark.parametrize("case", corpus_cases(), ids=lambda c: c.name)
def test_corpus_file_gets_its_verdict(case, kimi, kagent_home, tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-redteam-secret")
    monkeypatch.setenv("MY_SERVICE_TOKEN", "redteam-secret")
    want = expectation(case.patch)
    if want.requires_cuda and not torch.cuda.is_available():
        pytest.skip("the attack works on CUDA devices only, and torch sees none")
    hangs = want.verdict is Verdict.TIMEOUT
    solution = case.write(kimi, tmp_path / "solution")
    result = run_eval(kimi, solution, kagent_home, **eval_options(case, want, tmp_path))
    verdict = want.verdict
    writes_a_grading_file = want.check is not None and want.check.endswith((".py", ".yaml"))
    if verdict is Verdict.TAMPERED and writes_a_grading_file and (os.geteuid() != 0 or CAPS.files):
        # Without root, or inside the jail's read-only files, the write is refused: nothing
        # changed, nothing to catch.
        verdict = Verdict.PASS
    assert result.verdict is verdict, result.reason
    if verdict is Verdict.PASS and want.score_below is not None:
        assert result.score is not None and result.score < want.score_below, (
            f"score {result.score}, not below {want.score_below}: the attack inflated it ({result.reason})"
        )
    if verdict is Verdict.FORBIDDEN:
        assert want.check in {f.rule for f in result.static_findings}, result.static_findings
    elif verdict in (Verdict.INCORRECT, Verdict.ERROR):
        assert result.reason.startswith(want.check + ":"), result.reason
        assert check_named(result, want.check).status in ("fail", "error")
        assert result.score is None
    elif verdict is Verdict.TAMPERED:
        assert want.check in result.reason
        assert result.score is None
    if want.mentions:
        assert want.mentions in result.reason, result.reason
    _check_what_is_left(want, result, tmp_path)
    if hangs:
        assert result.wall_seconds < HANG_LIMIT_S + 15
        assert "killed" in result.reason
        # The process group went with it: no sleeping child of the fork bomb outlives it.
        deadline = time.monotonic() + 5
        while _live_fork_bomb_children() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _live_fork_bomb_children()


def _check_what_is_left(want: Expectation, result: EvalResult, scratch: Path) -> None:
    """What a case's header asks of the cache it ran with and of the launches it reported."""
    if want.cache_of_its_own:
        cache = scratch / "cache"
        assert cache.is_dir() and not [p for p in cache.rglob("*") if p.is_symlink()]
    if want.launches_decide_nothing:
        report = result.launches_of("candidate")
        assert report is not None and not report.counted_outside
        assert single_launch(result) is None and result.device_bound is None
        if result.device == "cpu":
            assert report.launches is None and report.single_launch is None and report.device_ms is None


# -- checks that map to their own verdicts -------------------------------------------------


def test_a_dead_solution_process_is_a_crash_and_an_error_is_an_error():
    assert check_verdict(CheckResult(name="fixed_seeds", status="crash", reason="died")) is Verdict.CRASH
    assert check_verdict(CheckResult(name="fixed_seeds", status="fail", reason="x")) is Verdict.INCORRECT
    assert check_verdict(CheckResult(name="load", status="error", reason="x")) is Verdict.ERROR
    assert check_verdict(CheckResult(name="hidden_work", status="fail", reason="x")) is Verdict.INCORRECT
    assert check_verdict(CheckResult(name="load", status="pass", reason="x")) is Verdict.PASS


# -- physics: no step beats the bytes floor -----------------------------------------------


def test_physics_rejects_a_time_below_the_bytes_floor():
    reason = timing.physics_violation(0.012, 243_000_000, 4.2e12)
    assert reason == ("0.012 ms per step moves 243 MB at 20.2 TB/s, 4.8x the device's measured 4.2 TB/s: rejected")


def test_physics_leaves_ten_percent_for_noise():
    floor_ms = 243e6 / 4.2e12 * 1e3
    assert timing.physics_violation(floor_ms, 243_000_000, 4.2e12) is None
    assert timing.physics_violation(floor_ms / 1.09, 243_000_000, 4.2e12) is None
    assert timing.physics_violation(floor_ms / 1.12, 243_000_000, 4.2e12) is not None
    assert timing.physics_violation(0.0, 243_000_000, 4.2e12) is not None


@pytest.mark.slow
def test_a_task_claiming_enormous_bytes_fails_physics(kagent_home, tmp_path):
    folder = tmp_path / "kimi_huge_roofline"
    shutil.copytree(resolve_task("02_kimi_linear_decode").path, folder)
    roofline = folder / "roofline.py"
    roofline.write_text(
        roofline.read_text() + "\n\n_honest_bytes = bytes_per_step\n\n\n"
        "def bytes_per_step(cfg, context_len: int) -> int:\n"
        "    return _honest_bytes(cfg, context_len) * 10**6\n"
    )
    task = resolve_task(str(folder))
    result = run_eval(task, reference_solution(task, tmp_path / "solution"), kagent_home, contexts=[16], rounds=1)
    assert result.verdict is Verdict.INCORRECT, result.reason
    assert result.reason.startswith("physics: ctx 16: "), result.reason
    assert result.reason.endswith("rejected") and result.score is None


@pytest.mark.slow
def test_an_honest_task_never_trips_physics(kimi, kagent_home, tmp_path):
    result = run_eval(kimi, reference_solution(kimi, tmp_path), kagent_home, contexts=[16], rounds=1)
    assert result.verdict is Verdict.PASS, result.reason
    assert all(t.roofline.candidate_fraction <= timing.PHYSICS_SLACK for t in result.timings)


# -- static tripwires ---------------------------------------------------------------------


def _rules(tmp_path: Path, source: str) -> list[str]:
    return [f.rule for f in static_checks.scan(_write(tmp_path, source, {}))]


@pytest.mark.parametrize(
    "source, rule",
    [
        ("import torch\ng = torch.cuda.CUDAGraph()\n", "cuda_graph"),
        ("import torch\nwith torch.cuda.graph(g):\n    pass\n", "cuda_graph"),
        ("from torch.cuda import make_graphed_callables\n", "cuda_graph"),
        ("import torch.cuda as tc\nf = tc.make_graphed_callables\n", "cuda_graph"),
        ("import torch\nG = getattr(torch.cuda, 'CUDAGraph')\n", "cuda_graph"),
        ("import torch\nf = torch.compile(lambda x: x)\n", "torch_compile"),
        ("from torch import compile as c\n", "torch_compile"),
        ("import torch._dynamo\n", "torch_compile"),
        ("import torch\ntorch._inductor.config.x = 1\n", "torch_compile"),
        ("import torch\nname = 'CUDA' + 'Graph'\nG = getattr(torch.cuda, name)\n", "computed_getattr"),
        ("import torch as t\nG = getattr(t, ''.join(['comp', 'ile']))\n", "computed_getattr"),
        (
            "from torch.utils.cpp_extension import load_inline\n"
            "SRC = 'void f(cudaGraphExec_t g) { cudaGraphLaunch(g, 0); }'\n",
            "cuda_graph",
        ),
    ],
)
def test_static_tripwire(source, rule, tmp_path):
    assert rule in _rules(tmp_path, source)


def test_tripwires_ignore_comments_strings_and_prose(tmp_path):
    source = '''"""No torch.compile and no torch.cuda.CUDAGraph here: cudaGraphLaunch is forbidden."""
from torch.utils.cpp_extension import load_inline
# torch.compile would be faster, but it is not allowed
NOTE = "torch.cuda.graph is forbidden"
SRC = """
// no cudaGraphLaunch: one plain launch
/* cudaStreamBeginCapture is not used */
void f() {}
"""
x = getattr(torch, "float16")
'''
    assert _rules(tmp_path, source) == []


def test_cuda_graph_in_a_native_file_of_the_solution(tmp_path):
    kernel = (
        "// honest comment: cudaGraphLaunch\n__global__ void k() {}\nvoid go(cudaStream_t s) {\n"
        "    cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);\n}\n"
    )
    findings = static_checks.scan(_write(tmp_path, "import torch\n", {"kernel.cu": kernel}))
    assert [(f.file, f.line, f.rule, f.evidence) for f in findings] == [
        ("kernel.cu", 4, "cuda_graph", "cudaStreamBeginCapture")
    ]


def _write(tmp_path: Path, source: str, extra: dict[str, str]) -> Path:
    (tmp_path / "solution.py").write_text(source)
    for name, text in extra.items():
        (tmp_path / name).write_text(text)
    return tmp_path / "solution.py"


# -- what a solution's process says of its launches ranks nothing ---------------------------


def test_a_single_launch_counted_by_the_solution_s_own_process_ranks_no_attempt():
    """A megakernel task ranks a single-launch attempt above every faster one, and two attempts
    at their device time by their own times: only where the count and the device time were
    taken outside the solution's process, which can write any figure into its report."""
    from test_long_runs import _timed

    best = Attempt(number=1, kind="benchmark", verdict="pass", reason="", score=2.0, commit="a", kept=True)
    ledger = Ledger(attempts=[best], best=1)

    def result(counted_outside: bool) -> EvalResult:
        report = LaunchReport(
            who="candidate",
            context_len=16,
            launches=1,
            single_launch=True,
            device_ms=0.5,
            counted_outside=counted_outside,
        )
        return EvalResult(
            task="02_kimi_linear_decode",
            task_kind="mega",
            mode="eval",
            scale="smoke",
            device="cuda",
            verdict=Verdict.PASS,
            reason="passed",
            started_at="2026-12-07T00:00:00+00:00",
            wall_seconds=1.0,
            score=1.5,
            launches=[report],
            timings=[_timed(1.5, 0.5)],
        )

    forged = result(counted_outside=False)
    assert single_launch(forged) is None and forged.device_bound is None
    note, lost, new_best = ledger.judge(forged, 1.5, single_launch_goal=True)
    assert lost and not new_best and note.startswith("regression"), note
    counted = result(counted_outside=True)
    assert single_launch(counted) is True and counted.device_bound is True
    note, lost, new_best = ledger.judge(counted, 1.5, single_launch_goal=True)
    assert new_best and "the first single launch" in note, note
