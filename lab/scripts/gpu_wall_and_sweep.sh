#!/usr/bin/env bash
# One device call for what issues 9, 10 and 16 still measure: an A/A with a cold cache, how
# long the cache's weights file takes to reach the GPU in one process and in six at once
# (lab/scripts/weights_load.py), two warm A/As with the referee's start split finer
# (device_context, reference_weights_read), then `kagent sweep` of 4 members sharing the GPU
# against the alone sweep of an earlier call (lab/scripts/gpu_sweep.sh, SWEEPS=shared). Every file
# is tarred into $OUT/round.tar.gz. Run from the repository root:
#   bash lab/scripts/stage_wheels.sh   # then, through the device tool with carry [".whl"]:
#   bash lab/scripts/gpu_wall_and_sweep.sh       (about 7 minutes on an H200)
set -uo pipefail
REPO=$(pwd)
ROUND=/tmp/kagent-wall-round
source lab/scripts/gpu_setup.sh
mkdir -p "$ROUND/sweep"
nvidia-smi --query-gpu=uuid,name --format=csv,noheader
aa_eval cold
weights=$(find "$KAGENT_HOME" -path '*/weights/*.pt' | head -1)
echo "weights file: $weights ($(stat -c %s "$weights") bytes)"
timeout 120 python3 lab/scripts/weights_load.py "$weights" --device cuda --processes 1 6 > "$OUT/weights_load.txt" 2>&1
echo "weights load: exit $?"; cat "$OUT/weights_load.txt" | head -6
aa_eval warm_1
aa_eval warm_2
(cd "$REPO" && OUT=$ROUND/sweep SWEEPS=shared BUDGET=${BUDGET:-180s} \
  ALONE_FROM=lab/measurements/2026-12-02-h200-sweep/sweeps.tar.gz timeout 330 bash lab/scripts/gpu_sweep.sh \
  > "$ROUND/sweep_out.txt" 2>&1)
echo "sweep: exit $?"; tail -30 "$ROUND/sweep_out.txt"
keep_round
