#!/usr/bin/env bash
# One GPU call for what the session's last device time must show, most important first, each
# part under a limit of its own so the whole stays inside one call: A/A per context with the
# warm evaluation's wall time (issue 9), kagent's own megakernel through the harness against a
# plain loop of its steps (issues 10 and 14), every broken variant of the coverage table at full
# scale (issue 10), the stream kernel against the plain loop and the profiler (issue 10).
# Run from the repository root, the wheels carried (bash lab/scripts/stage_wheels.sh): `bash lab/scripts/gpu_final.sh`. Eight files come
# back: log.txt, aa_cold/aa_1/aa_2.json, verdicts.json, mega_bench.json, mega_eval.json, timing_truth.json.
set -uo pipefail
source lab/scripts/gpu_setup.sh
date -u; nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
started=$(date +%s)
elapsed() { echo "[$(( $(date +%s) - started )) s]"; }

echo "== A/A: cold, then twice warm $(elapsed)"
timeout "${AA_LIMIT_S:-130}" python3 lab/scripts/gpu_evaluations.py aa '[["aa_cold", {}], ["aa_1", {}], ["aa_2", {}]]'

echo "== the megakernel: bench.py (fills the Triton cache, plain loop, launches) $(elapsed)"
HERE=examples/02_kimi_linear_decode
# One build HOME for bench.py and the evaluation (--build-home): the kernel is compiled once.
BUILD_HOME=$(mktemp -d /tmp/kimi-build-home-XXXX)
HOME="$BUILD_HOME" timeout "${BENCH_LIMIT_S:-110}" python3 "$HERE/bench.py" --out "$OUT/mega_bench.json" 2>&1 | tail -n 40
echo "bench exit ${PIPESTATUS[0]} $(elapsed)"
echo "== the megakernel through kagent eval $(elapsed)"
COLUMNS=160 timeout "${MEGA_EVAL_LIMIT_S:-80}" python3 -m kagent.agent.cli eval 02_kimi_linear_decode \
  --solution "$HERE/solution.py" --device cuda --build-home "$BUILD_HOME" --out "$OUT/mega_eval.json" 2>&1 | tail -n 40
echo "eval exit ${PIPESTATUS[0]} $(elapsed)"

echo "== every broken variant of the coverage table at full scale $(elapsed)"
timeout "${BROKEN_LIMIT_S:-90}" python3 lab/scripts/gpu_evaluations.py broken "${BROKEN_PARALLEL:-6}"

echo "== the stream kernel against a plain loop and the profiler $(elapsed)"
timeout "${TRUTH_LIMIT_S:-60}" python3 lab/scripts/timing_truth.py --device cuda --contexts 2048 8192 16384 --rounds 4 \
  --cache "$KAGENT_HOME" --out "$OUT/timing_truth.json"
echo "== done $(elapsed)"
