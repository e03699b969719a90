#!/usr/bin/env bash
# Work hidden from the timer, on a GPU: a KernelBench problem (a 4096x4096 fp32 matmul) with
# an honest solution and one that runs the matmul on a side stream it stops joining once the
# correctness checks are over, and the
# flagship reference at full scale (no false alarm from the per-step synchronized check).
# Needs the wheels in .whl/ (see gpu_sandbox.sh). Results land in $OUT.
set -uo pipefail
source lab/scripts/gpu_setup.sh
date -u; nvidia-smi --query-gpu=name,uuid,driver_version --format=csv,noheader
python3 - <<'PY'
import os, pathlib
from kagent.sandbox.evaluate import EvalOptions, evaluate
from kagent.tasks import resolve_task

OUT = pathlib.Path(os.environ["OUT"])
home = pathlib.Path(os.environ["KAGENT_HOME"])
root = pathlib.Path("/tmp/hidden-work")
root.mkdir(exist_ok=True)
(root / "matmul.py").write_text('''import torch

class Model(torch.nn.Module):
    def forward(self, a, b):
        return a @ b

def get_inputs():
    return [torch.randn(4096, 4096), torch.randn(4096, 4096)]

def get_init_inputs():
    return []
''')
solutions = {
    "honest": '''import torch

class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        return a @ b
''',
    # The inputs are waited for; the result never is: the timer's stream sees only a launch.
    # A result read before it is ready fails the correctness checks, so it joins its side
    # stream for the calls those make, then never again.
    "side_stream": '''import torch

_side = None
_calls = 0

class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        global _side, _calls
        _calls += 1
        if _side is None:
            _side = torch.cuda.Stream()
        _side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(_side):
            out = a @ b
        if _calls <= 12:
            torch.cuda.current_stream().wait_stream(_side)
        return out
''',
}


def report(name, result):
    (OUT / f"{name}.json").write_text(result.model_dump_json(indent=1))
    print(f"{name}: {result.verdict.value}: {result.reason[:400]} (wall {result.wall_seconds:.1f} s, score {result.score})")
    for t in result.timings:
        print(f"    {t.label}: baseline {t.baseline.median_ms:.3f} ms, candidate {t.candidate.median_ms:.3f} ms, "
              f"speedup {t.speedup:.3f}")
    for check in result.checks:
        if check.name == "hidden_work":
            print(f"    hidden_work data: { {k: v for k, v in check.data.items()} }")


matmul = resolve_task(str(root / "matmul.py"))
for name, source in solutions.items():
    folder = root / name
    folder.mkdir(exist_ok=True)
    (folder / "solution.py").write_text(source)
    result = evaluate(matmul, folder / "solution.py",
                      EvalOptions(mode="eval", device="cuda", cache_dir=home, home=home / "home"))
    report(f"kernelbench_{name}", result)

task = resolve_task("02_kimi_linear_decode")
reference = (task.path / "reference.py").read_text() + """
_reference_init = Model.__init__
def _cheap_init(self, cfg, init_weights=False):
    _reference_init(self, cfg, init_weights)
Model.__init__ = _cheap_init
"""
folder = root / "reference"
folder.mkdir(exist_ok=True)
(folder / "solution.py").write_text(reference)
for attempt in (1, 2):
    result = evaluate(task, folder / "solution.py", EvalOptions(mode="eval", device="cuda", scale="full",
                                                                cache_dir=home, home=home / "home"))
    report(f"flagship_reference_{attempt}", result)
    print(f"    phases: {result.phases}")
PY
