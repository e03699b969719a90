#!/usr/bin/env bash
# The sandbox on a GPU machine: what the probe finds, the containment and red-team tests under
# this machine's kernel and cgroups, and full-scale work through the jail: evaluations (CUDA
# with a minimal /dev and no capabilities), a side-stream exploit that never synchronizes,
# the profiler with Nsight Compute, and a memory hog and a fork bomb in the shell tool.
# Needs the wheels in .whl/ (kagent's own, built with `pip wheel --no-deps -w .whl .`, plus
# pydantic's and pytest's for a machine that lacks them). Results land in $OUT.
set -uo pipefail
source lab/scripts/gpu_setup.sh
date -u; uname -r; nvidia-smi --query-gpu=name,uuid,driver_version --format=csv,noheader
grep -i RmProfilingAdminOnly /proc/driver/nvidia/params
python3 -c "from kagent.sandbox import containment as c; print(c.probe()); print(c.describe())"

echo "== containment and red-team tests (CPU device, this kernel and cgroups)"
python3 -m pytest -q -p no:cacheprovider -rs tests/test_containment.py tests/test_redteam.py 2>&1 | tail -n 25

echo "== full scale through the jail"
python3 - <<'PY'
import os, pathlib, shutil, time
from kagent.sandbox import containment
from kagent.sandbox.evaluate import EvalOptions, evaluate
from kagent.tasks import resolve_task
from kagent.tools import default_tools
from kagent.tools.base import ToolContext

OUT = pathlib.Path(os.environ["OUT"])
task = resolve_task("02_kimi_linear_decode")
home = pathlib.Path(os.environ["KAGENT_HOME"])
# The reference as a solution, its random init switched off (weights come by load_state_dict).
reference = (task.path / "reference.py").read_text() + """
_reference_init = Model.__init__
def _cheap_init(self, cfg, init_weights=False):
    _reference_init(self, cfg, init_weights)
Model.__init__ = _cheap_init
"""
# All of a step's work on a side stream that neither waits for the timer's stream nor is
# waited for: the timer's events see only the launches. The first step also counts the
# host synchronizations a step makes (each would expose the hidden work to the timer).
SIDE_STREAM = """
import sys as _sys
import warnings as _warnings
_side = None

class Model(Model):
    def step(self, hidden, state):
        global _side
        if _side is None:
            _side = torch.cuda.Stream()
            torch.cuda.set_sync_debug_mode("warn")
            with _warnings.catch_warnings(record=True) as caught:
                _warnings.simplefilter("always")
                with torch.cuda.stream(_side):
                    result = super().step(hidden, state)
            torch.cuda.set_sync_debug_mode("default")
            print(f"kagent-sync-probe: {len(caught)} host synchronizations in one step", file=_sys.stderr)
            return result
        with torch.cuda.stream(_side):
            return super().step(hidden, state)
"""


def solution(name, patch=""):
    folder = pathlib.Path("/tmp/sandbox-solutions") / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "solution.py").write_text(reference + patch)
    return folder / "solution.py"


def run(name, path, mode):
    options = EvalOptions(mode=mode, device="cuda", scale="full", cache_dir=home, home=home / "home")
    result = evaluate(task, path, options)
    (OUT / f"{name}.json").write_text(result.model_dump_json(indent=1))
    peak = f"{result.peak_host_memory_bytes / 2**30:.1f} GiB" if result.peak_host_memory_bytes else "-"
    print(f"{name}: {result.verdict.value}: {result.reason[:300]} (wall {result.wall_seconds:.1f} s, "
          f"score {result.score}, peak host memory {peak})")
    for t in result.timings:
        print(f"    {t.label}: baseline {t.baseline.median_ms:.3f} ms, candidate {t.candidate.median_ms:.3f} ms, "
              f"speedup {t.speedup:.3f}")
    probe = [line for line in result.stderr_tail.splitlines() if "kagent-sync-probe" in line]
    if probe:
        print("    " + probe[-1])


run("aa_cold", None, "aa")
run("aa_warm", None, "aa")
run("reference_check", solution("reference"), "check")
run("reference_eval", solution("reference"), "eval")
run("side_stream_nosync", solution("side_stream", SIDE_STREAM), "eval")

print("== tools through the jail")
workspace = pathlib.Path("/tmp/sandbox-run/workspace")
(workspace / "task").mkdir(parents=True, exist_ok=True)
shutil.copy(solution("reference"), workspace / "solution.py")
tools = {tool.spec.name: tool for tool in default_tools()}
ctx = ToolContext(workspace=workspace, task=task,
                  eval_options=EvalOptions(device="cuda", scale="full", cache_dir=home))
for command in ("nvidia-smi -L; grep CapEff /proc/self/status; ls /dev; touch task/x; ls $HOME /root /tmp",
                "python -c 'import torch; print(torch.cuda.get_device_name(), torch.ones(4, device=\"cuda\").sum().item())'",
                ":(){ :|:& };:; sleep 30"):
    started = time.monotonic()
    out = tools["shell"].run({"command": command, "timeout_s": 20}, ctx)
    print(f"--- shell {command[:60]!r} ({time.monotonic() - started:.1f} s)\n{out.content[-1500:]}")
machine_memory = containment._machine_memory
containment._machine_memory = lambda: 4 << 30  # Limits() caps at three quarters: 3 GiB
out = tools["shell"].run({"command": "python -c 'x = bytearray(8 << 30); print(\"survived\")'"}, ctx)
print(f"--- shell memory hog\n{out.content[-800:]}")
containment._machine_memory = machine_memory
started = time.monotonic()
out = tools["profile"].run({"steps": 2, "ncu": True}, ctx)
print(f"--- profile with ncu ({time.monotonic() - started:.1f} s)\n{out.content[-3000:]}")
PY
