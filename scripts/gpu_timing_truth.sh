#!/usr/bin/env bash
# Timing truth on a GPU (issue 10): kagent's own fast kernel (scripts/stream_weights.py) timed
# in its own process and through the harness at several block sizes (scripts/timing_truth.py),
# then A/A runs per context and the warm evaluation's wall time. Needs the wheels in .whl/
# (kagent's own, built with `pip wheel --no-deps -w .whl .`, plus pydantic's). Results in $OUT.
# PARTS picks what runs: truth, aa, verdicts (default all): verdicts evaluates the reference as a
# solution REPEATS times and one wrong on 1 input in 10 (the CPU test's) WRONG_REPEATS times, checks only.
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
  timeout 330 python3 scripts/gpu_evaluations.py aa "${AA_RUNS:-[[\"aa_1\", {}], [\"aa_2\", {}], [\"aa_3\", {}]]}"
fi
if [[ " $PARTS " == *" verdicts "* ]]; then
  echo "== verdicts that repeat: the reference as a solution, and one wrong on 1 input in 10"
  timeout 400 python3 scripts/gpu_evaluations.py verdicts "${REPEATS:-4}" "${WRONG_REPEATS:-${REPEATS:-4}}"
fi
