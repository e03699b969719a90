#!/usr/bin/env bash
# Full-scale validation of `kagent eval` on a GPU machine; results land in $OUT.
# Needs the wheels in .whl/ (kagent's own, built with `pip wheel --no-deps -w .whl .`,
# plus pydantic's for a machine that lacks it). Prints a summary table last.
set -uo pipefail
source lab/scripts/gpu_setup.sh
rm -rf "$KAGENT_HOME"  # the first run below is truly cold: weights, outputs and bandwidth built anew
K="python3 -m kagent.agent.cli"
date -u; nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.mem --format=csv
python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"

timed() {  # name, then the command: records the whole process's wall time too
  local name=$1; shift
  local t0=$(date +%s%N)
  "$@" --out "$OUT/$name.json" > "/tmp/$name.txt" 2>&1
  local rc=$?
  echo "$name: exit $rc, process wall $(( ($(date +%s%N) - t0) / 1000000 )) ms"
  tail -n 40 "/tmp/$name.txt"
}

timed aa_cold $K eval 02_kimi_linear_decode --aa --device cuda
timed aa_warm $K eval 02_kimi_linear_decode --aa --device cuda
timed aa_warm2 $K eval 02_kimi_linear_decode --aa --device cuda

# The reference itself as a solution (its random init switched off: the weights arrive
# through load_state_dict): the whole path, checks and timing, at full scale.
CHEAP_INIT='
_reference_init = Model.__init__
def _cheap_init(self, cfg, init_weights=False):
    _reference_init(self, cfg, init_weights)
Model.__init__ = _cheap_init
'
mkdir -p /tmp/sol && cp "$(python3 -c 'import kagent.tasks as t; print(t.BUILTIN_DIR)')/02_kimi_linear_decode/reference.py" /tmp/sol/solution.py
echo "$CHEAP_INIT" >> /tmp/sol/solution.py
timed reference $K eval 02_kimi_linear_decode --solution /tmp/sol/solution.py --device cuda
timed reference_check $K eval 02_kimi_linear_decode --solution /tmp/sol/solution.py --device cuda --check-only
export CHEAP_INIT

# Cheating solutions from the test suite, check-only at full scale on CUDA.
python3 - <<'PY'
import os, sys, pathlib
sys.path.insert(0, "tests")
from test_eval_kimi import BROKEN
from kagent.tasks import resolve_task
from kagent.sandbox.evaluate import EvalOptions, evaluate
task = resolve_task("02_kimi_linear_decode")
ref = (task.path / "reference.py").read_text()
# Faults only a GPU can have: a kernel writing far out of bounds, and one that never ends.
DEVICE_FAULTS = {
    # The step's work goes on a side stream and is not waited for: the timer must not miss it.
    "side_stream_work": """
_side = torch.cuda.Stream()

class Model(Model):
    def step(self, hidden, state):
        _side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(_side):
            out, state = super().step(hidden, state)
        return out, state
""",
    "illegal_memory_access": """
import triton
import triton.language as tl

@triton.jit
def _poke(ptr):
    tl.store(ptr + (1 << 40), 1.0)

class Model(Model):
    def step(self, hidden, state):
        _poke[(1,)](hidden)
        torch.cuda.synchronize()
        return super().step(hidden, state)
""",
    "kernel_never_ends": """
import triton
import triton.language as tl

@triton.jit
def _spin(ptr):
    x = tl.load(ptr, volatile=True).to(tl.float32)
    while x < 1e30:
        x = tl.load(ptr, volatile=True).to(tl.float32)

class Model(Model):
    def step(self, hidden, state):
        _spin[(1,)](hidden)
        torch.cuda.synchronize()
        return super().step(hidden, state)
""",
}
cases = {name: BROKEN[name][0] for name in ("caches_by_pointer", "skips_moe_on_chained_steps",
                                            "forgets_routed_scaling")} | DEVICE_FAULTS
for name, patch in cases.items():
    folder = pathlib.Path("/tmp/cheat") / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "solution.py").write_text(ref + "\n" + os.environ["CHEAP_INIT"] + "\n" + patch)
    mode = "eval" if name == "side_stream_work" else "check"
    r = evaluate(task, folder / "solution.py", EvalOptions(mode=mode, device="cuda", scale="full",
                 cache_dir=pathlib.Path("/tmp/kagent-home"), timeout_s=60 if name == "kernel_never_ends" else 300))
    print(f"cheat {name}: {r.verdict.value}: {r.reason[:200]} ({r.wall_seconds:.1f} s)")
PY

python3 - "$OUT" <<'PY'
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
print(f"{'run':10} {'verdict':8} {'wall s':>7} {'score':>6}  per context: base ms | cand ms | speedup [CI] | floor frac")
for name in ("aa_cold", "aa_warm", "aa_warm2", "reference", "reference_check"):
    p = out / f"{name}.json"
    if not p.exists():
        print(name, "missing"); continue
    r = json.loads(p.read_text())
    cells = [f"{t['label']}: {t['baseline']['median_ms']:.2f} | {t['candidate']['median_ms']:.2f} | "
             f"{t['speedup']:.3f} [{t['ci_low']:.3f}-{t['ci_high']:.3f}] | {t['roofline']['baseline_fraction']:.4f}"
             for t in r["timings"]]
    score = f"{r['score']:.3f}" if r.get("score") else "-"
    print(f"{name:10} {r['verdict']:8} {r['wall_seconds']:7.1f} {score:>6}  " + " ; ".join(cells))
    for l in r["launches"]:
        print(f"    launches {l['who']}: {l['launches']} (single={l['single_launch']}, graph={l['cuda_graph_replay']}, "
              f"cached={l.get('cached')})")
    print(f"    phases {r['phases']}  bandwidth {r['bandwidth']['bytes_per_s']/1e12 if r.get('bandwidth') else None} TB/s")
PY
