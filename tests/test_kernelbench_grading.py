"""KernelBench files graded as KernelBench grades them, and no cheaper than honest work.

Small problems written here in KernelBench's convention (class Model, get_inputs(),
get_init_inputs(); solutions define ModelNew), one per class of rule: the module's mode,
the tolerance by precision, the correctness trials, inputs left as they were, timed calls on
fresh inputs judged, and a problem too slow for its time limit.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from kagent.core.errors import KagentError
from kagent.sandbox import static_checks
from kagent.sandbox.harness import kernelbench
from kagent.sandbox.results import EvalResult, Verdict
from kagent.tasks import TaskRef, resolve_task

from conftest import check_named, run_eval, write_solution

# KernelBench's first five trial seeds, as its run_and_check_correctness draws them
# (torch.randint(0, 2**32 - 1) after torch.manual_seed(42)), written out as evidence.
KERNELBENCH_TRIAL_SEEDS = [734796314, 576165995, 2197670066, 839703249, 2584932063]


def problem(tmp_path: Path, name: str, source: str) -> TaskRef:
    path = tmp_path / "task" / f"{name}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)
    return resolve_task(str(path))


BATCHNORM = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.bn = nn.BatchNorm1d(features)

    def forward(self, x):
        return torch.relu(self.bn(x))


def get_inputs():
    return [torch.randn(64, 32) * 3 + 1]


def get_init_inputs():
    return [32]
"""

# The normalization written out: {stats} picks the batch's statistics (training mode) or the
# running ones (eval mode, or every BatchNorm removed at its initial statistics).
BATCHNORM_SOLUTION = """
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.bn = nn.BatchNorm1d(features)

    def forward(self, x):
        bn = self.bn
        {stats}
        return torch.relu((x - mean) / torch.sqrt(var + bn.eps) * bn.weight + bn.bias)
"""
BATCH_STATS = "mean, var = x.mean(0), x.var(0, unbiased=False)"
RUNNING_STATS = "mean, var = bn.running_mean, bn.running_var"


@pytest.mark.slow
def test_batchnorm_is_graded_in_training_mode_as_kernelbench_does(tmp_path, kagent_home):
    task = problem(tmp_path, "bn_relu", BATCHNORM)
    batch = write_solution(tmp_path / "batch", BATCHNORM_SOLUTION.replace("{stats}", BATCH_STATS))
    running = write_solution(tmp_path / "running", BATCHNORM_SOLUTION.replace("{stats}", RUNNING_STATS))
    passed = run_eval(task, batch, kagent_home, mode="check")
    assert passed.verdict is Verdict.PASS, passed.reason
    assert "training mode" in check_named(passed, "fixed_seeds").reason
    assert run_eval(task, running, kagent_home, mode="check").verdict is Verdict.INCORRECT
    # A flag away: eval mode, as kagent graded before. (That the batch's statistics then fail
    # follows: each solution's answer is the same in either mode, and the two differ.)
    assert run_eval(task, running, kagent_home, mode="check", eval_mode=True).verdict is Verdict.PASS


@pytest.mark.slow
def test_a_problem_that_wants_eval_mode_says_so(tmp_path, kagent_home):
    task = problem(tmp_path, "bn_relu_eval", BATCHNORM + "\nEVAL_MODE = True\n")
    running = write_solution(tmp_path / "running", BATCHNORM_SOLUTION.replace("{stats}", RUNNING_STATS))
    result = run_eval(task, running, kagent_home, mode="check")
    assert result.verdict is Verdict.PASS, result.reason
    assert "eval mode" in check_named(result, "fixed_seeds").reason


SCALE = """
import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x * 2.0


def get_inputs():
    return [torch.randn(256, 256){cast}]


def get_init_inputs():
    return []
"""
SCALE_SOLUTION = """
import torch


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return x * 2.0 + 1e-3
"""


@pytest.mark.slow
def test_tolerance_is_kernelbenchs_for_the_outputs_precision(tmp_path, kagent_home):
    solution = write_solution(tmp_path / "s", SCALE_SOLUTION)
    fp32 = run_eval(problem(tmp_path, "scale32", SCALE.replace("{cast}", "")), solution, kagent_home, mode="check")
    assert fp32.verdict is Verdict.INCORRECT
    assert "exceeds atol 0.0001 + rtol 0.0001" in fp32.reason, fp32.reason
    half = problem(tmp_path / "h", "scale16", SCALE.replace("{cast}", ".half()"))
    fp16 = run_eval(half, solution, kagent_home, mode="check")
    assert fp16.verdict is Verdict.PASS, fp16.reason
    assert "atol 0.01, rtol 0.01" in check_named(fp16, "fixed_seeds").reason
    # KernelBench's trial count, 5, unless asked otherwise (the next test asks).
    assert check_named(fp16, "fixed_seeds").data["seeds"] == KERNELBENCH_TRIAL_SEEDS


@pytest.mark.slow
def test_correctness_trials_are_kernelbenchs(tmp_path, kagent_home):
    # (The default, KernelBench's 5: the test above.)
    task = problem(tmp_path, "scale", SCALE.replace("{cast}", ""))
    honest = write_solution(tmp_path / "s", SCALE_SOLUTION.replace(" + 1e-3", ""))
    fewer = run_eval(task, honest, kagent_home, mode="check", correct_trials=2)
    assert fewer.verdict is Verdict.PASS, fewer.reason
    assert check_named(fewer, "fixed_seeds").data["seeds"] == KERNELBENCH_TRIAL_SEEDS[:2]


def test_trial_seeds_and_tolerances_as_kernelbench_computes_them():
    assert kernelbench.trial_seeds(5) == KERNELBENCH_TRIAL_SEEDS
    assert kernelbench.tolerance_for([torch.zeros(1)]) == 1e-4
    assert kernelbench.tolerance_for([torch.zeros(1), torch.zeros(1, dtype=torch.bfloat16)]) == 1e-2


SIGMOID = """
import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return {reference}


def get_inputs():
    return [torch.randn(128, 64)]


def get_init_inputs():
    return []
"""
IN_PLACE_SOLUTION = """
import torch


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return torch.sigmoid_(x)
"""


@pytest.mark.slow
def test_a_solution_that_writes_into_its_inputs_fails_with_that_reason(tmp_path, kagent_home):
    task = problem(tmp_path, "sigmoid", SIGMOID.replace("{reference}", "torch.sigmoid(x)"))
    result = run_eval(task, write_solution(tmp_path / "s", IN_PLACE_SOLUTION), kagent_home, mode="check")
    assert result.verdict is Verdict.INCORRECT
    assert "forward wrote into its input tensor(s) 0" in result.reason, result.reason


@pytest.mark.slow
def test_writing_into_the_inputs_is_allowed_where_the_reference_does(tmp_path, kagent_home):
    task = problem(tmp_path, "sigmoid_", SIGMOID.replace("{reference}", "x.sigmoid_()"))
    result = run_eval(task, write_solution(tmp_path / "s", IN_PLACE_SOLUTION), kagent_home)
    assert result.verdict is Verdict.PASS, result.reason


MATMUL = """
import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(128, 128), torch.randn(128, 128)]


def get_init_inputs():
    return []
"""

# Answers from a cache keyed on the inputs' sparse samples: right whenever an input comes
# again: 18.6x on the CPU where the timed calls repeated one input.
VALUE_CACHE = """
import torch


class ModelNew(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.answers = {}

    def forward(self, a, b):
        key = (tuple(a.reshape(-1)[::4099].tolist()), tuple(b.reshape(-1)[::4099].tolist()))
        if key not in self.answers:
            self.answers[key] = torch.matmul(a, b)
        return self.answers[key]
"""

# Honest for its first 12 calls (every check before the timing), then the last answer again.
STALE_AFTER_CHECKS = """
import torch


class ModelNew(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.calls, self.last = 0, None

    def forward(self, x):
        self.calls += 1
        if self.calls > 12 and self.last is not None:
            return self.last
        self.last = torch.sigmoid(x)
        return self.last
"""


@pytest.mark.slow
def test_a_cache_keyed_on_values_scores_at_most_its_honest_speed(tmp_path, kagent_home):
    task = problem(tmp_path, "matmul", MATMUL)
    # Blocks of 10 ms, many calls each, every call on an input set of its own.
    result = run_eval(task, write_solution(tmp_path / "s", VALUE_CACHE), kagent_home, min_request_ms=10.0, rounds=8)
    assert result.verdict is Verdict.PASS, result.reason
    timed = check_named(result, "timed_calls")
    assert "drawn fresh for each block" in timed.reason and "each set" not in timed.reason, timed.reason
    (timing,) = result.timings
    # (A call of the 128x128 product takes well under the quarter of a block that makes a block
    # one call, even on a loaded 2-core machine: at 256x256 one run there read 1 a block.)
    assert timing.candidate_block_steps > 1
    # Honest speed is 1x; the bound leaves room for a loaded 2-core machine (one input set a
    # block, as timed before, this cache scored 44.7x here).
    assert result.score < 3, [(t.baseline.median_ms, t.candidate.median_ms) for t in result.timings]


@pytest.mark.slow
def test_timed_calls_are_judged_against_the_baseline_on_the_same_inputs(tmp_path, kagent_home):
    task = problem(tmp_path, "sigmoid", SIGMOID.replace("{reference}", "torch.sigmoid(x)"))
    result = run_eval(task, write_solution(tmp_path / "s", STALE_AFTER_CHECKS), kagent_home)
    assert result.verdict is Verdict.INCORRECT
    assert re.match(
        r"timed_calls: timed block \d+, input set 1 \(drawn for this run\): output 0: max abs", result.reason
    ), result.reason


def test_timed_plan_gives_every_call_of_a_block_its_own_input_set_as_far_as_memory_allows():
    assert kernelbench.timed_plan(5.0, 1 << 20) == (1, 1)  # a slow call: one a block
    assert kernelbench.timed_plan(0.1, 1 << 20) == (100, 100)
    big = kernelbench.TIMED_SETS_BYTES // 4
    assert kernelbench.timed_plan(0.1, big) == (100, 4)


SLOW = """
import time

import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        time.sleep(0.5)
        return x + 1


def get_inputs():
    return [torch.randn(8)]


def get_init_inputs():
    return []
"""


@pytest.mark.slow
def test_a_problem_too_slow_for_its_time_limit_says_so_before_it_starts(tmp_path, kagent_home):
    task = problem(tmp_path, "slow", SLOW)
    solution = write_solution(tmp_path / "s", SLOW.replace("class Model", "class ModelNew"))
    with pytest.raises(KagentError, match=r"a call of the reference takes \d+ ms on cpu.*inputs about [\d.]+x smaller"):
        run_eval(task, solution, kagent_home, timeout_s=20)


# Copies the task's file beside itself at run time and builds on it: the file is the grader's.
COPIES_THE_TASK = """
import glob
import os
import shutil

HERE = os.path.dirname(os.path.abspath(__file__))
for found in glob.glob(os.path.join(HERE, "..", "task", "*.py")):
    shutil.copy(found, os.path.join(HERE, "task_copy.py"))

import task_copy


class ModelNew(task_copy.Model):
    pass
"""

# Puts the task's folder on the path and imports the task by its own name.
IMPORTS_THE_TASK = """
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "task"))

import sigmoid


class ModelNew(sigmoid.Model):
    pass
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "source, rule", [(COPIES_THE_TASK, "module_made_at_run_time"), (IMPORTS_THE_TASK, "forbidden_import")]
)
def test_the_tasks_own_file_is_off_limits_at_run_time(tmp_path, kagent_home, source, rule):
    task = problem(tmp_path, "sigmoid", SIGMOID.replace("{reference}", "torch.sigmoid(x)"))
    result = run_eval(task, write_solution(tmp_path / "s", source), kagent_home, mode="check")
    assert result.verdict is Verdict.FORBIDDEN, result.reason
    assert [f.rule for f in result.static_findings] == [rule]


def test_an_import_guarded_as_optional_or_installed_is_no_module_made_at_run_time(tmp_path):
    solution = write_solution(
        tmp_path,
        "import torch\ntry:\n    import surely_not_installed_here\nexcept ImportError:\n    pass\n"
        "import made_later_by_the_solution\n",
    )
    assert [(f.rule, f.line) for f in static_checks.scan(solution)] == [("module_made_at_run_time", 6)]


def test_a_folder_of_problem_files_points_to_sweep(tmp_path):
    problem(tmp_path, "sigmoid", SIGMOID.replace("{reference}", "torch.sigmoid(x)"))
    problem(tmp_path, "matmul", MATMUL)
    with pytest.raises(KagentError, match="a folder of 2 KernelBench problem files") as raised:
        resolve_task(str(tmp_path / "task"))
    assert "kagent sweep" in raised.value.hint and "kagent eval" in raised.value.hint


def test_kernelbench_results_speak_of_calls(tmp_path):
    result = EvalResult(
        task="t",
        task_kind="kernelbench",
        mode="eval",
        scale="smoke",
        device="cpu",
        verdict=Verdict.PASS,
        reason="r",
        started_at="2026-12-07T00:00:00Z",
        wall_seconds=1.0,
    )
    assert (result.step_name, result.rate_unit) == ("call", "calls/s")
    assert (result.model_copy(update={"task_kind": "mega"}).rate_unit) == "tok/s"
