#!/usr/bin/env bash
# Where a contestant's process starts, and its speed once timed (lab/scripts/pair_bias.py): the
# machine's CPU, cache, memory-node and GPU layout, then PAIRS (4) fresh pairs per way of
# starting, QUADS (100) ABBA units each, into $OUT/pairs.tar.gz (about 3 minutes on an H200).
#   bash lab/scripts/stage_wheels.sh   # then, through the device tool with carry [".whl"]:
#   bash lab/scripts/gpu_pair_bias.sh
set -uo pipefail
ROUND=/tmp/kagent-pairs-round
source lab/scripts/gpu_setup.sh
nvidia-smi --query-gpu=uuid,name --format=csv,noheader
lscpu
nvidia-smi topo -m
python3 lab/scripts/pair_bias.py --device cuda --pairs "${PAIRS:-4}" --quads "${QUADS:-100}" --out "$OUT/pairs.json"
echo "pair_bias: exit $?"
keep_round pairs
