#!/usr/bin/env bash
# One device call on the A/A process effect (issues 9, 10): how much a host-bound baseline
# step's time depends on its process, for each way of starting the interpreter
# (lab/scripts/process_spread.py); whether the baseline passes every secret case an evaluation can
# draw, and what explains those it fails (lab/scripts/baseline_verdicts.py); then warm A/A evaluations as
# they stand. Every file is tarred into $OUT/process_truth.tar.gz. Run from the repository root:
#   bash lab/scripts/stage_wheels.sh   # then, through the device tool with carry [".whl"]:
#   bash lab/scripts/gpu_process_truth.sh
set -uo pipefail
ROUND=/tmp/kagent-process-truth
source lab/scripts/gpu_setup.sh
nvidia-smi --query-gpu=uuid,name,clocks.sm,clocks.mem --format=csv
lscpu | grep -E "^(Model name|CPU\(s\)|Thread|Core|Socket|NUMA)"
timeout 240 python3 lab/scripts/process_spread.py --device cuda --processes "${PROCESSES:-6}" --rounds "${ROUNDS:-30}" \
  --out "$OUT/spread.json"
echo "process spread: exit $?"
timeout 240 python3 lab/scripts/baseline_verdicts.py --device cuda --cases "${CASES:-240}" \
  --seeds 655230236:8192:salient --out "$OUT/baseline_verdicts.json"
echo "baseline verdicts: exit $?"
for i in $(seq 1 "${AA_RUNS:-3}"); do aa_eval "$i"; done
keep_round process_truth
