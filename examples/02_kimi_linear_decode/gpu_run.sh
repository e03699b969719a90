#!/usr/bin/env bash
# The megakernel on one GPU: bench.py's figures (the single launch against the stage-by-stage
# launches, a plain chain loop's ms per step, launches per step, registers and shared memory),
# then `kagent eval` at full scale. Run from the repository root:
#   bash scripts/stage_wheels.sh   # then, through the device tool with carry [".whl"]:
#   bash examples/02_kimi_linear_decode/gpu_run.sh
# A Triton cache compiled ahead on a CPU (see README) may sit in ./kimi-triton-cache; where its
# keys match the GPU machine's Triton, nothing is compiled there. Results land in $OUT.
set -uo pipefail
source scripts/gpu_setup.sh
HERE=examples/02_kimi_linear_decode
K="python3 -m kagent.agent.cli"
date -u
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
# One Triton cache for bench.py and for the evaluation's solution process, which reads it
# through the jail (/opt is visible there, read-only; a full hit writes nothing).
export TRITON_CACHE_DIR=/opt/kimi-triton-cache
mkdir -p "$TRITON_CACHE_DIR"
[ -d kimi-triton-cache ] && cp -r kimi-triton-cache/. "$TRITON_CACHE_DIR"/
echo "triton cache entries before: $(ls "$TRITON_CACHE_DIR" | wc -l)"

t0=$(date +%s)
timeout 120 python3 "$HERE/bench.py" --out "$OUT/bench.json" > "$OUT/bench.log" 2>&1
rc=$?
echo "bench exit $rc after $(( $(date +%s) - t0 )) s"
tail -n 80 "$OUT/bench.log"
echo "triton cache entries after: $(ls "$TRITON_CACHE_DIR" | wc -l)"
if [ $rc -ne 0 ]; then
  echo "the single launch failed or hung: the evaluation runs the stage launches"
  export KIMI_STAGE_LAUNCHES=1
fi

t0=$(date +%s)
timeout 200 $K eval 02_kimi_linear_decode --solution "$HERE/solution.py" --device cuda --out "$OUT/eval.json" \
  > "$OUT/eval.txt" 2>&1
echo "eval exit $? after $(( $(date +%s) - t0 )) s"
tail -n 60 "$OUT/eval.txt"
