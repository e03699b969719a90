#!/usr/bin/env bash
# `kagent sweep` on one GPU (issue 16): the flagship with the scripted demo session thinking
# THINK_S (20) seconds a turn, one member alone, then MEMBERS (4) members sharing the GPU
# through its lease, each member with the same budget. Results in $OUT: figures.json (the
# busy time per hour against the run alone, overlapping timed holds, the A/A of every
# member's baseline call and of one evaluation outside any sweep) and sweeps.tar.gz (each
# sweep's record, board, JSON, lease records, nvidia-smi samples, logs and traces).
#
#   bash scripts/gpu_sweep.sh            (about 7 minutes on an H200)
#
# Each member's budget is BUDGET (180s: 2 minutes of exploring, the final minute kept for the
# re-verification, as any run keeps it). On a CPU, for a trial of the script itself:
# DEVICE=cpu TASK=path/to/kernelbench.py SCRIPT=path/to/script.yaml THINK_S=1 BUDGET=90s.
set -uo pipefail
REPO=$(pwd)
source scripts/gpu_setup.sh
DEVICE=${DEVICE:-cuda} TASK=${TASK:-02_kimi_linear_decode} THINK_S=${THINK_S:-20} MEMBERS=${MEMBERS:-4}
BUDGET=${BUDGET:-180s} SCRIPT=${SCRIPT:-$REPO/examples/demo_session.yaml}
date -u; nvidia-smi --query-gpu=name,uuid,driver_version --format=csv,noheader || true
cd /tmp
kagent() { python3 -m kagent.agent.cli "$@"; }
model="scripted:$SCRIPT?delay=$THINK_S"
gpus=(); [ "$DEVICE" = cuda ] && gpus=(--gpus 0)
t0=$(date +%s)
# Caches first (the reference's weights, the copy bandwidth), so that neither sweep pays for
# them; and an A/A outside any sweep, to compare the members' with.
kagent eval "$TASK" --aa --device "$DEVICE" --json > "$OUT/aa_alone.json"
echo "A/A alone: exit $?, $(( $(date +%s) - t0 )) s"
kagent sweep "$TASK" -m "$model" --budget "$BUDGET" --grace 60s --device "$DEVICE" "${gpus[@]}" \
  --per-gpu 1 --name alone --quiet
echo "alone: exit $?, $(( $(date +%s) - t0 )) s"
kagent sweep "$TASK" -m "$model" --branches "$MEMBERS" --budget "$BUDGET" --grace 60s --device "$DEVICE" \
  "${gpus[@]}" --per-gpu "$MEMBERS" --name shared --quiet
echo "shared: exit $?, $(( $(date +%s) - t0 )) s"
alone=$(ls -d "$KAGENT_RUNS"/sweeps/alone-*/ | head -1)
shared=$(ls -d "$KAGENT_RUNS"/sweeps/shared-*/ | head -1)
python3 "$REPO/scripts/sweep_figures.py" "$shared" --alone "$alone" --aa "$OUT/aa_alone.json" > "$OUT/figures.json"
echo "figures: exit $? (0: every check holds)"
cat "$OUT/figures.json" | python3 -c 'import json, sys; r = json.load(sys.stdin); print(json.dumps(
    {k: v for k, v in r.items() if k not in ("sweeps", "alone")}, indent=1))'
cat "$shared/board.md"
tar -czf "$OUT/sweeps.tar.gz" -C "$KAGENT_RUNS" --exclude='*/workspace' --exclude='*/home' --exclude='*/blobs' sweeps
echo "total $(( $(date +%s) - t0 )) s"
