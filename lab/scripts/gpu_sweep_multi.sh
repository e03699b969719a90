#!/usr/bin/env bash
# `kagent sweep --ray auto` on every GPU of a machine with several (issue 17), in phases that
# each fit one device call (10 minutes):
#
#   bash lab/scripts/gpu_sweep_multi.sh spread      one member per GPU; a member's Ray worker is
#                                               killed mid-run and the member resumes (where
#                                               Ray places it: its log names each segment's GPU)
#   bash lab/scripts/gpu_sweep_multi.sh shared      two members per GPU, each GPU's shared by its lease
#   bash lab/scripts/gpu_sweep_multi.sh one_gpu     the members of `shared`, one after another on
#                                               GPU 0 (the local engine), for the wall time
#
# Ray is not on the lent machines: carry it (lab/scripts/ray_wheels_for_device.sh puts a trimmed
# wheel and what it needs into .whl/). Each phase warms the caches with an A/A outside any
# sweep first. Results in $OUT: figures.json (lab/scripts/sweep_figures.py: each GPU's busy
# fraction, overlapping holds, every member's A/A), where.txt (each member's segments and
# GPUs), sweeps.tar.gz.
set -uo pipefail
phase=${1:?usage: lab/scripts/gpu_sweep_multi.sh spread|shared|one_gpu}
REPO=$(pwd)
source lab/scripts/gpu_setup.sh
TASK=${TASK:-02_kimi_linear_decode} THINK_S=${THINK_S:-20} BUDGET=${BUDGET:-140s}
model="scripted:$REPO/examples/demo_session.yaml?delay=$THINK_S"
date -u; nvidia-smi --query-gpu=index,name,uuid,driver_version --format=csv,noheader
gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
cd /tmp
kagent() { python3 -m kagent.agent.cli "$@"; }
t0=$(date +%s)
kagent eval "$TASK" --aa --device cuda --json > "$OUT/aa_alone.json"
echo "A/A alone: exit $?, $(( $(date +%s) - t0 )) s"
case "$phase" in
  spread)
    kagent sweep "$TASK" -m "$model" --branches "$gpus" --per-gpu 1 --budget "$BUDGET" --grace 60s --device cuda \
      --ray auto --name spread --quiet &
    driver=$!
    # The first member that waits for its model on its third turn: its Ray worker is killed.
    victim=""
    while kill -0 "$driver" 2>/dev/null && [ -z "$victim" ]; do
      for run in "$KAGENT_RUNS"/sweeps/spread-*/runs/*/; do
        if tail -n 1 "$run/trace.jsonl" 2>/dev/null | grep -q '"type":"model_requested","turn":3,'; then
          victim=$run; break
        fi
      done
      sleep 0.5
    done
    if [ -n "$victim" ]; then
      pid=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["pid"])' "$victim/lock")
      worker=$(awk '{print $4}' "/proc/$pid/stat")
      echo "killing the Ray worker $worker of $(basename "$victim") (its run: pid $pid)"
      kill -9 "$worker"
    fi
    wait "$driver"; echo "spread: exit $?, $(( $(date +%s) - t0 )) s";;
  shared)
    kagent sweep "$TASK" -m "$model" --branches $(( 2 * gpus )) --per-gpu 2 --budget "$BUDGET" --grace 60s \
      --device cuda --ray auto --name shared --quiet
    echo "shared: exit $?, $(( $(date +%s) - t0 )) s";;
  one_gpu)
    kagent sweep "$TASK" -m "$model" --branches $(( 2 * gpus )) --per-gpu 1 --gpus 0 --budget "$BUDGET" \
      --grace 60s --device cuda --name one_gpu --quiet
    echo "one_gpu: exit $?, $(( $(date +%s) - t0 )) s";;
  *) echo "unknown phase $phase"; exit 2;;
esac
sweep=$(ls -d "$KAGENT_RUNS"/sweeps/"$phase"-*/ | head -1)
python3 "$REPO/scripts/sweep_figures.py" "$sweep" --aa "$OUT/aa_alone.json" > "$OUT/figures.json"
echo "figures: exit $? (0: every check holds)"
grep -h "^=== " "$sweep"/logs/*.log | sed "s|$sweep||" > "$OUT/where.txt"; cat "$OUT/where.txt"
cat "$sweep/board.md"
tar -czf "$OUT/sweeps.tar.gz" -C "$KAGENT_RUNS" --exclude='*/workspace' --exclude='*/home' --exclude='*/blobs' sweeps
echo "total $(( $(date +%s) - t0 )) s"
