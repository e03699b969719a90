#!/usr/bin/env bash
# The megakernel on one GPU: bench.py's figures (the single launch against the stage-by-stage
# launches, a plain chain loop's ms per step, launches per step, registers and shared memory),
# then `kagent eval` at full scale, five times: issue 14's regression test of the harness
# against a fast kernel of known speed. Run from the repository root:
#   bash lab/scripts/stage_wheels.sh   # then, through the device tool with carry [".whl"]:
#   bash lab/megakernel/gpu_run.sh
# Results land in $OUT.
set -uo pipefail
source lab/scripts/gpu_setup.sh
date -u
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
# The kernel is compiled once: bench.py and the evaluations share one build HOME (the
# regression script gives the evaluations `--build-home`).

# bench.py's plain chain loop, then the evaluation REPEATS times (5), judged by
# lab/scripts/megakernel_regression.py: every one passes, with one launch per step, the same verdict
# each time, and the steady time within 3% of the plain loop at every context. Files in $OUT:
# bench.json, bench.log, eval_1.json ... eval_5.json, regression.json (8: all that come back).
t0=$(date +%s)
# RECORDING=1: bench.py also times its loop recording each step's hidden, as timed chains do.
# BOARD=DIR (the task's public KernelBench-Mega folder, as published): the board's own check.py
# and benchmark.py on the kernel too, and `kagent eval` of that folder (board.json, board_*.log).
timeout 560 python3 lab/scripts/megakernel_regression.py run "$OUT" --repeats "${REPEATS:-5}" \
  ${RECORDING:+--recording} ${BOARD:+--board "$BOARD"}
echo "regression: exit $? (0: every criterion holds) after $(( $(date +%s) - t0 )) s"
