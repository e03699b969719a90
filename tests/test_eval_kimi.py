"""`kagent eval` on the flagship task at smoke scale: honest solutions pass, broken or
cheating ones fail with the right verdict and a reason naming the check."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
from pathlib import Path

import pytest
import torch
from rich.console import Console

from kagent.agent.cli.views import print_result
from kagent.sandbox import bundle, containment
from kagent.sandbox.harness.exchange import decode, encode
from kagent.sandbox.harness.loading import load_module
from kagent.sandbox.results import Verdict
from kagent.tasks import KINDS

from conftest import check_named, reference_solution, run_eval, write_solution

REDTEAM = Path(__file__).resolve().parent / "redteam"


def _corpus(name: str) -> str:
    """A patch from the red-team corpus, so each cheat is written once."""
    return (REDTEAM / f"{name}.py").read_text()


def _block_variant(
    attn_input: str = "self.norm(x, self.attn_norm, EPS)",
    attn_residual: str = "x + ",
    moe_input: str = "self.norm(h, self.moe_norm, EPS)",
    moe_residual: str = "h + ",
) -> str:
    """A patch replacing Block.step with the reference's, one piece of it changed."""
    return f"""
def _block_step(self, x, st):
    h = {attn_residual}self.attn.step({attn_input}, st)
    return {moe_residual}self.moe.step({moe_input})
Block.step = _block_step
"""


# Each case: a patch appended to a copy of the reference, the verdict it must get, and the
# check whose failure must be the reason.
BROKEN = {
    "drops_the_moe": (
        """
class Model(Model):
    def step(self, hidden, state):
        for block in self.blocks:
            block.moe.step = lambda x: torch.zeros_like(x)
        return super().step(hidden, state)
""",
        Verdict.INCORRECT,
        "fixed_seeds",
    ),
    "forgets_routed_scaling": (
        """
_moe_step = MoE.step
def _unscaled(self, x):
    return (_moe_step(self, x).float() / self.cfg.routed_scaling).to(torch.bfloat16)
MoE.step = _unscaled
""",
        Verdict.INCORRECT,
        "fixed_seeds",
    ),
    "k_rope_not_appended": (_corpus("k_rope_not_appended"), Verdict.INCORRECT, "fixed_seeds"),
    "conv_window_not_shifted": (_corpus("conv_window_not_shifted"), Verdict.INCORRECT, "fixed_seeds"),
    # One part of the step's math broken at a time (PARTS below says which part each covers).
    "skips_the_conv": (
        """
def _no_conv(self, val, prev, j):
    # The window still moves on, but the projection goes on without the convolution.
    return val, torch.cat([prev, val[None]])[1:]
KDA.short_conv = _no_conv
""",
        Verdict.INCORRECT,
        "fixed_seeds",
    ),
    "skips_the_delta_rule_write": (
        """
class Model(Model):
    def __init__(self, cfg):
        super().__init__(cfg)
        for block in self.blocks:
            if block.kind == "K":
                # beta = sigmoid(-inf) = 0: the state only decays, nothing is written into it.
                block.attn.beta_proj.forward = lambda x: torch.full((cfg.kda_heads,), -torch.inf, dtype=x.dtype,
                                                                    device=x.device)
""",
        Verdict.INCORRECT,
        "fixed_seeds",
    ),
    "skips_the_decay": (
        """
_kda_step = KDA.step
def _no_decay(self, x, st):
    # g = -softplus(...) = 0: the state is not decayed before the write.
    softplus, F.softplus = F.softplus, torch.zeros_like
    try:
        return _kda_step(self, x, st)
    finally:
        F.softplus = softplus
KDA.step = _no_decay
""",
        Verdict.INCORRECT,
        "fixed_seeds",
    ),
    "hands_on_the_old_kda_state": (
        """
_kda_step = KDA.step
def _old_state(self, x, st):
    # The output from the updated state, but the state handed on is the one that came in.
    S = st["S"]
    out = _kda_step(self, x, st)
    st["S"] = S
    return out
KDA.step = _old_state
""",
        Verdict.INCORRECT,
        "fixed_seeds",
    ),
    "skips_the_cache_attention": (
        """
_mla_step = MLA.step
def _no_attention(self, x, st):
    # The cache is still appended to, but nothing read from it reaches the output.
    return torch.zeros_like(_mla_step(self, x, st))
MLA.step = _no_attention
""",
        Verdict.INCORRECT,
        "fixed_seeds",
    ),
    "attends_to_the_newest_8_rows": (
        """
_mla_step, _softmax = MLA.step, torch.softmax
def _newest_rows_only(scores, dim):
    # MLA.step's one softmax, over cache positions, with all but the newest 8 rows left out.
    kept = torch.full_like(scores, -torch.inf)
    kept[-8:] = scores[-8:]
    return _softmax(kept, dim=dim)
def _windowed(self, x, st):
    torch.softmax = _newest_rows_only
    try:
        return _mla_step(self, x, st)
    finally:
        torch.softmax = _softmax
MLA.step = _windowed
""",
        Verdict.INCORRECT,
        "fixed_seeds",
    ),
    "ropes_at_the_next_position": (
        """
_rope_cos_sin = rope_cos_sin
def rope_cos_sin(pos, dim, theta, device):
    # The position after the new row is appended rather than before.
    return _rope_cos_sin(pos + 1, dim, theta, device)
""",
        Verdict.INCORRECT,
        "fixed_seeds",
    ),
    "routes_to_the_next_experts": (
        """
_ffn = MoE.ffn
def _next_expert(x, gate, up, down, e):
    # Each chosen expert's index off by one (the shared expert, the only one of its kind, stays).
    return _ffn(x, gate, up, down, (e + 1) % gate.n)
MoE.ffn = staticmethod(_next_expert)
""",
        Verdict.INCORRECT,
        "fixed_seeds",
    ),
    "swaps_gate_and_up": (
        """
_ffn = MoE.ffn
MoE.ffn = staticmethod(lambda x, gate, up, down, e: _ffn(x, up, gate, down, e))
""",
        Verdict.INCORRECT,
        "fixed_seeds",
    ),
    "drops_the_shared_expert": (
        """
import dataclasses
class Model(Model):
    def __init__(self, cfg):
        super().__init__(cfg)
        for block in self.blocks:
            block.moe.cfg = dataclasses.replace(cfg, n_shared=0)  # MoE.step adds n_shared shared experts
""",
        Verdict.INCORRECT,
        "fixed_seeds",
    ),
    "skips_the_attention_norm": (_block_variant(attn_input="x"), Verdict.INCORRECT, "fixed_seeds"),
    "skips_the_moe_norm": (_block_variant(moe_input="h"), Verdict.INCORRECT, "fixed_seeds"),
    "drops_the_attention_residual": (_block_variant(attn_residual=""), Verdict.INCORRECT, "fixed_seeds"),
    "drops_the_moe_residual": (_block_variant(moe_residual=""), Verdict.INCORRECT, "fixed_seeds"),
    "nan_in_output": (
        """
class Model(Model):
    def step(self, hidden, state):
        out, state = super().step(hidden, state)
        out = out.clone()
        out[3] = float("nan")
        return out, state
""",
        Verdict.INCORRECT,
        "fixed_seeds",
    ),
    "caches_by_pointer": (_corpus("cache_by_pointer"), Verdict.INCORRECT, "overwrite_in_place"),
    "caches_by_id": (_corpus("cache_by_id"), Verdict.INCORRECT, "overwrite_in_place"),
    "skips_moe_on_chained_steps": (_corpus("skips_work_on_chained_steps"), Verdict.INCORRECT, "chained_steps"),
    "raises_in_step": (
        """
class Model(Model):
    def step(self, hidden, state):
        raise RuntimeError("kernel launch failed: invalid configuration")
""",
        Verdict.ERROR,
        "fixed_seeds",
    ),
    "wrong_output_shape": (
        """
class Model(Model):
    def step(self, hidden, state):
        out, state = super().step(hidden, state)
        return out[:-1], state
""",
        Verdict.ERROR,
        "fixed_seeds",
    ),
    "wrong_output_dtype": (
        """
class Model(Model):
    def step(self, hidden, state):
        out, state = super().step(hidden, state)
        return out.float(), state
""",
        Verdict.ERROR,
        "fixed_seeds",
    ),
    "cannot_load_weights": (
        """
class Model(torch.nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(3))
""",
        Verdict.ERROR,
        "load",
    ),
}


# Every part of the step's math, and the variants above broken in that part alone: each must
# fail (docs/evaluation.md, "Cases that cover all of the math", has this table with the checks
# that catch them).
PARTS = {
    "KDA short conv": ["skips_the_conv", "conv_window_not_shifted"],
    "KDA state update": ["skips_the_delta_rule_write", "skips_the_decay", "hands_on_the_old_kda_state"],
    "MLA attention over the cache": ["skips_the_cache_attention", "attends_to_the_newest_8_rows"],
    "MLA cache append and RoPE": ["k_rope_not_appended", "ropes_at_the_next_position"],
    "router": ["routes_to_the_next_experts", "forgets_routed_scaling"],
    "routed experts": ["swaps_gate_and_up", "drops_the_moe"],
    "shared expert": ["drops_the_shared_expert"],
    "norms": ["skips_the_attention_norm", "skips_the_moe_norm"],
    "residual": ["drops_the_attention_residual", "drops_the_moe_residual"],
}


def test_every_part_of_the_math_has_a_broken_variant():
    assert all(PARTS.values()) and {n for names in PARTS.values() for n in names} <= set(BROKEN)


# Secret seeds for an evaluation whose test does not count them: one of each kind at each check
# context (secret_case_kinds), so the determinism and overwrite checks have the cases they use.
FEW_SECRET = 4
# The variants broken in one part of the math fail the fixed seeds' single steps: judged here, in
# this process, as the referee judges them (test_each_part_broken_alone_fails_the_fixed_seeds).
# Every other variant fails elsewhere in an evaluation, or fails to run, and is evaluated whole.
IN_ONE_PART = sorted({name for names in PARTS.values() for name in names})


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(set(BROKEN) - set(IN_ONE_PART)))
def test_broken_solution_is_caught_by_the_right_check(name, kimi, kagent_home, tmp_path):
    patch, verdict, check = BROKEN[name]
    solution = reference_solution(kimi, tmp_path, patch)
    result = run_eval(kimi, solution, kagent_home, mode="check", hidden_seeds=FEW_SECRET)
    assert result.verdict is verdict, result.reason
    assert result.reason.startswith(check + ":"), result.reason
    assert check_named(result, check).status in ("fail", "error")
    assert result.score is None


def test_an_import_of_a_module_that_is_nowhere_is_refused_with_its_name(kimi, kagent_home, tmp_path):
    """Neither in the solution's folder nor installed: refused before the harness runs, as a
    module made at run time would be, with the import named."""
    solution = reference_solution(kimi, tmp_path, "\nimport a_module_that_does_not_exist\n")
    result = run_eval(kimi, solution, kagent_home, mode="check")
    assert result.verdict is Verdict.FORBIDDEN and result.score is None
    assert result.reason.startswith("module_made_at_run_time at solution.py:"), result.reason
    assert "import a_module_that_does_not_exist" in result.reason


def public_fields_only(cfg):
    """The config as the solution's process gets it: rebuilt from the exchange's encoding."""
    return decode(encode(cfg, lambda tensor: None), lambda slot: None)


@pytest.fixture(scope="module")
def fixed_seed_cases(kimi):
    """The referee's view of the fixed seeds at smoke scale, built in this process: the task,
    its reference, the step checker, and each case (label, inputs, expected outputs), in the
    evaluation's order (mega.py's _fixed_cases)."""
    from kagent.sandbox.harness import decode_task
    from kagent.sandbox.harness.loading import DiskCache
    from kagent.sandbox.harness.step_checker import StepChecker, case_label

    task = decode_task.Task(kimi.path, "smoke", torch.device("cpu"))
    cases = []
    with torch.no_grad():
        reference, _ = decode_task.build_reference(task, DiskCache(None))
        for context_len in task.check_contexts:
            for seed in task.check_seeds:
                for salient in (False, True):
                    inputs = decode_task.case_inputs(task, reference, context_len, seed, salient)
                    expected = decode_task.reference_case(task, reference, *inputs)
                    cases.append((case_label(f"seed {seed}", context_len, salient), inputs, expected))
    return task, reference, StepChecker(task, reference), cases


def judged_fixed_seeds(fixed_seed_cases, source: Path) -> dict[str, bool]:
    """Whether each fixed-seed case passes for the solution in ``source``: built as its process
    builds it (building.build, a public-fields-only config, the reference's weights), a fresh
    step on copies of each case's inputs, judged by the evaluation's StepChecker."""
    from kagent.sandbox.harness import building
    from kagent.sandbox.harness.decode_task import clone_state

    task, reference, checker, cases = fixed_seed_cases
    spec = building.mega_spec("solution", task.dir, source, task.has_baseline, KINDS["mega"].model_class)
    module = load_module(f"_kagent_test_broken_{source.parent.name}", source)
    passed = {}
    with torch.no_grad():
        model = building.build(spec, [public_fields_only(task.cfg)], task.device, reference.state_dict(), module=module)
        for label, (hidden_in, state_in), (hidden, state, margin) in cases:
            got_hidden, got_state = model.step(hidden_in.clone(), clone_state(state_in))
            result = checker.judge(hidden_in, state_in, got_hidden, list(got_state), hidden, state, margin)
            passed[label] = result["passed"]
    return passed


@pytest.mark.parametrize("name", IN_ONE_PART)
def test_each_part_broken_alone_fails_the_fixed_seeds(name, kimi, fixed_seed_cases, tmp_path):
    """What the evaluation's fixed_seeds check decides for each variant, in this process: at
    least one case fails. That such a failure is an INCORRECT verdict with the check's reason is
    the next test's (a whole evaluation of one of them, its cases judged as here)."""
    patch, verdict, check = BROKEN[name]
    assert (verdict, check) == (Verdict.INCORRECT, "fixed_seeds")
    passed = judged_fixed_seeds(fixed_seed_cases, reference_solution(kimi, tmp_path / name, patch))
    assert len(passed) == 12 and not all(passed.values()), passed


def test_the_reference_itself_passes_every_fixed_seed_as_judged_here(kimi, fixed_seed_cases, tmp_path):
    """The judgment above can fail: the unbroken copy passes every case."""
    assert all(judged_fixed_seeds(fixed_seed_cases, reference_solution(kimi, tmp_path / "honest")).values())


@pytest.mark.slow
def test_the_cache_attention_is_caught_on_the_salient_state(kimi, kagent_home, fixed_seed_cases, tmp_path):
    # From init_state's draw the attention's share of the output rounds away (every cache row
    # scores about the same and the values average out): those cases pass without it, and the
    # cases from the reference's salient_state, one per fixed seed, must fail. One variant
    # evaluated whole, its cases as the judgment in this process has them; the other judged here.
    salient = [label for label, _, _ in fixed_seed_cases[3] if label.endswith(" salient state")]
    assert len(salient) == 6
    name = "skips_the_cache_attention"
    solution = reference_solution(kimi, tmp_path / name, BROKEN[name][0])
    result = run_eval(kimi, solution, kagent_home, mode="check", hidden_seeds=FEW_SECRET)
    assert result.verdict is Verdict.INCORRECT and result.score is None, result.reason
    assert result.reason.startswith("fixed_seeds: 6 of 12 cases fail"), result.reason
    fixed = check_named(result, "fixed_seeds")
    assert fixed.status == "fail"
    evaluated = {c["case"]: c["passed"] for c in fixed.data["cases"]}
    assert evaluated == judged_fixed_seeds(fixed_seed_cases, solution)
    assert [label for label, ok in evaluated.items() if not ok] == salient
    name = "attends_to_the_newest_8_rows"
    judged = judged_fixed_seeds(fixed_seed_cases, reference_solution(kimi, tmp_path / name, BROKEN[name][0]))
    assert [label for label, ok in judged.items() if not ok] == salient


@pytest.fixture(scope="module")
def smoke_reference(kimi):
    """The flagship's reference module and its smoke-scale model, in this process."""
    shapes = load_module("_kagent_test_kimi_shapes", kimi.path / "shapes.py")
    reference = load_module("_kagent_test_kimi_reference", kimi.path / "reference.py")
    cfg = reference.build_config(shapes.SMOKE_SHAPES[0])
    with torch.no_grad():
        yield reference, reference.Model(cfg).eval(), cfg


def _copy(state):
    return [{name: t.clone() for name, t in layer.items()} for layer in state]


def test_salient_state_scales_the_kda_states_and_plants_rows_the_query_attends_to(smoke_reference, monkeypatch):
    reference, model, cfg = smoke_reference
    hidden, drawn = reference.init_token(cfg, 0, device="cpu"), reference.init_state(cfg, 32, 0, device="cpu")
    kept = _copy(drawn)
    salient = reference.salient_state(model, hidden, drawn)
    assert all(
        torch.equal(a, b)
        for layer, copy in zip(drawn, kept, strict=True)
        for a, b in zip(layer.values(), copy.values(), strict=True)
    )
    for layer, original in zip(salient[:3], drawn[:3], strict=True):
        # Each KDA state scaled as a whole (so that the step's write weighs as much as what it
        # keeps); the convolution windows as drawn.
        ratio = layer["S"] / original["S"]
        assert torch.allclose(ratio, ratio.flatten()[0]) and float(ratio.flatten()[0]) < 0.1
        assert all(torch.equal(layer[name], original[name]) for name in ("cq", "ck", "cv"))
    planted = [0, 10, 21, 31]  # spread over the 32 rows, the oldest and the newest among them
    for name in ("c_kv", "k_rope"):
        changed = (salient[3][name] != drawn[3][name]).any(dim=1).nonzero().flatten().tolist()
        assert changed == planted, name
    weights = []
    softmax = torch.softmax
    monkeypatch.setattr(torch, "softmax", lambda t, dim: weights.append((dim, softmax(t, dim=dim))) or weights[-1][1])
    model.step(hidden.clone(), _copy(salient))
    attention = next(p for dim, p in weights if dim == 0)  # MLA's, over cache positions (rows, heads)
    assert torch.all(attention[planted].sum(0) > 0.7) and torch.all(attention[planted] > 0.1)


def test_runner_up_takes_one_other_expert_at_that_layer_only(smoke_reference, monkeypatch):
    reference, model, cfg = smoke_reference
    hidden, state = reference.init_token(cfg, 0, device="cpu"), reference.init_state(cfg, 16, 0, device="cpu")
    chosen = []
    ffn = reference.MoE.ffn
    monkeypatch.setattr(
        reference.MoE,
        "ffn",
        staticmethod(lambda x, gate, up, down, e: chosen.append((gate.n, e)) or ffn(x, gate, up, down, e)),
    )

    def routed_experts(**runner_up):
        chosen.clear()
        if runner_up:
            with reference.runner_up(model, runner_up["at"]):
                out, _ = model.step(hidden.clone(), _copy(state))
        else:
            out, _ = model.step(hidden.clone(), _copy(state))
        routed = [int(e) for n, experts in chosen if n == cfg.n_experts for e in experts]
        return out, [set(routed[i : i + cfg.n_active]) for i in range(0, len(routed), cfg.n_active)]

    expected, per_layer = routed_experts()
    swapped, swapped_per_layer = routed_experts(at=2)
    assert swapped_per_layer[:2] == per_layer[:2]
    assert len(swapped_per_layer[2] - per_layer[2]) == 1 and len(per_layer[2] - swapped_per_layer[2]) == 1
    assert not torch.equal(swapped, expected)
    assert torch.equal(routed_experts()[0], expected)  # taken back on leaving


# Imports a helper from its own folder, and fails if it can read the keys honest_check sets.
HONEST_PATCH = """
from helpers import SCALE
assert SCALE == 1.0
import os
_leaked = sorted(k for k in os.environ if k in ("ANTHROPIC_API_KEY", "MY_SERVICE_TOKEN"))
assert not _leaked, f"the solution can read {_leaked}"
"""


@pytest.fixture(scope="module")
def honest_check(kimi, kagent_home, tmp_path_factory):
    """One check of an honest solution with 8 secret seeds, which the tests below read each an
    aspect of: a copy of the reference that imports a helper from its folder and asserts that it
    cannot see the API keys set in the environment that evaluates it. (Module-scoped, so it sets
    what the autouse _isolated_env sets for a test itself.)"""
    folder = tmp_path_factory.mktemp("honest")
    (folder / "helpers.py").write_text("SCALE = 1.0\n")
    solution = reference_solution(kimi, folder, HONEST_PATCH)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("KAGENT_HOME", str(kagent_home))
        env.setenv("KAGENT_RUNS", str(folder / "runs"))
        env.delenv("KAGENT_DEBUG", raising=False)
        env.setenv("ANTHROPIC_API_KEY", "sk-ant-secret")
        env.setenv("MY_SERVICE_TOKEN", "secret")
        return solution, run_eval(kimi, solution, kagent_home, mode="check", hidden_seeds=8)


@pytest.mark.slow
def test_the_solution_imports_its_helpers_and_does_not_see_api_keys(honest_check):
    _, result = honest_check
    assert result.verdict is Verdict.PASS, result.reason


@pytest.mark.slow
def test_secret_seeds_start_from_both_kinds_of_state_at_every_context(honest_check):
    _, result = honest_check
    assert result.verdict is Verdict.PASS, result.reason
    labels = [c["case"] for c in check_named(result, "hidden_seeds").data["cases"]]
    kinds = {(label.split(" ctx ")[1].split()[0], label.endswith(" salient state")) for label in labels}
    assert kinds == {(ctx, salient) for ctx in ("16", "32") for salient in (False, True)}, labels


# Near-ties of the routing. At smoke scale every fixed seed sits on one (the least margin of
# the four layers' routings is 0.5-1.5%, below min_decision_margin's 2%).
TAKES_THE_RUNNER_UP = """
class Model(Model):
    def step(self, hidden, state):
        # A kernel whose rounding tips the routing's first near-tie the other way: the
        # reference's step, with the runner-up taken at the first decision within 2% of a tie
        # and close enough to one that rounding can tip it (decision_rounding).
        super().step(hidden.clone(), [{k: v.clone() for k, v in layer.items()} for layer in state])
        margins, bounds = decision_margins(self), decision_rounding(self)
        tied = [i for i, margin in enumerate(margins) if margin < min(0.02, bounds[i])]
        if not tied:
            return super().step(hidden, state)
        with runner_up(self, tied[0]):
            return super().step(hidden, state)
"""

RETURNS_ITS_INPUT_AT_NEAR_TIES = """
class Model(Model):
    def step(self, hidden, state):
        out, state = super().step(hidden.clone(), state)
        # At a near-tie of the routing the hidden goes back as it came in (the state is right).
        return (hidden.clone() if decision_margin(self) < 0.02 else out), state
"""


@pytest.mark.slow
def test_fixed_seeds_at_a_near_tie_are_reported_and_the_runner_up_excused(kimi, kagent_home, tmp_path):
    result = run_eval(
        kimi,
        reference_solution(kimi, tmp_path, TAKES_THE_RUNNER_UP),
        kagent_home,
        mode="check",
        hidden_seeds=FEW_SECRET,
    )
    assert result.verdict is Verdict.PASS, result.reason
    fixed = check_named(result, "fixed_seeds")
    near = [c for c in fixed.data["cases"] if c["near_tie"]]
    assert fixed.data["near_ties"] == [c["case"] for c in near] and len(near) == len(fixed.data["cases"])
    assert all(c["decision_margin"] < 0.02 for c in near)
    excused = [c for c in near if "excused" in c]
    assert excused and all(c["excused"]["margin"] < 0.02 for c in excused)
    assert "at a near-tie of the reference's routing (margin below 2%): seed 0 ctx 16 (" in fixed.reason
    assert (
        f"{excused[0]['case']} ({excused[0]['decision_margin']:.2%}, matches the reference that took the "
        "runner-up)" in fixed.reason
    )


@pytest.mark.slow
def test_a_step_that_returns_its_input_at_a_near_tie_fails(kimi, kagent_home, tmp_path):
    result = run_eval(
        kimi,
        reference_solution(kimi, tmp_path, RETURNS_ITS_INPUT_AT_NEAR_TIES),
        kagent_home,
        mode="check",
        hidden_seeds=FEW_SECRET,
    )
    assert result.verdict is Verdict.INCORRECT, result.reason
    assert re.match(r"fixed_seeds: (\d+) of \1 cases fail", result.reason), result.reason
    assert "does not match the reference that took the runner-up either" in result.reason


@pytest.mark.slow
def test_reference_as_solution_passes_and_is_timed(kimi, kagent_home, tmp_path):
    result = run_eval(kimi, reference_solution(kimi, tmp_path), kagent_home)
    assert result.verdict is Verdict.PASS, result.reason
    names = [c.name for c in result.checks]
    # One chain validated step by step per timed context, then the timed chains that repeat it.
    assert names == [
        "load",
        "fixed_seeds",
        "hidden_seeds",
        "overwrite_in_place",
        "chained_steps",
        "chained_steps",
        "chained_steps",
        "timed_chain_ctx_16",
        "timed_chain_ctx_32",
        "timed_chain_ctx_64",
    ]
    assert len(result.hidden_seeds) == KINDS["mega"].hidden_seeds
    assert all(s >= 1000 for s in result.hidden_seeds)
    # On the CPU the reference repeats itself bit for bit, and the result view says so.
    assert result.determinism.bitwise_equal and result.determinism.max_abs_diff == 0.0
    assert "determinism: two calls on identical inputs (hidden seed #1 ctx 16) are bitwise equal" in shown(result)
    assert [t.context_len for t in result.timings] == [16, 32, 64]
    for t in result.timings:
        # One sample per block of consecutive steps (a chain's short rest joins its last block).
        assert t.candidate.n == t.rounds * (t.steps // t.block_steps) and 1 <= t.block_steps <= t.steps
        assert t.ci_low <= t.speedup <= t.ci_high and t.ratio_of_medians > 0
        assert t.roofline is not None and t.roofline.bytes_per_step > 0
    assert result.score is not None and result.score > 0
    assert result.environment.torch and result.bandwidth.bytes_per_s > 0
    assert result.phases["timing"] > 0 and result.wall_seconds > 0
    # The wall time is accounted for: the child's phases and what lies outside them.
    assert list(result.overhead_seconds) == ["setup", "start", "exit", "teardown"]
    accounted = sum(result.phases.values()) + sum(result.overhead_seconds.values())
    assert result.wall_seconds * 0.9 < accounted <= result.wall_seconds + 0.01
    # Each process's start-up as it said it: ready, asked to load, loaded, in order, within the run.
    assert set(result.start_up) == {"baseline", "solution"}  # no reference workers on the CPU
    for times in result.start_up.values():
        assert 0 < times["ready"] and times["asked"] <= times["loaded"] < result.wall_seconds
        assert times["ready"] <= times["loaded"]
    assert result.start_up["solution"]["asked"] >= result.start_up["baseline"]["loaded"]  # after the trusted loads
    # Where each shape's timing went: its warm-up, pairs and isolated steps, within its share.
    for t in result.timings:
        assert {"warm_up", "pairs", "isolated", "pairs_candidate_requests", "pairs_candidate_chain_checks"} <= set(
            t.wall_seconds
        )
        assert t.wall_seconds["pairs_candidate_requests"] <= t.wall_seconds["pairs"] <= result.phases["timing"]
    for t in result.timings:
        assert t.candidate.median_ci_low_ms <= t.candidate.median_ms <= t.candidate.median_ci_high_ms
    # Fixed-seed reference outputs and weights were cached on disk by an earlier run (or this one).
    assert (kagent_home / "weights").is_dir() and (kagent_home / "outputs").is_dir()


@pytest.mark.slow
def test_second_run_uses_the_cache(kimi, kagent_home, honest_check):
    solution, first = honest_check  # the first run, into this session's cache
    assert first.verdict is Verdict.PASS, first.reason
    again = run_eval(kimi, solution, kagent_home, mode="check", hidden_seeds=FEW_SECRET)
    assert again.verdict is Verdict.PASS
    assert again.cache["misses"] == 0 and again.cache["hits"] > 0
    assert [c.name for c in again.checks][-1] == "chained_steps"  # check-only runs an untimed chain


@pytest.mark.slow
def test_aa_run_of_the_baseline_reads_close_to_one(kimi, kagent_home):
    result = run_eval(kimi, None, kagent_home, mode="aa", rounds=6)
    assert result.verdict is Verdict.PASS, result.reason
    assert len(result.timings) == 3
    # Alternating blocks cancel the drift a 2-core CI machine has; each shape stays close.
    assert 0.85 < result.score < 1.15, [t.speedup for t in result.timings]


@pytest.mark.slow
def test_hanging_solution_is_killed_at_the_limit(kimi, kagent_home, tmp_path):
    patch = """
class Model(Model):
    def step(self, hidden, state):
        import subprocess, sys, time
        # A child that would outlive its parent: the whole process group must go.
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        # Sleeps rather than spins: the limit kills it either way, and a spin burns a core of
        # the machine the other tests run on until then.
        while True:
            time.sleep(0.1)
"""
    solution = reference_solution(kimi, tmp_path, patch)
    result = run_eval(kimi, solution, kagent_home, mode="check", timeout_s=15, hidden_seeds=FEW_SECRET)
    assert result.verdict is Verdict.TIMEOUT, result.reason
    assert result.wall_seconds < 30
    assert "killed" in result.reason


@pytest.mark.slow
def test_hang_at_import_is_killed_too(kimi, kagent_home, tmp_path):
    solution = write_solution(tmp_path, "import time\nwhile True:\n    time.sleep(1)\n")
    result = run_eval(kimi, solution, kagent_home, mode="check", timeout_s=10)
    assert result.verdict is Verdict.TIMEOUT


@pytest.mark.parametrize(
    "how, signal_or_code",
    [
        ("import os\nos._exit(0)", "exit code 0"),
        # (A signal's number is said as any other's: os.abort()'s 6 took the same path.)
        ("import ctypes\nctypes.string_at(0)", "killed by signal 11"),
    ],
)
@pytest.mark.slow
def test_crash_in_step_is_a_crash_verdict(how, signal_or_code, kimi, kagent_home, tmp_path):
    body = "\n".join("        " + line for line in how.splitlines())
    patch = f"\nclass Model(Model):\n    def step(self, hidden, state):\n{body}\n"
    result = run_eval(
        kimi, reference_solution(kimi, tmp_path, patch), kagent_home, mode="check", hidden_seeds=FEW_SECRET
    )
    assert result.verdict is Verdict.CRASH, result.reason
    assert signal_or_code in result.reason
    # The referee outlives the solution's process and says which check it died in.
    assert result.reason.startswith("fixed_seeds: the solution's process died while running a step")


@pytest.mark.slow
def test_printed_pass_and_early_exit_do_not_pass(kimi, kagent_home, tmp_path):
    patch = _corpus("fake_pass_and_exit")
    result = run_eval(
        kimi, reference_solution(kimi, tmp_path, patch), kagent_home, mode="check", hidden_seeds=FEW_SECRET
    )
    assert result.verdict is Verdict.CRASH


@pytest.mark.slow
def test_writing_to_the_task_files_or_patching_the_installed_harness_is_caught(
    kimi, kagent_home, tmp_path, monkeypatch
):
    # Inside the jail the task's files are on a read-only mount and the write is refused (the
    # red-team corpus checks that); without the jail or the solution's box, as here on purpose,
    # root can write them, and the hash check must catch it. Code that escaped its sandbox
    # could also patch kagent's harness on disk to weaken every later evaluation: the
    # evaluation copies from what this process read at start, and puts the source back. A copy
    # of the harness stands in for the install. One solution does both, at its import.
    installed = tmp_path / "installed-harness"
    shutil.copytree(bundle.HARNESS_SOURCE, installed, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(bundle, "HARNESS", bundle.Pristine(installed, sorted(installed.rglob("*.py"))))
    found = containment.probe()
    monkeypatch.setattr(containment, "probe", lambda: dataclasses.replace(found, files=False, solution_box=False))
    original = (installed / "compare.py").read_text()
    patch = (
        (Path(__file__).parent / "redteam" / "writes_grading_files.py").read_text()
        + f"""
import pathlib as _pathlib
_pathlib.Path({str(installed / "compare.py")!r}).write_text("# weakened\\n")
"""
    )
    solution = reference_solution(kimi, tmp_path / "solution", patch)
    result = run_eval(kimi, solution, kagent_home, mode="check", hidden_seeds=FEW_SECRET)
    assert result.verdict is Verdict.TAMPERED and "installed harness" in result.reason, result.reason
    assert (installed / "compare.py").read_text() == original
    # Root ignores file modes: the hash check must catch the task's file written; anyone else's
    # write is refused, and nothing of the task changed.
    assert ("task/problem.yaml" in result.reason) is (os.geteuid() == 0), result.reason


def shown(result) -> str:
    """The result as `kagent eval` prints it, as plain text."""
    console = Console(record=True, width=200)
    print_result(console, result)
    return console.export_text()


# Wrong on about 1 input in 10: when a hash of the input hidden's bytes is 9 modulo 10 (the
# residue that the fixed seeds' inputs miss, as a bug that slipped past the public cases would).
RARELY_WRONG = """
import hashlib


def unlucky(hidden):
    digest = hashlib.sha256(bytes(hidden.reshape(-1).view(torch.uint8).tolist())).digest()
    return int.from_bytes(digest[:8], "little") % 10 == 9


class Model(Model):
    def step(self, hidden, state):
        wrong = unlucky(hidden)
        out, state = super().step(hidden, state)
        return (-out if wrong else out), state
"""


def test_the_rarely_wrong_solution_is_wrong_on_one_input_in_ten(kimi):
    """What the next test's solution is: wrong on about 10% of random seeds, right on the fixed ones."""
    shapes = load_module("_kagent_test_kimi_shapes", kimi.path / "shapes.py")
    reference = load_module("_kagent_test_kimi_reference", kimi.path / "reference.py")
    namespace = {"torch": torch, "Model": reference.Model}
    exec(RARELY_WRONG, namespace)
    cfg = reference.build_config(shapes.SMOKE_SHAPES[0])
    wrong = [seed for seed in range(1000, 3000) if namespace["unlucky"](reference.init_token(cfg, seed, device="cpu"))]
    assert 0.08 < len(wrong) / 2000 < 0.12
    assert not any(namespace["unlucky"](reference.init_token(cfg, seed, device="cpu")) for seed in (0, 1, 2))


@pytest.mark.slow
def test_a_solution_wrong_on_one_input_in_ten_fails_every_evaluation(kimi, kagent_home, tmp_path):
    # With 96 secret seeds (a final re-verification's count) it passes an evaluation with
    # probability 0.9**96 (about 4e-5), so evaluations in a row all fail it, and each failure
    # counts the cases. Three, the last with the secret cases drawn by reference workers (as on
    # a GPU): each costs about 11 s of CPU (two interpreters, or four, ~170 reference steps with
    # the seeds drawn again at near-ties, ~100 solution steps). With the former 2 secret seeds
    # it passed 9 evaluations of 12 (0.9**2 = 0.81): three in a row fail with probability
    # 0.19**3 (0.7%), five with 0.02%.
    solution = reference_solution(kimi, tmp_path, RARELY_WRONG)
    counts = []
    for workers in (0, 0, 2):
        result = run_eval(kimi, solution, kagent_home, mode="check", hidden_seeds=96, reference_workers=workers)
        assert result.verdict is Verdict.INCORRECT, result.reason
        found = re.match(
            r"hidden_seeds: (\d+) of 96 cases fail, worst: hidden seed #\d+ ctx \d+( salient state)?: "
            r"cosine below 0.98 "
            r"for .*hidden -1\.0000",
            result.reason,
        )
        assert found, result.reason
        failed = [c for c in check_named(result, "hidden_seeds").data["cases"] if not c["passed"]]
        assert int(found.group(1)) == len(failed) >= 1
        counts.append(len(failed))
    assert 3 <= sum(counts) / len(counts) <= 20, counts  # about 1 in 10 of 96, on average


def test_reference_workers_draw_the_secret_cases_and_judge_the_chains(kimi, kagent_home, tmp_path):
    # What the referee does itself on the CPU by default, processes of its own do beside it
    # on a GPU: the same cases, the same judgments.
    # Eight secret seeds (the default count is test_reference_as_solution_passes_and_is_timed's).
    honest = run_eval(
        kimi,
        reference_solution(kimi, tmp_path / "honest"),
        kagent_home,
        mode="check",
        reference_workers=2,
        hidden_seeds=8,
    )
    assert honest.verdict is Verdict.PASS, honest.reason
    load, hidden = check_named(honest, "load"), check_named(honest, "hidden_seeds")
    assert load.data["reference_workers"] == 2
    # Check mode starts no baseline: the workers' and the solution's start-up, each said.
    assert set(honest.start_up) == {"reference worker 1", "reference worker 2", "solution"}
    assert len(hidden.data["seeds"]) == 8 and all(c["decision_margin"] >= 0.02 for c in hidden.data["cases"])
    assert sum(c["case"].endswith(" salient state") for c in hidden.data["cases"]) == 4
    # A step that skips work on chained steps only, judged by a worker.
    skips = run_eval(
        kimi,
        reference_solution(kimi, tmp_path / "skips", BROKEN["skips_moe_on_chained_steps"][0]),
        kagent_home,
        mode="check",
        reference_workers=2,
        hidden_seeds=FEW_SECRET,
    )
    assert skips.verdict is Verdict.INCORRECT and skips.reason.startswith("chained_steps: ctx 16 step 2"), skips.reason
    # (A solution wrong on 1 input in 10, on the workers' secret cases: the test above.)


NOISY = """
class Model(Model):
    def step(self, hidden, state):
        out, state = super().step(hidden, state)
        # Noise of 1e-6 relative on a float32 state, another on every call, as atomics that
        # add in a varying order make: right, but not bitwise repeatable.
        state[0]["S"].mul_(1 + 1e-6 * torch.randn_like(state[0]["S"]))
        return out, state
"""


@pytest.mark.slow
def test_a_nondeterministic_solution_passes_and_is_said_to_be_nondeterministic(kimi, kagent_home, tmp_path):
    result = run_eval(
        kimi, reference_solution(kimi, tmp_path, NOISY), kagent_home, mode="check", hidden_seeds=FEW_SECRET
    )
    assert result.verdict is Verdict.PASS, result.reason
    determinism = result.determinism
    assert not determinism.bitwise_equal and determinism.largest_in == "L0.S"
    assert 0 < determinism.max_abs_diff < 1e-5
    line = next(line for line in shown(result).splitlines() if line.startswith("determinism:"))
    assert line == (
        f"determinism: two calls on identical inputs ({determinism.case}) are not bitwise equal: "
        f"largest difference {determinism.max_abs_diff:.3g} in L0.S"
    )


@pytest.mark.parametrize("salient", [False, True])
def test_a_screened_draw_stops_at_a_near_tie_and_draws_the_same_case(kimi, monkeypatch, salient):
    """The reference's screening stops a secret seed's steps at the first routing near-tie: the
    case drawn (seed, redraws, outputs, margin) is the very one an unscreened draw makes,
    with fewer expert FFNs paid for on the seeds drawn again."""
    from kagent.sandbox.harness import decode_task, secret_cases
    from kagent.sandbox.harness.loading import DiskCache

    task = decode_task.Task(kimi.path, "smoke", torch.device("cpu"))
    assert task.screening is not None and task.min_margin > 0
    with torch.no_grad():
        reference, _ = decode_task.build_reference(task, DiskCache(None))
        ffns = []
        ffn = task.reference.MoE.ffn
        monkeypatch.setattr(
            task.reference.MoE,
            "ffn",
            staticmethod(lambda x, gate, up, down, e: ffns.append(e) or ffn(x, gate, up, down, e)),
        )

        def draw(screening):
            monkeypatch.setattr(task, "screening", screening)
            seeds = iter(range(10_000))
            monkeypatch.setattr(secret_cases.secrets, "randbelow", lambda _bound: next(seeds))
            ffns.clear()
            case = secret_cases.draw_secret_case(task, reference, task.check_contexts[0], salient)
            return case, len(ffns)

        screened, screened_ffns = draw(task.screening)
        plain, plain_ffns = draw(None)
    assert plain.redrawn >= 1  # the first seeds sit on near-ties at this scale
    assert (screened.seed, screened.redrawn, screened.margin) == (plain.seed, plain.redrawn, plain.margin)
    assert torch.equal(screened.expected_hidden, plain.expected_hidden)
    assert all(
        torch.equal(a[name], b[name])
        for a, b in zip(screened.expected_state, plain.expected_state, strict=True)
        for name in a
    )
    if salient:
        assert all(
            torch.equal(a[name], b[name])
            for a, b in zip(screened.inputs[1], plain.inputs[1], strict=True)
            for name in a
        )
    assert screened_ffns < plain_ffns
