#!/usr/bin/env bash
# Timing truth on a GPU (issues 9 and 10): A/A runs per context with the warm evaluation's wall
# time and phases; kagent's own fast kernel (lab/scripts/stream_weights.py) timed in its own process
# and through the harness (lab/scripts/timing_truth.py); verdicts repeated on unchanged files; every
# broken variant of the coverage table at full scale. Needs the wheels in .whl/ (kagent's own,
# built with `pip wheel --no-deps -w .whl .`, plus pydantic's). Results in $OUT: log.txt, each A/A
# run's EvalResult, timing_truth.json and verdicts.json (at most 8 files come back from the device tool).
# PARTS picks what runs, in this order: aa truth verdicts broken cuda_corpus (default all but
# cuda_corpus). AA_RUNS: the A/A
# runs (JSON, see gpu_evaluations.py; the first on a fresh machine is cold). VERDICTS: "HONEST
# WRONG PARALLEL" (the honest file HONEST times, one wrong on 1 input in 10 WRONG times, checks
# only, PARALLEL at once). BROKEN_PARALLEL: how many broken variants at once.
set -uo pipefail
source lab/scripts/gpu_setup.sh
PARTS=${PARTS:-aa truth verdicts broken}
date -u; nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
if [ -z "${AA_RUNS:-}" ]; then AA_RUNS='[["aa_cold", {}], ["aa_1", {}], ["aa_2", {}], ["aa_3", {}]]'; fi
if [[ " $PARTS " == *" aa "* ]]; then
  echo "== A/A per context, and the warm evaluation's wall time"
  timeout "${AA_LIMIT_S:-400}" python3 lab/scripts/gpu_evaluations.py aa "$AA_RUNS"
fi
if [[ " $PARTS " == *" truth "* ]]; then
  echo "== timing truth: the stream kernel in its own process and through the harness"
  timeout "${TRUTH_LIMIT_S:-200}" python3 lab/scripts/timing_truth.py --device cuda --contexts 2048 8192 16384 --rounds 4 \
    --cache "$KAGENT_HOME" --out "$OUT/timing_truth.json"
fi
if [[ " $PARTS " == *" verdicts "* ]]; then
  echo "== verdicts that repeat: the honest file, and one wrong on 1 input in 10"
  timeout "${VERDICTS_LIMIT_S:-400}" python3 lab/scripts/gpu_evaluations.py verdicts ${VERDICTS:-10 10 6}
fi
if [[ " $PARTS " == *" broken "* ]]; then
  echo "== every broken variant of the coverage table, at full scale"
  timeout "${BROKEN_LIMIT_S:-300}" python3 lab/scripts/gpu_evaluations.py broken "${BROKEN_PARALLEL:-6}"
fi
if [[ " $PARTS " == *" cuda_corpus "* ]]; then
  echo "== the red-team corpus's CUDA cases (device work left running; events patched in the solution's process)"
  timeout "${CORPUS_LIMIT_S:-120}" python3 -m pytest -q -p no:cacheprovider -rs tests/test_redteam.py \
    -k "side_stream_work_with_sync_noops or event_elapsed_time_reads_a_tenth" 2>&1 | tail -n 6
fi
