"""The flagship's built-in task is the public board's task: the same `Config` (names, order,
types, defaults, nothing more), the same entry points, and every solution the repository ships
runs under a config that offers only the public fields, as the public `check.py` hands it.

A solution that reads anything the public contract lacks loads here and crashes on the board
(the example megakernel once read `cfg.eps` and scored 0.0 there); these tests fail first.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kagent.sandbox.harness.exchange import decode, encode
from kagent.sandbox.harness.loading import load_module
from kagent.sandbox.results import Verdict

from conftest import check_named, reference_solution, run_eval

ROOT = Path(__file__).resolve().parents[1]
TASK = ROOT / "tasks" / "02_kimi_linear_decode"
# The public board's problem folder, where the workplace lays it beside the checkout
# (../shared/public, as published); the tests that read it skip where it is not there.
PUBLIC = ROOT.parent / "shared" / "public" / "kernelbench-mega" / "02_kimi_linear_decode"

# The public Config, field by field, as ../shared/spec/02_kimi_linear_decode.md fixes it
# ("These 18 are the public Config's fields, in this order, and there are no others").
PUBLIC_FIELDS: tuple[tuple[str, str, object], ...] = (
    ("hidden", "int", 2304),
    ("kda_heads", "int", 32),
    ("kda_head_dim", "int", 128),
    ("short_conv", "int", 4),
    ("mla_heads", "int", 32),
    ("kv_lora", "int", 512),
    ("qk_nope", "int", 128),
    ("qk_rope", "int", 64),
    ("v_head", "int", 128),
    ("rope_theta", "float", 10000.0),
    ("n_experts", "int", 64),
    ("n_active", "int", 8),
    ("n_shared", "int", 1),
    ("moe_inter", "int", 1024),
    ("routed_scaling", "float", 2.446),
    ("group", "int", 128),
    ("pattern", "tuple", ("K", "K", "K", "M")),
    ("dtype", "torch.dtype", torch.bfloat16),
)
# The public entry points and the parameters the public harness passes to each, in order.
PUBLIC_SIGNATURES = {
    "build_config": ["shape"],
    "init_state": ["cfg", "context_len", "seed"],
    "init_token": ["cfg", "seed"],
}


@pytest.fixture(scope="module")
def task_modules():
    shapes = load_module("_kagent_contract_shapes", TASK / "shapes.py")
    reference = load_module("_kagent_contract_reference", TASK / "reference.py")
    return reference, shapes


def _annotation(field: dataclasses.Field) -> str:
    kind = field.type
    if isinstance(kind, str):  # `from __future__ import annotations`
        return kind
    return "torch.dtype" if kind is torch.dtype else kind.__name__


def test_the_builtin_config_has_exactly_the_public_fields(task_modules):
    reference, _ = task_modules
    fields = dataclasses.fields(reference.Config)
    assert [(f.name, _annotation(f), f.default) for f in fields] == list(PUBLIC_FIELDS)
    assert reference.Config.__dataclass_params__.frozen


def _public_config_fields(source: str) -> list[tuple[str, str, object]]:
    """The public reference's Config read from its source (it builds its tensors on cuda:0, so it
    is not imported): each annotated field's name, annotation and default."""
    tree = ast.parse(source)
    config = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Config")
    rows = []
    for node in config.body:
        if not isinstance(node, ast.AnnAssign):
            continue
        default = node.value
        if isinstance(default, ast.Call):  # field(default=...)
            default = next(k.value for k in default.keywords if k.arg == "default")
        value = torch.bfloat16 if ast.unparse(default) == "torch.bfloat16" else ast.literal_eval(default)
        rows.append((node.target.id, ast.unparse(node.annotation), value))
    return rows


@pytest.mark.skipif(not PUBLIC.is_dir(), reason="the public board's folder is not laid beside this checkout")
def test_the_spec_list_is_the_public_boards_config():
    assert _public_config_fields((PUBLIC / "reference.py").read_text()) == list(PUBLIC_FIELDS)


def test_the_entry_points_take_what_the_public_harness_passes(task_modules):
    reference, shapes = task_modules
    for name, params in PUBLIC_SIGNATURES.items():
        signature = inspect.signature(getattr(reference, name))
        positional = list(signature.parameters)[: len(params)]
        assert positional == params, name
        # Anything kagent adds (the device it builds on) has a default: the public call works.
        extra = list(signature.parameters.values())[len(params) :]
        assert all(p.default is not inspect.Parameter.empty for p in extra), name
    model_params = list(inspect.signature(reference.Model).parameters.values())
    assert model_params[0].name == "cfg" and all(p.default is not inspect.Parameter.empty for p in model_params[1:])
    # build_config as the board's: n_experts from the shape, 64 where the shape has none.
    for shape in shapes.SHAPES:
        assert reference.build_config(shape) == reference.Config(n_experts=shape["n_experts"])
    assert reference.build_config({"context_len": 2048}) == reference.Config()


def public_fields_only(cfg):
    """The config as a solution gets it in an evaluation: a dataclass rebuilt on the solution's
    side with the reference Config's fields and nothing else (the exchange's own path)."""
    return decode(encode(cfg, lambda tensor: None), lambda slot: None)


def test_a_field_outside_the_contract_is_named_when_read(task_modules):
    reference, shapes = task_modules
    cfg = public_fields_only(reference.build_config(shapes.SMOKE_SHAPES[0]))
    with pytest.raises(AttributeError, match=r"no field 'eps'.*hidden, kda_heads"):
        cfg.eps  # noqa: B018
    assert getattr(cfg, "eps", 1e-6) == 1e-6 and cfg.hidden == 256


def _step_under_public_config(reference, shapes, solution_module, tolerance: float) -> float:
    shape = shapes.SMOKE_SHAPES[0]
    cfg = reference.build_config(shape)
    ref_model = reference.Model(cfg).eval()
    model = solution_module.Model(public_fields_only(cfg))
    model.load_state_dict(ref_model.state_dict(), strict=True)
    hidden = reference.init_token(cfg, 0, device="cpu")
    with torch.no_grad():
        want, _ = ref_model.step(hidden.clone(), reference.init_state(cfg, shape["context_len"], 0, device="cpu"))
        got, _ = model.step(hidden.clone(), reference.init_state(cfg, shape["context_len"], 0, device="cpu"))
    cosine = torch.nn.functional.cosine_similarity(want.float(), got.float(), dim=0).item()
    assert cosine >= tolerance, cosine
    return cosine


HONEST_REDTEAM = sorted(p.name for p in (ROOT / "tests" / "redteam").glob("honest_*.py"))


@pytest.mark.parametrize("patch", ["", *HONEST_REDTEAM])
def test_reference_copies_run_under_the_public_config(task_modules, tmp_path, patch):
    """The demo session's solution (a copy of the reference) and the honest red-team cases (the
    copy with their patch), each a step at smoke scale on a public-fields-only config."""
    reference, shapes = task_modules
    source = (TASK / "reference.py").read_text()
    if patch:
        source += "\n" + (ROOT / "tests" / "redteam" / patch).read_text()
    path = tmp_path / "solution.py"
    path.write_text(source)
    module = load_module(f"_kagent_contract_solution_{path.stem}_{len(patch)}", path)
    _step_under_public_config(reference, shapes, module, 0.999)


# The kernel runs in a fresh interpreter: its module sets TRITON_INTERPRET before Triton is
# imported (on a machine without a GPU), and another test of this session may have imported it.
MEGAKERNEL_DRIVER = """
import sys
import torch
sys.path[:0] = ["tests", "tasks/02_kimi_linear_decode", "examples/02_kimi_linear_decode"]
import reference, shapes, solution
from test_public_contract import _step_under_public_config
print("cosine", _step_under_public_config(reference, shapes, solution, 0.98))
"""


@pytest.mark.slow
@pytest.mark.example_kernel
def test_the_example_megakernel_runs_under_the_public_config():
    """The example kernel, built and stepped once (Triton's interpreter on the CPU)."""
    pytest.importorskip("triton")
    # Its torch and numpy on one thread, as an evaluation's processes compute on the CPU (a second
    # thread waits for a core on a loaded 2-core machine).
    env = {**{k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", MEGAKERNEL_DRIVER], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "cosine" in done.stdout


@pytest.mark.slow
def test_check_names_a_field_the_public_config_lacks(kimi, kagent_home, tmp_path):
    patch = """
class Model(Model):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.eps = cfg.eps
"""
    # Four secret seeds, the least that gives each kind at each check context: the load fails
    # before any is used, and all are drawn while the solution loads.
    result = run_eval(kimi, reference_solution(kimi, tmp_path, patch), kagent_home, mode="check", hidden_seeds=4)
    assert result.verdict is not Verdict.PASS
    assert "no field 'eps'" in result.reason, result.reason
    assert check_named(result, result.reason.split(":")[0]).status in ("fail", "error")
