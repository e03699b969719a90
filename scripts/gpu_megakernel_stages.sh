#!/usr/bin/env bash
# kagent's megakernel stage by stage on one GPU (issue 14's stage breakdown): the stages tool
# (its kagent_stop_after sweep and the kernel's own %globaltimer stamps) at every full-scale
# context, then the regression test of the harness against the kernel
# (scripts/megakernel_regression.py, REPEATS evaluations, 3 by default). Run from the
# repository root:
#   bash scripts/stage_wheels.sh   # then, through the device tool with carry [".whl"]:
#   bash scripts/gpu_megakernel_stages.sh
# Then AA_RUNS A/A evaluations (3: cold and 2 warm). Everything lands in $OUT/stages.tar.gz
# (stage_tools_megakernel.json, stages.log, bench.json, eval_N.json, regression.json, aa_*) beside
# log.txt.
set -uo pipefail
ROUND=/tmp/kagent-megakernel-stages-out
source scripts/gpu_setup.sh
date -u
nvidia-smi --query-gpu=name,uuid,driver_version --format=csv,noheader
# One Triton cache for every process (the evaluation's solution process reads it through the jail).
export TRITON_CACHE_DIR=/opt/kimi-triton-cache
mkdir -p "$TRITON_CACHE_DIR"
t0=$(date +%s)
timeout 300 python3 scripts/stage_tools_run.py megakernel "$OUT" /tmp/kagent-megakernel-stages > "$OUT/stages.log" 2>&1
echo "stages: exit $? after $(( $(date +%s) - t0 )) s"
cat "$OUT/stages.log"
keep_round stages
t0=$(date +%s)
timeout 420 python3 scripts/megakernel_regression.py run "$OUT" --repeats "${REPEATS:-3}"
echo "regression: exit $? (0: every criterion holds) after $(( $(date +%s) - t0 )) s"
keep_round stages
# A/A beside it (cold, then warm), AA_RUNS in all (3 by default; 0: none).
for i in $(seq 1 "${AA_RUNS:-3}"); do
  if [ "$i" -eq 1 ]; then aa_eval cold; else aa_eval "warm_$((i - 1))"; fi
done
python3 scripts/aa_rounds.py "$OUT"/aa_*.json 2>/dev/null
keep_round stages
date -u
