"""Users bring their own tasks: a KernelBench-style single file, and a KernelBench-Mega-style
problem folder. kagent grades both with its own harness; the examples are made here."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import check_named, run_eval, write_solution
from kagent.agent.errors import KagentError
from kagent.sandbox.results import Verdict
from kagent.tasks import resolve_task

KERNELBENCH_PROBLEM = '''
import torch


class Model(torch.nn.Module):
    """A linear layer followed by ReLU."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.linear = torch.nn.Linear(n_in, n_out)

    def forward(self, x):
        return torch.relu(self.linear(x))


def get_inputs():
    return [torch.randn(16, 64)]


def get_init_inputs():
    return [64, 32]
'''

KB_SOLUTION = '''
import torch


class ModelNew(torch.nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.linear = torch.nn.Linear(n_in, n_out)

    def forward(self, x):
        return torch.clamp_min(torch.addmm(self.linear.bias, x, self.linear.weight.t()), 0.0){extra}
'''


@pytest.fixture
def kb_task(tmp_path):
    path = tmp_path / "task" / "linear_relu.py"
    path.parent.mkdir()
    path.write_text(KERNELBENCH_PROBLEM)
    return resolve_task(str(path))


def kb_solution(folder: Path, extra: str = "") -> Path:
    return write_solution(folder, KB_SOLUTION.replace("{extra}", extra))


def test_kernelbench_file_is_recognized(kb_task):
    assert kb_task.kind == "kernelbench" and kb_task.name == "linear_relu"
    assert kb_task.description == "A linear layer followed by ReLU."


def test_kernelbench_correct_solution_passes_and_is_timed(kb_task, kagent_home, tmp_path):
    result = run_eval(kb_task, kb_solution(tmp_path / "s"), kagent_home)
    assert result.verdict is Verdict.PASS, result.reason
    assert [c.name for c in result.checks] == ["load", "fixed_seeds", "hidden_seeds", "overwrite_in_place",
                                               "timed_calls"]
    (timing,) = result.timings
    assert timing.label == "default" and timing.candidate.n == timing.rounds  # one block of calls per round
    assert timing.roofline.bytes_per_step == 16 * 64 * 4 + 16 * 32 * 4 + (64 * 32 + 32) * 4
    assert result.score == pytest.approx(timing.speedup)


def test_kernelbench_wrong_solution_fails(kb_task, kagent_home, tmp_path):
    result = run_eval(kb_task, kb_solution(tmp_path / "s", " - 1.0"), kagent_home, mode="check")
    assert result.verdict is Verdict.INCORRECT
    assert result.reason.startswith("fixed_seeds: seed 0: output 0: max abs difference")


def test_kernelbench_tolerance_is_the_users(kb_task, kagent_home, tmp_path):
    solution = kb_solution(tmp_path / "s", " + 1e-3")
    assert run_eval(kb_task, solution, kagent_home, mode="check", atol=1e-2, rtol=0.0).verdict is Verdict.PASS
    strict = run_eval(kb_task, solution, kagent_home, mode="check", atol=1e-5, rtol=1e-5)
    assert strict.verdict is Verdict.INCORRECT


def test_kernelbench_pointer_cache_fails_the_overwrite_check(kb_task, kagent_home, tmp_path):
    solution = write_solution(tmp_path / "s", KB_SOLUTION.replace("{extra}", "") + '''
_forward = ModelNew.forward
_answers = {}
def _cached(self, x):
    if x.data_ptr() not in _answers:
        _answers[x.data_ptr()] = _forward(self, x)
    return _answers[x.data_ptr()]
ModelNew.forward = _cached
''')
    result = run_eval(kb_task, solution, kagent_home, mode="check")
    assert result.verdict is Verdict.INCORRECT
    assert check_named(result, "overwrite_in_place").status == "fail"


def test_kernelbench_missing_model_new_is_an_error(kb_task, kagent_home, tmp_path):
    result = run_eval(kb_task, write_solution(tmp_path / "s", "import torch\n"), kagent_home, mode="check")
    assert result.verdict is Verdict.ERROR and "defines no class ModelNew" in result.reason


def test_kernelbench_aa_run(kb_task, kagent_home):
    result = run_eval(kb_task, None, kagent_home, mode="aa")
    assert result.verdict is Verdict.PASS and result.score > 0


def test_not_a_kernelbench_file_is_refused(tmp_path):
    path = tmp_path / "thing.py"
    path.write_text("x = 1\n")
    with pytest.raises(KagentError, match="defines no Model, get_inputs, get_init_inputs"):
        resolve_task(str(path))


# A KernelBench-Mega-style folder: a tiny stateful model with a growing memory per layer.
MEGA_REFERENCE = '''
import dataclasses

import torch


@dataclasses.dataclass(frozen=True)
class Config:
    hidden: int = 64
    n_layers: int = 2


def build_config(shape):
    return Config(**shape.get("config", {}))


class Model(torch.nn.Module):
    def __init__(self, cfg):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.w = torch.nn.Parameter(torch.randn(cfg.n_layers, cfg.hidden, cfg.hidden, generator=g) * 0.1)

    @torch.no_grad()
    def step(self, hidden, state):
        for i, layer in enumerate(state):
            h = torch.tanh(hidden.float() @ self.w[i].float() + layer["memory"].mean(0))
            layer["memory"] = torch.cat([layer["memory"], h[None]], 0)
            hidden = (hidden.float() + h).to(torch.bfloat16)
        return hidden, state


def init_state(cfg, context_len, seed, device=None):
    g = torch.Generator(device=device or "cpu").manual_seed(seed)
    return [{"memory": torch.randn(context_len, cfg.hidden, generator=g, device=device)}
            for _ in range(cfg.n_layers)]


def init_token(cfg, seed, device=None):
    g = torch.Generator(device=device or "cpu").manual_seed(seed + 1)
    return torch.randn(cfg.hidden, generator=g, device=device).to(torch.bfloat16)
'''

MEGA_SOLUTION = '''
import torch


class Model(torch.nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.w = torch.nn.Parameter(torch.empty(cfg.n_layers, cfg.hidden, cfg.hidden))

    @torch.no_grad()
    def step(self, hidden, state):
        x = hidden.float()
        for i, layer in enumerate(state):
            h = {activation}(torch.matmul(x, self.w[i]) + layer["memory"].sum(0) / layer["memory"].shape[0])
            layer["memory"] = torch.cat([layer["memory"], h[None]], 0)
            x = (x + h).to(torch.bfloat16).float()
        return x.to(torch.bfloat16), state
'''


@pytest.fixture
def mega_task(tmp_path):
    folder = tmp_path / "my_problem"
    folder.mkdir()
    (folder / "reference.py").write_text(MEGA_REFERENCE)
    (folder / "shapes.py").write_text('SHAPES = [{"context_len": 8, "steps": 3}, {"context_len": 12, "steps": 2}]\n'
                                      "SMOKE_SHAPES = SHAPES\n")
    (folder / "problem.yaml").write_text(textwrap.dedent("""\
        name: my_problem
        description: a tiny stateful step
        correctness: {threshold: 0.99, seeds: [0, 1], contexts: [8], smoke_contexts: [8, 12]}
        forbidden_imports: [numpy]
        """))
    (folder / "PROMPT.txt").write_text("Make step fast.\n")
    return resolve_task(str(folder))


def test_mega_folder_correct_solution_passes(mega_task, kagent_home, tmp_path):
    assert mega_task.kind == "mega" and mega_task.name == "my_problem" and mega_task.prompt == "Make step fast.\n"
    solution = write_solution(tmp_path / "s", MEGA_SOLUTION.replace("{activation}", "torch.tanh"))
    result = run_eval(mega_task, solution, kagent_home)
    assert result.verdict is Verdict.PASS, result.reason
    assert [t.context_len for t in result.timings] == [8, 12]
    assert all(t.roofline is None for t in result.timings)  # this folder has no roofline.py


def test_mega_folder_wrong_solution_fails(mega_task, kagent_home, tmp_path):
    solution = write_solution(tmp_path / "s", MEGA_SOLUTION.replace("{activation}", "torch.sigmoid"))
    result = run_eval(mega_task, solution, kagent_home, mode="check")
    assert result.verdict is Verdict.INCORRECT and result.reason.startswith("fixed_seeds")


def test_mega_folder_forbidden_import_from_its_yaml(mega_task, kagent_home, tmp_path):
    source = "import numpy\n" + MEGA_SOLUTION.replace("{activation}", "torch.tanh")
    result = run_eval(mega_task, write_solution(tmp_path / "s", source), kagent_home)
    assert result.verdict is Verdict.FORBIDDEN and "numpy" in result.reason


def test_incomplete_folder_is_refused(tmp_path):
    (tmp_path / "reference.py").write_text("")
    with pytest.raises(KagentError, match="no shapes.py"):
        resolve_task(str(tmp_path))


def test_cli_grades_a_folder_with_json_output(mega_task, tmp_path):
    solution = write_solution(tmp_path / "s", MEGA_SOLUTION.replace("{activation}", "torch.tanh"))
    out = tmp_path / "result.json"
    proc = subprocess.run([sys.executable, "-m", "kagent.agent.cli", "eval", str(mega_task.path), "--solution",
                           str(solution), "--device", "cpu", "--rounds", "2", "--json", "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    printed = json.loads(proc.stdout)
    assert printed["verdict"] == "pass" and printed["version"] == 1
    assert json.loads(out.read_text()) == printed
    wrong = write_solution(tmp_path / "w", MEGA_SOLUTION.replace("{activation}", "torch.sigmoid"))
    proc = subprocess.run([sys.executable, "-m", "kagent.agent.cli", "eval", str(mega_task.path), "--solution",
                           str(wrong), "--device", "cpu", "--check-only"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    assert "INCORRECT" in proc.stdout and "Traceback" not in proc.stdout + proc.stderr


# Decision margins: a reference may say how close a step's discrete choices came to a tie.
MARGIN_HOOK = """

def decision_margin(model):
    return model.last_margin


_step = Model.step


def _step_with_margin(self, hidden, state):
    # A stand-in for expert routing: tight on the step that finds 10 rows of memory, and
    # for inputs whose first value is small.
    rows = state[0]["memory"].shape[0]
    self.last_margin = 0.0 if rows == 10 else abs(float(hidden.float()[0]))
    return _step(self, hidden, state)


Model.step = _step_with_margin
"""


@pytest.fixture
def margin_task(mega_task):
    folder = mega_task.path
    (folder / "reference.py").write_text(MEGA_REFERENCE + MARGIN_HOOK)
    (folder / "problem.yaml").write_text(
        "correctness: {threshold: 0.99, seeds: [0], contexts: [8], smoke_contexts: [8], "
        "min_decision_margin: 0.5}\n")
    return resolve_task(str(folder))


def solution_wrong_when(condition: str) -> str:
    """The correct solution, except that it negates its output when ``condition`` holds."""
    return MEGA_SOLUTION.replace("{activation}", "torch.tanh").replace(
        "        x = hidden.float()\n", f"        wrong = {condition}\n        x = hidden.float()\n").replace(
        "        return x.to(torch.bfloat16), state", "        return (-x if wrong else x).to(torch.bfloat16), state")


def test_secret_seeds_are_drawn_clear_of_near_ties(margin_task, kagent_home, tmp_path):
    solution = write_solution(tmp_path / "s", solution_wrong_when("False"))
    result = run_eval(margin_task, solution, kagent_home, mode="check", hidden_seeds=6)
    assert result.verdict is Verdict.PASS, result.reason
    hidden = check_named(result, "hidden_seeds")
    assert len(hidden.data["seeds"]) == 6
    assert all(case["decision_margin"] >= 0.5 for case in hidden.data["cases"])
    assert check_named(result, "fixed_seeds").data["cases"][0]["decision_margin"] > 0


def test_chained_mismatch_at_a_near_tie_is_excused(margin_task, kagent_home, tmp_path):
    solution = write_solution(tmp_path / "s", solution_wrong_when("state[0]['memory'].shape[0] == 10"))
    result = run_eval(margin_task, solution, kagent_home, mode="check")
    assert result.verdict is Verdict.PASS, result.reason
    assert "steps [3] differ at a near-tie" in check_named(result, "chained_steps").reason


def test_chained_mismatch_away_from_ties_fails(margin_task, kagent_home, tmp_path):
    solution = write_solution(tmp_path / "s", solution_wrong_when("state[0]['memory'].shape[0] == 9"))
    result = run_eval(margin_task, solution, kagent_home, mode="check")
    assert result.verdict is Verdict.INCORRECT
    assert result.reason.startswith("chained_steps: ctx 8 step 2 of a chain")


def solution_wrong_from_second_time(rows: int) -> str:
    """The correct solution, except that it negates its output on a step that finds ``rows``
    rows of memory, from the second such step on: right in the validated chain, another
    answer in the timed chains that follow it from the same inputs."""
    return "import itertools\n_TIMES_SEEN = itertools.count()\n" + solution_wrong_when(
        f"state[0]['memory'].shape[0] == {rows} and next(_TIMES_SEEN) > 0")


def test_timed_chain_departing_after_a_near_tie_is_excused(margin_task, kagent_home, tmp_path):
    # ctx 8: step 3 finds 10 rows, where the reference's margin is 0: a near-tie.
    solution = write_solution(tmp_path / "s", solution_wrong_from_second_time(10))
    result = run_eval(margin_task, solution, kagent_home, contexts=[8])
    assert result.verdict is Verdict.PASS, result.reason
    timed = check_named(result, "timed_chain_ctx_8")
    assert timed.reason == ("2 timed chain(s) of 3 steps at ctx 8 repeat the validated chain (min cosine 1.00000); "
                            "2 of them depart from it at step 3 or later, after a near-tie of the reference's "
                            "routing at step 3: not counted from there")


def test_timed_chain_departing_before_a_near_tie_fails(margin_task, kagent_home, tmp_path):
    solution = write_solution(tmp_path / "s", solution_wrong_from_second_time(9))
    result = run_eval(margin_task, solution, kagent_home, contexts=[8])
    assert result.verdict is Verdict.INCORRECT
    assert result.reason.startswith("timed_chain_ctx_8: ctx 8 step 2: a timed chain gave another answer than the "
                                    "validated chain"), result.reason
