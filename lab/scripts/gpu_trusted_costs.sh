#!/usr/bin/env bash
# Where the trusted work of a warm evaluation goes, on a lent GPU (issues 9, 10): an A/A with a
# cold cache, AA_RUNS (2) warm ones (their phases), then lab/scripts/trusted_costs.py on the cache they
# left, and what importing torch and the harness costs here (python -X importtime).
#   bash lab/scripts/stage_wheels.sh   # then, through the device tool with carry [".whl"]:
#   bash lab/scripts/gpu_trusted_costs.sh       (about 4 minutes on an H200)
set -uo pipefail
ROUND=/tmp/kagent-trusted-costs
source lab/scripts/gpu_setup.sh
nvidia-smi --query-gpu=uuid,name --format=csv,noheader
date -u
aa_eval cold; keep_round
for i in $(seq 1 "${AA_RUNS:-2}"); do aa_eval "warm_$i"; keep_round; done
python3 lab/scripts/trusted_costs.py --device cuda --json "$OUT/trusted_costs.json" > "$OUT/trusted_costs.txt" 2>&1
echo "trusted_costs: exit $?"; head -40 "$OUT/trusted_costs.txt"
for i in 1 2 3; do
  /usr/bin/time -f "import torch: %e s" python3 -I -c "import torch" 2>&1 | tail -1
done
python3 -X importtime -c "import torch, kagent.sandbox.harness.mega" 2> "$OUT/importtime.txt"
sort -t'|' -k2 -n -r "$OUT/importtime.txt" | head -25
keep_round
