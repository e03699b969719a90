#!/usr/bin/env bash
# A short device call after a change to the harness's start or its probe (issues 9, 10): one
# A/A with a cold cache, AA_RUNS (3) warm ones, then the megakernel evaluated REPEATS (2)
# times (REPEATS=0: none). Everything is tarred into $OUT/round.tar.gz again after each step, so a call cut
# short keeps what ran.
#   bash lab/scripts/stage_wheels.sh   # then, through the device tool with carry [".whl"]:
#   bash lab/scripts/gpu_quick_truth.sh       (about 4 minutes on an H200)
set -uo pipefail
ROUND=/tmp/kagent-quick-round
source lab/scripts/gpu_setup.sh
nvidia-smi --query-gpu=uuid,name --format=csv,noheader
aa_eval cold; keep_round
for i in $(seq 1 "${AA_RUNS:-3}"); do aa_eval "warm_$i"; keep_round; done
python3 lab/scripts/aa_rounds.py "$OUT"/aa_*.json  # every round of pairs at 1.00 once warm-up is fair
if [ "${REPEATS:-2}" -gt 0 ]; then
  OUT=$ROUND/megakernel RECORDING=1 REPEATS=${REPEATS:-2} bash lab/megakernel/gpu_run.sh \
    > "$ROUND/megakernel.txt" 2>&1
  echo "megakernel: exit $?"; tail -12 "$ROUND/megakernel.txt"
  keep_round
fi
