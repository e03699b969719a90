#!/usr/bin/env bash
# `kagent run` with the scripted demo session at full scale on a GPU machine; results in $OUT.
# Needs .whl/ with kagent's wheel and, for a machine without them, pydantic's and GitPython's.
set -uo pipefail
REPO=$(pwd)
source scripts/gpu_setup.sh
date -u; git --version; nvidia-smi --query-gpu=name,uuid,driver_version --format=csv,noheader
cd /tmp
t0=$(date +%s%N)
python3 -m kagent.agent.cli run 02_kimi_linear_decode --model "scripted:$REPO/examples/demo_session.yaml" \
  --budget 20m --device cuda --quiet
echo "exit $?, process wall $(( ($(date +%s%N) - t0) / 1000000 )) ms"
run=$(ls -d /tmp/kagent-runs/*/ | head -1)
cp "$run/report.json" "$run/status.json" "$run/trace.jsonl" "$OUT/"
git -C "$run/workspace" log --format='%h %s%n%(trailers:only,unfold)' main > "$OUT/git_log.txt"
git -C "$run/workspace" for-each-ref --format='%(refname) %(objectname:short)' >> "$OUT/git_log.txt"
cat "$OUT/git_log.txt"
