#!/usr/bin/env bash
# The solution in a process of its own, on a GPU: A/A and the reference as a solution at full
# scale (cold, then warm, with the phases that the split costs), a solution that leaves device
# work running past its answers (patched synchronize, a side stream), one that patches the
# CUDA events in its own process, the device-idle probe's calibration, and the test that kills
# kagent with SIGKILL during an evaluation. Needs the wheels in .whl/ (kagent's own, built with
# `pip wheel --no-deps -w .whl .`, plus pydantic's). Results land in $OUT.
set -uo pipefail
source scripts/gpu_setup.sh
date -u; nvidia-smi --query-gpu=name,uuid,driver_version --format=csv,noheader
python3 - <<'PY'
import json, os, pathlib, time
from kagent.sandbox.evaluate import EvalOptions, evaluate
from kagent.tasks import resolve_task

OUT = pathlib.Path(os.environ["OUT"])
home = pathlib.Path(os.environ["KAGENT_HOME"])
kimi = resolve_task("02_kimi_linear_decode")
reference = (kimi.path / "reference.py").read_text()
root = pathlib.Path("/tmp/split-solutions")
patches = {
    "reference": "",
    # Its step queues ~20 ms of matrix work on a stream of its own and never waits for it;
    # synchronize is patched away in its process, so its server answers at once.
    "leaves_device_work": '''
_side = torch.cuda.Stream()
_a = torch.randn(4096, 4096, device="cuda")
for _name in ("synchronize",):
    setattr(torch.cuda, _name, lambda device=None: None)
torch.cuda.Stream.synchronize = lambda self: None
torch.cuda.Event.synchronize = lambda self: None


class Model(Model):
    def step(self, hidden, state):
        out = super().step(hidden, state)
        _side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(_side):
            for _ in range(100):
                _a @ _a
        return out
''',
    # Its own process's events read a tenth of the truth: nothing the referee measures.
    "patches_events": '''
_elapsed = torch.cuda.Event.elapsed_time
torch.cuda.Event.elapsed_time = lambda self, end: _elapsed(self, end) / 10
''',
}
paths = {}
for name, patch in patches.items():
    (root / name).mkdir(parents=True, exist_ok=True)
    paths[name] = root / name / "solution.py"
    paths[name].write_text(reference + "\n" + patch)


def run(label, solution, **options):
    opts = dict(device="cuda", scale="full", cache_dir=home, timeout_s=600.0, **options)
    started = time.monotonic()
    result = evaluate(kimi, solution, EvalOptions(**opts))
    (OUT / f"{label}.json").write_text(result.model_dump_json(indent=1))
    load = next((c for c in result.checks if c.name == "load"), None)
    print(f"== {label}: {result.verdict.value} score={result.score} wall={result.wall_seconds:.1f}s "
          f"(process {time.monotonic() - started:.1f}s)")
    print("   reason:", result.reason[:300])
    print("   phases:", result.phases)
    if load is not None:
        print("   load:", json.dumps(load.data))
    for t in result.timings:
        print(f"   ctx {t.context_len}: speedup {t.speedup:.3f} [{t.ci_low:.3f}, {t.ci_high:.3f}] base "
              f"{t.baseline.median_ms:.3f} ms, cand {t.candidate.median_ms:.3f} ms (n={t.candidate.n}, "
              f"blocks of {t.block_steps})")
    for launch in result.launches:
        print(f"   launches {launch.who}: {launch.launches} ({launch.reported_by})")
    return result


run("aa_warm", None, mode="aa")
run("reference_warm", paths["reference"])
run("reference_warm_again", paths["reference"])
run("leaves_device_work_check", paths["leaves_device_work"], mode="check")
run("patches_events", paths["patches_events"])
PY
echo "== kill -9 of kagent during an evaluation"
python3 -m pytest -q -p no:cacheprovider -rs tests/test_containment.py -k "dies_with_kagent" 2>&1 | tail -n 5
