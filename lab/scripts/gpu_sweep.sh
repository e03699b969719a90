#!/usr/bin/env bash
# `kagent sweep` on one GPU (issue 16): the flagship with a scripted session thinking THINK_S
# (20) seconds a turn, one member alone, then MEMBERS (4) members sharing the GPU through its
# lease, each member with the same budget. The session (SCRIPT) is examples/sweep_session.yaml:
# laps of five turns, one attempt a lap, until the budget ends it (the demo session, which the
# runs of 2026-12-02 and 12-03 used, finishes after 8 turns, so its members stop early).
# Results in $OUT: figures.json (the busy time per hour against the run alone, overlapping
# timed holds, the A/A of every member's baseline call and of one evaluation outside any
# sweep) and sweeps.tar.gz (each sweep's record, board, JSON, lease records, nvidia-smi
# samples, logs and traces).
#
#   bash lab/scripts/gpu_sweep.sh            (about 8 minutes on an H200)
#
# Each member's budget is BUDGET (180s: 2 minutes of exploring, the final minute kept for the
# re-verification, as any run keeps it). In two minutes the members' first evaluation (the
# baseline's A/A: one member measures it, the others wait and read it, since ed7683c; before,
# all four at once took 46-98 s of a 5-minute member on an H200) fills much of the window;
# longer budgets show the steady state but do not fit both sweeps in one 10-minute device call. So SWEEPS picks which run
# ("alone shared"), and ALONE_FROM names the sweeps.tar.gz of an earlier call (carried) whose
# alone sweep the shared one is compared with:
#   SWEEPS=alone BUDGET=420s bash lab/scripts/gpu_sweep.sh            (one call; keep its sweeps.tar.gz)
#   SWEEPS=shared BUDGET=420s ALONE_FROM=path/sweeps.tar.gz bash lab/scripts/gpu_sweep.sh
# On a CPU, for a trial of the script itself:
# DEVICE=cpu TASK=path/to/kernelbench.py SCRIPT=path/to/script.yaml THINK_S=1 BUDGET=90s.
set -uo pipefail
REPO=$(pwd)
source lab/scripts/gpu_setup.sh
DEVICE=${DEVICE:-cuda} TASK=${TASK:-02_kimi_linear_decode} THINK_S=${THINK_S:-20} MEMBERS=${MEMBERS:-4}
BUDGET=${BUDGET:-180s} SCRIPT=${SCRIPT:-$REPO/examples/sweep_session.yaml}
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
SWEEPS=${SWEEPS:-alone shared}
if [ -n "${ALONE_FROM:-}" ]; then  # an earlier call's sweeps: its alone sweep is the comparison
  mkdir -p "$KAGENT_RUNS" && tar -xzf "$REPO/$ALONE_FROM" -C "$KAGENT_RUNS" || exit 1
fi
if [[ " $SWEEPS " == *" alone "* ]]; then
  kagent sweep "$TASK" -m "$model" --budget "$BUDGET" --grace 60s --device "$DEVICE" "${gpus[@]}" \
    --per-gpu 1 --name alone --quiet
  echo "alone: exit $?, $(( $(date +%s) - t0 )) s"
fi
if [[ " $SWEEPS " == *" shared "* ]]; then
  kagent sweep "$TASK" -m "$model" --branches "$MEMBERS" --budget "$BUDGET" --grace 60s --device "$DEVICE" \
    "${gpus[@]}" --per-gpu "$MEMBERS" --name shared --quiet
  echo "shared: exit $?, $(( $(date +%s) - t0 )) s"
fi
# The latest of each (the names carry their start time): an earlier call's may be there too.
alone=$(ls -d "$KAGENT_RUNS"/sweeps/alone-*/ 2>/dev/null | tail -1)
shared=$(ls -d "$KAGENT_RUNS"/sweeps/shared-*/ 2>/dev/null | tail -1)
if [ -n "$shared" ] && [ -n "$alone" ]; then
  python3 "$REPO/scripts/sweep_figures.py" "$shared" --alone "$alone" --aa "$OUT/aa_alone.json" > "$OUT/figures.json"
  echo "figures: exit $? (0: every check holds)"
else  # the alone sweep only: its own figures, for the next call to compare with
  python3 "$REPO/scripts/sweep_figures.py" "$alone" --aa "$OUT/aa_alone.json" > "$OUT/figures.json"
  echo "figures of the alone sweep: exit $?"
fi
cat "$OUT/figures.json" | python3 -c 'import json, sys; r = json.load(sys.stdin); print(json.dumps(
    {k: v for k, v in r.items() if k not in ("sweeps", "alone")}, indent=1))'
cat "${shared:-$alone}/board.md"
tar -czf "$OUT/sweeps.tar.gz" -C "$KAGENT_RUNS" --exclude='*/workspace' --exclude='*/home' --exclude='*/blobs' sweeps
echo "total $(( $(date +%s) - t0 )) s"
