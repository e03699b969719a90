"""lab/megakernel/attend_alone.py on the CPU (Triton's interpreter): the
attention stage launched alone leaves each chunk's partial softmax as torch computes it, for
every variant it times on a GPU; and its check fails a stage that attends to too few rows.

In a fresh interpreter: the kernel's module sets TRITON_INTERPRET before Triton is imported."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lab_isolation import isolated_env  # noqa: F401  (autouse)

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="Triton is not installed")

REPO = Path(__file__).resolve().parents[2]

DRIVER = """
import json, sys
sys.path.insert(0, "lab/megakernel")
import attend_alone
if sys.argv[2] == "short":  # a stage that stops 8 rows short of the cache's end
    stage = attend_alone.mk.attend_alone

    class Short:
        def __getitem__(self, grid):
            return lambda L, *args, **kwargs: stage[grid](L - 8, *args, **kwargs)

    attend_alone.mk.attend_alone = Short()
code = attend_alone.main(["--out", sys.argv[1], "--contexts", "40,200", "--programs", "3", "--launches", "1",
                          "--rounds", "1", "--cold-launches", "1"])
print(json.dumps({"code": code}))
"""


def run(tmp_path: Path, how: str) -> tuple[int, dict]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = tmp_path / f"{how}.json"
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, str(out), how], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])["code"], json.loads(out.read_text())


def test_the_stage_alone_leaves_the_partials_torch_computes_for_every_variant(tmp_path):
    code, result = run(tmp_path, "as is")
    assert code == 0 and result["device"] == "cpu" and result["programs"] == 3
    names = [row["variant"]["name"] for row in result["rows"]]
    assert names == ["the megakernel's", "4 warps", "three products", "the megakernel's again"]
    for row in result["rows"]:
        # Blocks of 64 rows (the megakernel's): 41 rows on 3 programs, one chunk of one block;
        # 201 rows, chunks of 128 rows (2), 2 blocks each.
        assert [(c["rows_per_chunk"], c["chunks"], c["blocks_per_chunk"]) for c in row["contexts"]] == [
            (64, 1, 1),
            (128, 2, 2),
        ]
        assert all("us_cold" in c and "us_per_block_cold" in c for c in row["contexts"])
        for figures in row["contexts"]:
            exact = row["variant"].get("consts", {}).get("ATT_LO", 1) == 1
            assert figures["weighted_sum_cos"] > (0.9999999 if exact else 0.99999), figures
            assert figures["sum_cos"] > 0.9999999 and figures["max_abs_diff_max"] < 1e-3, figures
            # A time less the empty launch's, taken on this CPU under Triton's interpreter: a
            # figure, not a sign (on a loaded 2-core machine one read -16 ms). The GPU run says
            # what it is worth.
            assert math.isfinite(figures["us"]) and math.isfinite(figures["us_per_block"])


def test_a_stage_that_misses_rows_fails_the_check(tmp_path):
    code, result = run(tmp_path, "short")
    assert code == 1
    assert min(c["weighted_sum_cos"] for row in result["rows"] for c in row["contexts"]) < 0.99  # (0.896 here)
