#!/usr/bin/env bash
# kagent replay --execute of the megakernel session's run (issue 14): on the warm machine the
# run folder is still in /tmp/kagent-runs; else the carried copy in runs/gpu-demo.
set -uo pipefail
REPO=$(pwd)
source scripts/gpu_setup.sh
date -u; nvidia-smi --query-gpu=name,uuid --format=csv,noheader
run=$(ls -d /tmp/kagent-runs/02_kimi*/ 2>/dev/null | head -1)
if [ -z "$run" ]; then run=$(ls -d "$REPO"/runs/gpu-demo/02_kimi*/ | head -1); echo "from the carried copy"; fi
echo "run: $run"
t0=$(date +%s)
timeout -s INT 540 python3 -m kagent.agent.cli replay "$run" --execute 2>&1 | tee "$OUT/replay_execute.txt"
echo "replay --execute: exit ${PIPESTATUS[0]}, wall $(( $(date +%s) - t0 )) s"
date -u
