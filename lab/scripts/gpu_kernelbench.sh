#!/usr/bin/env bash
# Issue 47 in one device call: the within-noise bar (RUNS evaluations of code identical to a
# KernelBench-style reference, lab/scripts/kernelbench_within_noise.py) and the honest port of
# 10 KernelBench problems (lab/scripts/kernelbench_h200.sh), with the card, date and torch.
#
#   bash lab/scripts/stage_wheels.sh && rm -rf build      # here, once; .kb/ fetched beforehand
#   # device tool, carry [".whl", ".kb"]:
#   source lab/scripts/gpu_setup.sh && bash lab/scripts/gpu_kernelbench.sh "$OUT"
#
# .kb/ holds KernelBench's problem files (level1/, level2/) and its published H100 timings
# (H100_modal_baseline_time_torch.json), never committed. The call must end within the device
# tool's 600 s: everything runs under one deadline, BUDGET_S (default 480) seconds from the
# start, each part stopping cleanly before a unit that would not fit and saying how many ran.
# The within-noise runs go first, as the bar needs all RUNS of them; the problems then take
# what is left, cheapest first, each a result of its own. PARTS="noise" or PARTS="kernelbench"
# runs one part alone (a second call for what the first left out); KB_PROBLEMS names fewer
# problems. DEVICE=cpu RUNS=2 KB_PROBLEMS=level1/40_ tries the control flow without a GPU.
#
# Into OUT (the tool brings back 8 files at most): env.txt, within_noise.txt, kernelbench.txt,
# kernelbench_gpu.tar.gz (all of it, each problem's result JSON included), and gpu_setup.sh's
# log.txt.
set -uo pipefail
dest=${1:?usage: gpu_kernelbench.sh OUT_DIR}
DEVICE=${DEVICE:-cuda}
RUNS=${RUNS:-20}
BUDGET_S=${BUDGET_S:-480}
PARTS=${PARTS:-noise kernelbench}
start=$(date +%s)
deadline=$(( start + BUDGET_S ))
work=$(mktemp -d -t kagent-kb-gpu-XXXX)
mkdir -p "$dest"

{
  date -u
  nvidia-smi -L || echo "nvidia-smi: not here"
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
    torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA device")'
  echo "device $DEVICE, runs $RUNS, budget $BUDGET_S s, parts: $PARTS"
} 2>&1 | tee "$work/env.txt"

status=0
if [[ " $PARTS " == *" noise "* ]]; then
  t0=$(date +%s)
  python3 lab/scripts/kernelbench_within_noise.py "$RUNS" --device "$DEVICE" --deadline "$deadline" 2>&1 \
    | tee "$work/within_noise.txt"
  noise_status=${PIPESTATUS[0]}
  echo "within-noise: exit $noise_status after $(( $(date +%s) - t0 )) s" | tee -a "$work/env.txt"
  [ "$noise_status" -eq 0 ] || status=1
fi

if [[ " $PARTS " == *" kernelbench "* ]]; then
  t0=$(date +%s)
  # The same 10 problems as kernelbench_h200.sh's list, by the bytes a call moves, least first,
  # so that a run cut short by the deadline has the most results.
  KB_DIR=.kb KB_TIMING=.kb/H100_modal_baseline_time_torch.json OUT="$work/kernelbench" DEVICE="$DEVICE" \
    KB_DEADLINE="$deadline" \
    KB_PROBLEMS=${KB_PROBLEMS:-"level1/1_ level1/40_ level2/3_ level2/1_ level2/4_ level2/2_ level1/33_ level1/47_ level1/19_ level1/23_"} \
    bash lab/scripts/kernelbench_h200.sh 2>&1 | tee "$work/kernelbench.txt"
  kb_status=${PIPESTATUS[0]}
  echo "kernelbench: exit $kb_status after $(( $(date +%s) - t0 )) s" | tee -a "$work/env.txt"
  [ "$kb_status" -eq 0 ] || status=1
fi

echo "wall $(( $(date +%s) - start )) s, exit $status" | tee -a "$work/env.txt"
for name in env.txt within_noise.txt kernelbench.txt; do
  [ ! -f "$work/$name" ] || cp "$work/$name" "$dest/"
done
tar -czf "$dest/kernelbench_gpu.tar.gz" -C "$work" .
exit $status
