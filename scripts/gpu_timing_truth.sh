#!/usr/bin/env bash
# Timing truth on a GPU (issue 10): kagent's own fast kernel (scripts/stream_weights.py) timed
# in its own process and through the harness at several block sizes (scripts/timing_truth.py),
# then A/A runs per context and the warm evaluation's wall time. Needs the wheels in .whl/
# (kagent's own, built with `pip wheel --no-deps -w .whl .`, plus pydantic's). Results in $OUT.
# PARTS picks what runs: truth, aa, verdicts (default all): verdicts evaluates the reference as a
# solution and one wrong on 1 input in 10 (the CPU test's) REPEATS times each, checks only.
set -uo pipefail
source scripts/gpu_setup.sh
PARTS=${PARTS:-truth aa verdicts}
BLOCKS=${BLOCKS:-8 16 32}
date -u; nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
if [[ " $PARTS " == *" truth "* ]]; then
  echo "== timing truth: blocks of $BLOCKS"
  timeout 330 python3 scripts/timing_truth.py --device cuda --contexts 2048 8192 16384 --block-steps $BLOCKS \
    --rounds 4 --cache /tmp/kagent-stream-cache --out "$OUT/timing_truth.json"
fi
if [[ " $PARTS " == *" aa "* ]]; then
  echo "== A/A per context, and the warm evaluation's wall time"
  timeout 330 python3 - <<'PY'
import json, os, pathlib, time
from kagent.sandbox.evaluate import EvalOptions, evaluate
from kagent.tasks import resolve_task

OUT = pathlib.Path(os.environ["OUT"])
home = pathlib.Path(os.environ["KAGENT_HOME"])
kimi = resolve_task("02_kimi_linear_decode")
for label, extra in json.loads(os.environ.get("AA_RUNS", '[["aa_1", {}], ["aa_2", {}], ["aa_3", {}]]')):
    started = time.monotonic()
    result = evaluate(kimi, None, EvalOptions(device="cuda", scale="full", cache_dir=home, timeout_s=600.0,
                                              mode="aa", **extra))
    (OUT / f"{label}.json").write_text(result.model_dump_json(indent=1))
    print(f"== {label} {extra}: {result.verdict.value} score={result.score} wall={result.wall_seconds:.1f}s "
          f"(process {time.monotonic() - started:.1f}s) phases={result.phases}")
    for t in result.timings:
        print(f"   ctx {t.context_len}: {t.speedup:.3f} [{t.ci_low:.3f}, {t.ci_high:.3f}] base {t.baseline.median_ms:.3f} "
              f"cand {t.candidate.median_ms:.3f} isolated {t.candidate_isolated_ms} blocks of {t.block_steps}/"
              f"{t.candidate_block_steps}x{t.candidate_chains_per_request} n={t.candidate.n} base p10-p90 {t.baseline.p10_ms:.2f}-{t.baseline.p90_ms:.2f} "
              f"cand p10-p90 {t.candidate.p10_ms:.2f}-{t.candidate.p90_ms:.2f}")
PY
fi
if [[ " $PARTS " == *" verdicts "* ]]; then
  echo "== verdicts that repeat: the reference as a solution, and one wrong on 1 input in 10"
  timeout 400 python3 - <<'PY'
import os, pathlib, re, time
from kagent.sandbox.evaluate import EvalOptions, evaluate
from kagent.tasks import resolve_task

OUT = pathlib.Path(os.environ["OUT"])
home = pathlib.Path(os.environ["KAGENT_HOME"])
kimi = resolve_task("02_kimi_linear_decode")
source = (kimi.path / "reference.py").read_text()
quotes = "'" * 3
test = pathlib.Path("tests/test_eval_kimi.py").read_text()
rarely_wrong = re.search(rf"^RARELY_WRONG = {quotes}(.*?){quotes}", test, re.S | re.M).group(1)
for label, text in (("reference", source), ("rarely_wrong", source + "\n" + rarely_wrong)):
    folder = pathlib.Path(f"/tmp/verdicts/{label}")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "solution.py").write_text(text)
    for i in range(int(os.environ.get("REPEATS", "4"))):
        started = time.monotonic()
        result = evaluate(kimi, folder / "solution.py", EvalOptions(device="cuda", scale="full", cache_dir=home,
                                                                    timeout_s=600.0, mode="check"))
        print(f"== {label} #{i + 1}: {result.verdict.value} in {time.monotonic() - started:.1f}s: {result.reason[:200]}")
PY
fi
