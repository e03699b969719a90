"""lab/megakernel/tune.py on the CPU: what it can do without a GPU. A variant's
constants reach the layout the model is built with (an unknown one is refused), its warps
reach the launch, its variables are set for it alone, a variant naming another copy of
megakernel.py launches that copy's kernel, and each variant's figures are paired with the
first variant's round by round. The timing itself needs a GPU (the lab notebook,
lab/notebook/, has its runs and its own A/A).

In a fresh interpreter: the kernel's module sets TRITON_INTERPRET before Triton is imported."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lab_isolation import isolated_env  # noqa: F401  (autouse)

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="Triton is not installed")

REPO = Path(__file__).resolve().parents[2]

DRIVER = """
import json, shutil, sys, tempfile
sys.path.insert(0, "lab/megakernel")
import tune
out = {}
cfg = tune.reference.build_config(tune.shapes.SMOKE_SHAPES[0])
tune.apply({"num_warps": 16, "consts": {"BL": 16}})
layout = tune.solution.Layout.of(cfg, 4, False)
out["bl"], out["warps"] = layout.consts["BL"], tune.solution.NUM_WARPS
tune.apply({})
out["bl_default"], out["warps_default"] = tune.solution.Layout.of(cfg, 4, False).consts["BL"], tune.solution.NUM_WARPS
out["bl_gpu"] = tune.solution.Layout.of(cfg, 4, False, True).consts["BL"]
import os
os.environ["KIMI_BL"] = "48"
try:
    tune.solution.Layout.of(cfg, 4, False)
    out["bl_48"] = "accepted"
except ValueError as exc:
    out["bl_48"] = str(exc)
os.environ["KIMI_BL"] = "32"
out["bl_32"] = tune.solution.Layout.of(cfg, 4, False, True).consts["BL"]
del os.environ["KIMI_BL"]
tune.apply({"consts": {"NO_SUCH": 1}})
try:
    tune.solution.Layout.of(cfg, 4, False)
    out["unknown"] = "accepted"
except SystemExit as exc:
    out["unknown"] = str(exc)
copy = tempfile.mkdtemp() + "/megakernel_before.py"
shutil.copy("examples/02_kimi_linear_decode/megakernel.py", copy)
tune.apply({"kernel": copy})
other = tune.mk.kimi_decode_step.kernel
out["copy_launched"] = other is not tune.KERNEL and other.fn.__code__.co_filename == copy
tune.apply({"name": "this folder's"})
out["own_launched"] = tune.mk.kimi_decode_step.kernel is tune.KERNEL
out["signature_seen"] = tune.mk.kimi_decode_step.arg_names == tune.KERNEL.arg_names
tune.apply({"env": {"KIMI_LAUNCH": "direct", "KIMI_SPLIT_F": 0}})
out["env_set"] = [os.environ.get("KIMI_LAUNCH"), os.environ.get("KIMI_SPLIT_F")]
tune.apply({"env": {"KIMI_SPLIT_F": 1}})
out["env_next"] = [os.environ.get("KIMI_LAUNCH"), os.environ.get("KIMI_SPLIT_F")]
tune.apply({})
out["env_none"] = [os.environ.get("KIMI_LAUNCH"), os.environ.get("KIMI_SPLIT_F")]
rows = [{"rounds": [[1.0, 2.0], [1.2, 2.2], [1.1, 2.1]]}, {"rounds": [[0.5, 2.2], [0.6, 2.0], [0.5, 2.31]]}]
tune.summarize(rows)
out["rows"] = [{k: r[k] for k in ("median_ms", "ratio_to_first")} for r in rows]
print(json.dumps(out))
"""


def test_tune_applies_a_variant_and_pairs_its_rounds_with_the_first():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run(
        [sys.executable, "-c", DRIVER], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert (out["bl"], out["warps"]) == (16, 16)
    assert (out["bl_default"], out["warps_default"]) == (64, 8)  # the interpreter's tiles, 8 warps
    # The GPU's tiles take blocks of 64 rows too (since 2026-12-06); KIMI_BL sets a power of two.
    assert out["bl_gpu"] == 64 and out["bl_32"] == 32
    assert "KIMI_BL=48" in out["bl_48"] and "power of two" in out["bl_48"]
    assert "no constant ['NO_SUCH']" in out["unknown"]
    assert out["copy_launched"] and out["own_launched"]
    assert out["signature_seen"]  # the kernel's own attributes through the launcher (the direct launch reads them)
    # A variant's variables are set for it alone: the next variant's replace them.
    assert out["env_set"] == ["direct", "0"] and out["env_next"] == [None, "1"] and out["env_none"] == [None, None]
    # Medians per context; ratios paired by round, then their median: at the first context
    # 0.5/1.0, 0.6/1.2, 0.5/1.1; at the second 2.2/2.0, 2.0/2.2, 2.31/2.1.
    assert out["rows"][0] == {"median_ms": [1.1, 2.1], "ratio_to_first": [1.0, 1.0]}
    assert out["rows"][1] == {"median_ms": [0.5, 2.2], "ratio_to_first": [0.5, 1.1]}
