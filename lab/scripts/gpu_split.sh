#!/usr/bin/env bash
# The solution in a process of its own, on a GPU: A/A and the reference as a solution at full
# scale (cold, then warm, with the phases that the split costs and the calibration of the
# device-idle probe), the red-team corpus's CUDA cases (a solution that leaves device work
# running past its answers; one that patches the CUDA events in its own process), and the
# test that kills kagent with SIGKILL during an evaluation (EVALUATIONS_ONLY=1: the
# evaluations alone). Needs the wheels in .whl/ (kagent's own, built with
# `pip wheel --no-deps -w .whl .`, plus pydantic's). Results land in $OUT.
set -uo pipefail
source lab/scripts/gpu_setup.sh
date -u; nvidia-smi --query-gpu=name,uuid,driver_version --format=csv,noheader
python3 - <<'PY'
import json, os, pathlib, time
from kagent.sandbox.evaluate import EvalOptions, evaluate
from kagent.tasks import resolve_task

OUT = pathlib.Path(os.environ["OUT"])
home = pathlib.Path(os.environ["KAGENT_HOME"])
kimi = resolve_task("02_kimi_linear_decode")
solution = pathlib.Path("/tmp/split-solutions/reference/solution.py")
solution.parent.mkdir(parents=True, exist_ok=True)
solution.write_text((kimi.path / "reference.py").read_text())


def run(label, candidate, **options):
    opts = dict(device="cuda", scale="full", cache_dir=home, timeout_s=600.0, **options)
    started = time.monotonic()
    result = evaluate(kimi, candidate, EvalOptions(**opts))
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


run("aa_cold", None, mode="aa")
run("aa_warm", None, mode="aa")
run("aa_warm_again", None, mode="aa")
run("reference_warm", solution)
PY
[ -n "${EVALUATIONS_ONLY:-}" ] && exit 0
echo "== the red-team corpus's CUDA cases (device work left running; events patched), and kill -9 of kagent"
python3 -m pytest -q -p no:cacheprovider -rs tests/test_redteam.py -k "side_stream_work_with_sync_noops or event_elapsed_time_reads_a_tenth" 2>&1 | tail -n 8
python3 -m pytest -q -p no:cacheprovider -rs tests/test_containment.py -k "dies_with_kagent" 2>&1 | tail -n 5
