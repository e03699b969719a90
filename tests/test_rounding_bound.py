"""The flagship's rounding bound on its routing (reference.decision_rounding, issue 44).

A mismatch at a near-tie of the expert routing is excused only where the reference that took
the runner-up explains it, and only where the tie is close enough that bf16 rounding could
have tipped it: below the bound the reference derives from the step's own magnitudes, no
longer anywhere under the task's flat 6% (max_explained_margin). These tests hold the bound
to that: positive, far below 6% at smoke scale, one per decision margin, and an exact
runner-up step above it fails where the same step below it passes.
"""

from __future__ import annotations

import math

import pytest
import torch

from kagent.sandbox.harness import decode_task, step_checker
from kagent.sandbox.harness.loading import DiskCache, load_module
from kagent.tasks import resolve_task

from conftest import KIMI

# Smoke scale, seed 0, ctx 16: layer 1's routing is 5.3% from a tie, under the 6% of
# max_explained_margin but above what rounding can move there (about 1%); layer 2's is
# 0.55% from one, under its bound.
SEED, CONTEXT = 0, 16
ABOVE_THE_BOUND, BELOW_THE_BOUND = 1, 2


@pytest.fixture(scope="module")
def flagship():
    task = decode_task.Task(resolve_task(KIMI).path, "smoke", torch.device("cpu"))
    with torch.no_grad():
        reference, _ = decode_task.build_reference(task, DiskCache(None))
    return task, reference


def _step(task, reference, seed: int, context_len: int, runner_up: int | None = None):
    hidden, state = task.init_token(seed), task.init_state(context_len, seed)
    expected_hidden, expected_state, margin = decode_task.reference_case(task, reference, hidden, state)
    margins = task.decision_margins(reference)
    bounds = task.decision_rounding(reference) if task.decision_rounding else None
    got = (expected_hidden, expected_state)
    if runner_up is not None:
        with task.runner_up(reference, runner_up):
            got = decode_task.reference_step(reference, hidden, state)
    judged = step_checker.StepChecker(task, reference).judge(
        hidden, state, *got, expected_hidden, expected_state, margin
    )
    return margins, bounds, judged


@torch.no_grad()
def test_the_bound_is_one_positive_margin_per_decision_far_below_the_old_excuse(flagship):
    task, reference = flagship
    assert task.decision_rounding is not None
    for seed in range(4):
        for context_len in task.check_contexts:
            margins, bounds, _ = _step(task, reference, seed, context_len)
            assert len(bounds) == len(margins) == len(task.cfg.pattern)
            # At least the logits' own rounding, and well under a third of the flat 6%.
            assert all(2.0**-8 * 0.5 < b < task.explained_margin / 3 for b in bounds), bounds


@torch.no_grad()
def test_the_bound_grows_with_the_roundings_the_router_input_carries(flagship):
    task, reference = flagship
    _step(task, reference, SEED, CONTEXT)
    moe = reference.blocks[0].moe
    few, many = (float(task.reference.routing_rounding(moe, n)) for n in (1, 16))
    assert 0 < few < many < 1


@torch.no_grad()
def test_an_exact_runner_up_above_the_bound_fails_where_one_below_it_passes(flagship):
    task, reference = flagship
    margins, bounds, honest = _step(task, reference, SEED, CONTEXT)
    assert honest["passed"] and "excused" not in honest
    assert bounds[ABOVE_THE_BOUND] < margins[ABOVE_THE_BOUND] < task.explained_margin
    assert margins[BELOW_THE_BOUND] < bounds[BELOW_THE_BOUND]

    *_, made = _step(task, reference, SEED, CONTEXT, runner_up=ABOVE_THE_BOUND)
    assert not made["passed"] and "excused" not in made, made
    # The reason says why the runner-up there is no excuse: rounding cannot move a tie that far.
    beyond = made["beyond_rounding"]
    assert beyond["decision"] == ABOVE_THE_BOUND and beyond["rounding_bound"] == pytest.approx(bounds[ABOVE_THE_BOUND])
    reason = step_checker.fail_reason("seed 0 ctx 16", made, task.threshold, min(margins), task.explained_margin)
    assert f"at decision {ABOVE_THE_BOUND} it is {margins[ABOVE_THE_BOUND]:.2%} from a tie" in reason, reason
    assert f"more than rounding its inputs to bf16 can move there ({bounds[ABOVE_THE_BOUND]:.2%})" in reason
    *_, tipped = _step(task, reference, SEED, CONTEXT, runner_up=BELOW_THE_BOUND)
    assert tipped["passed"]
    assert tipped["excused"]["decision"] == BELOW_THE_BOUND
    assert tipped["excused"]["rounding_bound"] == pytest.approx(bounds[BELOW_THE_BOUND])


@torch.no_grad()
def test_without_the_bound_the_flat_excuse_would_pass_the_made_tie(flagship, monkeypatch):
    # The check above fails for the bound's reason alone: with a bound above the margin (or
    # none, the flat 6% of before) the same step is excused.
    task, reference = flagship
    monkeypatch.setattr(task, "decision_rounding", lambda model: [1.0] * len(model.blocks))
    *_, made = _step(task, reference, SEED, CONTEXT, runner_up=ABOVE_THE_BOUND)
    assert made["passed"] and made["excused"]["decision"] == ABOVE_THE_BOUND
    monkeypatch.setattr(task, "decision_rounding", None)
    *_, made = _step(task, reference, SEED, CONTEXT, runner_up=ABOVE_THE_BOUND)
    assert made["passed"] and "rounding_bound" not in made["excused"]


@torch.no_grad()
def test_the_bf16_baseline_stays_well_inside_the_bound(flagship, monkeypatch):
    """The task's own bf16 baseline, from the same inputs: what its rounding moves of each
    boundary's logit gap stays under half of what the bound allows."""
    task, reference = flagship
    monkeypatch.syspath_prepend(str(task.dir))  # the baseline imports its reference by name
    baseline_module = load_module("_kagent_test_kimi_baseline", task.dir / "baseline.py")
    baseline = baseline_module.Model(task.cfg)
    baseline.load_state_dict(reference.state_dict())
    inputs: dict[str, list] = {"reference": [], "baseline": []}
    for name, cls in (("reference", task.reference.MoE), ("baseline", baseline_module.MoE)):
        # Each router's input, recorded as the step begins.
        monkeypatch.setattr(
            cls, "step", lambda self, x, _step=cls.step, _name=name: inputs[_name].append(x) or _step(self, x)
        )
    for seed in range(6):
        inputs["reference"].clear()
        inputs["baseline"].clear()
        hidden, state = task.init_token(seed), task.init_state(CONTEXT, seed)
        decode_task.reference_step(reference, hidden, state)
        bounds = task.decision_rounding(reference)
        baseline.step(hidden.clone(), decode_task.clone_state(state))
        for block, bound, x, y in zip(reference.blocks, bounds, inputs["reference"], inputs["baseline"], strict=True):
            _, _, last, first_out = block.moe.last_boundary
            weight = block.moe.router.weight.float()
            moved = abs(float((y.float() - x.float()) @ (weight[last] - weight[first_out])))
            assert moved < 0.5 * -math.log1p(-bound), (seed, moved, bound)
