#!/usr/bin/env bash
# `kagent run` with a scripted session at full scale on a GPU machine; results in $OUT.
#   bash lab/scripts/gpu_run_demo.sh [SESSION [BUDGET [--execute]]]
# SESSION defaults to examples/demo_session.yaml and BUDGET to 20m; for kagent's own megakernel:
#   bash lab/scripts/gpu_run_demo.sh examples/megakernel_session.yaml 1h --execute
# --execute then re-runs the recorded session with `kagent replay --execute` (every attempt's
# verdict and speedup re-measured on a fresh workspace; exit 1 where one diverges).
# Needs .whl/ with kagent's wheel and, for a machine without them, pydantic's and GitPython's.
set -uo pipefail
REPO=$(pwd)
session=${1:-examples/demo_session.yaml}
budget=${2:-20m}
execute=${3:-}
source lab/scripts/gpu_setup.sh
date -u; git --version; nvidia-smi --query-gpu=name,uuid,driver_version --format=csv,noheader
cd /tmp
t0=$(date +%s%N)
python3 -m kagent.agent.cli run 02_kimi_linear_decode --model "scripted:$REPO/$session" \
  --budget "$budget" --device cuda --quiet
echo "exit $?, process wall $(( ($(date +%s%N) - t0) / 1000000 )) ms"
run=$(ls -d /tmp/kagent-runs/*/ | head -1)
cp "$run/report.json" "$run/status.json" "$run/trace.jsonl" "$OUT/"
git -C "$run/workspace" log --format='%h %s%n%(trailers:only,unfold)' main > "$OUT/git_log.txt"
git -C "$run/workspace" for-each-ref --format='%(refname) %(objectname:short)' >> "$OUT/git_log.txt"
cat "$OUT/git_log.txt"
python3 -m kagent.agent.cli replay "$run" --attempts
if [ "$execute" = "--execute" ]; then
    t0=$(date +%s%N)
    python3 -m kagent.agent.cli replay "$run" --execute
    echo "replay --execute: exit $?, wall $(( ($(date +%s%N) - t0) / 1000000 )) ms"
fi
