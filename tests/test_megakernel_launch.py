"""The megakernel's direct launch (examples/02_kimi_linear_decode/solution.py, KIMI_LAUNCH=direct)
on the CPU: its bookkeeping against the real kernel's signature, with Triton's dispatch and the
compiled kernel replaced by recorders (launching needs a GPU; the lab notebook (lab/notebook/) has the GPU's runs).

A step that changes only what steps change (a fresh output, a cache view) launches the compiled
kernel directly, with every argument and constant in the signature's place; a step whose
arguments specialize otherwise (a misaligned input, another dtype) or that hands in another
object where a weight's buffer was goes through the dispatch again.

In a fresh interpreter with TRITON_INTERPRET=0: the kernel must be Triton's JIT function (its
signature), which the interpreter's stand-in is not."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.example_kernel,
    pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="Triton is not installed"),
]

REPO = Path(__file__).resolve().parents[1]
# The drivers' torch and numpy on one thread, as an evaluation's processes compute on the CPU: on
# a loaded 2-core machine a second thread waits for a core (the stages' driver took 5.0 s of
# CPU on two, 3.1 s on one, 2026-12-07).
ONE_THREAD = {"OMP_NUM_THREADS": "1"}

DRIVER = """
import json, sys
import torch
sys.path.insert(0, "examples/02_kimi_linear_decode")
import megakernel as mk
import solution
from triton.backends.compiler import BaseBackend

torch.cuda.current_device = lambda: 0  # the device whose dispatch the launcher asks (no GPU here)
real = mk.kimi_decode_step
dispatched, launched = [], []

class Compiled:
    def __getitem__(self, grid):
        return lambda *values: launched.append((grid, values))

class Dispatch:
    params, arg_names = real.params, real.arg_names
    device_caches = {0: (None, None, None, BaseBackend, None)}
    def __getitem__(self, grid):
        def run(*args, **kwargs):
            dispatched.append((grid, args, kwargs))
            return Compiled()
        return run

pointers = [q for q in real.params if not q.is_constexpr]
def fresh():
    return torch.zeros(64, dtype=torch.bfloat16)
args = [7 if q.name in ("s_lo", "s_hi", "STOP", "ONE", "L", "R", "NCHK", "COPY") else fresh() for q in pointers]
x_in, x_out = real.arg_names.index("x_in"), real.arg_names.index("x_out")
weights = [a for i, a in enumerate(args) if isinstance(a, torch.Tensor) and i not in (x_in, x_out)]
consts = {q.name: 1000 + q.num for q in real.params if q.is_constexpr}
launch = solution.DirectLaunch(Dispatch(), consts, 8, lambda: {id(w) for w in weights})
out = {"n_args": len(args)}

def step(*changes):
    a = list(args)
    a[x_out] = fresh()
    for position, value in changes:
        a[position] = value
    launch((132,), a)
    return a

step()
first = dispatched[0][2]
out["first"] = [len(dispatched), len(launched), first.get("num_warps"), first.get("BL") == consts["BL"]]
a = step((x_in, fresh()))
grid, values = launched[-1]
out["second"] = [len(dispatched), len(launched), list(grid)]
out["values_in_place"] = (len(values) == len(real.params)
                          and all(values[real.arg_names.index(q.name)] is a[i] for i, q in enumerate(pointers))
                          and all(values[q.num] == consts[q.name] for q in real.params if q.is_constexpr))
step((x_in, torch.zeros(65, dtype=torch.bfloat16)[1:]))  # 2 bytes off: not 16-byte aligned
out["misaligned"] = [len(dispatched), len(launched)]
step((x_in, torch.zeros(64, dtype=torch.float32)))
out["other_dtype"] = [len(dispatched), len(launched)]
step((x_in, fresh()))
out["aligned_again"] = [len(dispatched), len(launched)]
moved = fresh()
w = next(i for i, a in enumerate(args) if a is weights[3])
weights[3] = moved
step((w, moved))
out["weight_replaced"] = [len(dispatched), len(launched)]
step((w, moved))
out["after_it"] = [len(dispatched), len(launched)]
try:
    launch((132,), args[:-1])
    out["short"] = "launched"
except TypeError as exc:
    out["short"] = str(exc)
# The switch itself, read as the model loads: a value it does not know is refused; without a
# GPU (the interpreter launches stage by stage) there is no single launch to make direct.
import os
sys.path.insert(0, "tasks/02_kimi_linear_decode")
import reference, shapes
model = solution.Model(reference.build_config(shapes.SMOKE_SHAPES[0]))
os.environ["KIMI_LAUNCH"] = "fast"
try:
    model.pack()
    out["unknown_launch"] = "accepted"
except ValueError as exc:
    out["unknown_launch"] = str(exc)
os.environ["KIMI_LAUNCH"] = "direct"
model.pack()
out["direct_without_gpu"] = model.direct is None
print(json.dumps(out))
"""


def test_a_step_launches_the_kernel_its_arguments_were_compiled_for(launches):
    out = launches["launch"]
    assert out["first"] == [1, 0, 8, True]  # the first step goes through the dispatch, with the constants
    assert out["second"] == [1, 1, [132, 1, 1]]  # the next launches the compiled kernel itself
    assert out["values_in_place"] is True
    assert out["misaligned"] == [2, 1]  # specialized otherwise: the dispatch again
    assert out["other_dtype"] == [3, 1]
    assert out["aligned_again"] == [3, 2]  # the first compiled kernel, kept
    assert out["weight_replaced"] == [4, 2]  # another object where a weight was
    assert out["after_it"] == [4, 3]
    assert out["short"] == f"{out['n_args'] - 1} arguments for a kernel of {out['n_args']}"
    assert out["unknown_launch"].startswith("KIMI_LAUNCH='fast': jit") and out["direct_without_gpu"]


BIND_DRIVER = """
import json, sys
import torch
sys.path[:0] = ["tasks/02_kimi_linear_decode", "examples/02_kimi_linear_decode"]
import megakernel as mk
import reference, shapes, solution
shape = shapes.SMOKE_SHAPES[0]
cfg = reference.build_config(shape)
model = solution.Model(cfg)
model.load_state_dict(reference.Model(cfg).state_dict(), strict=True)
state, token = reference.init_state(cfg, shape["context_len"], 0), reference.init_token(cfg, 0)

def buffers_taken():
    args, _, _ = model.kernel_args(token, state)
    mine = {id(b): name for name, b in model.named_buffers()}
    return len(args), [mine[id(a)] for a in args if id(a) in mine]

n, first = buffers_taken()
model.to(torch.float64)   # every floating buffer replaced by a new tensor
_, after = buffers_taken()
print(json.dumps({"n": n, "signature": sum(1 for q in mk.kimi_decode_step.params if not q.is_constexpr),
                  "first": first, "after": after}))
"""


# One interpreter for both drivers (its start and imports are most of a driver's time): the
# buffers' first, on a model of its own, then the launches'.
@pytest.fixture(scope="module")
def launches() -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", BIND_DRIVER + DRIVER],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TRITON_INTERPRET": "0", **ONE_THREAD},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    bind, launch = (json.loads(line) for line in proc.stdout.strip().splitlines()[-2:])
    return {"bind": bind, "launch": launch}


def test_the_step_s_arguments_take_the_model_s_buffers_and_follow_them_when_replaced(launches):
    """kernel_args looks the repacked buffers up once per load (nn.Module's attribute lookup
    was 20 of the 50 us a step's arguments took); a move or a cast puts new tensors in their
    places, and the next step must take those, not the old ones."""
    out = launches["bind"]
    assert out["n"] == out["signature"]
    # Every buffer the kernel reads, once each, and the same ones (by name) after the cast:
    # none of the old objects is left among the arguments.
    assert len(out["first"]) == len(set(out["first"])) == 51 and all(n.startswith("pk_") for n in out["first"])
    assert out["after"] == out["first"]


def test_the_megakernel_agrees_with_the_task_s_reference_on_the_cpu():
    """check.py at smoke scale (Triton's interpreter, each stage launched on its own): two
    chained steps from plain and salient states of two seeds, every output and state within
    cosine 0.98 of the task's reference (0.99995 and above when measured, 2026-12-07)."""
    proc = subprocess.run(
        [sys.executable, "examples/02_kimi_linear_decode/check.py", "--scale", "smoke", "--seeds", "0,1"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env={**{k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}, **ONE_THREAD},
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "ok: every cosine at least" in proc.stdout
