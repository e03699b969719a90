#!/usr/bin/env bash
# Round 13: the batched reference MoE (old against new at full scale), A/A cold and 4 warm,
# trusted_costs, then pair_bias --modes history.
set -uo pipefail
ROUND=/tmp/kagent-round13
source scripts/gpu_setup.sh
nvidia-smi --query-gpu=uuid,name --format=csv,noheader; date -u
timeout 150 python3 scratch/cmp_ref.py full cuda 8 > "$OUT/cmp_ref.txt" 2>&1; echo "cmp_ref: exit $?"; tail -12 "$OUT/cmp_ref.txt"; keep_round
aa_eval cold; keep_round
for i in 1 2 3 4; do aa_eval "warm_$i"; keep_round; done
python3 scripts/aa_rounds.py "$OUT"/aa_*.json
timeout 90 python3 scripts/trusted_costs.py --device cuda --draws 12 > "$OUT/trusted_costs.txt" 2>&1; echo "trusted_costs: exit $?"; head -30 "$OUT/trusted_costs.txt"; keep_round
timeout 140 python3 scripts/pair_bias.py --device cuda --pairs 8 --quads 60 --modes history --out "$OUT/history.json" > "$OUT/history.txt" 2>&1; echo "pair_bias: exit $?"; tail -25 "$OUT/history.txt"; keep_round
date -u
