#!/usr/bin/env bash
# The scripted megakernel session (issue 14) at full scale: kagent run, then the attempts table;
# the run folder tarred into $OUT (run.tar.gz) for a later `kagent replay --execute`.
set -uo pipefail
REPO=$(pwd)
source scripts/gpu_setup.sh
date -u; nvidia-smi --query-gpu=name,uuid,driver_version --format=csv,noheader
cd /tmp
t0=$(date +%s)
timeout -s INT 530 python3 -m kagent.agent.cli run 02_kimi_linear_decode \
  --model "scripted:$REPO/examples/megakernel_session.yaml" --budget 1h --device cuda --quiet
echo "kagent run: exit $?, process wall $(( $(date +%s) - t0 )) s"
run=$(ls -d /tmp/kagent-runs/*/ | head -1)
python3 -m kagent.agent.cli replay "$run" --attempts
python3 -m kagent.agent.cli runs 2>&1 | tail -5
git -C "$run/workspace" log --format='%h %s%n%(trailers:only,unfold)' --all > "$OUT/git_log.txt" 2>&1
du -sh "$run"; du -sh "$run"/* 2>/dev/null | sort -h | tail -8
tar -czf "$OUT/run.tar.gz" --exclude='*/build/*' --exclude='*.so' --exclude='*/.triton/*' --exclude='*/home/*' -C /tmp/kagent-runs .
ls -la "$OUT"
date -u
