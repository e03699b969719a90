#!/usr/bin/env bash
# One device call for the open criteria of issues 9, 10 and 14: the megakernel's regression
# (bench.py, its loop also with each step's hidden recorded, then five evaluations), then an
# A/A run twice, warm. Every file is tarred into $OUT/round.tar.gz: the device tool brings back
# eight files at most. Run from the repository root:
#   bash lab/scripts/stage_wheels.sh   # then, through the device tool with carry [".whl"]:
#   bash lab/scripts/gpu_warm_truth.sh
set -uo pipefail
FINAL_OUT=${OUT:-/tmp/kagent-gpu-out}
ROUND=/tmp/kagent-round
rm -rf "$ROUND" && mkdir -p "$ROUND" "$FINAL_OUT"
OUT=$ROUND/megakernel RECORDING=1 REPEATS=${REPEATS:-5} bash lab/megakernel/gpu_run.sh
OUT=$ROUND/aa
source lab/scripts/gpu_setup.sh
for i in $(seq 1 "${AA_RUNS:-2}"); do aa_eval "$i"; done
tar -czf "$FINAL_OUT/round.tar.gz" -C "$ROUND" .
cp "$ROUND/megakernel/regression.json" "$FINAL_OUT/" 2>/dev/null
cp "$OUT/log.txt" "$FINAL_OUT/aa_log.txt"
